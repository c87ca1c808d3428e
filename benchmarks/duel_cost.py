"""What the sidecar's exploration costs, read from its own duels (issue #34 item 4: ≤ 0.5% of
goodput, with its interval).

A client-level ratio (sidecar arm over table arm) cannot resolve 0.5% on a noisy host: a 2-core
box spreads a paired block by ±10%. But exploration costs only on the steps it explores, and
the sidecar measures those steps itself. An explored step (a duel run or a rotation step, the
plugin's `explore_steps`) delivers what its k delivers instead of the table's k, and each duel
pair is that difference for one run: the log ratio of goodput, the run over the table's steps
on either side of it at the same batch sizes (sidecar/measured.py `pairs_in`). So

    cost = s · ū      s = explored steps / all steps of the sidecar's arm (counted, exact)
                      ū = the mean over pairs of 1 − exp(log ratio): a run's shortfall

with ū's 95% interval the sidecar's own (`paired_interval`: a confidence sequence, valid at
every look, on the pairs' long-run variance at its upper 90% bound, eq. LRV from 24 pairs, eq.
EARLY below: neighbouring pairs are not independent), so a run extended after an undecided look
keeps its error rate; s taken as counted; ū the plain mean
over pairs (each a duel run of about the same steps). `verdict` reads that interval;
`cost_ci_independent` beside it is the plain t-interval, valid if neighbouring pairs are
independent, with the shortfalls' lag-1 autocorrelation (`lag1`) that says how far that
holds. With several logs (a resumed record's parts) the interval runs over their pairs in the
order the parts ran, while `lag1` keeps each log a series of its own (two engine runs' pairs
are not neighbours). What the figure assumes, each said in the output:

- runs that formed no pair cost what paired ones do (`paired_share`: the explored steps the
  pairs cover);
- steps stand for time: a challenger at a smaller k than the table's takes shorter steps, so
  its share of the time is below its share of steps, and where the shortfall is positive the
  interval's upper end overstates the cost (`bound` "upper": every pair and every explored
  step below the table's one k, nothing pushed); otherwise "approximate";
- it prices the explored steps only, not the sidecar's reads or CPU (benchmarks/poll_cost.py,
  benchmarks/sidecar_cost.py) nor any push (a push is a decision, judged by the field bench).

Explored steps come from the record's `explore_steps` (the plugin's counter, recorded since
2026-12-07); in older records, from the steps at each k, where the sidecar's start table has one
k and it never pushed (every other k's steps were then explored).

    python -m benchmarks.duel_cost --field DIR/field.json --log DIR/sidecar-part0.log.gz \\
        [--arm sidecar-from-tuned] [--out DIR/duel-cost.json]
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Literal, NamedTuple

import numpy as np
from pydantic import BaseModel, ConfigDict

from benchmarks.arm_run import BlockRun
from benchmarks.client_record import FieldRecord
from benchmarks.json_out import emit
from benchmarks.pair_dependence import dependence
from benchmarks.policies import SIDECAR_POLICIES
from benchmarks.sidecar_log import LoggedPair, logged_pairs, read_lines
from sidecar.measured import EARLY_PAIRS, MIN_PAIRS, paired_interval
from tuner.core.errors import InvalidInput
from tuner.core.student_t import t_ppf

TARGET = 0.005   # issue #34 item 4: exploration's cost at most 0.5% of goodput
ALPHA = 0.05

Verdict = Literal["met", "missed", "undecided"]


class DuelCost(BaseModel):
    """duel-cost.json: exploration's cost as a share of the arm's goodput."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    arm: str
    steps: int                      # engine steps while the arm ran (warmup rounds included)
    explored_steps: int
    explored_share: float           # s
    explored_from: Literal["explore_steps", "steps_per_k"]
    pairs: int
    by_pair: dict[str, int]         # "k2 vs k3" -> pairs
    paired_share: float             # explored steps the pairs cover
    mean_loss: float                # ū
    loss_ci: list[float]
    variance: Literal["eq. LRV", "eq. EARLY"]
    cost: float                     # s · ū
    cost_ci: list[float]
    lag1: float | None              # the shortfalls' lag-1 autocorrelation, each log's in the order they
                                    # ran (None: too few pairs in one log to tell)
    cost_ci_independent: list[float]  # the plain t-interval: valid if the pairs are independent
    bound: Literal["upper", "approximate"]
    target: float
    verdict: Verdict
    command: str


def arm_runs(record: FieldRecord, arm: str) -> list[BlockRun]:
    """The arm's runs, warmup rounds first (the sidecar explored in those too)."""
    return [r for r in (*record.warmup, *record.runs) if r.arm == arm]


class Explored(NamedTuple):
    """What the record says of the arm's exploration."""

    steps: int          # explored
    all_steps: int
    source: Literal["explore_steps", "steps_per_k"]
    table_k: int        # the start table's one k (-1: several)
    below: bool         # every explored step below table_k, and nothing pushed


