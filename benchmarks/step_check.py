"""Does a profile's T(B, k) predict the steps the bench saw? For every fixed-k cell of a bench
(cells.csv with the plugin's step columns) at a load N on the profile's grid, the engine's time
per step in serving against the profile's T(N, k), for one or more profiles.

    python -m benchmarks.step_check CELLS.csv PROFILE [PROFILE ...] [--out step-check.csv]

Pure arithmetic on files; the median absolute error per profile is printed last.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from pathlib import Path

from benchmarks.cells import read_windows
from tuner.core.profile import load


def compare(cells: Path, profiles: list[Path]) -> tuple[list[dict[str, object]], dict[str, float]]:
    rows = [r for r in read_windows(cells) if r.policy.startswith("fixed-k") and r.step_ms is not None]
    loaded = [(p.parent.name or p.name, load(p)) for p in profiles]
    by: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for r in rows:
        by.setdefault((r.load, int(r.policy.removeprefix("fixed-k"))), []).append(
            (r.step_ms, r.tokens_per_step or 0.0))  # type: ignore[arg-type]
    out: list[dict[str, object]] = []
    errors: dict[str, list[float]] = {name: [] for name, _ in loaded}
    for (N, k), v in sorted(by.items()):
        row: dict[str, object] = {"load": N, "k": k,
                                  "bench_step_ms": round(statistics.median(m for m, _ in v), 2),
                                  "bench_tokens_per_step": round(statistics.median(t for _, t in v), 1)}
        for name, prof in loaded:
            if N not in prof.grid or k > prof.K:
                continue
            T = float(prof.step_time_matrix(monotone=False)[prof.grid.index(N), k])
            row[f"T_{name}"] = round(T, 2)
            errors[name].append(abs(T - row["bench_step_ms"]) / row["bench_step_ms"])  # type: ignore[operator]
        out.append(row)
    return out, {name: statistics.median(e) for name, e in errors.items() if e}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cells")
    ap.add_argument("profiles", nargs="+")
    ap.add_argument("--out", help="write the comparison as CSV")
    args = ap.parse_args(argv)
    rows, errors = compare(Path(args.cells), [Path(p) for p in args.profiles])
    if not rows:
        print("no fixed-k cells with step columns (a bench from before they were recorded?)")
        return 1
    keys = list(dict.fromkeys(k for r in rows for k in r))
    print(" ".join(f"{k:>22}" for k in keys))
    for r in rows:
        print(" ".join(f"{r.get(k, ''):>22}" for k in keys))
    for name, e in errors.items():
        print(f"median |T - bench step| / bench step, {name}: {e * 100:.1f}%")
    if args.out:
        with open(args.out, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys)
            w.writeheader()
            w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
