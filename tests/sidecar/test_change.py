"""The step-time change test on simulated and replayed step times: calibrated against the noise
of a shared CPU, still quick on a real change, and a transient is one change, not two (#27.3).

The noise model is fitted to the stationary CPU run that fired five times
(benchmarks/results/cpu-tiny/stationary-changes, MEASURED below): the mean step of its busiest
cell between rebuilds had a log spread of 0.145 and an autocorrelation of 0.66 at 3.8 s, 0.32
at 11.5 s, ~0 at 30 s (a wander with a time constant of ~10 s), and once rose ×1.5-1.85 for
~18 s. So the machine's step-time factor is a wander (AR(1) in log, sd 0.12, τ 10 s) times
episodes of ×1.3-1.45 or ÷1.3-1.45 lasting 10-40 s (the issue's description), six per 10
minutes on average (the run had about three); every scrape's steps are log-normal (sd 0.25)
and one scrape in ten is a burst, a third of its steps 3x slower (prefills). A closed loop
runs fewer steps when steps are slower, so a cell's step rate is divided by the factor.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from sidecar.change import STEP_RATIO, StepTimeChange, StepTimeWindow
from sidecar.settings import SidecarSettings
from sidecar.step_times import LiveStepTimes

FloatArray = npt.NDArray[np.float64]
Scrape = dict[tuple[int, int], tuple[float, float]]

# (B bucket, k): (ms a step, steps a second), as the CPU tiny model's load runs them (20-50 ms)
CELLS = {(8, 3): (35.0, 20.0), (7, 3): (32.0, 12.0), (8, 2): (30.0, 10.0), (4, 3): (25.0, 10.0)}
SLOW_CELL = {(8, 3): (50.0, 20.0)}  # the slowest of them: 20 steps a second, 10 once 2x slower
FAST_CELL = {(8, 3): (20.0, 50.0)}

# (end of interval s, mean step ms) of cell (B=8, k=3) between consecutive rebuilds of the run
# (benchmarks.stationary.step_series of its logs/sidecar-50727.log, at 7826c6c: each rebuild's
# live seconds and steps less the previous rebuild's after its cap; none across a change)
MEASURED = (
    (5.3, 33.2), (9.6, 40.5), (14.1, 41.5), (17.9, 29.6), (22.1, 35.1), (26.4, 34.2), (30.4, 34.8),
    (34.5, 34.1), (38.4, 37.0), (42.4, 29.9), (47.0, 32.2), (52.9, 50.2), (65.4, 59.8), (77.1, 32.8),
    (80.5, 35.2), (83.9, 29.9), (87.9, 34.4), (99.7, 30.6), (112.1, 34.0), (116.7, 32.7),
    (120.7, 33.0), (124.7, 30.8), (128.5, 32.4), (132.4, 32.4), (136.2, 32.7), (140.1, 32.2),
    (143.9, 33.8), (147.8, 27.2), (156.8, 24.2), (160.7, 25.0), (164.6, 27.0), (168.4, 25.0),
    (172.3, 25.0), (175.5, 23.5), (179.3, 24.6), (182.7, 23.2), (186.6, 25.3), (189.9, 31.8),
    (193.7, 33.4), (197.6, 33.5), (202.0, 35.5), (205.9, 33.4), (209.7, 32.7), (213.0, 32.2),
    (216.8, 28.9), (220.6, 27.1), (224.5, 28.2), (228.4, 27.9), (232.3, 28.1), (236.1, 28.3),
    (240.0, 26.9), (244.0, 27.7), (248.0, 30.4), (251.8, 35.6), (256.3, 35.1), (260.2, 29.9),
    (263.5, 32.9), (266.8, 29.8), (270.1, 29.2), (273.5, 28.7), (276.7, 28.8), (280.2, 29.3),
    (284.0, 32.1), (287.8, 27.1), (291.1, 28.1), (294.8, 36.7), (298.7, 35.6), (301.9, 30.4),
    (305.8, 30.6), (309.7, 31.7), (313.5, 31.0), (317.4, 33.6), (321.3, 33.2), (325.3, 32.9),
    (329.2, 32.9), (333.0, 32.3), (336.8, 32.2), (340.1, 25.6), (343.4, 31.8), (346.7, 31.2),
    (350.5, 36.9), (354.3, 33.0), (357.7, 31.3), (361.6, 26.7), (365.3, 28.6), (369.2, 25.9),
    (372.9, 26.6), (376.9, 25.8), (380.7, 26.2), (385.0, 28.9), (388.9, 26.5), (392.9, 27.4),
    (397.3, 27.9), (401.0, 27.8), (404.8, 26.3), (408.7, 26.0), (412.5, 27.9), (416.2, 34.9),
    (420.0, 34.2), (423.8, 34.8), (427.7, 34.3), (431.6, 32.5), (435.5, 37.2), (439.4, 38.5),
    (443.3, 29.4), (447.1, 36.3), (450.9, 34.4), (454.8, 37.1), (458.7, 33.9), (462.6, 28.5),
    (466.4, 26.3), (470.2, 26.4), (474.1, 27.4), (477.9, 24.4), (481.2, 23.6), (485.0, 33.6),
    (488.3, 32.5), (492.1, 37.2), (496.4, 39.1), (500.2, 38.5), (504.1, 35.3), (507.9, 35.8),
    (511.8, 34.1), (515.7, 36.0), (520.0, 35.1), (523.9, 35.8), (527.8, 38.7), (531.6, 37.6),
    (535.6, 32.9), (539.5, 32.4), (543.4, 31.3), (547.2, 33.5), (551.1, 35.0), (555.0, 40.7),
    (558.9, 39.6), (562.7, 36.8), (566.1, 34.8), (569.9, 32.6), (573.7, 31.7), (577.5, 31.9),
    (580.8, 33.0), (584.7, 32.9), (588.1, 27.3), (592.0, 27.2), (595.9, 32.6))


def machine(rng: np.random.Generator, seconds: float, dt: float, episodes: float = 6.0,
            wander: float = 0.12) -> FloatArray:
    """The machine's step-time factor at each scrape (the module's model): episodes (``episodes``
    per 10 minutes) times the wander."""
    n = round(seconds / dt)
    t = np.arange(n) * dt
    log_f = np.zeros(n)
    start = rng.exponential(600 / episodes) if episodes else np.inf
    while start < seconds:
        length = rng.uniform(10.0, 40.0)
        log_f[(t >= start) & (t < start + length)] = rng.choice((-1, 1)) * rng.uniform(
            np.log(1.3), np.log(1.45))
        start += length + rng.exponential(600 / episodes)
    phi = np.exp(-dt / 10.0)
    shocks = rng.normal(0.0, wander * np.sqrt(1 - phi ** 2), n)
    level = rng.normal(0.0, wander)
    for j in range(n):
        level = phi * level + shocks[j]
        log_f[j] += level
    return np.exp(log_f)


def scrapes(rng: np.random.Generator, factor: FloatArray, dt: float,
            cells: dict[tuple[int, int], tuple[float, float]] = CELLS) -> list[Scrape]:
    """Each scrape's (seconds, steps) per cell under the machine's ``factor``."""
    burst = rng.random(factor.size) < 0.1
    out: list[Scrape] = [{} for _ in factor]
    for cell, (ms, rate) in cells.items():
        n = rng.poisson(rate * dt / factor)
        steps = ms * np.repeat(factor, n) * rng.lognormal(0.0, 0.25, int(n.sum()))
        first = np.cumsum(n) - n
        slow = np.arange(steps.size) - np.repeat(first, n) < np.repeat(n // 3, n)
        steps[slow & np.repeat(burst, n)] *= 3.0
        seconds = np.add.reduceat(steps, np.minimum(first, max(steps.size - 1, 0))) / 1000.0
        for j in np.flatnonzero(n):
            out[j][cell] = (float(seconds[j]), float(n[j]))
    return out


def measured(dt: float) -> FloatArray:
    """MEASURED as the machine's factor at each scrape: its interval's mean over the median."""
    at, ms = np.array(MEASURED).T
    t = np.arange(round(600 / dt)) * dt
    return np.asarray(ms[np.minimum(np.searchsorted(at, t), at.size - 1)] / np.median(ms))


def replay(series: list[Scrape], dt: float) -> tuple[list[int], list[int]]:
    """The controller's use (sidecar/controller._detect_change): test at every scrape. The
    scrapes with a change, and with one taken back."""
    window, found, back = StepTimeWindow(dt), [], []
    for i, cells in enumerate(series):
        window.add(cells)
        changes = window.step_time_changes()
        if any(c.reverted for c in changes):
            back.append(i)
        if any(not c.reverted for c in changes):
            found.append(i)
    return found, back


def replay_last_rule(series: list[Scrape]) -> list[int]:
    """The rule this one replaced (7826c6c), as the controller ran it: two disjoint windows of 5
    scrapes, each's median scrape against the older live mean, ×1.3 the same way in both; on a
    change the cell's live steps became the newer window's; live steps capped at 2000 per cell
    every 200 steps (a rebuild), the windows scaled alike."""
    live, found, since = LiveStepTimes(), [], 0.0
    last: list[Scrape] = []

    def median(window: list[Scrape], cell: tuple[int, int]) -> float:
        means = [1000 * s / n for c in window for s, n in [c.get(cell, (0.0, 0.0))] if n >= 3]
        return float(np.median(means)) if 2 * len(means) > len(window) else float("nan")

    for i, cells in enumerate(series):
        live.observe(cells)
        last = [*last, dict(cells)][-10:]
        since += sum(n for _, n in cells.values())
        if len(last) == 10:
            changed: dict[tuple[int, int], tuple[float, float]] = {}
            for cell in cells:
                s, n = (sum(c.get(cell, (0.0, 0.0))[j] for c in last) for j in (0, 1))
                old_s, old_n = live.seconds[cell] - s, live.steps[cell] - n
                if min(sum(c.get(cell, (0.0, 0.0))[1] for c in w) for w in (last[:5], last[5:])) < 30 \
                        or old_n < 120 or old_s <= 0:
                    continue
                r = [median(w, cell) / (1000 * old_s / old_n) for w in (last[:5], last[5:])]
                if min(r) > 1.3 or max(r) < 1 / 1.3:
                    changed[cell] = (sum(c.get(cell, (0.0, 0.0))[0] for c in last[5:]),
                                     sum(c.get(cell, (0.0, 0.0))[1] for c in last[5:]))
            if changed:
                found.append(i)
                live.replace(changed)
                last = []
        if since >= 200:
            since = 0.0
            for cell, f in live.cap(2000.0).items():
                for c in last:
                    if cell in c:
                        c[cell] = (c[cell][0] * f, c[cell][1] * f)
    return found


def test_stationary_noise_is_at_most_one_false_change_per_10_minutes() -> None:
    """40 simulated 10-minute runs of the module's machine at 0.5-s scrapes, 4 cells: 0.35
    false changes per 10 minutes (the mean; at most 4 in a run, more than one in 5 runs).
    Beside the test: 100 runs, 0.34; 60 runs at 2-s scrapes, 0.30; 40 at 1-s, 0.28; twice the
    episodes (12 per 10 minutes), 0.68. Each is an excursion beyond ×1.7 for 18 s or more (an
    episode and the wander together), found in one cell or several a scrape or two apart, and
    mostly taken back within a minute. The last rule, on the first three runs: 12, 22 and 19
    (at 2-s scrapes: 4 and 8)."""
    dt, counts, last = 0.5, [], []
    for run in range(40):
        rng = np.random.default_rng(1000 + run)
        series = scrapes(rng, machine(rng, 600.0, dt), dt)
        counts.append(len(replay(series, dt)[0]))
        if run < 3:
            last.append(len(replay_last_rule(series)))
    assert np.mean(counts) <= 1.0, counts
    assert np.mean(last) > 5, last  # the last rule fails the same runs


def test_the_measured_run_replayed_fires_at_most_once() -> None:
    """MEASURED as the machine's factor, every cell of CELLS under it, 10 noise draws each at
    0.5-s and 2-s scrapes: no false change in the 20 runs of 10 minutes (the ×1.5-1.85
    excursion lasted ~18 s, short of both windows' majority). The last rule: 6, 6 and 11 on
    the first three draws at 0.5 s, 4, 5 and 4 at 2 s (the run itself had 5, in its one busy
    cell)."""
    for dt in (0.5, 2.0):
        factor = measured(dt)
        counts = [len(replay(scrapes(np.random.default_rng(seed), factor, dt), dt)[0])
                  for seed in range(10)]
        assert sum(counts) <= 2, (dt, counts)
    last = replay_last_rule(scrapes(np.random.default_rng(0), measured(0.5), 0.5))
    assert len(last) >= 3, last


def found_after(series: list[Scrape], dt: float, at: int) -> tuple[list[float], list[int]]:
    """Seconds from scrape ``at`` (a change's first) to each change found from it on, and the
    scrapes of changes found before it."""
    found, _ = replay(series, dt)
    return [(i - at + 1) * dt for i in found if i >= at], [i for i in found if i < at]


def test_a_lasting_2x_or_half_step_time_is_found_within_30_s() -> None:
    """The slowest and the fastest cell of the load (50 ms and 20 ms steps; after a 2x change
    the slow one times 10 steps a second, 120 in a window of 12 s: min_steps is 30), at 0.5-,
    1- and 2-s scrapes: found 18-22 s after the change (the majority of both 12-s windows),
    never before it. With the module's wander on top (sd 0.12, no episodes; 40 draws each),
    90-100% of them are found within 30 s, the median at 18.5-20 s: the rest are changes the
    wander holds below ×1.7 for a while."""
    for cells in (SLOW_CELL, FAST_CELL):
        for dt in (0.5, 1.0, 2.0):
            for jump in (2.0, 0.5):
                for seed in range(5):
                    rng = np.random.default_rng(seed)
                    before = round(180 / dt)
                    factor = np.ones(before + round(60 / dt))
                    factor[before:] = jump
                    delays, early = found_after(scrapes(rng, factor, dt, cells), dt, before)
                    assert not early and delays and delays[0] <= 30.0, (cells, dt, jump, delays)
                    assert delays[0] >= 15.0, delays  # both windows mostly past the change


def test_a_transient_that_goes_back_is_one_change_and_the_older_level_stays() -> None:
    """A step-time episode of 2x (or 0.5x) for 20-40 s, then back: found once, taken back once
    (the last rule found it going and again coming back); and a lasting change after it is
    measured against the older level, not the transient's."""
    twice = 0
    for dt in (0.5, 2.0):
        for jump in (2.0, 0.5):
            for seconds in (20.0, 30.0, 40.0):
                rng = np.random.default_rng(int(seconds))
                factor = np.ones(round(300 / dt))
                factor[round(150 / dt):round((150 + seconds) / dt)] = jump
                series = scrapes(rng, factor, dt, SLOW_CELL)
                found, back = replay(series, dt)
                assert len(found) == 1 and len(back) == 1, (dt, jump, seconds, found, back)
                twice += len(replay_last_rule(series)) == 2
    # the last rule: found going and again coming back in 11 of the 12 (in the other, 10 steps
    # a second left its 2.5-s windows short of min_steps)
    assert twice >= 10, twice
    # after a transient taken back, the cell's level is the older one again
    dt, rng = 0.5, np.random.default_rng(1)
    factor = np.ones(round(400 / dt))
    factor[round(120 / dt):round(150 / dt)] = 2.0
    factor[round(300 / dt):] = 2.0
    delays, early = found_after(scrapes(rng, factor, dt, SLOW_CELL), dt, round(300 / dt))
    assert len(early) == 1 and delays and delays[0] <= 30.0, (early, delays)


def test_one_burst_scrape_is_not_a_change_and_the_change_says_what_it_saw() -> None:
    assert SidecarSettings.model_fields["change_step_ratio"].default == STEP_RATIO  # calibrated
    dt, rng = 0.5, np.random.default_rng(3)
    series = scrapes(rng, np.ones(240), dt)
    series[150] = {c: (s * 4, n) for c, (s, n) in series[150].items()}  # every cell 4x once
    assert replay(series, dt) == ([], [])
    window = StepTimeWindow(dt)
    changes: list[StepTimeChange] = []
    for cells in scrapes(rng, np.r_[np.ones(120), np.full(60, 2.0)], dt, SLOW_CELL):
        window.add(cells)
        if found := window.step_time_changes():
            changes += found
            kept = window.newer_step_time()[(8, 3)]  # what the controller keeps for the cell
    (change,) = changes
    assert (change.batch_size, change.k, change.reverted) == (8, 3, False)
    assert 1.8 < change.recent_ms / change.estimate_ms < 2.2 and 45 < change.estimate_ms < 55
    # the newer window's steps: 12 s at 10 steps a second, most of them at the new level
    assert kept[1] == change.steps > 90 and 1.6 < 1000 * kept[0] / kept[1] / 50 < 2.4
