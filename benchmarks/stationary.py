"""False step-time changes under a stationary load (#27.3): how often the sidecar's change test
fires when nothing changes.

One vLLM CPU with the plugin, the table the profile chose, 8 closed-loop clients on the
profile's repetitive prompts at temperature 0 for ``--seconds``, the sidecar beside it as the
benchmarks run it (0.5 s scrapes: benchmarks/stateful.sidecar). Every ``traffic change`` event
in the sidecar's log is false here; the step-time ones are what the calibration bounds (a
``step-time change taken back`` is a transient the test had called a change, counted apart).
What the machine did meanwhile is in ``steps``: the busiest cell's mean step between rebuilds
(step_series), the noise the figure must be read against.

    python -m benchmarks.stationary --profile benchmarks/results/cpu-tiny/profile.json \\
        --out benchmarks/results/cpu-tiny/stationary-changes --seconds 600
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from benchmarks.json_out import dumped
from benchmarks.scenario import Startup, scenario_of, serving
from benchmarks.stateful import sidecar
from sidecar.step_times import LiveStepTimes
from tuner.load import Request, StationaryLoad
from tuner.core.table import Table

MAX_TOKENS = 48


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class StepNoise(_Record):
    """The busiest cell's steps between rebuilds (intervals of at least 20 steps) and their
    spread as ratios to the median (None: no interval)."""

    cell: list[int]                   # (B bucket, k)
    intervals: int
    median_ms: float | None
    log_sd: float | None
    ratio_range: list[float] | None
    series: list[list[float]]         # (seconds since the first event, mean step ms, steps)


class RunSetup(_Record):
    """How long the load ran, its clients, the sidecar's interval and its log's name."""

    seconds: float
    load: int
    interval_s: float
    log: str | None = None            # None: a file from before the log was named


class StationaryChanges(_Record):
    """The sidecar log's traffic-change events by kind, its rebuilds, the busiest cell's steps."""

    traffic_changes: int
    step_time_changes: int
    acceptance_changes: int
    step_time_taken_back: int | None = None   # None: a file from before take-backs were logged
    rebuilds: int
    steps: StepNoise | None = None
    events: list[dict[str, Any]]      # the sidecar's log lines as it wrote them (its format)


class StationaryRun(StationaryChanges, RunSetup):
    """stationary.json: the run's set-up, then what the sidecar's log says (older files lack
    what was added later: written with exclude_unset, they keep their shape)."""


def changes(log: Path) -> StationaryChanges:
    """The sidecar log's traffic-change events, by kind, and the busiest cell's steps."""
    events = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    found = [e for e in events if e.get("event") == "traffic change"]
    back = [e for e in events if e.get("event") == "step-time change taken back"]
    series = step_series(events)
    busiest = max(series, key=lambda c: sum(n for _, _, n in series[c]), default=None)
    return StationaryChanges(
        traffic_changes=len(found), step_time_changes=sum(1 for e in found if e.get("step_times")),
        acceptance_changes=sum(1 for e in found if e.get("acceptance")),
        step_time_taken_back=len(back),
        rebuilds=sum(1 for e in events if e.get("event") == "rebuild"),
        steps=None if busiest is None else noise(busiest, series[busiest]), events=found + back)


def step_series(events: list[dict[str, Any]]) -> dict[tuple[int, int], list[tuple[float, float, float]]]:
    """Per (B bucket, k): (seconds since the first event, mean step ms, steps) of the steps
    between consecutive rebuilds, from each rebuild's drift cells (the live seconds and steps
    at its last scrape) less the previous one's, cut as the rebuild cut them (the cap at
    step_memory steps, after a rebuild that did its bookkeeping). A cell whose live steps a
    change, or a take-back, replaced skips the next rebuild: that one may have logged them
    from before the replacement (the same tick)."""
    memory = next((e["settings"].get("step_memory", 2000.0) for e in events
                   if e.get("event") == "starting"), 2000.0)
    t0 = datetime.fromisoformat(events[0]["ts"]).timestamp() if events else 0.0
    prev: dict[tuple[int, int], tuple[float, float]] = {}
    skip: set[tuple[int, int]] = set()
    out: dict[tuple[int, int], list[tuple[float, float, float]]] = {}
    for e in events:
        if e.get("event") in ("traffic change", "step-time change taken back"):
            for c in e.get("step_times") or []:
                cell = (c["batch_size"], c["k"])
                prev.pop(cell, None)
                skip.add(cell)
        if e.get("event") != "rebuild":
            continue
        d = e["decision"]
        # a log from before the decision said so: the rule the controller applied then
        cut = d.get("bookkeeping", d.get("trigger") != "measured" or d.get("outcome") == "pushed")
        t = datetime.fromisoformat(e["ts"]).timestamp() - t0
        live = LiveStepTimes()
        for c in d.get("drift") or []:
            cell, n = (c["batch_size"], c["k"]), float(c["steps"])
            seconds = c["live_ms"] * n / 1000
            if cell in skip:
                skip.discard(cell)
                continue
            if cell in prev and n - prev[cell][1] > 0:
                s0, n0 = prev[cell]
                out.setdefault(cell, []).append(
                    (round(t, 1), round(1000 * (seconds - s0) / (n - n0), 2), n - n0))
            live.seconds[cell], live.steps[cell] = seconds, n
        if cut:
            live.cap(memory)   # the controller's own cut (sidecar/step_times.py)
        prev.update({cell: (live.seconds[cell], live.steps[cell]) for cell in live.steps})
    return out


def noise(cell: tuple[int, int], series: list[tuple[float, float, float]]) -> StepNoise:
    """The cell's step series and its spread: intervals of at least 20 steps, as ratios to
    their median (what the change test's ×1.7 is set against)."""
    kept = [(t, ms, n) for t, ms, n in series if n >= 20]
    ms = np.array([m for _, m, _ in kept])
    ratio = ms / np.median(ms) if ms.size else ms
    return StepNoise(cell=list(cell), intervals=len(kept),
                     median_ms=round(float(np.median(ms)), 2) if ms.size else None,
                     log_sd=round(float(np.std(np.log(ratio))), 3) if ms.size else None,
                     ratio_range=[round(float(ratio.min()), 2), round(float(ratio.max()), 2)]
                     if ms.size else None,
                     series=[list(x) for x in kept])


async def run(args: argparse.Namespace) -> StationaryRun:
    s = scenario_of(args, ())
    requests = [Request(p, MAX_TOKENS) for p in s.prompts()]
    out = s.out
    assert s.profile.table is not None
    earlier = set((out / "logs").glob("sidecar-*.log"))  # an earlier run's stays beside this one
    async with serving(s, Startup(table=Table.from_list(s.profile.table))) as up:
        async with StationaryLoad(up.server.url, requests, args.load, 0.0, seed=1) as traffic:
            async with sidecar(s.profile_path, out / "logs", up.server.url, up.admin.admin_url):
                t0 = time.monotonic()
                while time.monotonic() - t0 < args.seconds:
                    await asyncio.sleep(5)
                    traffic.check()
                wall = time.monotonic() - t0
    (log,) = sorted(set((out / "logs").glob("sidecar-*.log")) - earlier)
    return StationaryRun(seconds=round(wall, 1), load=args.load, interval_s=0.5, log=log.name,
                         **dict(changes(log)))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--profile", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--seconds", type=float, default=600.0)
    p.add_argument("--load", type=int, default=8)
    args = p.parse_args()
    result = asyncio.run(run(args))
    Path(args.out, "stationary.json").write_text(json.dumps(dumped(result), indent=1) + "\n")
    print(result.model_dump_json(exclude={"events": True, "steps": {"series"}}))



if __name__ == "__main__":
    main()
