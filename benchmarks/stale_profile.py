"""A stale profile, for asking what the sidecar costs when its model is wrong (issue #34).

A profile measured on another machine, vLLM release or drafter can flatter one k: its step
times T(B, k) read too low there, so the model predicts that k wins where it loses. The live
step times correct only the k the engine runs, so a flattered rival stays flattered until a
duel measures it. This writes a copy of a profile with every T at `--k` (cells and raw samples)
multiplied by `--factor`; the do-no-harm bench runs the sidecar on it from the right table:

    python -m benchmarks.stale_profile --profile P --k 0 --factor 0.4 --out stale.json
    python -m benchmarks.noharm --profile P --sidecar-arg=--profile=stale.json ...
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from tuner.core.errors import InvalidInput, TableTuneError
from tuner.core.profile import Profile, load

__all__ = ["scaled"]


def scaled(profile: Profile, k: int, factor: float,
           names: tuple[str, str] = ("--k", "--factor")) -> Profile:
    """The profile with T(B, k) times `factor` at every B (cells and samples, their intervals
    and per-step times alike) and the table this tuner builds on it; InvalidInput names (by
    ``names``, the caller's flags) a k the profile lacks or a factor that is no time scale."""
    measured = sorted({c.k for c in profile.cells})
    if k not in measured:
        raise InvalidInput(f"{names[0]}={k}: the profile has k {measured}")
    if not factor > 0:
        raise InvalidInput(f"{names[1]}={factor}: must be > 0 (0.4 makes k look 2.5x faster)")

    def times(x: Any) -> Any:
        if x.k != k:
            return x
        update: dict[str, Any] = {f: getattr(x, f) * factor
                                  for f in ("client_ms", "engine_ms", "ci_low_ms", "ci_high_ms")
                                  if getattr(x, f, None) is not None}
        if getattr(x, "steps_ms", None):
            update["steps_ms"] = [t * factor for t in x.steps_ms]
        return x.model_copy(update=update)

    out = profile.model_copy(update={"cells": [times(c) for c in profile.cells],
                                     "samples": [times(s) for s in profile.samples]})
    return out.model_copy(update={"table": out.build().table.to_list()})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", required=True, help="from `tabletune tune`")
    ap.add_argument("--k", type=int, required=True, help="the k whose step times to scale")
    ap.add_argument("--factor", type=float, required=True, help="T(B, k) times this")
    ap.add_argument("--out", required=True, help="where the stale copy goes")
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        stale = scaled(load(Path(args.profile)), args.k, args.factor)
    except (InvalidInput, TableTuneError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    stale.save(Path(args.out))
    print(f"{args.out}: T(B, {args.k}) x {args.factor:g}; the tuner's table on it: {stale.table}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
