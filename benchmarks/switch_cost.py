"""Does switching k between steps cost vLLM anything of its own? At a fixed batch size B (the
tuner's reject-all timing, so B stays B), the step time with k = LO every step, k = HI every step,
and alternating LO, HI, LO, ... (the plugin's exploration step every 2nd step). Without a cost of
its own, the alternating step is the mean of the two; the excess is what a table pays per switch
when the batch moves across its edges.

    python -m benchmarks.switch_cost --out runs/switch-cost              # the tiny CPU model
    python -m benchmarks.switch_cost --model /path --max-num-seqs 256 --loads 16,128 \\
        --engine-arg=--dtype=bfloat16 ...                                 # any engine
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from benchmarks.scenario import Rig, Startup, serving
from tuner.engine_defaults import default_model
from tuner.sweep import CellTimer
from tuner.core.table import Table

ARMS = ("lo", "hi", "alternating")


class LoadCost(BaseModel):
    """One batch size: each arm's step times (ms, one per repeat) and the alternating excess."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    lo: list[float]
    hi: list[float]
    alternating: list[float]
    excess: float


class SwitchCost(BaseModel):
    """switch-cost.json: the two k's, the repeats, and per batch size B its LoadCost."""

    model_config = ConfigDict(extra="forbid")  # not frozen: filled B by B
    lo: int
    hi: int
    repeats: int
    loads: dict[int, LoadCost]


def excess(lo: list[float], hi: list[float], alt: list[float]) -> float:
    """Alternating step time over the mean of the two fixed ones, minus 1 (medians). Pure."""
    mean = (statistics.median(lo) + statistics.median(hi)) / 2
    return statistics.median(alt) / mean - 1


async def measure(args: argparse.Namespace) -> SwitchCost:
    n, K = args.max_num_seqs, args.hi
    rig = Rig(model=Path(args.model) if args.model else default_model().target, method="ngram", K=K,
              max_num_seqs=n, drafter=None, replay=None, out=Path(args.out),
              engine_args=("--no-enable-prefix-caching", *(args.engine_arg or ())))
    # the startup table holds only LO and HI and the plugin is restricted to its K set, so its
    # exploration (which visits the other allowed k's in turn) alternates exactly LO, HI, LO, ...
    startup = Table.from_list([[1, 1, K], [2, n, args.lo]])
    out = SwitchCost(lo=args.lo, hi=K, repeats=args.repeats, loads={})
    prompts = lambda count, seed: rig.prompts(length=32, seed=seed, count=count)  # noqa: E731
    start = Startup(table=startup, token=None, reject_all=True, restrict_k=True)
    async with serving(rig, start) as up, CellTimer(up.server, up.admin.admin_url, prompts) as timer:
        engine = up.admin

        async def arm(name: str) -> None:
            k = args.lo if name in ("lo", "alternating") else K
            await engine.put_table(Table.from_list([[1, n, k]]))
            await engine.put_policy(explore_every=2 if name == "alternating" else 0, explore_run=1)

        loads = [int(x) for x in args.loads.split(",")]
        await timer.warm_up(loads)
        for B in loads:
            ms: dict[str, list[float]] = {a: [] for a in ARMS}
            for rep in range(args.repeats):  # interleaved: drift over the run cancels
                for name in ARMS:
                    await arm(name)
                    sample = await timer.time_cell(B, K if name == "hi" else args.lo, rep,
                                                   args.decode_tokens)
                    ms[name].append(round(sample.step_ms, 3))
            out.loads[B] = LoadCost(**ms, excess=round(excess(ms["lo"], ms["hi"], ms["alternating"]), 4))
            print(json.dumps({"B": B, **out.loads[B].model_dump(mode="json")}), flush=True)
        await arm("lo")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="target model (default: the embedded tiny Llama, ngram)")
    ap.add_argument("--max-num-seqs", type=int, default=32)
    ap.add_argument("--loads", default="4,16,32", help="batch sizes B")
    ap.add_argument("--lo", type=int, default=1, help="the k the table holds")
    ap.add_argument("--hi", type=int, default=3, help="K: the k every other step switches to")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--decode-tokens", type=int, default=33)
    ap.add_argument("--engine-arg", action="append", metavar="ARG")
    ap.add_argument("--out", default="runs/switch-cost")
    args = ap.parse_args(argv)
    if not 0 <= args.lo < args.hi:
        ap.error(f"--lo={args.lo} --hi={args.hi}: need 0 <= lo < hi")
    result = asyncio.run(measure(args))
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "switch-cost.json").write_text(json.dumps(result.model_dump(mode="json"),
                                                                indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
