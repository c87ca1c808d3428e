"""Duels: exploration aimed at the comparisons the sidecar cannot settle by model.

The rotation of policy.py (every ``explore_every`` steps a run of ``explore_run`` at the next
allowed k) gives each k live steps everywhere, but thinly (about one timed step a minute at a
large model's busy bucket), and a 3-step run times only its middle steps. A duel is
what the sidecar asks for once it knows where the question is: at batch sizes
``start_bs..end_bs`` (the bucket the engine serves), runs of ``duel_run`` steps at each
challenger k in turn, separated by at least 2·``duel_run`` steps of the table, so
every run has the incumbent's steps just before and just after it at the same load: a paired
comparison whose drift cancels (sidecar/measured.py pairs them). A run keeps its k whatever B
does, so all but its first step are steady, timed steps of that k.

Budget: a run starts only if the explored steps of the last ``duel_horizon`` steps, plus this
run, stay within ``duel_share`` of the horizon; the rotation's steps are charged to the same
budget (and skipped when it is spent). So over any ``duel_horizon`` consecutive steps at most
duel_share of them explore. The steps counted are those under a policy that may explore
(policy.py): in service that is every step, while a bench that freezes its sidecar between
arms runs the others under a plain policy, whose steps must not make room for more
exploration in the sidecar's arm than a sidecar in service would do. Runs are also spread: at
least run / (SPREAD·duel_share) table steps lie between two runs (200 at the defaults), so a
short burst of traffic holds at most about a run's worth and a comparison still finishes in
minutes. The sidecar runs the rotation below the share (1% by default) so a duel finds room
at once. Each gap is lengthened by a draw in [0, run) (a seeded generator on the clock): with
one gap counter for all duels and bursts that repeat, a fixed gap phase-locks the runs so a
drain's runs land in the same buckets burst after burst (docs/sidecar.md). And a run starts
only after ``run`` steps in a row at the table's k, the reference its pair needs before it:
one begun as B enters a range from another k's cannot pair
(benchmarks/results/calibration/README.md, plateau_pairs). Pure, except for the small state a
DuelClock keeps.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field
from math import ceil

from tuner.core.admin_api import Duel

SPREAD = 4  # any stretch of steps explores at most about SPREAD·duel_share of them in duel runs
SEED = 0    # the gaps' jitter: reproducible runs, a different phase each gap


def duel_at(duels: tuple[Duel, ...], batch_size: int) -> int | None:
    """The index of the duel whose range holds ``batch_size``, or None."""
    for i, (lo, hi, ks) in enumerate(duels):
        if lo <= batch_size <= hi and ks:
            return i
    return None


def min_gap(run: int, share: float) -> int:
    """Table steps between two runs: 2·run, so no table step is the reference of two runs
    (independent pairs), and at least run / (SPREAD·share), so runs spread out."""
    return max(2 * run, ceil(run / (SPREAD * share))) if share > 0 else 2 * run


def within_budget(starts: deque[tuple[int, int]], step: int, run: int, share: float,
                  horizon: int) -> bool:
    """May a run of ``run`` steps start at ``step``? ``starts``: (step, length) of earlier runs,
    oldest first; those older than the horizon are dropped here."""
    while starts and starts[0][0] <= step - horizon:
        starts.popleft()
    return sum(n for _, n in starts) + run <= share * horizon


@dataclass(slots=True)
class DuelClock:
    """Which k each step runs under the duels: the run in progress, the gap since the last one,
    whose turn it is per duel, and the runs inside the budget's horizon."""

    run_k: int | None = None
    run_left: int = 0
    gap: int = 0               # steps of the table since the last run ended
    jitter: int = 0            # extra table steps the next gap waits, drawn as a run starts
    settled: int = 0           # steps in a row at the table's k ``ref_k`` (a run's reference)
    ref_k: int | None = None
    rng: random.Random = field(default_factory=lambda: random.Random(SEED))
    turns: dict[int, int] = field(default_factory=dict)
    starts: deque[tuple[int, int]] = field(default_factory=deque)

    def k_for_step(self, duels: tuple[Duel, ...], batch_size: int, table_k: int, step: int,
               run: int, share: float, horizon: int) -> int | None:
        """The k a duel makes this step run, or None for the table's own."""
        if self.run_left > 0:
            self.run_left -= 1
            if self.run_left == 0:
                self.gap = 0
            return self.run_k
        self.gap += 1
        index = duel_at(duels, batch_size)
        self.settled = self.settled + 1 if table_k == self.ref_k else 1
        self.ref_k = table_k
        # a pair needs a run's length of the table's k just before the run (sidecar/measured.py
        # pairs_in); a run started sooner, as B enters the range from another k's, never pairs
        if (index is None or self.gap <= min_gap(run, share) + self.jitter or self.settled <= run
                or not within_budget(self.starts, step, run, share, horizon)):
            return None
        ks = [k for k in duels[index][2] if k != table_k]
        if not ks:
            return None
        turn = self.turns.get(index, 0)
        self.turns[index] = turn + 1
        self.run_k, self.run_left = ks[turn % len(ks)], run - 1
        self.jitter, self.settled = self.rng.randrange(run), 0
        self.starts.append((step, run))
        return self.run_k

    def unseen(self) -> None:
        """A step under another policy (no duels: a bench's other arm, a rotation): whatever k it
        ran, the next run waits for its reference again."""
        self.settled, self.ref_k = 0, None

    def charge(self, step: int, share: float, horizon: int) -> bool:
        """One step of the rotation (policy.py) against the same budget: False if it has no
        room (the step then runs the table)."""
        if not within_budget(self.starts, step, 1, share, horizon):
            return False
        self.starts.append((step, 1))
        return True

    def reset(self) -> None:
        """A new policy: any run in progress ends (its challenger may no longer be asked for);
        the gap since an ended run goes on (the sidecar re-sends duels as buckets are served)."""
        if self.run_left > 0:
            self.gap = 0
        self.run_k, self.run_left = None, 0
