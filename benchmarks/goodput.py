"""Does the sidecar end on the k that measures best? (issue: decide by measured goodput)

Start from a profile made wrong by a known amount that acceptance cannot reveal (one k's step
times scaled by ``--scale K:FACTOR``), on one vLLM with the plugin, at each steady load N of
closed-loop clients:

1. the fixed k's 0..K in ``--blocks`` shuffled blocks of ``--window-s`` windows (engine-clock
   throughput, benchmarks/window.py); per pair of k's the ratio per block, median with a 95%
   interval, Bonferroni over the load's pairs of k's (fixed_verdicts). The *best set* is every k
   that no other k beats beyond its interval (more than one k when they are indistinguishable
   at this noise); ``best_fixed_k`` is the one with the
   highest median, ``best_fixed_ci`` its interval over the runner-up;
2. ``--runs`` times: the wrong profile's own table pushed, a fresh `tabletune sidecar` (its
   defaults, all k allowed) started beside the engine, the load served for ``--follow-s``;
   the engine's table polled every 0.5 s and the plugin's step ring read for the batch size the
   load runs at (the mode over the last 60 s). ``sidecar_k`` is the final table's k there,
   ``seconds_to_final`` when that k last changed, ``pushes`` the table versions the sidecar wrote.

A run matches when sidecar_k is in the best set. The fixed k's blocks are also written as the
bench's windows (``cells.csv``) and analysed like any bench (``summary.json``/``summary.md``:
Holm-corrected verdicts at a 1% threshold, benchmarks/stats.py); ``--render DIR`` does that again
from a ``goodput.json``. ``goodput.json``:
``{"runs": [{"load", "run", "best_fixed_k", "best_fixed_ci", "sidecar_k", "seconds_to_final",
"pushes", ...}], "match_rate", ...}``.

    python -m benchmarks.goodput --profile PROFILE --scale 3:1.3 --loads 2,4,8 --runs 3 --out DIR
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import random
import sys
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from benchmarks.cells import TABLES, Window, write_windows
from benchmarks.report import write as write_report
from benchmarks.scenario import scenario_of, serving
from benchmarks.stale_profile import scaled
from benchmarks.stats import Settings, analyze
from benchmarks.summary import MIN_STEPS
from benchmarks.stateful import sidecar
from benchmarks.inference import MeanInterval, mean_interval
from benchmarks.window import measure, swap
from tuner import flags
from tuner.core.engine_client import EngineClient
from tuner.core.errors import InvalidInput
from tuner.load import Request, StationaryLoad
from tuner.core.profile import Profile
from tuner.core.table import Table


class Family(BaseModel):
    """How a load's pairs of fixed k's share the error rate."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    pairs: int
    method: Literal["bonferroni"]
    alpha: float


class FixedVerdicts(BaseModel):
    """A load's fixed k's: tokens/s per block, every pair's ratio (Bonferroni over the pairs)
    and the best set, every k no other beats beyond its interval."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    tokens_per_s: dict[int, list[float]]
    ratios: dict[str, MeanInterval | None]     # "a/b": k=a over k=b
    best_set: list[int]
    best_fixed_k: int                          # the highest median
    runner_up: int
    best_fixed_ci: list[float | None]          # best over runner-up
    family: Family


class Followed(BaseModel):
    """What one sidecar did from the wrong table under a load: the table's k at the batch
    size the load ran at (the mode of the last 60 s), when it last changed, and its versions."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    batch_size: int
    start_k: int
    sidecar_k: int
    seconds_to_final: float
    pushes: int                                  # table versions the sidecar wrote
    final_table: list[list[int]]
    timeline: list[tuple[float, list[list[int]]]]  # (seconds, the table) at every change


class GoodputRun(Followed):
    """A run as goodput.json keeps it: the load's verdict on the fixed k's beside it."""

    load: int
    run: int
    best_fixed_k: int
    best_fixed_ci: list[float | None]
    best_set: list[int]
    decided_by: dict[str, int]                   # the pushes' changes by who decided them
    match: bool                                  # sidecar_k in best_set

    @classmethod
    def of(cls, got: Followed, verdicts: FixedVerdicts, load: int, run: int,
           decided_by: dict[str, int]) -> GoodputRun:
        """A sidecar's run judged by its load's fixed_verdicts."""
        return cls(**{f: getattr(got, f) for f in Followed.model_fields}, load=load, run=run,
                   best_fixed_k=verdicts.best_fixed_k, best_fixed_ci=verdicts.best_fixed_ci,
                   best_set=verdicts.best_set, decided_by=decided_by,
                   match=got.sidecar_k in verdicts.best_set)

    def judged(self, verdicts: FixedVerdicts) -> GoodputRun:
        """The run against its load's verdicts recomputed."""
        return GoodputRun.of(self, verdicts, self.load, self.run, self.decided_by)


