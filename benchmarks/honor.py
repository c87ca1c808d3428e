"""Does the engine honor the table? (GPU issue 38 item 1)

One vLLM with the plugin, started with a table holding every k (the GPU V2 runner captures full
CUDA graphs only for the startup table's k's) and in the plugin's reject-all timing mode (every
draft rejected after the full draft and verify work, so a batch of B stays at B for all its
steps; the setting's acceptance replay is configured as the tuner's):

1. every one-range table [[1, N, k]], k = 0..K, at each of --batch-sizes, a batch size's k's
   interleaved over --repeats rounds (k = 0..K, then K..0);
2. a table with an edge, [[1, E, K], [E+1, N, 1]], at the largest batch size <= E and the
   smallest > E (--edge E; 0: none);
3. with --reference-k R (default 1, 0: none): a second vLLM started with num_speculative_tokens
   R, the tables k = 0..R at the same batch sizes. At the same (B, k) a drafter that drafts the
   table's k does the same work on both engines; one that drafts its startup K runs K - R more
   drafter forwards a step on the first (the plugin's counters cannot see this: under async
   scheduling the scheduler reserves the table's k whatever the drafter drafts).

Per cell: the drafts each request verified (tokens / B - 1 on the steady decode steps of the
plugin's step ring), the step time, the plugin's counters (engine steps per scheduled k, drafted
per position, drafts verified per request-step); verdicts and the finding: tuner/core/honor.py.
Writes DIR/honor.json, DIR/honor.csv and DIR/summary.json (benchmarks/honor_summary.py) after
each engine (a run cut by its time limit keeps what it measured); `--summary DIR/honor.json`
writes that summary.json again from a stored honor.json, with no engine.

    python -m benchmarks.honor --model M --method eagle3 --drafter D -K 3 --max-num-seqs 256 \\
        --batch-sizes 1,32,128 --edge 32 --emulate 0.75,0.55,0.40 --emulate-with vllm --out DIR
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.honor_summary import summarize
from benchmarks.scenario import Rig, Startup, serving
from tuner import flags
from tuner.core.errors import InvalidInput, TableTuneError
from tuner.core.honor import (
    TOLERANCE,
    Burst,
    EdgePlan,
    HonorCell,
    HonorCheck,
    check,
    edge_plan,
    measured_cell,
)
from tuner.core.profile import model_name
from tuner.core.table import Table, every_k_table
from tuner.engine_defaults import default_model
from tuner.hardware import hardware, vllm_version
from tuner.honor_run import edge_cells, run_burst
from tuner.launcher import MODEL_DRAFTERS
from tuner.replay import Replay
from tuner.sweep import CellTimer, repeat_order
from tuner.core.engine_client import EngineClient

START_RESERVE_S = 30.0  # stopping one vLLM and what a second start costs beyond the first's


@dataclass(frozen=True, slots=True)
class Run:
    """The command's flags, checked."""

    model: Path
    method: str
    drafter: Path | None
    K: int
    max_num_seqs: int
    batch_sizes: list[int]
    plan: EdgePlan | None
    reference_k: int
    decode_tokens: int
    repeats: int
    tolerance: float
    emulate: Replay | None
    engine_args: tuple[str, ...]
    out: Path
    budget_s: float | None

    def rig(self) -> Rig:
        """What each engine serves: prefix caching off, so a burst's prompts are all prefilled."""
        return Rig(model=self.model, method=self.method, K=self.K, max_num_seqs=self.max_num_seqs,
                   drafter=self.drafter, engine_args=("--no-enable-prefix-caching", *self.engine_args),
                   replay=self.emulate, out=self.out)


