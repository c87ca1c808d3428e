"""The step-time change test on replayed step samples: calibrated against heavy-tailed noise,
still quick on a real change (#27.3)."""

from __future__ import annotations

import numpy as np

from sidecar.change import RecentWindow, step_time_changes, step_time_changes_robust
from sidecar.step_times import LiveStepTimes

CELLS = [(b, k) for b in (1, 2, 4, 8) for k in (0, 1, 3)]   # 12 cells tested every scrape


def scrape(rng: np.random.Generator, slow: float = 1.0) -> dict[tuple[int, int], tuple[float, float]]:
    """One scrape's (seconds, steps) per cell: ~15 steps each, log-normal steps (CV ~0.25) and,
    one scrape in ten, a burst: a third of the steps 3x slower (prefills, a shared CPU)."""
    out = {}
    for b, k in CELLS:
        n = int(rng.poisson(15)) + 1
        ms = (5.0 + b + 0.5 * k) * slow * rng.lognormal(0.0, 0.25, n)
        if rng.random() < 0.1:
            ms[: n // 3] *= 3.0
        out[(b, k)] = (float(ms.sum()) / 1000, float(n))
    return out


def replay(scrapes: list[dict[tuple[int, int], tuple[float, float]]],
           robust: bool = True) -> list[int]:
    """The controller's use (sidecar/controller._detect_change): the scrape index of each
    change found; after one, the window starts afresh and the cell keeps its recent steps."""
    live, window, found = LiveStepTimes(), RecentWindow(3), []
    for i, cells in enumerate(scrapes):
        live.observe(cells)
        window.push(np.zeros(3), np.zeros(3), cells)
        if not window.full:
            continue
        recent = window.newer_step_time() if robust else window.step_time()
        if robust:
            changes = step_time_changes_robust(window, live.seconds, live.steps)
        else:
            older = {c: (live.seconds[c] - s, live.steps[c] - n) for c, (s, n) in recent.items()}
            changes = step_time_changes(recent, older)
        if changes:
            found.append(i)
            live.replace({(c.batch_size, c.k): recent[(c.batch_size, c.k)] for c in changes})
            window.clear()
    return found


def test_stationary_heavy_tailed_steps_raise_no_change_in_ten_minutes() -> None:
    # 1,200 scrapes at 0.5 s (the demo's interval): 10 minutes of 12 cells
    rng = np.random.default_rng(7)
    scrapes = [scrape(rng) for _ in range(1200)]
    assert len(replay(scrapes)) <= 1
    assert len(replay(scrapes, robust=False)) > 5  # the pooled one-window test: the noise


def test_steps_twice_as_slow_are_found_within_30_s() -> None:
    for interval_s in (0.5, 2.0):
        rng = np.random.default_rng(11)
        before = [scrape(rng) for _ in range(120)]
        after = [scrape(rng, slow=2.0) for _ in range(120)]
        found = replay(before + after)
        late = [i for i in found if i >= 120]
        assert len(found) - len(late) <= 1, found  # 1 min of noise: the rate allows at most one
        assert late and (late[0] - 119) * interval_s <= 30.0, found


def test_a_faster_engine_is_a_change_too_and_one_burst_scrape_is_not() -> None:
    rng = np.random.default_rng(3)
    base = [scrape(rng) for _ in range(60)]
    burst = {c: (s * 4, n) for c, (s, n) in scrape(rng).items()}   # every cell 4x slower once
    assert replay(base + [burst] + [scrape(rng) for _ in range(30)]) == []
    found = replay(base + [scrape(rng, slow=0.5) for _ in range(30)])
    assert found and found[0] - 59 <= 10  # two windows of 5 scrapes
