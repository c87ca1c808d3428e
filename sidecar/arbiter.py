"""Who decides at a bucket the engine serves: the measurement, or the model (pure).

The model (G = B·τ(â)/T̂, tuner/core/goodput.py) ranks k's through two estimates, each with an
error the confidence draws only partly see: ~5% against the 1-4% differences between the k's
it must rank (docs/sidecar.md says where it was measured). The plugin measures what each k
delivers (sidecar/measured.py), so at a bucket with live steps:

- per challenger c of the incumbent k (the engine's k there), two figures for G(c)/G(k): the
  model's, its interval widened by ``model_error`` (the error the model's own draws do not
  show), and the paired measurement's confidence sequence;
- the measurement decides once it is conclusive (its interval clears the tie either way) or
  no wider than the model's interval;
- where the plugin can duel (``can_duel``: its ring is read and exploration has a budget) the
  model never switches a bucket on its own: a challenger it favours is dueled until the
  measurement settles it (pushes by the model alone were what cost under bursts; docs/sidecar.md);
- a bucket the load only passes through (not ``pairable``: a burst drains through it in a few
  steps, three runs there had their chance and never paired, or it is entered under another
  k so no run can start; sidecar/measured.py) gives a duel no pairs, so none is asked for
  there, and it counts as one where no duel can run;
- only where no duel can run does the model decide, with its interval widened by the larger
  of ``model_error`` and its own error measured live: on ratios, where pairs checked them
  (sidecar/model_error.py ``ratio_error``), else at that bucket (predicted against realized
  goodput of the table's k there, or borrowed from measured neighbours: ``bracketed``); where
  the bucket's live error is not known yet, the model switches nothing there (``live_error``);
  and while the plugin duels (``can_duel``) it switches nothing before pairs somewhere have
  checked its ratios (a bucket's level error checks only the incumbent's k: a stale profile
  flattering the challenger passes it);
- from EARLY_PAIRS pairs an early measurement (sidecar/measured.py, eq. EARLY: its dependence
  assumed, not estimated) counts too, so a large gain is found under bursts, which leave a
  bucket a handful of pairs; an early win switches only where the model's interval, at
  ``model_error``, wins as well: two readings must agree before a table changes on so few pairs;
- c replaces k only if the deciding interval's lower end beats the tie; with several
  challengers the level is split among them (Bonferroni), so one bucket's verdict errs at most
  at 1 - confidence whatever the number of k's;
- a challenger the measurement has not settled is "open": the sidecar asks the plugin for
  duels there (vllm_patch/duel.py), the most promising by the model first, until the
  measurement resolves it (a win, a loss, or ``max_pairs`` pairs: indistinguishable at this
  noise); but exploration must pay for itself, so a challenger whose upper bound loses to the
  incumbent (the model's, at ``model_error``, or the measurement's) is "keep": no duel runs on
  a k that cannot win, and a k that is "keep" wherever it was judged leaves the plugin's
  rotation too (``rotation_ks``); a duel already running ends on the model only once its best
  case loses by DROP_MARGIN, and a k the rotation visits leaves it only then too (hysteresis:
  near 1 either would end and restart rebuild by rebuild).
- a duel whose challenger the model finds better beyond its assumed ``model_error`` (not its
  live error, which would hold back the share where it is needed) is "urgent"
  (``Verdicts.urgent``): the sidecar lets the plugin spend ``urgent_share`` of the steps on it
  until the pairs settle it: at the usual share 24 runs need more than one
  ``explore_horizon`` (docs/sidecar.md); the measurement still decides. From its
  URGENT_PAIRS-th pair on it stays urgent only while the pairs' mean favours the challenger (a
  model wrong in direction, e.g. a stale profile, buys a few pairs at the larger share; one
  right in direction whose gain sits near the tie keeps it up to ``max_pairs``: a cost not
  yet measured). While any duel is urgent every planned duel runs at that share (the share is
  the plugin's for every duel it runs): a duel's cost is its pairs, at most ``max_pairs`` at
  any share (an argument: the cost of near-ties run at the urgent share is not measured), and
  a duel held back waits for as long as an urgent one at a bucket the traffic only passes
  through stays urgent (docs/sidecar.md: the H200's B 249-256).

Buckets the engine did not serve since the last push that changed them are not decided here:
their k stays (an edge is never moved on evidence from elsewhere).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from statistics import NormalDist
from typing import Literal

import numpy as np
import numpy.typing as npt

from sidecar.decision import Call, Figures
from sidecar.measured import MIN_PAIRS, PairedComparison, MeasuredGoodput
from sidecar.model_error import model_log_ratio, ratio_error
from tuner.core.buckets import band, band_rows
from tuner.core.admin_api import Duel

__all__ = ["URGENT_PAIRS", "Verdicts", "arbitrate", "surviving"]

URGENT_PAIRS = 4  # an urgent duel's first pairs: from then on they must agree with the model
# a running duel ends on the model alone only when its best case loses by this much: the
# model's ratio moves ~1% between rebuilds, and each end and restart resets the plugin's runs
DROP_MARGIN = 0.02

FloatArray = npt.NDArray[np.float64]
Decider = Literal["measured", "model"]
Status = Literal["switch", "keep", "tie", "open"]


@dataclass(frozen=True, slots=True)
class Verdicts:
    ks: npt.NDArray[np.int64]                 # the dense table after the switches
    calls: list[Call]                          # every challenger at every served bucket
    duels: tuple[Duel, ...]
    urgent: bool = False    # a dueled challenger the model is sure wins, the pairs not against
    ratio_error: float | None = None  # the model's error on ratios, where pairs checked it
    rotation: tuple[int, ...] = ()    # the k's the plugin's rotation visits (rotation_ks)

    def switches(self) -> list[Call]:
        return [c for c in self.calls if c.status == "switch"]


@dataclass(frozen=True, slots=True)
class Arbiter:
    """What the arbiter weighs a rebuild's calls with: the pairs, the served buckets, the
    model's error (assumed, or measured live per bucket) and the duel budget."""

    goodput: MeasuredGoodput
    served: dict[int, int]       # steps per bucket since the last push that changed it
    model_error: float
    min_served: int
    max_pairs: int
    duel_width: int
    # the duels the plugin runs now: they keep DROP_MARGIN and their turn
    duels: tuple[Duel, ...] = ()
    # the model's error measured live per bucket (None: model_error everywhere)
    live_error: Mapping[int, float] | None = None
    can_duel: bool = False       # the plugin duels: measurement, not the model, switches
    pairable: frozenset[int] | None = None  # where a duel can pair (None: every bucket)
    rotation: tuple[int, ...] = ()  # the k's the plugin's rotation visits now (): every k


