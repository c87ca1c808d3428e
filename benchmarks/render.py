"""Rewrite a bench's summary from its cells.csv, or merge several benches' windows into one.

    python -m benchmarks.render OUT_DIR [CELLS.csv ...] [--title T] [--versus tuned:documented]

With only OUT_DIR: OUT_DIR/cells.csv again, with the meta of OUT_DIR/summary.json (e.g. after a
change to the analysis). With CELLS files: their windows, blocks and rounds renumbered so each
file's stay apart (every block was measured on one engine, so its pairs stay valid), written to
OUT_DIR/cells.csv first. Any cells.csv a bench ever wrote can be re-analysed this way: a file
without the `dropped` column is read as every window kept; its design is read from the meta
("adaptive" where the meta has none: the bench before schema 2 added blocks until it resolved).
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
    ap.add_argument("--no-plot", action="store_true", help="leave intervals.png as it is")
    args = ap.parse_args(argv)
    out = Path(args.out)
    old = json.loads((out / "summary.json").read_text()) if (out / "summary.json").exists() else {}
    meta = old.get("meta", {})
    s = Settings(**{k: v for k, v in old.items() if k in ("threshold", "confidence")})
    windows = merged([Path(c) for c in args.cells]) if args.cells else read_windows(out / "cells.csv")
    if args.cells:
        out.mkdir(parents=True, exist_ok=True)
        write_windows(windows, out / "cells.csv")
        meta = {**meta, "merged_from": args.cells}
    policies = {w.policy for w in windows}
    pairs = [(a, b) for a, _, b in (x.partition(":") for x in args.versus.split(",") if x)
             if a in policies and b in policies]
    a = analyze(windows, s, pairs)
    write(windows, a, out, args.title or str(meta.get("title", "TableTune bench")), meta,
          plots=not args.no_plot)
    print((out / "summary.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