class Discarded(BaseModel):
    """A fixed k's window measured again, and why."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    block: int
    k: int
    reason: str


class FixedLoad(FixedVerdicts):
    """A load's entry of goodput.json: its verdicts, each window's engine steps (None: not
    read; absent in files from before they were kept) and the windows measured again."""

    steps: dict[int, list[int | None]] = {}
    discarded: list[Discarded] = []

    def blocks(self) -> int:
        return min(len(v) for v in self.tokens_per_s.values())


class Rates(BaseModel):
    """The runs' share that matched, whether all settled within 180 s, the most pushes."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    match_rate: float | None
    within_180s: bool
    max_pushes_per_run: int

    @classmethod
    def of(cls, runs: list[GoodputRun]) -> Rates:
        return cls(match_rate=round(sum(r.match for r in runs) / len(runs), 3) if runs else None,
                   within_180s=all(r.seconds_to_final <= 180 for r in runs),
                   max_pushes_per_run=max((r.pushes for r in runs), default=0))


class GoodputFile(Rates):
    """goodput.json: the sidecar's runs, each load's fixed k's, and how they were run (a merged
    file: per load ``blocks`` and ``follow_s``, a command per call, the parts' names)."""

    runs: list[GoodputRun]
    loads: dict[int, FixedLoad]
    blocks: int | dict[int, int]
    window_s: float = 7.0
    follow_s: float | dict[int, float] | None = None
    ks: list[int] | None = None         # None: a file from before they were recorded
    scale: str | None = None
    start_table: list[list[int]] | None = None
    profile_table: list[list[int]] | None = None
    command: str | list[str] = ""
    merged_from: list[str] | None = None

    def fixed_ks(self) -> list[int]:
        """The fixed k's measured, in order."""
        return self.ks or sorted({k for fk in self.loads.values() for k in fk.tokens_per_s})


def scale_of(text: str) -> tuple[int, float] | None:
    """--scale K:FACTOR as (K, FACTOR); None for 'none'; InvalidInput otherwise."""
    if text == "none":
        return None
    try:
        k, factor = text.split(":")
        return int(k), float(factor)
    except ValueError:
        raise InvalidInput(f"--scale={text!r}: give K:FACTOR, e.g. 3:1.3, or none") from None


async def fixed(url: str, engine: EngineClient, admin: EngineClient, requests: list[Request],
                n: int, ks: list[int], blocks: int, window_s: float,
                seed: int) -> FixedLoad:
    """Every fixed k of ``ks`` in shuffled blocks: the load's entry of goodput.json (the
    verdicts, engine steps and windows measured again)."""
    n_max = (await admin.get_table()).max_num_seqs
    await admin.put_policy(explore_every=0, duels=[])  # no sidecar's exploration left behind
    rng = random.Random(seed)
    tps: dict[int, list[float]] = {k: [] for k in ks}
    steps: dict[int, list[int | None]] = {k: [] for k in ks}
    discarded: list[Discarded] = []
    async with StationaryLoad(url, requests, n, 0.0, seed=seed) as traffic:
        await asyncio.sleep(2.0)
        for b in range(blocks):
            order = list(ks)
            rng.shuffle(order)
            for k in order:
                await swap(admin, Table.from_list([[1, n_max, k]]), settle_steps=8)
                # at least MIN_STEPS engine steps: one step more or less moves it by <= 2%
                m = await measure(engine, admin, traffic, window_s, min_steps=MIN_STEPS)
                tps[k].append(m.tokens_per_s)
                steps[k].append(m.steps.steps if m.steps is not None else None)
                discarded += [Discarded(block=b, k=k, reason=why) for _, why in m.discarded]
        traffic.check()
    return FixedLoad(**dict(fixed_verdicts(tps)), steps=steps, discarded=discarded)