def _model(G_reps: FloatArray, rows: npt.NDArray[np.int64], k: int, c: int, z: float,
           model_error: float) -> Figures:
    """The model's G(c)/G(k) over the bucket's rows: median of the draws, its spread widened
    by the model's own error (log scale)."""
    priced = model_log_ratio(G_reps, rows, k, c)
    if priced is None:  # a k the model cannot price here: no evidence either way
        return Figures(ratio=1.0, low=0.0, high=1e9)
    mid, sd = priced
    half = z * math.hypot(sd, model_error)
    return Figures(ratio=round(math.exp(mid), 5), low=round(math.exp(mid - half), 5),
                   high=round(math.exp(mid + half), 5))


def _measured(c: PairedComparison | None) -> Figures | None:
    return None if c is None else Figures(ratio=round(c.ratio, 5), low=round(c.low, 5),
                                          high=round(c.high, 5), pairs=c.pairs, steps=c.steps)


def _urgent(assumed: Figures, so_far: tuple[int, float], tie: float) -> bool:
    """The model, at its assumed error, sure that the challenger wins: the table is likely
    wrong here, and a duel at the usual share would take minutes to show it. Its live error
    does not hold the share back (a wide one would keep the wrong k for minutes): the share
    only buys pairs, and the pairs decide. Only while the pairs agree: from URGENT_PAIRS on,
    their mean must favour the challenger, so a model that is wrong (a stale profile
    flattering a k) spends the larger share on a few pairs; one that the pairs bear out keeps
    it until they settle (at the usual share it would wait behind every other urgent duel)."""
    pairs, mean = so_far
    return assumed.low > 1.0 + tie and (pairs < URGENT_PAIRS or mean > math.log1p(tie))


