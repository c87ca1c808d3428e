"""The do-no-harm bench's runs pooled: every paired block of several runs, per shape, one ratio.

One run of 12 blocks spreads ±5-8% at bursts of 4 on the 2-core CPU box; a cost of a few
percent shows only over many runs. Each run is a code version of its own, so the pool says what
the sidecar cost across them, not what the latest costs. The ratio is noharm_summary's (the
geometric mean of the per-block ratios sidecar / table of the client's output throughput) with
its Student's t-interval at 95% and at 97.5% (two shapes share the family). A folder holding a
field bench's field.json instead is read as `noharm_of_field` reads it (sidecar-from-tuned
against tuned).

    python -m benchmarks.noharm_pool --out benchmarks/results/cpu-tiny-noharm/pooled.json \\
        --shapes burst-c4,burst-c16 benchmarks/results/cpu-tiny-noharm \\
        benchmarks/results/cpu-tiny-noharm/bursts-*
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.arm_run import runs_of
from benchmarks.noharm_summary import arm_throughput, from_field, paired, ratio_interval

__all__ = ["pool", "record_in"]


def pool(records: dict[str, dict[str, Any]], shapes: Sequence[str]) -> dict[str, Any]:
    """Per shape, the pooled ratio over every record's paired blocks (records: name ->
    noharm.json's record)."""
    out = []
    for shape in shapes:
        pairs = [p for record in records.values() for p in paired(runs_of(record["runs"]), shape)]
        mid = ratio_interval(pairs, arm_throughput)
        wide = ratio_interval(pairs, arm_throughput, alpha=0.025)
        out.append({"shape": shape, "blocks": mid.n, "ratio": mid.ratio, "ci": mid.ci,
                    "ci_975": wide.ci})
    return {"runs": sorted(records), "shapes": out,
            "statistic": "geometric mean of per-block ratios sidecar / table of the client's "
                         "output throughput over every run's blocks; Student's t-intervals"}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.noharm_pool", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--shapes", required=True, help="comma-separated, e.g. burst-c4,burst-c16")
    p.add_argument("runs", nargs="+", type=Path,
                   help="folders holding a noharm.json (or a field bench's field.json)")
    args = p.parse_args(argv)
    missing = [str(d) for d in args.runs
               if not (d / "noharm.json").is_file() and not (d / "field.json").is_file()]
    if missing:
        print(f"runs: no noharm.json or field.json in {', '.join(missing)}; pass the benches' "
              "--out folders",
              file=sys.stderr)
        return 2
    records = {d.as_posix(): record_in(d) for d in args.runs}
    result = pool(records, [s for s in args.shapes.split(",") if s])
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    for s in result["shapes"]:
        print(f"{s['shape']}: {s['ratio']} {s['ci']} over {s['blocks']} blocks")
    return 0


def record_in(folder: Path) -> dict[str, Any]:
    """The do-no-harm record a run's folder holds: its noharm.json, or its field.json read as
    one (benchmarks/noharm_summary.from_field)."""
    if (folder / "noharm.json").is_file():
        record: dict[str, Any] = json.loads((folder / "noharm.json").read_text())
        return record
    return from_field(json.loads((folder / "field.json").read_text()))


if __name__ == "__main__":
    raise SystemExit(main())
