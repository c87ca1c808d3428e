"""Nightjar-style baseline (for benchmarks only, off by default): an independent ε-greedy
bandit per batch-size bucket that learns the best k from observed tokens per second.

Reward of arm (B, k): tokens emitted per second by the step that verified the drafts proposed
under k (vLLM drafts at the end of step t and verifies at t+1), so the reward of the k chosen at
step t is measured at step t+1. Each batch size learns on its own and keeps exploring: the
weaknesses the paper measured (4–12% slower than the best fixed k at every load).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from tuner.core.buckets import step_bucket


@dataclass(slots=True)
class Bandit:
    arms: tuple[int, ...]              # the k values it may choose
    epsilon: float = 0.1
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    means: dict[tuple[int, int], float] = field(default_factory=dict)   # (bucket, k) -> reward
    pulls: dict[tuple[int, int], int] = field(default_factory=dict)
    pending: tuple[int, int] | None = None  # the (bucket, k) whose reward the next step brings

    def k_for(self, batch_size: int) -> int:
        """The k for this batch size: untried arms first, then ε-greedy; remembers it as pending."""
        bucket = step_bucket(batch_size)
        untried = [k for k in self.arms if (bucket, k) not in self.pulls]
        if untried:
            k = untried[0]
        elif self.rng.random() < self.epsilon:
            k = self.rng.choice(self.arms)
        else:
            k = max(self.arms, key=lambda a: self.means[(bucket, a)])
        self.pending = (bucket, k)
        return k

    def reward(self, arm: tuple[int, int], tokens_per_s: float) -> None:
        """Fold one observed reward into the arm's running mean."""
        n = self.pulls.get(arm, 0) + 1
        self.pulls[arm] = n
        self.means[arm] = self.means.get(arm, 0.0) + (tokens_per_s - self.means.get(arm, 0.0)) / n