def rotation_ks(calls: Collection[Call], allowed: list[int], served_ks: Collection[int],
                restricted: bool = False, staying: Collection[int] = ()) -> tuple[int, ...]:
    """The k's the plugin's rotation may visit: every allowed k but one whose every call is
    "keep" (its best case, the model's or the pairs', loses to the incumbent wherever it was
    judged); the table's served k's stay (a cycle at the table's k runs the table), and so does
    the largest k unless the table serves it (it alone drafts every position, whose acceptance
    the estimate needs), and so do ``staying`` (rotating now, and kept only within DROP_MARGIN).
    (): none left out of an unrestricted set (``restricted`` False: every k), i.e. the
    plugin's every runnable k."""
    judged: dict[int, bool] = {}
    for c in calls:
        judged[c.k] = judged.get(c.k, True) and c.status == "keep"
    lost = ({k for k, all_keep in judged.items() if all_keep} - set(served_ks) - {max(allowed)}
            - set(staying))
    if not restricted and not lost & set(allowed):
        return ()
    return tuple(k for k in allowed if k not in lost)


def surviving(duels: tuple[Duel, ...], changed: Collection[int] | None) -> tuple[Duel, ...]:
    """The duels a push leaves standing: those at buckets it did not change (``changed`` None:
    it changed them all); where it changed the k, the challengers have no verdicts yet."""
    return tuple(d for d in duels if changed is not None and band(d[1]) not in changed)


def _half(f: Figures) -> float:
    return (math.log(f.high) - math.log(f.low)) / 2.0 if f.low > 0 else math.inf


