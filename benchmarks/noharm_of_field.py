"""The do-no-harm figures of a field bench run whose policies hold a sidecar and the table it
starts from (benchmarks/noharm_summary.from_field): on a GPU one field run answers both benches.
With `--against` another policy of the run is the reference instead: `--sidecar
sidecar-from-tuned --against watch-from-tuned` is what exploring costs beyond observing.

    python -m benchmarks.noharm_of_field --field DIR/field.json --out DIR/noharm-summary.json \
        [--figures DIR/noharm-figures.json]

`--figures` also writes the descriptive figures (benchmarks/noharm_figures.py): rank-based
intervals beside the t, TTFT, TPOT, steps per token, short drafts per arm.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pydantic import ValidationError

from benchmarks.client_record import FieldRecord, parse_error
from benchmarks.noharm_figures import figures
from benchmarks.noharm_summary import from_field, summary
from benchmarks.policies import SIDECAR_POLICIES


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.noharm_of_field", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--field", type=Path, required=True, help="a field bench's field.json")
    p.add_argument("--sidecar", default="sidecar-from-tuned", choices=sorted(SIDECAR_POLICIES))
    p.add_argument("--against", help="the reference policy (default: the sidecar's start table)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--figures", type=Path, help="also write the descriptive figures here")
    args = p.parse_args(argv)
    if not args.field.is_file():
        print(f"--field: no file {args.field}; pass the field bench's field.json", file=sys.stderr)
        return 2
    try:
        record = FieldRecord.model_validate_json(args.field.read_text())
    except ValidationError as exc:
        print(f"--field: {args.field} is not a field bench record ({parse_error(exc)}); pass its "
              "field.json", file=sys.stderr)
        return 2
    policies = record.meta.policies
    table = args.against or SIDECAR_POLICIES[args.sidecar]
    if args.sidecar not in policies or table not in policies or table == args.sidecar:
        flag = "--against" if args.against else "--sidecar"
        print(f"{flag}: {args.field} ran {', '.join(policies)}, not both {args.sidecar} and "
              f"{table}; pick two policies it ran (a sidecar policy and its reference)",
              file=sys.stderr)
        return 2
    arms = from_field(record, args.sidecar, table)
    result = summary(arms)
    args.out.write_text(json.dumps(result.model_dump(mode="json"), indent=1) + "\n")
    if args.figures is not None:
        found = figures(arms, (args.sidecar, table))
        args.figures.write_text(json.dumps(found.model_dump(mode="json"), indent=1) + "\n")
        for f in found.shapes:
            print(f"{f.shape}: TTFT {f.mean_ttft.t.ratio} {f.mean_ttft.t.ci}, throughput "
                  f"(Hodges-Lehmann) {f.throughput.hodges_lehmann.ratio} "
                  f"{f.throughput.hodges_lehmann.ci}, short drafts {f.short_drafts}")
    for s in result.shapes:
        print(f"{s.shape}: {s.ratio} {s.ci} {s.verdict}")
    print(f"verdict: {result.verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
