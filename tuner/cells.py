"""Measuring cells: the one repeat loop of the tuner, and what a finished cell records.

A batch size's cells (B, k) are timed in rounds: each round times every k still due once, in
alternating order (k = 0..K, then K..0: tuner.sweep.repeat_order), so a slow stretch of the
host falls on every k of that B alike and a linear drift cancels over two rounds. After
`repeats` rounds, a cell stays due while fewer than `repeats` of its samples held their batch
or its interval is wider than ± `ci_target` (tuner/core/samples.needs_more), up to
`max_repeats`; every interval is at the level that pays for those looks (samples.cell_level).
With one vLLM per k (the paper's way) a round holds a single k.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Awaitable, Callable

from tqdm import tqdm

from tuner.config import TuneConfig
from tuner.core.goodput import tau
from tuner.core.profile import Cell, Profile, StepSample
from tuner.prompts import repetitive
from tuner.core.samples import cell_estimate, cell_level, needs_more, usable
from tuner.sweep import CellTimer, PromptSource, repeat_order

__all__ = ["measure_batch", "record_cell", "time_one", "timing_prompts", "todo"]

Swap = Callable[[int], Awaitable[None]]  # put k's one-range table into the engine


def todo(cfg: TuneConfig, profile: Profile, k: int) -> list[int]:
    """The grid points whose cell for k is not measured yet."""
    done = {c.B for c in profile.cells if c.k == k}
    return [B for B in cfg.grid if B not in done]


def timing_prompts(cfg: TuneConfig) -> PromptSource:
    """Fresh 32-token prompts per seed for pure-decode cells (no prefix-cache hits between runs)."""
    vocab = cfg.vocab_size
    return lambda n, seed: repetitive(n, vocab, length=32, seed=seed)


async def time_one(cfg: TuneConfig, profile: Profile, timer: CellTimer, B: int, k: int,
                   rep: int) -> StepSample:
    """One sample of cell (B, k): pure decode steps, or steady serving of cfg.workload."""
    if cfg.workload is None:
        return await timer.time_cell(B, k, rep, cfg.decode_tokens)
    assert profile.acceptance is not None  # measured first under a workload
    P, vocab = cfg.workload.prompt_tokens, cfg.vocab_size
    return await timer.time_mixed(B, k, rep, cfg.workload, float(tau(profile.acceptance.a)[k]),
                                  cfg.decode_tokens - 1,
                                  lambda n, seed: repetitive(n, vocab, length=P, seed=seed))


def record_cell(profile: Profile, samples: list[StepSample], wall_s: float,
                level: float) -> Cell:
    """All samples kept raw; the cell's estimate and its interval at ``level`` over the usable
    ones (none with a single repeat: it says nothing of the noise between repeats)."""
    profile.samples.extend(samples)
    est = cell_estimate(samples, level)
    good = usable(samples)
    has_engine = any(s.engine_ms is not None for s in good)
    bounded = est.n >= 2
    first = samples[0]
    cell = Cell(B=first.B, k=first.k, client_ms=statistics.median(s.client_ms for s in good),
                engine_ms=est.median if has_engine else None, wall_s=wall_s,
                ci_low_ms=est.low if bounded else None, ci_high_ms=est.high if bounded else None,
                ci_level=level, steps=sum(len(s.steps_ms or []) for s in good) or est.n)
    profile.cells = [c for c in profile.cells if (c.B, c.k) != (first.B, first.k)]
    profile.cells.append(cell)
    return cell


async def measure_batch(cfg: TuneConfig, profile: Profile, B: int, ks: list[int],
                        timer: CellTimer, swap: Swap, bar: tqdm) -> None:
    """Time the cells (B, k) for every k in ks in interleaved rounds until each is settled,
    then record them together (one save: a cut run loses at most this batch size)."""
    c0 = time.monotonic()
    samples: dict[int, list[StepSample]] = {k: [] for k in ks}
    rep = 0
    while True:
        due = ks if rep < cfg.repeats else [
            k for k in ks if needs_more(samples[k], cfg.repeats, cfg.ci_target, cfg.repeat_limit)]
        if not due:
            break
        if rep >= cfg.repeats:
            bar.total += len(due)
        for k in repeat_order(due, rep):
            bar.set_description(f"B={B} k={k} rep {rep}")
            await swap(k)
            samples[k].append(await time_one(cfg, profile, timer, B, k, len(samples[k])))
            bar.update(1)
        rep += 1
    share = (time.monotonic() - c0) / len(ks)  # the cells shared the time
    for k in ks:
        record_cell(profile, samples[k], share, cell_level(cfg.repeats, cfg.repeat_limit))
    profile.save(cfg.out)
