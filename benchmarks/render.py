"""Rewrite a bench's summary from its cells.csv, or merge several benches' windows into one.

    python -m benchmarks.render OUT_DIR [CELLS.csv ...] [--title T] [--versus tuned:documented]

With only OUT_DIR: OUT_DIR/cells.csv again, with the meta of OUT_DIR/summary.json (e.g. after a
change to the summary's layout). With CELLS files: their windows, blocks and rounds renumbered
so each file's stay apart (every block was measured on one engine, so its pairs stay valid),
written to OUT_DIR/cells.csv first.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from benchmarks.cells import Window, read_windows, write_windows
from benchmarks.report import write
from benchmarks.stats import Settings, analyze


def merged(paths: list[Path]) -> list[Window]:
    out: list[Window] = []
    for path in paths:
        block0 = 1 + max((w.block for w in out), default=-1)
        round0 = 1 + max((w.round for w in out), default=-1)
        out += [dataclasses.replace(w, block=w.block + block0, round=w.round + round0)
                for w in read_windows(path)]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("cells", nargs="*")
    ap.add_argument("--title", default=None)
    ap.add_argument("--versus", default="tuned:documented,tuned:quarter")
    args = ap.parse_args(argv)
    out = Path(args.out)
    old = out / "summary.json"
    meta = json.loads(old.read_text()).get("meta", {}) if old.exists() else {}
    s = Settings(**{k: v for k, v in (json.loads(old.read_text()) if old.exists() else {}).items()
                    if k in ("threshold", "ci_target", "confidence", "n_boot")})
    windows = merged([Path(c) for c in args.cells]) if args.cells else read_windows(out / "cells.csv")
    if args.cells:
        write_windows(windows, out / "cells.csv")
        meta = {**meta, "merged_from": args.cells}
    policies = {w.policy for w in windows}
    pairs = [(a, b) for a, _, b in (x.partition(":") for x in args.versus.split(",") if x)
             if a in policies and b in policies]
    a = analyze(windows, dataclasses.replace(s, seed=int(meta.get("seed", 0))), pairs)
    write(windows, a, out, args.title or str(meta.get("title", "TableTune bench")), meta)
    print((out / "summary.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