def arbitrate(old_ks: npt.NDArray[np.int64], G_reps: FloatArray, measured: MeasuredGoodput,
              served: Mapping[int, int], allowed: set[int] | None, *, tie: float,
              confidence: float, model_error: float, min_served: int, max_pairs: int,
              duel_width: int, futile: Callable[[int, int, int, int], bool] | None = None,
              previous: tuple[Duel, ...] = (),
              live_error: Mapping[int, float] | None = None,
              can_duel: bool = False, pairable: Collection[int] | None = None,
              rotating: Collection[int] = ()) -> Verdicts:
    """Per served bucket, the k to run and who decided it; the duels still worth running.
    ``futile(start, end, k, c)``: the incumbent k's extra drafts over a smaller c buy nothing
    and c is no slower (tuner/core/incumbent.py): c replaces it without waiting for a duel.
    ``live_error[bucket]``: the model's error measured there or borrowed (None: ``model_error`` everywhere,
    the model may switch any served bucket). ``can_duel``: duels can settle what the model
    favours, so the model switches nothing (it orders the duels). ``pairable``: the buckets
    where a duel can pair (None: all); elsewhere no duel is asked for and the model decides
    as where none can run. ``previous``: the duels running now, which end only beyond
    DROP_MARGIN. ``rotating``: the k's the plugin's rotation visits now (() every k): one of
    them leaves it, as a running duel's challenger ends, only beyond DROP_MARGIN."""
    max_b, num_k = G_reps.shape[1], G_reps.shape[2]
    ks = np.asarray(old_ks, dtype=np.int64).copy()
    calls: list[Call] = []
    duels = []
    urgent = False
    marginal: set[int] = set()  # kept by the model's best case, but within DROP_MARGIN of 1
    ks_allowed = sorted(allowed) if allowed is not None else list(range(num_k))
    checked = ratio_error(G_reps, measured) if live_error is not None else None
    for bucket in sorted(b for b, n in served.items() if n >= min_served):
        rows = np.asarray(band_rows(bucket, max_b), dtype=np.int64)
        if not rows.size:
            continue
        k = int(np.bincount(ks[rows - 1], minlength=num_k).argmax())  # the incumbent
        rivals = [c for c in ks_allowed if c != k]
        if not rivals:
            continue
        alpha = (1.0 - confidence) / len(rivals)       # Bonferroni over the challengers
        z = NormalDist().inv_cdf(1.0 - alpha / 2.0)
        here: list[Call] = []
        assumed: dict[int, Figures] = {}  # the model at model_error, per challenger
        before = next((ks_ for lo, hi, ks_ in previous if (lo, hi) == (rows[0], rows[-1])), ())
        # the model may switch only where no duel can settle it, where its own error is known,
        # and by more than that error
        can_pair = can_duel and (pairable is None or bucket in pairable)
        # where duels run somewhere, the model's ratios must have met pairs first: its level
        # error there checks the incumbent's k only, not the challenger's
        by_model = not can_pair and (live_error is None or bucket in live_error) and (
            not can_duel or checked is not None)
        # where pairs checked the model's ratios, that error bounds it, not its level's
        error = model_error if live_error is None else max(
            model_error, checked if checked is not None else live_error.get(bucket, 0.0))
        for c in rivals:
            model = _model(G_reps, rows, k, c, z, error)
            best_case = assumed[c] = (model if error == model_error
                                      else _model(G_reps, rows, k, c, z, model_error))
            meas = _measured(measured.compare(bucket, c, k, alpha, early=True))
            # a conclusive measurement decides (its interval holds at this level whatever the
            # model says); an inconclusive one only once it is the tighter of the two; an early
            # win only where the model's interval wins too
            # the model's direction at its assumed error: the pairs give the size, and its live
            # error would veto every early win where it is wide (docs/sidecar.md)
            confirmed = meas is None or meas.pairs >= MIN_PAIRS or best_case.low > 1.0 + tie
            decisive = meas is not None and (
                (meas.low > 1.0 + tie and confirmed) or meas.high < 1.0 + tie)
            decided_by: Decider = ("measured" if meas is not None and (
                decisive or _half(meas) <= _half(model)) else "model")
            used = meas if decided_by == "measured" and meas is not None else model
            # a futile incumbent goes, unless the measurement says the smaller k is worse
            if (used.low > 1.0 + tie and ((decided_by == "measured" and confirmed) or by_model)) or (
                    c < k and futile is not None
                                         and (meas is None or meas.high >= 1.0)
                                         and futile(int(rows[0]), int(rows[-1]), k, c)):
                status: Status = "switch"
            elif meas is not None and (meas.high < 1.0 + tie or meas.pairs >= max_pairs):
                status = "keep" if meas.high < 1.0 + tie else "tie"
            elif best_case.high < 1.0 - (DROP_MARGIN if c in before else 0.0):
                # even its best case loses to the incumbent: a duel would only cost, and so
                # would the rotation's steps (rotation_ks); a running duel only by a margin
                status, decided_by = "keep", "model"
                if best_case.high >= 1.0 - DROP_MARGIN:
                    marginal.add(c)
            else:
                status = "open"
            here.append(Call(bucket=bucket, batch_size_start=int(rows[0]),
                             batch_size_end=int(rows[-1]), k_old=k, k=c, decided_by=decided_by,
                             status=status, model=model, measured=meas))
        winners = [c for c in here if c.status == "switch"]
        if winners:
            best = max(winners, key=lambda c: (c.measured or c.model).low)
            mine = rows[ks[rows - 1] == k]  # rows of another k were not compared: they stay
            ks[mine - 1] = best.k
            # the runner-up winners are not pushed: open until measured against the new k
            here = [c if c is best or c.status != "switch" else c.model_copy(update={"status": "open"})
                    for c in here]
        else:
            # a challenger already dueled here keeps its turn while open: re-sorting near-equal
            # upper bounds every rebuild would reset the plugin's runs
            open_ = sorted((c for c in here if c.status == "open"),
                           key=lambda c: (c.k not in before, before.index(c.k) if c.k in before
                                          else 0, -(c.measured or c.model).high))[:duel_width]
            if open_ and (pairable is None or bucket in pairable):
                duel = (int(rows[0]), int(rows[-1]), tuple(c.k for c in open_))
                duels.append(duel)
                urgent = urgent or _urgent(assumed[open_[0].k],
                                           measured.so_far(bucket, open_[0].k, k), tie)
        calls += here
    served_ks = {int(k) for b, n in served.items() if n >= min_served
                 for k in ks[np.asarray(band_rows(b, max_b), dtype=np.int64) - 1]}
    staying = marginal & set(rotating or ks_allowed)
    return Verdicts(ks, calls, tuple(duels), urgent, checked,
                    rotation_ks(calls, ks_allowed, served_ks, restricted=allowed is not None,
                                staying=staying))