def checked(args: argparse.Namespace) -> Run:
    """The flags as a Run; InvalidInput naming the flag, the value and the fix."""
    K, n = args.num_speculative_tokens, args.max_num_seqs
    if K < 1 or n < 1:
        raise InvalidInput(f"-K={K} --max-num-seqs={n}: both must be >= 1")
    sizes = sorted(set(flags.ints(args.batch_sizes, "--batch-sizes", "1,32,128")))
    if sizes[-1] > n:
        raise InvalidInput(f"--batch-sizes={args.batch_sizes!r}: B={sizes[-1]} exceeds "
                           f"--max-num-seqs={n}; lower it or raise --max-num-seqs")
    E = args.edge if args.edge is not None else sizes[(len(sizes) - 1) // 2]  # the middle one
    plan = None if E == 0 else edge_plan(sizes, K, n, E)
    if plan is None and E != 0:
        raise InvalidInput(f"--edge={E}{'' if args.edge is not None else ' (the middle batch size)'}: "
                           f"needs a batch size of --batch-sizes={args.batch_sizes!r} at or below it "
                           f"and one above it, below --max-num-seqs={n}; e.g. --batch-sizes 1,32,128 "
                           "--edge 32 (or --edge 0: no edge table)")
    if not 0 <= args.reference_k < K:
        raise InvalidInput(f"--reference-k={args.reference_k}: the second engine's K must be in "
                           f"1..{K - 1} (below -K={K}), or 0 for none")
    if args.method in MODEL_DRAFTERS and not args.drafter:
        raise InvalidInput(f"--method={args.method} needs --drafter PATH (the drafter model)")
    if args.decode_tokens < 3 or args.repeats < 1 or not 0 < args.tolerance < 0.5:
        raise InvalidInput(f"--decode-tokens={args.decode_tokens} --repeats={args.repeats} "
                           f"--tolerance={args.tolerance}: need >= 3, >= 1 and a tolerance in (0, 0.5)")
    model = Path(args.model) if args.model else default_model().target
    return Run(model=model, method=args.method, drafter=Path(args.drafter) if args.drafter else None,
               K=K, max_num_seqs=n, batch_sizes=sizes, plan=plan, reference_k=args.reference_k,
               decode_tokens=args.decode_tokens, repeats=args.repeats, tolerance=args.tolerance,
               emulate=flags.replay(args, K), engine_args=tuple(args.engine_arg or ()),
               out=Path(args.out), budget_s=args.budget_s)


def say(t0: float, text: str) -> None:
    print(f"[{time.monotonic() - t0:5.0f}s] {text}", file=sys.stderr, flush=True)


async def one_ranges(run: Run, timer: CellTimer, admin: EngineClient, K: int,
                     t0: float) -> list[HonorCell]:
    """Tables [[1, N, k]], k = 0..K, at each batch size, the k's interleaved over the repeats."""
    n = run.max_num_seqs
    for k in range(K + 1):  # each k's graphs and kernels once before anything is timed
        await run_burst(timer, admin, Table.from_list([[1, n, k]]), run.batch_sizes[-1], 8)
    cells = []
    for B in run.batch_sizes:
        bursts: dict[int, list[Burst]] = {k: [] for k in range(K + 1)}
        for rep in range(run.repeats):
            for k in repeat_order(range(K + 1), rep):
                table = Table.from_list([[1, n, k]])
                bursts[k].append(await run_burst(timer, admin, table, B, run.decode_tokens))
                got = measured_cell(bursts[k][-1:], table, B, K, run.tolerance)
                say(t0, f"K={K} B={B} k={k} rep {rep}: {got.drafts} drafts verified per request, "
                        f"{got.step_ms} ms a step ({got.steps} steps, {got.verdict})")
        cells += [measured_cell(bursts[k], Table.from_list([[1, n, k]]), B, K, run.tolerance)
                  for k in range(K + 1)]
    return cells


async def measure_engine(run: Run, K: int, t0: float,
                         with_edge: bool) -> tuple[list[HonorCell], list[HonorCell], str | None, float]:
    """One engine's one-range cells, its edge cells, its runner, and how long it took to start."""
    rig = run.rig()
    say(t0, f"starting vLLM with K={K} (startup table {every_k_table(K, run.max_num_seqs).to_list()})")
    # every k in the startup table, reject-all on; the replay's first K rates reach vLLM only
    start = Startup(K=K, token=None, reject_all=True, emulates=False)
    async with serving(rig, start) as up:
        srv, admin = up.server, up.admin
        say(t0, f"vLLM ready after {srv.ready_after_s:.0f} s")
        runner = (await admin.get_table()).runner
        prompts = lambda count, seed: rig.prompts(length=32, seed=seed, count=count)  # noqa: E731
        async with CellTimer(srv, admin.admin_url, prompts) as timer:
            cells = await one_ranges(run, timer, admin, K, t0)
            edge = []
            if with_edge and run.plan is not None:
                edge = await edge_cells(timer, admin, run.plan, K, run.decode_tokens, run.repeats,
                                        run.tolerance)
                for c in edge:
                    say(t0, f"edge {c.table} B={c.B}: asked {c.k}, verified {c.drafts} ({c.verdict})")
    return cells, edge, runner, srv.ready_after_s or 0.0


def write(run: Run, result: HonorCheck, timings: dict[str, float], command: str) -> None:
    """honor.json (the check and what was run), honor.csv (one row a cell), summary.json."""
    run.out.mkdir(parents=True, exist_ok=True)
    # the folders of this machine are no one else's: results carry names (tests/test_published.py)
    for path, name in ((run.drafter, "$DRAFTER"), (run.model, "$MODEL")):
        command = command.replace(str(path), name) if path else command
    meta = {"command": command, "model": model_name(str(run.model)), "method": run.method,
            "drafter": model_name(str(run.drafter)) if run.drafter else None,
            "num_speculative_tokens": run.K, "max_num_seqs": run.max_num_seqs,
            "batch_sizes": run.batch_sizes, "reference_k": run.reference_k,
            "decode_tokens": run.decode_tokens, "repeats": run.repeats,
            "emulate": run.emulate.model_dump() if run.emulate else None,
            "hardware": hardware(), "vllm_version": vllm_version(),
            "timings_s": {k: round(v, 1) for k, v in timings.items()}}
    body = {**meta, "check": result.model_dump(mode="json")}
    (run.out / "honor.json").write_text(json.dumps(body, indent=1) + "\n")
    (run.out / "summary.json").write_text(json.dumps(summarize(body), indent=1) + "\n")
    with (run.out / "honor.csv").open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["engine_K", "table", "B", "k", "steps", "drafts", "step_ms", "off_table",
                      "verdict", "engine_steps_per_k", "drafted_per_pos", "verified_per_request_step"])
        for c in [*result.cells, *result.edge, *result.reference]:
            n = c.counts
            out.writerow([c.engine_K, json.dumps(c.table), c.B, c.k, c.steps, c.drafts, c.step_ms,
                          c.off_table, c.verdict,
                          " ".join(f"{k}:{v}" for k, v in sorted(n.engine_steps_per_k.items())) if n else "",
                          " ".join(str(x) for x in n.drafted_per_pos) if n else "",
                          round(n.verified / n.request_steps, 4) if n and n.request_steps else ""])