def explored(record: FieldRecord, arm: str) -> Explored:
    """The arm's explored steps and where their count came from; InvalidInput when the record
    cannot tell."""
    runs = arm_runs(record, arm)
    engines = [p.engine for r in runs for p in r.phases]
    if not engines:
        raise InvalidInput(f"--arm={arm}: no run of it in the record; use one of "
                           f"{', '.join(sorted({r.arm for r in record.runs}))}")
    steps = sum(e.steps or 0 for e in engines)
    start = record.meta.tables.get(SIDECAR_POLICIES.get(arm, ""))
    ks = {k for _, _, k in start} if start else set()
    table_k = ks.pop() if len(ks) == 1 else -1
    pushed = any(r.sidecar is not None and r.sidecar.pushes for r in runs)
    below = table_k >= 0 and not pushed and all(
        k < table_k for e in engines for k, n in (e.steps_per_k or {}).items() if n and k != table_k)
    if all(e.explore_steps is not None for e in engines):
        return Explored(sum(e.explore_steps or 0 for e in engines), steps, "explore_steps",
                        table_k, below and all(e.steps_per_k is not None for e in engines))
    if any(e.steps_per_k is None for e in engines):
        raise InvalidInput(f"--field: the {arm} runs record neither explore_steps nor steps per k "
                           "(a bench older than 2026-12-07); rerun the bench")
    if table_k < 0:
        raise InvalidInput(f"--field: {arm} started from {start}, not one k at every batch size, "
                           "and the record has no explore_steps; rerun the bench")
    if pushed:
        raise InvalidInput(f"--field: {arm} pushed a table, so its steps at other k's are not all "
                           "explored, and the record has no explore_steps; rerun the bench")
    other = sum(n for e in engines for k, n in (e.steps_per_k or {}).items() if k != table_k)
    return Explored(other, steps, "steps_per_k", table_k, below)


def mean_interval(u: Sequence[float], alpha: float = ALPHA) -> tuple[float, float, float,
                                                                       Literal["eq. LRV", "eq. EARLY"]]:
    """(mean, low, high, variance used) of the pairs' shortfalls in the order they ran: the
    sidecar's own `paired_interval` (eq. CS on eq. LRV, eq. EARLY below MIN_PAIRS), valid at
    every look, so a run extended after an undecided look keeps its error rate."""
    x = np.asarray(u, dtype=float)
    n = len(x)
    if n < EARLY_PAIRS:
        raise InvalidInput(f"--log: {n} pair(s); an interval needs at least {EARLY_PAIRS} "
                           "(the sidecar's first look)")
    m, lo, hi = (float(v) for v in paired_interval(x, alpha))
    return m, lo, hi, "eq. LRV" if n >= MIN_PAIRS else "eq. EARLY"


def independent_interval(u: Sequence[float], alpha: float = ALPHA) -> tuple[float, float]:
    """(low, high) of the shortfalls' mean as if the pairs were independent: a plain
    t-interval."""
    x = np.asarray(u, dtype=float)
    half = float(t_ppf(np.asarray(1 - alpha / 2), np.asarray(len(x) - 1.0))) * float(
        x.std(ddof=1)) / math.sqrt(len(x))
    return float(x.mean()) - half, float(x.mean()) + half


def verdict(ci: Sequence[float], target: float = TARGET) -> Verdict:
    return "met" if ci[1] <= target else "missed" if ci[0] > target else "undecided"


def duel_cost(record: FieldRecord, logs: Sequence[Sequence[LoggedPair]], arm: str,
              command: str = "") -> DuelCost:
    """The arm's exploration cost from its record and its sidecar's pairs, one list per log
    (a resumed record's parts, in the order they ran). Pure."""
    e = explored(record, arm)
    n_explored, steps = e.steps, e.all_steps
    pairs = [p for log in logs for p in log]
    u = [1 - math.exp(p.log_ratio) for p in pairs]
    m, lo, hi, how = mean_interval(u)
    ilo, ihi = independent_interval(u)
    # each log's pairs a series of their own: two engine runs' pairs are not neighbours
    lag1 = dependence([[1 - math.exp(p.log_ratio) for p in log] for log in logs])["lag1"]
    share = n_explored / steps if steps else 0.0
    by_pair: dict[str, int] = {}
    for p in pairs:
        key = f"k{p.k} vs k{p.ref}"
        by_pair[key] = by_pair.get(key, 0) + 1
    return DuelCost(
        arm=arm, steps=steps, explored_steps=n_explored, explored_share=round(share, 6),
        explored_from=e.source, pairs=len(pairs), by_pair=by_pair,
        paired_share=round(min(1.0, sum(p.steps for p in pairs) / n_explored), 4) if n_explored else 0.0,
        mean_loss=round(m, 6), loss_ci=[round(lo, 6), round(hi, 6)], variance=how,
        cost=round(share * m, 6), cost_ci=[round(share * lo, 6), round(share * hi, 6)],
        lag1=lag1, cost_ci_independent=[round(share * ilo, 6), round(share * ihi, 6)],
        bound="upper" if e.below and all(p.k < p.ref == e.table_k for p in pairs) else "approximate",
        target=TARGET, verdict=verdict([share * lo, share * hi]), command=command)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--field", required=True, help="a field bench's field.json")
    ap.add_argument("--log", required=True, action="append",
                    help="its sidecar's log (sidecar-partN.log.gz); repeat for every part of a "
                         "resumed record (the record's steps span them all)")
    ap.add_argument("--arm", help="the sidecar policy (default: the record's sidecar-from-...)")
    ap.add_argument("--out", help="write duel-cost.json here (default: stdout only)")
    args = ap.parse_args(argv)
    try:
        try:
            record = FieldRecord.model_validate_json(Path(args.field).read_text())
        except (OSError, ValueError) as exc:
            raise InvalidInput(f"--field={args.field}: not a field bench's record ({exc})") from exc
        logs = []
        for log in args.log:
            try:
                logs.append(logged_pairs(read_lines(Path(log))))
            except (OSError, ValueError) as exc:
                raise InvalidInput(f"--log={log}: not a sidecar's JSON log ({exc})") from exc
        arm = args.arm or next((p for p in record.meta.policies if p.startswith("sidecar-from-")), "")
        if not arm:
            raise InvalidInput("--arm: the record has no sidecar-from-... policy; name the arm")
        cost = duel_cost(record, logs, arm, "python -m benchmarks.duel_cost " + " ".join(
            sys.argv[1:] if argv is None else argv))
    except InvalidInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    emit(cost.model_dump(mode="json"), Path(args.out) if args.out else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
