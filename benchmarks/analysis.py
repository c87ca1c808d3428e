"""Benchmark arithmetic (pure): medians, spreads, loss against the best fixed k, worst cases.

loss(policy, N) = 1 - median_tps(policy, N) / max_k median_tps(fixed k, N)
The best single fixed k is chosen after the fact: the fixed k with the smallest worst-case loss.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field

from tuner.samples import spread as repeat_spread


@dataclass(frozen=True, slots=True)
class Row:
    policy: str
    load: int
    repeat: int
    tokens_per_s: float
    completed: int
    window_s: float
    table: str
    # the engine's steps in the window (table policies, from the plugin): step time, requests and
    # tokens per step; empty for no speculation (no plugin counters there)
    step_ms: float | None = None
    requests_per_step: float | None = None
    tokens_per_step: float | None = None


@dataclass(frozen=True, slots=True)
class Summary:
    median: dict[tuple[str, int], float]
    spread: dict[tuple[str, int], float]  # (max - min) / median over repeats
    loss: dict[tuple[str, int], float]
    worst: dict[str, float]
    best_fixed_k: str | None
    loads: list[int]
    policies: list[str]
    # median engine step (ms) and tokens per step, where the plugin's counters were read
    steps: dict[tuple[str, int], tuple[float, float]] = field(default_factory=dict)


def summarize(rows: list[Row]) -> Summary:
    by: dict[tuple[str, int], list[float]] = defaultdict(list)
    for r in rows:
        by[(r.policy, r.load)].append(r.tokens_per_s)
    median = {key: statistics.median(v) for key, v in by.items()}
    spread = {key: repeat_spread(v) for key, v in by.items()}
    loads = sorted({load for _, load in by})
    policies = list(dict.fromkeys(r.policy for r in rows))
    fixed = [p for p in policies if p.startswith("fixed-k")]
    best = {n: max((median[(p, n)] for p in fixed if (p, n) in median), default=float("nan"))
            for n in loads}
    loss = {(p, n): 1.0 - median[(p, n)] / best[n] for (p, n) in median if best[n] == best[n]}
    worst = {p: max(loss[(p, n)] for n in loads if (p, n) in loss) for p in policies
             if any((p, n) in loss for n in loads)}
    best_fixed = min((p for p in fixed if p in worst), key=lambda p: worst[p], default=None)
    carried: dict[tuple[str, int], list[tuple[float, float]]] = defaultdict(list)
    for r in rows:
        if r.step_ms is not None and r.tokens_per_step is not None:
            carried[(r.policy, r.load)].append((r.step_ms, r.tokens_per_step))
    steps = {key: (statistics.median(m for m, _ in v), statistics.median(t for _, t in v))
             for key, v in carried.items()}
    return Summary(median, spread, loss, worst, best_fixed, loads, policies, steps)


def markdown(s: Summary) -> str:
    head = "| policy | worst loss | " + " | ".join(f"N={n}" for n in s.loads) + " |"
    lines = [head, "|---" * (len(s.loads) + 2) + "|"]
    for p in s.policies:
        cells = []
        for n in s.loads:
            if (p, n) not in s.median:
                cells.append("")
                continue
            loss = s.loss.get((p, n))
            cells.append(f"{s.median[(p, n)]:.0f} ±{s.spread[(p, n)] * 50:.0f}%"
                         + (f" ({-loss * 100:+.1f}%)" if loss is not None else ""))
        worst = f"{s.worst[p] * 100:.1f}%" if p in s.worst else "n/a"
        mark = " (best single fixed k)" if p == s.best_fixed_k else ""
        lines.append(f"| {p}{mark} | {worst} | " + " | ".join(cells) + " |")
    return ("Output tokens/s (median over repeats, ± half the max–min spread), and in brackets the "
            "difference to the best fixed k at that load.\n\n" + "\n".join(lines) + "\n")


def steps_markdown(s: Summary) -> str:
    """What a step carried per policy and load: where steps cross a CUDA-graph size, it shows."""
    if not s.steps:
        return ""
    lines = ["| policy | " + " | ".join(f"N={n}" for n in s.loads) + " |",
             "|---" * (len(s.loads) + 1) + "|"]
    for p in s.policies:
        if any((p, n) in s.steps for n in s.loads):
            lines.append(f"| {p} | " + " | ".join(
                f"{s.steps[(p, n)][0]:.1f} ms, {s.steps[(p, n)][1]:.0f} tok" if (p, n) in s.steps
                else "" for n in s.loads) + " |")
    return ("Engine steps in the window (the plugin's clock and exact totals, median over "
            "repeats): time per step, and tokens per step (decodes, drafts and prefill).\n\n"
            + "\n".join(lines) + "\n")