async def measure(run: Run, command: str) -> HonorCheck:
    t0 = time.monotonic()
    timings: dict[str, float] = {}
    cells, edge, runner, start_s = await measure_engine(run, run.K, t0, with_edge=True)
    timings.update(main_start=start_s, main=time.monotonic() - t0)
    result = check(cells, run.K, edge=edge, runner=runner, tolerance=run.tolerance)
    write(run, result, timings, command)
    say(t0, f"K={run.K} engine: verified {result.verified}; wrote {run.out / 'honor.json'}")
    if run.reference_k:
        # its cells take about (R+1)/(K+1) of the main engine's, plus a start like the first one
        need = start_s + START_RESERVE_S + (timings["main"] - start_s) * (run.reference_k + 1) / (run.K + 1)
        left = None if run.budget_s is None else run.budget_s - (time.monotonic() - t0)
        if left is not None and left < need:
            say(t0, f"reference engine skipped: about {need:.0f} s needed, {left:.0f} s left (--budget-s)")
        else:
            ref, _, _, ref_start = await measure_engine(run, run.reference_k, t0, with_edge=False)
            timings.update(reference_start=ref_start, total=time.monotonic() - t0)
            result = check(cells, run.K, edge=edge, reference=ref, runner=runner, tolerance=run.tolerance)
            write(run, result, timings, command)
    say(t0, result.finding)
    return result


def write_summary(path: Path) -> int:
    """summary.json beside ``path`` from the honor.json stored there; exit 2 when it cannot be read."""
    try:
        body = json.loads(path.read_text())
        summary = summarize(body)
    except (OSError, ValueError, KeyError) as exc:  # pydantic's ValidationError is a ValueError
        print(f"python -m benchmarks.honor: --summary={path}: not a readable honor.json ({exc})"
              .replace("\n", " "), file=sys.stderr)
        return 2
    (path.parent / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return 0


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.honor", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="model path (default: the embedded tiny Llama)")
    ap.add_argument("--method", default="ngram", choices=["ngram", "draft_model", "eagle", "eagle3"])
    ap.add_argument("--drafter", help="drafter path for draft_model/eagle/eagle3")
    ap.add_argument("--num-speculative-tokens", "-K", type=int, default=3)
    ap.add_argument("--max-num-seqs", type=int, default=32)
    ap.add_argument("--batch-sizes", default="1,4,16", help="B's every one-range table runs at")
    ap.add_argument("--edge", type=int, default=None,
                    help="E of the edge table [[1,E,K],[E+1,N,1]] (default: the middle batch size; 0: none)")
    ap.add_argument("--reference-k", type=int, default=1,
                    help="K of the second engine timed at the same (B, k) (0: none)")
    ap.add_argument("--decode-tokens", type=int, default=33, help="tokens each request decodes")
    ap.add_argument("--repeats", type=int, default=2, help="bursts per cell, interleaved over k")
    ap.add_argument("--tolerance", type=float, default=TOLERANCE,
                    help="drafts per request a cell may verify above the table's k and still be honored")
    ap.add_argument("--budget-s", type=float, default=None,
                    help="skip the reference engine when it would not finish inside this")
    ap.add_argument("--out", default="runs/honor", help="folder for honor.json, honor.csv, logs/")
    ap.add_argument("--summary", metavar="HONOR_JSON",
                    help="write summary.json beside a stored honor.json and exit (no engine)")
    flags.add_engine_flags(ap)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.summary:
        return write_summary(Path(args.summary))
    try:
        run = checked(args)
        asyncio.run(measure(run, "python -m benchmarks.honor " + " ".join(argv or sys.argv[1:])))
    except TableTuneError as exc:
        print(f"python -m benchmarks.honor: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
