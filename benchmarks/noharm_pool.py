"""The do-no-harm bench's runs pooled: every paired block of several runs, per shape, one ratio.

One run of 12 blocks spreads ±5-8% at bursts of 4 on the 2-core CPU box; a cost of a few
percent shows only over many runs. Each run is a code version of its own, so the pool says what
the sidecar cost across them, not what the latest costs. The ratio is noharm_summary's (the
geometric mean of the per-block ratios sidecar / table of the client's output throughput) with
its Student's t-interval at 95% and at 97.5% (two shapes share the family). A folder holding a
field bench's field.json instead is read as `noharm_of_field` reads it (sidecar-from-tuned
against tuned); `--sidecar P --against Q` reads two other policies of the field runs (e.g.
`watch-from-tuned` against `tuned`: what observing costs), and then every folder must hold a
field.json that ran both.

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
from pydantic import BaseModel, ConfigDict

from benchmarks.client_record import ClientRecord, FieldRecord, NoharmRecord
from benchmarks.noharm_summary import arm_throughput, from_field, paired, ratio_interval
from benchmarks.policies import SIDECAR_POLICIES

__all__ = ["Pooled", "PooledShape", "pool", "record_in"]


class PooledShape(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    shape: str
    blocks: int
    ratio: float | None
    ci: list[float | None]        # 95%
    ci_975: list[float | None]    # 97.5%: two shapes share the family


class Pooled(BaseModel):
    """pooled*.json: the runs pooled, how their field records were read, and per shape."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    runs: list[str]
    reading: list[str | None] | None  # (sidecar, against) of field runs; None: the do-no-harm arms
    shapes: list[PooledShape]
    statistic: str


def pool(records: dict[str, ClientRecord], shapes: Sequence[str],
         reading: tuple[str, str | None] | None = None) -> Pooled:
    """Per shape, the pooled ratio over every record's paired blocks (records: name ->
    noharm.json's record); ``reading``: the field runs' (sidecar, against) policies they were
    read with, recorded (None: the do-no-harm arms)."""
    out = []
    for shape in shapes:
        pairs = [p for record in records.values() for p in paired(record.runs, shape)]
        mid = ratio_interval(pairs, arm_throughput)
        wide = ratio_interval(pairs, arm_throughput, alpha=0.025)
        out.append(PooledShape(shape=shape, blocks=mid.n, ratio=mid.ratio, ci=mid.ci,
                               ci_975=wide.ci))
    return Pooled(runs=sorted(records), reading=list(reading) if reading else None, shapes=out,
                  statistic="geometric mean of per-block ratios sidecar / table of the client's "
                            "output throughput over every run's blocks; Student's t-intervals")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.noharm_pool", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--shapes", required=True, help="comma-separated, e.g. burst-c4,burst-c16")
    p.add_argument("--sidecar", choices=sorted(SIDECAR_POLICIES),
                   help="a field run's sidecar policy (default: the do-no-harm arms)")
    p.add_argument("--against", help="its reference policy (default: the table it starts from)")
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
    if args.sidecar or args.against:
        sidecar = args.sidecar or "sidecar-from-tuned"
        against = args.against or SIDECAR_POLICIES.get(sidecar)
        lacking = [str(d) for d in args.runs if not _ran(d, (sidecar, against))]
        if lacking:
            print(f"--sidecar/--against: {', '.join(lacking)} did not run both {sidecar} and "
                  f"{against} (a field.json with both policies); leave those folders out",
                  file=sys.stderr)
            return 2
        records = {d.as_posix(): record_in(d, (sidecar, against)) for d in args.runs}
        reading: tuple[str, str | None] | None = (sidecar, against)
    else:
        records, reading = {d.as_posix(): record_in(d) for d in args.runs}, None
    result = pool(records, [s for s in args.shapes.split(",") if s], reading)
    args.out.write_text(json.dumps(result.model_dump(mode="json"), indent=1) + "\n")
    for s in result.shapes:
        print(f"{s.shape}: {s.ratio} {s.ci} over {s.blocks} blocks")
    return 0


def _ran(folder: Path, policies: tuple[str, str | None]) -> bool:
    if not (folder / "field.json").is_file():
        return False
    ran = _field(folder).meta.policies
    return all(p in ran for p in policies)


def _field(folder: Path) -> FieldRecord:
    return FieldRecord.model_validate_json((folder / "field.json").read_text())


def record_in(folder: Path, reading: tuple[str, str | None] | None = None) -> ClientRecord:
    """The do-no-harm record a run's folder holds: its noharm.json, or its field.json read as
    one (benchmarks/noharm_summary.from_field), as ``reading``'s (sidecar, against) if given."""
    if reading is not None:
        return from_field(_field(folder), *reading)
    if (folder / "noharm.json").is_file():
        return NoharmRecord.model_validate_json((folder / "noharm.json").read_text())
    return from_field(_field(folder))


if __name__ == "__main__":
    raise SystemExit(main())
