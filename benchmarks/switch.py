"""The workload switch with the real sidecar: how fast does the table follow the traffic?

Repair of a wrong table is in `bench` (sidecar-from-quarter); this is the switch. Workload A
(the one the profile was tuned on) and workload B (the same prompts at another temperature, so
very different acceptance), on one vLLM with the plugin, under a stationary load of `--load`
closed-loop clients; throughput from the engine's counters (benchmarks/window.py). With dummy
weights (a GPU setting) acceptance is replayed instead: `--emulate A_RATES --emulate-b B_RATES`,
and the switch is the plugin's `PUT /v1/emulation` at the moment B's traffic starts.

1. Acceptance under A and under B (plugin counters), and each one's own table from the profile.
2. The gap, paired: `--blocks` blocks under B traffic, each running A's table (stale), B's
   table by the profile and every fixed k in a rotating order; "best" is the one of B's table
   and the fixed k's with the highest median (the best fixed k, all k allowed, where it beats
   the profile's choice). The cycles measure it again in their own arms.
3. The switch, in paired cycles: each cycle runs three arms in a rotating order, each arm A for
   `--adapt-s` from A's table, then the switch to B and `--follow-s` of windows: `stale` (A's
   table stays), `best` (the best table of step 2 pushed at the switch) and `sidecar` (a fresh sidecar
   process from A's table, started with A's traffic). Every arm starts B's load the same way,
   so the transient of a new load (all clients prefilling at once) falls on all three alike.
   Per cycle: `seconds_to_right_table` (the sidecar arm: from the switch until the engine's
   table runs B's k at the load, polled every 0.2 s) and `recovery_30s` = (sidecar - stale) /
   (best - stale), each the mean over the windows of the first 30 s of its own arm; over
   cycles, medians with 95% intervals. (An earlier design took stale and best from step 2's
   steady load, so the new-load transient counted against the sidecar alone.)

    python -m benchmarks.switch --profile PROFILE --out DIR
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.design import rotated
from benchmarks.inference import MeanInterval, mean_interval
from benchmarks.scenario import scenario_of, serving
from benchmarks.stateful import sidecar
from benchmarks.summary import MIN_STEPS, step_counts
from benchmarks.window import measure, swap
from pydantic import BaseModel, ConfigDict, ValidationError
from tuner import flags
from tuner.core.errors import InvalidInput
from tuner.replay import Replay
from tuner.acceptance import monotone, per_position
from tuner.core.engine_client import EngineClient
from tuner.load import Request, StationaryLoad
from tuner.core.table import Table

MAX_TOKENS = 48


@dataclass(frozen=True)
class Workload:
    """What the traffic is: its sampling temperature and, with dummy weights, the acceptance
    the plugin's emulator replays (None: the drafter's own)."""
    temperature: float
    rates: tuple[float, ...] | None = None

    def describe(self) -> str:
        if self.rates is not None:
            return "repetitive prompts, acceptance replayed at " + "/".join(map(str, self.rates))
        return f"repetitive prompts, temperature {self.temperature}"


async def enter(admin: EngineClient, w: Workload) -> None:
    """Make the engine serve workload w (only the emulator's rates are engine state)."""
    if w.rates is not None:
        await admin.put_emulation(list(w.rates))


def drafting_everywhere(K: int, max_num_seqs: int) -> Table:
    """The table acceptance is measured under: every position drafted at every batch size (the
    engine starts with every k in its table, k=0 from B=K+1 on: no drafts, acceptance 0)."""
    return Table.from_list([[1, max_num_seqs, K]])


async def acceptance(url: str, engine: EngineClient, admin: EngineClient, requests: list[Request],
                     n: int, w: Workload, K: int, seconds: float = 10.0) -> list[float]:
    await enter(admin, w)
    await admin.put_table(drafting_everywhere(K, (await admin.get_table()).max_num_seqs))
    async with StationaryLoad(url, requests, n, w.temperature) as traffic:
        await asyncio.sleep(1.0)
        s0 = await admin.get_stats()
        await asyncio.sleep(seconds)
        s1 = await admin.get_stats()
        traffic.check()
    acc = [b - a for a, b in zip(s0.accepted_per_pos, s1.accepted_per_pos, strict=True)]
    dra = [b - a for a, b in zip(s0.drafted_per_pos, s1.drafted_per_pos, strict=True)]
    return [max(0.0, float(x)) for x in monotone(per_position(acc, dra))]


async def gap(url: str, engine: EngineClient, admin: EngineClient, requests: list[Request],
              n: int, work_b: Workload, stale: Table, candidates: dict[str, Table], blocks: int,
              window_s: float) -> Gap:
    """Under B traffic, in paired blocks (rotating order): A's table (stale) and every candidate
    for "best" (B's table by the profile, and each fixed k: the best fixed k, not only the best
    allowed one). The best is the candidate with the highest median here; the cycles measure it
    again in their own arms, so it is chosen on these blocks and judged on others. Each window
    holds at least MIN_STEPS engine steps; their counts and any window measured again are kept."""
    names = ["stale", *candidates]
    tables = {"stale": stale, **candidates}
    tps: dict[str, list[float]] = {name: [] for name in names}
    steps: dict[str, list[int | None]] = {name: [] for name in names}
    discarded: list[GapDiscarded] = []
    await enter(admin, work_b)
    async with StationaryLoad(url, requests, n, work_b.temperature, seed=5) as traffic:
        await asyncio.sleep(1.0)
        for b in range(blocks):
            for name in rotated(tuple(names), b):
                await swap(admin, tables[name], settle_steps=8)
                m = await measure(engine, admin, traffic, window_s, min_steps=MIN_STEPS)
                tps[name].append(m.tokens_per_s)
                steps[name].append(m.steps.steps if m.steps is not None else None)
                discarded += [GapDiscarded(block=b, name=name, reason=why) for _, why in m.discarded]
    best = max(candidates, key=lambda c: statistics.median(tps[c]))
    return Gap(stale_tps=tps["stale"], best_tps=tps[best], best_name=best,
               best_table=tables[best].to_list(), candidates_tps=tps, gap_steps=steps,
               gap_discarded=discarded)


async def right_table_after(admin: EngineClient, table_b: Table, n: int, t0: float,
                            until_s: float) -> float | None:
    """Seconds from t0 until the engine's table runs B's k at load n (None: not by until_s)."""
    want = table_b.k_at(n)
    while time.monotonic() - t0 < until_s:
        table = (await admin.get_table()).table
        if table is not None and Table.from_list(table).k_at(n) == want:
            return round(time.monotonic() - t0, 2)
        await asyncio.sleep(0.2)
    return None


async def arm(url: str, engine: EngineClient, admin: EngineClient, requests: list[Request],
              n: int, works: tuple[Workload, Workload], tables: tuple[Table, Table], which: str,
              side: Callable[[], AbstractAsyncContextManager[Any]], adapt_s: float,
              follow_s: float, window_s: float, seed: int) -> SwitchArm:
    """One arm of a cycle: A's traffic from A's table, then B's; `which` says what follows B."""
    await admin.put_table(tables[0])
    await admin.put_policy(explore_every=0)  # a sidecar arm's sidecar sets its own at start
    await enter(admin, works[0])
    async with contextlib.AsyncExitStack() as stack:
        if which == "sidecar":
            await stack.enter_async_context(side())
        async with StationaryLoad(url, requests, n, works[0].temperature, seed=seed) as traffic:
            await asyncio.sleep(adapt_s)
            traffic.check()
            table_before = (await admin.get_table()).table
        t0 = time.monotonic()
        await enter(admin, works[1])
        if which == "best":
            await admin.put_table(tables[1])
        async with StationaryLoad(url, requests, n, works[1].temperature, seed=seed + 1) as traffic:
            poll = asyncio.create_task(right_table_after(admin, tables[1], n, t0, follow_s))
            windows: list[SwitchWindow] = []
            while time.monotonic() - t0 + window_s <= follow_s:
                m = await measure(engine, admin, traffic, window_s, min_steps=MIN_STEPS)
                windows.append(SwitchWindow(
                    end_s=round(time.monotonic() - t0, 2), tps=m.tokens_per_s,
                    steps=m.steps.steps if m.steps is not None else None,
                    discarded=[why for _, why in m.discarded]))
            seconds = await poll
            table_after = (await admin.get_table()).table
    first = _mean_between(windows, 0.0, 30.0)
    return SwitchArm(arm=which, table_before_switch=table_before, table_after=table_after,
                     seconds_to_right_table=seconds, windows=windows,
                     mean_30s=None if first is None else round(first, 2))


ARMS = ("stale", "best", "sidecar")


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class GapDiscarded(_Record):
    """A gap block's window measured again, and why."""

    block: int
    name: str
    reason: str


class Gap(_Record):
    """Step 2: under B's traffic, each table's throughput per paired block, and the best one
    (the highest median); older files lack the steps and the windows measured again (None)."""

    stale_tps: list[float]
    best_tps: list[float]
    best_name: str | None = None     # None: a file from before the best was chosen per call
    best_table: list[list[int]] | None = None
    candidates_tps: dict[str, list[float]] | None = None
    gap_steps: dict[str, list[int | None]] | None = None
    gap_discarded: list[GapDiscarded] | None = None


class SwitchWindow(_Record):
    """One window after the switch: its end (seconds after it) and the engine's throughput."""

    end_s: float
    tps: float
    steps: int | None = None             # engine steps (None: a file before they were kept)
    discarded: list[str] | None = None   # why a measurement was taken again (None: ditto)


class SwitchArm(_Record):
    """One arm of a cycle: A's traffic from A's table, then B's under `arm`'s policy."""

    arm: str
    table_before_switch: list[list[int]] | None
    table_after: list[list[int]] | None
    seconds_to_right_table: float | None
    windows: list[SwitchWindow]
    mean_30s: float | None


class SwitchCycle(_Record):
    """A switch A -> B under every arm, in `order`; `part`: the call that ran it (merged)."""

    order: list[str]
    arms: dict[str, SwitchArm]
    seconds_to_right_table: float | None
    recovery_30s: float | None
    part: int | None = None


def recovery(arms: dict[str, SwitchArm]) -> float | None:
    """(sidecar - stale) / (best - stale) over the first 30 s of each arm; None without a gap."""
    st, bt, sc = (arms[a].mean_30s for a in ("stale", "best", "sidecar"))
    if st is None or bt is None or sc is None or bt <= st:
        return None
    return round((sc - st) / (bt - st), 4)


def _mean_between(windows: list[SwitchWindow], lo: float, hi: float) -> float | None:
    got = [w.tps for w in windows if lo < w.end_s <= hi]
    return statistics.mean(got) if got else None


class AfterRightTable(_Record):
    """The sidecar arm over the best and over the stale arm, windows ending in (from_s, to_s]."""

    from_s: float
    to_s: float
    sidecar_over_best: MeanInterval | None
    sidecar_over_stale: MeanInterval | None


class ArmSteps(_Record):
    """Engine steps in the arms' windows against the rule of at least MIN_STEPS."""

    min_steps: int
    windows_with_steps: int
    fewest_steps: int | None
    windows_below_min_steps: int
    windows_measured_again: int | None = None   # None: a switch.json from before the count was kept


class SwitchFigures(_Record):
    """Every figure of switch.json, from its raw windows and cycles (``summarize``)."""

    best_over_stale: MeanInterval | None
    stale_loss: float | None
    seconds_to_right_table: list[float | None]
    seconds_to_right_table_max: float | None
    right_table_every_cycle: bool
    recovery_30s: MeanInterval | None
    after_right_table: AfterRightTable
    arm_steps: ArmSteps
    switch_gap_30s: MeanInterval | None

    @classmethod
    def of_file(cls, body: dict[str, Any]) -> SwitchFigures:
        """The figures of a committed switch.json (its raw runs beside them left out); a file
        from before the step count was kept reads an ArmSteps of no windows counted."""
        got = {k: body[k] for k in cls.model_fields if k in body}
        return cls.model_validate({"arm_steps": no_arm_steps(), **got})


def no_arm_steps() -> dict[str, Any]:
    """The arm_steps of a switch.json from before the step count was kept: no windows counted."""
    return {**step_counts([]), "windows_measured_again": None}


def after(cycles: list[SwitchCycle], from_s: float = 10.0, to_s: float = 30.0) -> AfterRightTable:
    """Once the right table is in (the switch's target is 10 s): the sidecar arm's throughput
    over the best arm's and over the stale arm's, windows ending in (from_s, to_s], per cycle
    and as medians with 95% intervals. Ratios of arms, not a share of the gap: a gap of ~10%
    under ±10% window noise makes the share's interval far wider than the ratios'."""
    best, stale = [], []
    for c in cycles:
        sc, bt, st = (_mean_between(c.arms[a].windows, from_s, to_s)
                      for a in ("sidecar", "best", "stale"))
        if sc is not None and bt and st:
            best.append(sc / bt)
            stale.append(sc / st)
    return AfterRightTable(from_s=from_s, to_s=to_s, sidecar_over_best=mean_interval(best),
                           sidecar_over_stale=mean_interval(stale))


def arm_steps(cycles: list[SwitchCycle]) -> ArmSteps:
    """Engine steps in the arms' windows (at least MIN_STEPS each, rule 12 of
    docs/measurement.md); a switch.json from before the count was kept says so (None)."""
    windows = [w for c in cycles for a in c.arms.values() for w in a.windows]
    steps = [w.steps for w in windows if w.steps is not None]
    # windows measured again (an implausible engine count): None where a file predates the record
    discarded = (sum(len(w.discarded) for w in windows if w.discarded is not None)
                 if windows and all(w.discarded is not None for w in windows) else None)
    return ArmSteps(**step_counts(steps), windows_measured_again=discarded)


class SwitchSetup(_Record):
    """How a switch run was set up (the fields every call of it shares)."""

    load: int
    workload_a: str
    workload_b: str
    window_s: float
    adapt_s: float
    follow_s: float
    sidecar_args: list[str]


class SwitchRun(SwitchFigures, SwitchSetup, Gap):
    """One call's switch.json: the set-up, the acceptance and tables of A and B, the gap blocks,
    the cycles and every figure (``figures``, recomputed by ``--rerender``)."""

    a_a: list[float]
    a_b: list[float]
    table_a: list[list[int]]
    table_b: list[list[int]]
    cycles: list[SwitchCycle]
    command: str
    analysis: str | None = None          # how a re-analysed file's figures were made


class SwitchPart(_Record):
    """One call of a merged switch.json: the best it chose and its tables."""

    file: str
    best_name: str
    best_table: list[list[int]]
    table_a: list[list[int]]
    table_b: list[list[int]]
    a_a: list[float]
    a_b: list[float]
    cycles: int
    command: str | None


class SwitchMerged(SwitchFigures, SwitchSetup):
    """Several calls' switch.json as one (``merge``): every cycle and gap block, the figures of
    them all, and per call what it chose."""

    merged_from: list[str]
    parts: list[SwitchPart]
    best_candidates_over_table_b: dict[str, MeanInterval | None]
    stale_tps: list[float]
    best_tps: list[float]
    cycles: list[SwitchCycle]
    analysis: str | None = None


def figures(stale_tps: list[float], best_tps: list[float],
            cycles: list[SwitchCycle]) -> SwitchFigures:
    """Every figure of switch.json from its raw windows and cycles (pure)."""
    seconds = [c.seconds_to_right_table for c in cycles]
    recovered = [c.recovery_30s for c in cycles if c.recovery_30s is not None]
    st, bt = statistics.median(stale_tps), statistics.median(best_tps)
    return SwitchFigures(
        best_over_stale=mean_interval([b / s for b, s in zip(best_tps, stale_tps, strict=True)]),
        stale_loss=round(1 - st / bt, 4) if bt else None,
        seconds_to_right_table=seconds,
        seconds_to_right_table_max=max((s for s in seconds if s is not None), default=None),
        right_table_every_cycle=all(s is not None for s in seconds),
        recovery_30s=mean_interval(recovered, ratio=False),
        after_right_table=after(cycles),
        arm_steps=arm_steps(cycles),
        switch_gap_30s=mean_interval([best_30 / stale_30 for c in cycles
                                      if (stale_30 := c.arms["stale"].mean_30s)
                                      and (best_30 := c.arms["best"].mean_30s) is not None]))


def dumped(record: SwitchRun | SwitchMerged) -> str:
    """A switch.json's text: the fields it was given (an older file keeps its shape), a
    cycle's `part` only in a merged file."""
    return record.model_dump_json(indent=1, exclude_unset=True,
                                  exclude={"cycles": {"__all__": {"part"}}}
                                  if isinstance(record, SwitchRun) else None)


def parsed(body: dict[str, Any], where: Path) -> SwitchRun | SwitchMerged:
    """A committed switch.json, one call's or merged (ValueError: cycles without paired arms,
    the design before switch-paired, which cannot be re-analysed)."""
    if "arms" not in (body.get("cycles") or [{}])[0]:
        raise ValueError(f"{where}: cycles without paired arms (the design before switch-paired) "
                         "cannot be re-analysed")
    return (SwitchMerged if "merged_from" in body else SwitchRun).model_validate(
        {"arm_steps": no_arm_steps(), **body})


def rerender(path: Path) -> SwitchRun | SwitchMerged:
    """A committed switch.json with its figures recomputed by today's `figures`."""
    old = parsed(json.loads(path.read_text()), path)
    new = figures(old.stale_tps, old.best_tps, old.cycles)
    return type(old).model_validate(
        {**old.model_dump(exclude_unset=True), **dict(new),
         "analysis": "re-analysed: geometric means / means with t-intervals (issue #26)"})


def merge(paths: list[Path]) -> SwitchMerged:
    """Several switch.json (one GPU call each) as one: cycles and gap blocks concatenated (a
    cycle's arms, and a gap block's tables, ran on one engine, so each stays a valid pair), the
    figures recomputed by `summarize`. Each call chose its own best (the highest median of its
    own gap blocks): ``parts`` keeps it per call, and ``best_candidates_over_table_b`` pools every call's
    gap blocks per candidate, paired against B's table, to say whether those bests differ."""
    parts = []
    for p in paths:
        got = parsed(json.loads(p.read_text()), p)
        if not isinstance(got, SwitchRun) or got.best_name is None or got.candidates_tps is None:
            raise ValueError(f"{p}: not one call's switch.json with its gap's candidates")
        parts.append(got)
    cycles = [c.model_copy(update={"part": i}) for i, g in enumerate(parts) for c in g.cycles]
    stale = [x for g in parts for x in g.stale_tps]
    best = [x for g in parts for x in g.best_tps]
    tps = [g.candidates_tps or {} for g in parts]
    names = sorted(set.intersection(*(set(t) for t in tps)))
    versus_b = {name: mean_interval([x / b for t in tps
                                     for x, b in zip(t[name], t["table_b"], strict=True)])
                for name in names if name != "table_b" and "table_b" in names}
    return SwitchMerged(
        **dict(SwitchSetup.model_validate(parts[0].model_dump(include=set(SwitchSetup.model_fields)))),
        merged_from=[p.name for p in paths],
        parts=[SwitchPart(file=p.name, best_name=g.best_name or "", best_table=g.best_table or [],
                          table_a=g.table_a, table_b=g.table_b, a_a=g.a_a, a_b=g.a_b,
                          cycles=len(g.cycles), command=g.command)
               for p, g in zip(paths, parts, strict=True)],
        best_candidates_over_table_b=versus_b, stale_tps=stale, best_tps=best, cycles=cycles,
        **dict(figures(stale, best, cycles)))


def workloads(args: argparse.Namespace, K: int) -> tuple[Workload, Workload]:
    """A and B from the flags: two temperatures, or (dummy weights) two replayed acceptances."""
    replay = flags.replay(args, K)
    if replay is None and args.emulate_b is None:
        return Workload(args.temp_a), Workload(args.temp_b)
    if replay is None or replay.by != "plugin":
        raise InvalidInput("--emulate-b: the switch is the plugin's PUT /v1/emulation; give A's "
                           "rates with --emulate and keep --emulate-with plugin")
    try:
        b = Replay.parse(args.emulate_b)
    except (ValueError, ValidationError) as exc:
        raise InvalidInput(f"--emulate-b={args.emulate_b!r}: {exc}") from None
    if len(b.rates) != len(replay.rates):
        raise InvalidInput(f"--emulate-b={args.emulate_b!r}: {len(b.rates)} rates where --emulate "
                           f"has {len(replay.rates)}; give one per position for both")
    return Workload(args.temp_a, replay.rates), Workload(args.temp_a, b.rates)


async def run(args: argparse.Namespace) -> SwitchRun:
    scenario = scenario_of(args, tuple(args.engine_arg or ()))
    profile = scenario.profile
    requests = scenario.requests(args.prompt_tokens, args.max_tokens)
    K, n_max = profile.K, profile.engine.max_num_seqs
    out, n = scenario.out, args.load
    works = workloads(args, K)
    async with serving(scenario) as up:
        server, admin, engine = up.server, up.admin, up.engine
        a_a = await acceptance(server.url, engine, admin, requests, n, works[0], K)
        a_b = await acceptance(server.url, engine, admin, requests, n, works[1], K)
        if sum(a_a) == 0:
            raise RuntimeError(f"workload A's acceptance measured {a_a}: no drafts were accepted, "
                               "so A's table would be k=0 and there is no switch to follow")
        table_a, table_b = profile.build(a_a).table, profile.build(a_b).table
        candidates = {"table_b": table_b} | {f"fixed-k{k}": Table.from_list([[1, n_max, k]])
                                             for k in range(K + 1)}
        paired = await gap(server.url, engine, admin, requests, n, works[1], table_a, candidates,
                           args.blocks, args.window_s)
        # the best arm runs the best fixed k when one beat B's own table: recovery_30s is then
        # against the best fixed k (all k allowed), not only the profile's choice
        table_b = Table.from_list(paired.best_table or [])
        cycles = []
        side = functools.partial(sidecar, Path(args.profile), out / "logs", server.url,
                                 admin.admin_url, tuple(args.sidecar_arg or ()))
        for i in range(args.cycles):
            order = rotated(ARMS, i)  # none of the arms always runs first (after the gap blocks)
            arms = {w: await arm(server.url, engine, admin, requests, n, works, (table_a, table_b),
                                 w, side, args.adapt_s, args.follow_s, args.window_s, seed=10 * i)
                    for w in order}
            cycles.append(SwitchCycle(order=list(order), arms=arms,
                                      seconds_to_right_table=arms["sidecar"].seconds_to_right_table,
                                      recovery_30s=recovery(arms)))
            print(f"cycle {i + 1}/{args.cycles}: right table after "
                  f"{cycles[-1].seconds_to_right_table} s, 30 s recovery "
                  f"{cycles[-1].recovery_30s}", file=sys.stderr)
            # after every cycle: a run cut short by a time limit keeps its cycles
            result = report(args, works, a_a, a_b, table_a, table_b, paired, cycles)
            (out / "switch.json").write_text(dumped(result))
    return report(args, works, a_a, a_b, table_a, table_b, paired, cycles)


def report(args: argparse.Namespace, works: tuple[Workload, Workload], a_a: list[float],
           a_b: list[float], table_a: Table, table_b: Table, paired: Gap,
           cycles: list[SwitchCycle]) -> SwitchRun:
    return SwitchRun(load=args.load, workload_a=works[0].describe(),
                     workload_b=works[1].describe(), a_a=a_a, a_b=a_b,
                     table_a=table_a.to_list(), table_b=table_b.to_list(), **dict(paired),
                     cycles=cycles, **dict(figures(paired.stale_tps, paired.best_tps, cycles)),
                     window_s=args.window_s, adapt_s=args.adapt_s, follow_s=args.follow_s,
                     sidecar_args=args.sidecar_arg or [],
                     command="python -m benchmarks.switch " + " ".join(sys.argv[1:]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile")
    ap.add_argument("--rerender", type=Path, help="recompute a switch.json's figures in place")
    ap.add_argument("--merge", type=Path, nargs="+", metavar="PART_JSON",
                    help="join several switch.json (one call each) into --out/switch.json")
    ap.add_argument("--out", default="runs/switch")
    ap.add_argument("--load", type=int, default=8)
    ap.add_argument("--temp-a", type=float, default=0.0)
    ap.add_argument("--temp-b", type=float, default=1.5)
    ap.add_argument("--blocks", type=int, default=8, help="paired stale/best blocks")
    ap.add_argument("--cycles", type=int, default=4, help="switches A -> B with the sidecar")
    ap.add_argument("--adapt-s", type=float, default=15.0, help="workload A before each switch")
    ap.add_argument("--follow-s", type=float, default=30.0, help="windows after each switch")
    ap.add_argument("--window-s", type=float, default=2.5)
    ap.add_argument("--sidecar-arg", action="append", help="extra flag for the sidecar (repeat)")
    ap.add_argument("--model", help="model path (default: the profile's)")
    ap.add_argument("--prompt-tokens", type=int, default=96)
    ap.add_argument("--max-tokens", type=int, default=MAX_TOKENS,
                    help="mean output length (0.5-1.5x)")
    ap.add_argument("--emulate-b", help="workload B's replayed acceptance, e.g. 0.1,0.02,0.01 "
                    "(with --emulate for A's; the temperatures are then unused)")
    flags.add_engine_flags(ap)
    args = ap.parse_args()
    if args.rerender:
        args.rerender.write_text(dumped(rerender(args.rerender)))
        return 0
    if args.merge:
        try:
            merged = merge(args.merge)
        except (OSError, ValueError) as exc:   # a pydantic ValidationError is a ValueError
            print(f"error: --merge: {exc}", file=sys.stderr)
            return 2
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "switch.json").write_text(dumped(merged))
        return 0
    if not args.profile:
        ap.error("--profile is required (or --rerender FILE, or --merge PART ...)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        result = asyncio.run(run(args))
    except InvalidInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except RuntimeError as exc:  # the run cannot answer its question (said why)
        print(f"error: {exc}", file=sys.stderr)
        return 1
    (out / "switch.json").write_text(dumped(result))
    print(result.model_dump_json(indent=1, include={"stale_loss", "best_over_stale",
                                                    "seconds_to_right_table", "recovery_30s"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
