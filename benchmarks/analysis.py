"""Benchmark arithmetic (pure): medians, spreads, loss against the best fixed k, worst cases.

loss(policy, N) = 1 - median_tps(policy, N) / max_k median_tps(fixed k, N)
The best single fixed k is chosen after the fact: the fixed k with the smallest worst-case loss.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Row:
    policy: str
    load: int
    repeat: int
    tokens_per_s: float
    completed: int
    window_s: float
    table: str


@dataclass(frozen=True, slots=True)
class Summary:
    median: dict[tuple[str, int], float]
    spread: dict[tuple[str, int], float]  # (max - min) / median over repeats
    loss: dict[tuple[str, int], float]
    worst: dict[str, float]
    best_fixed_k: str | None
    loads: list[int]
    policies: list[str]


def summarize(rows: list[Row]) -> Summary:
    by: dict[tuple[str, int], list[float]] = defaultdict(list)
    for r in rows:
        by[(r.policy, r.load)].append(r.tokens_per_s)
    median = {key: statistics.median(v) for key, v in by.items()}
    spread = {key: (max(v) - min(v)) / statistics.median(v) if statistics.median(v) else 0.0
              for key, v in by.items()}
    loads = sorted({load for _, load in by})
    policies = list(dict.fromkeys(r.policy for r in rows))
    fixed = [p for p in policies if p.startswith("fixed-k")]
    best = {n: max((median[(p, n)] for p in fixed if (p, n) in median), default=float("nan"))
            for n in loads}
    loss = {(p, n): 1.0 - median[(p, n)] / best[n] for (p, n) in median if best[n] == best[n]}
    worst = {p: max(loss[(p, n)] for n in loads if (p, n) in loss) for p in policies
             if any((p, n) in loss for n in loads)}
    best_fixed = min((p for p in fixed if p in worst), key=lambda p: worst[p], default=None)
    return Summary(median, spread, loss, worst, best_fixed, loads, policies)


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