def fixed_verdicts(tps: dict[int, list[float]], alpha: float = 0.05) -> FixedVerdicts:
    """Per pair of k's the ratio per block with its interval, Bonferroni over the load's
    pairs (each at alpha / pairs, so the best set's family errs with probability <= alpha),
    and the *best set*: every k no other k beats beyond its interval."""
    pairs = max(1, len(tps) * (len(tps) - 1) // 2)
    ratios = {f"{a}/{b}": mean_interval([x / y for x, y in zip(tps[a], tps[b], strict=True)],
                                        alpha=alpha / pairs)
              for a in tps for b in tps if a != b}
    best_set = [a for a in tps if all((r := ratios[f"{a}/{b}"]) is None or r.ci_high >= 1.0
                                      for b in tps if b != a)]
    medians = {k: sorted(v)[len(v) // 2] for k, v in tps.items()}
    order = sorted(medians, key=lambda k: -medians[k])
    best, runner_up = order[0], order[1]
    ci = ratios[f"{best}/{runner_up}"]
    return FixedVerdicts(tokens_per_s=tps, ratios=ratios, best_set=best_set, best_fixed_k=best,
                         runner_up=runner_up,
                         best_fixed_ci=[None, None] if ci is None else [ci.ci_low, ci.ci_high],
                         family=Family(pairs=pairs, method="bonferroni", alpha=alpha))


async def sidecar_run(url: str, admin: EngineClient, requests: list[Request], n: int,
                      start: Table, profile_path: Path, log_dir: Path, follow_s: float,
                      seed: int, args: tuple[str, ...]) -> Followed:
    """A fresh sidecar from the wrong table under load n: its table over time, the load's B."""
    await admin.put_table(start)
    await admin.put_policy(explore_every=0, duels=[])
    seq = (await admin.get_stats()).engine_steps
    batch: collections.deque[tuple[float, int]] = collections.deque()
    timeline: list[tuple[float, list[list[int]]]] = []
    async with (StationaryLoad(url, requests, n, 0.0, seed=seed) as traffic,
                sidecar(profile_path, log_dir, url, admin.admin_url, args)):
        t0 = time.monotonic()
        version = (await admin.get_table()).version
        versions = 0
        while (t := time.monotonic() - t0) < follow_s:
            info = await admin.get_table()
            if info.version != version:
                version, versions = info.version, versions + 1
                timeline.append((round(t, 2), info.table or []))
            stats = await admin.get_stats(since=seq)
            for s in stats.recent_steps:
                batch.append((t, int(s[1])))
                seq = max(seq, int(s[0]))
            while batch and batch[0][0] < t - 60.0:
                batch.popleft()
            await asyncio.sleep(0.5)
        traffic.check()
        final = Table.from_list((await admin.get_table()).table or start.to_list())
    B = collections.Counter(b for _, b in batch).most_common(1)[0][0] if batch else n
    k_final = final.k_at(B)
    seconds = 0.0
    for t, table in timeline:
        if Table.from_list(table).k_at(B) != k_at_before(timeline, t, start, B):
            seconds = t
    return Followed(batch_size=B, start_k=start.k_at(B), sidecar_k=k_final,
                    seconds_to_final=seconds, pushes=versions, final_table=final.to_list(),
                    timeline=timeline)


def k_at_before(timeline: list[tuple[float, list[list[int]]]], t: float, start: Table,
                B: int) -> int:
    """The table's k at B just before time t."""
    before = [table for s, table in timeline if s < t]
    return Table.from_list(before[-1]).k_at(B) if before else start.k_at(B)


def decisions(log: Path) -> dict[str, int]:
    """Pushes in a sidecar log by who decided their changes (measured / model)."""
    count: collections.Counter[str] = collections.Counter()
    if not log.exists():
        return {}
    for line in log.read_text().splitlines():
        try:
            d = json.loads(line).get("decision")
        except json.JSONDecodeError:
            continue
        if d and d.get("outcome") == "pushed":
            for c in d.get("changes", []):
                count[c.get("decided_by", "model")] += 1
    return dict(count)


def fixed_windows(loads: dict[int, FixedLoad], ks: list[int], window_s: float) -> list[Window]:
    """The fixed k's blocks as the bench's windows: block b at load n holds each k's b-th
    window, in the order ``fixed`` ran them (its shuffle, seeded by n, replayed)."""
    out: list[Window] = []
    for r, n in enumerate(sorted(loads)):
        tps = loads[n].tokens_per_s
        rng = random.Random(n)
        for b in range(loads[n].blocks()):
            order = list(ks)
            rng.shuffle(order)
            block = len({w.block for w in out})
            out += [Window(block=block, round=r, load=int(n), group=TABLES, position=i,
                           policy=f"fixed-k{k}", tokens_per_s=float(tps[k][b]),
                           window_s=window_s, started_s=0.0, steps=_steps(loads[n], k, b))
                    for i, k in enumerate(order)]
    return out


def _steps(load: FixedLoad, k: int, b: int) -> int | None:
    """The engine steps of k's b-th window (None: a file from before they were kept)."""
    got = load.steps.get(k)
    return got[b] if got is not None and b < len(got) else None


def analysed(out: Path, loads: dict[int, FixedLoad], ks: list[int], window_s: float,
             command: str) -> None:
    """cells.csv, summary.json, summary.md (and intervals.png) of the fixed k's blocks."""
    windows = fixed_windows(loads, ks, window_s)
    if not windows:
        return
    write_windows(windows, out / "cells.csv")
    planned = {str(n): fk.blocks() for n, fk in loads.items()}
    meta = {"title": "The fixed k's of the goodput bench", "window_s": window_s,
            "command": command, "stop_reason": "the planned blocks", "rounds": len(loads),
            "design": {"kind": "fixed", "planned_blocks": planned,
                       "basis": "--blocks per load, set by the time a call had (not planned "
                                "for power); fixed before the run, so no optional stopping"}}
    write_report(windows, analyze(windows, Settings()), out, str(meta["title"]), meta)


def summary(runs: list[GoodputRun], loads: dict[int, FixedLoad], start: Table,
            base: Profile, args: argparse.Namespace) -> GoodputFile:
    return GoodputFile(runs=runs, **dict(Rates.of(runs)), loads=loads, scale=args.scale,
                       start_table=start.to_list(), profile_table=base.table,
                       window_s=args.window_s, blocks=args.blocks, follow_s=args.follow_s,
                       ks=fixed_ks(args, base.K),
                       command="python -m benchmarks.goodput " + " ".join(sys.argv[1:]))


def fixed_ks(args: argparse.Namespace, K: int) -> list[int]:
    return [int(x) for x in args.ks.split(",")] if args.ks else list(range(K + 1))


async def run(args: argparse.Namespace) -> GoodputFile:
    scenario = scenario_of(args, tuple(args.engine_arg or ()))
    out, base = scenario.out, scenario.profile
    scale = scale_of(args.scale)  # None: the profile as measured, its model's own error the test
    bad = (base.model_copy(update={"table": base.build().table.to_list()}) if scale is None
           else scaled(base, *scale, names=("--scale K", "--scale FACTOR")))
    bad_path = out / "profile-wrong.json"
    bad.save(bad_path)
    # --start-table: a table wrong where the profile is right (the model can be sure of it)
    start = (flags.table(args.start_table, "--start-table") if args.start_table
             else Table.from_list(bad.table or []))
    requests = scenario.requests(args.prompt_tokens, args.max_tokens)
    K = base.K
    runs: list[GoodputRun] = []
    loads: dict[int, FixedLoad] = {}
    async with serving(scenario) as up:
        server, admin, engine = up.server, up.admin, up.engine
        for n in (int(x) for x in args.loads.split(",")):
            ks = fixed_ks(args, K)
            best = loads[n] = await fixed(server.url, engine, admin, requests, n, ks,
                                          args.blocks, args.window_s, seed=n)
            analysed(out, loads, ks, args.window_s, "python -m benchmarks.goodput "
                     + " ".join(sys.argv[1:]))
            print(f"N={n}: best fixed k={best.best_fixed_k} {best.best_fixed_ci}, "
                  f"best set {best.best_set}", file=sys.stderr)
            for r in range(args.runs):
                logs = out / "logs" / f"n{n}-run{r}"
                logs.mkdir(parents=True, exist_ok=True)
                got = await sidecar_run(server.url, admin, requests, n, start, bad_path, logs,
                                        args.follow_s, seed=100 * n + r,
                                        args=tuple(args.sidecar_arg or ()))
                log = next(logs.glob("sidecar-*.log"), None)
                runs.append(GoodputRun.of(got, best, n, r, decisions(log) if log else {}))
                print(f"N={n} run {r}: k {got.start_k} -> {got.sidecar_k} after "
                      f"{got.seconds_to_final} s, {got.pushes} pushes "
                      f"({'match' if runs[-1].match else 'MISS'})", file=sys.stderr)
                # after every run: a run cut short by a time limit keeps what it has
                (out / "goodput.json").write_text(
                    summary(runs, loads, start, base, args).model_dump_json(indent=1))
    return summary(runs, loads, start, base, args)


def merge(paths: list[Path]) -> GoodputFile:
    """Several goodput.json (one call each on a GPU) as one: runs concatenated, loads joined
    (each load's blocks ran on one engine, so its pairs stay valid), the rates recomputed."""
    parts = [json.loads(p.read_text()) for p in paths]
    loads = {n: fk for g in parts for n, fk in g["loads"].items()}
    return revised({**parts[0], "loads": loads, "runs": [r for g in parts for r in g["runs"]],
                    "follow_s": {str(r["load"]): g["follow_s"] for g in parts for r in g["runs"]},
                    "command": [g["command"] for g in parts],
                    "merged_from": [p.name for p in paths]})


def revised(g: dict[str, Any]) -> GoodputFile:
    """A goodput.json, as read, with each load's verdicts recomputed from its blocks by today's
    fixed_verdicts (an older file's intervals were not corrected for the load's pairs), each
    run's best set and match with them, and the rates."""
    verdicts = {int(n): fixed_verdicts({int(k): v for k, v in fk["tokens_per_s"].items()})
                for n, fk in g["loads"].items()}
    loads = {int(n): FixedLoad(**{**fk, **dict(verdicts[int(n)])}) for n, fk in g["loads"].items()}
    runs = [GoodputRun.model_validate(r).judged(verdicts[int(r["load"])]) for r in g["runs"]]
    return GoodputFile.model_validate({**g, "runs": runs, "loads": loads, **dict(Rates.of(runs)),
                                       "blocks": {n: fk.blocks() for n, fk in loads.items()}})


def render(path: Path) -> GoodputFile:
    """The goodput.json's verdicts recomputed (revised, written back), and cells.csv and the
    summary beside it from its fixed k's blocks."""
    got = revised(json.loads(path.read_text()))
    path.write_text(got.model_dump_json(indent=1, exclude_unset=True) + "\n")
    command = got.command
    analysed(path.parent, got.loads, got.fixed_ks(), got.window_s,
             " && ".join(command) if isinstance(command, list) else command)
    return got


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--render", type=Path, metavar="GOODPUT_JSON",
                    help="recompute a goodput.json's verdicts, write cells.csv and the summary "
                         "beside it, and stop")
    ap.add_argument("--merge", type=Path, nargs="+", metavar="PART_JSON",
                    help="with --render: first write GOODPUT_JSON from these goodput.json files")
    ap.add_argument("--profile")
    ap.add_argument("--scale", default="3:1.3", help="K:FACTOR, the profile's T(., K) times "
                    "FACTOR; 'none': the profile as measured")
    ap.add_argument("--ks", help="the fixed k's measured (default 0..K)")
    ap.add_argument("--loads", default="2,4,8")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--blocks", type=int, default=6, help="fixed-k blocks per load")
    ap.add_argument("--window-s", type=float, default=3.0)
    ap.add_argument("--follow-s", type=float, default=180.0)
    ap.add_argument("--out", default="runs/goodput")
    ap.add_argument("--model", help="model path (default: the profile's)")
    ap.add_argument("--prompt-tokens", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=48, help="mean output length (0.5-1.5x)")
    ap.add_argument("--sidecar-arg", action="append", help="extra flag for the sidecar (repeat)")
    ap.add_argument("--start-table", help="JSON table each sidecar run starts from (default: the "
                                          "scaled profile's own table)")
    flags.add_engine_flags(ap)
    args = ap.parse_args()
    if args.render:
        if args.merge:
            args.render.write_text(merge(args.merge).model_dump_json(indent=1, exclude_unset=True) + "\n")
        render(args.render)
        print((args.render.parent / "summary.md").read_text())
        return 0
    if not args.profile:
        ap.error("--profile is required (or --render GOODPUT_JSON)")
    if args.blocks < 2:
        print(f"error: --blocks={args.blocks}: the fixed k's need at least 2 blocks for an "
              "interval (4 for a verdict); pass --blocks 4", file=sys.stderr)
        return 2
    try:  # checked before an engine starts: exit 2 with the flag named
        scale_of(args.scale)
        if args.start_table:
            flags.table(args.start_table, "--start-table")
    except InvalidInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    Path(args.out).mkdir(parents=True, exist_ok=True)
    try:
        result = asyncio.run(run(args))
    except InvalidInput as exc:  # a --scale K the profile lacks, a --model not here
        print(f"error: {exc}", file=sys.stderr)
        return 2
    (Path(args.out) / "goodput.json").write_text(result.model_dump_json(indent=1))
    print(Rates(**{f: getattr(result, f) for f in Rates.model_fields}).model_dump_json())
    return 0


if __name__ == "__main__":
    sys.exit(main())
