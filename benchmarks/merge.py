"""Merge the cells of several `tabletune bench` runs (repeats renumbered by run) and rewrite the
summary: for a budget that only allows one repeat per call, e.g. on a lent GPU.

    python -m benchmarks.merge OUT_DIR TITLE run1/cells.csv run2/cells.csv ...
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

from benchmarks.analysis import Row, summarize
from benchmarks.report import write
from benchmarks.run import write_rows


def read(path: Path, repeat_offset: int) -> list[Row]:
    with open(path) as f:
        return [Row(r["policy"], int(r["load"]), int(r["repeat"]) + repeat_offset,
                    float(r["tokens_per_s"]), int(r["completed"]), float(r["window_s"]), r["table"],
                    *(float(r[c]) if r.get(c) else None  # absent or empty in older runs
                      for c in ("step_ms", "requests_per_step", "tokens_per_step")))
                for r in csv.DictReader(f)]


def main(argv: list[str]) -> int:
    out, title, paths = Path(argv[0]), argv[1], [Path(p) for p in argv[2:]]
    rows: list[Row] = []
    for path in paths:
        rows += read(path, 1 + max((r.repeat for r in rows), default=-1))
    out.mkdir(parents=True, exist_ok=True)
    write_rows(rows, out / "cells.csv")
    write(summarize(rows), out, title, {"merged_from": [str(p) for p in paths], "cells": len(rows)})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
