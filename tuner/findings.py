"""What a profile says beyond its table, in numbers and in words: how noisy its cells are, which
table edges sit in a step-time cliff, which cells did not hold their batch, and how sure each
edge of the table is. Read by the tune summary, the report and `tabletune table`. Pure.
"""

from __future__ import annotations

import statistics

import numpy as np

from tuner.core.confidence import Confident
from tuner.core.goodput import cliff_warnings, cliffs, refine_points
from tuner.core.profile import Profile, StepSample
from tuner.core.samples import cell_estimate, cell_level, filled, pooled_log_sd, spread, usable
from tuner.core.table import Table

__all__ = ["batch_warnings", "client_engine_gap", "cliff_lines", "edge_lines", "grid_warnings",
           "honor_warnings",
           "interval_line", "new_refine_points", "noise_line", "repeat_spreads", "underfilled"]


def _cliffs(profile: Profile) -> list:  # type: ignore[type-arg]
    return cliffs(profile.grid, profile.step_time_matrix(monotone=False))


def cliff_lines(profile: Profile) -> list[str]:
    """Table edges that interpolation placed inside a step-time jump (see goodput.cliffs)."""
    if profile.table is None:
        return []
    return cliff_warnings(Table.from_list(profile.table), _cliffs(profile))


def new_refine_points(profile: Profile) -> list[int]:
    """New grid points that would bisect the cliffs holding an edge of the current table."""
    if profile.table is None:
        return []
    return [B for B in refine_points(Table.from_list(profile.table), _cliffs(profile))
            if B not in profile.grid]


def repeat_spreads(profile: Profile) -> dict[tuple[int, int], tuple[float, int]]:
    """(B, k) -> (spread between the cell's first `repeats` usable repeats, how many it took),
    for cells with two or more: extra repeats would widen the range, not describe the noise,
    and a sample that missed its batch measured another B (see samples.usable)."""
    return {key: (spread([s.step_ms for s in usable(v)[:max(profile.repeats, 2)]]), len(v))
            for key, v in profile.samples_by_cell().items() if len(usable(v)) >= 2}


def underfilled(profile: Profile) -> list[StepSample]:
    """The samples of cells where none held the batch: those cells' T is for a smaller batch
    than their B. A cell with one filled sample takes its median over the filled ones."""
    return [s for v in profile.samples_by_cell().values() if not any(filled(x) for x in v)
            for s in v]


def batch_warnings(profile: Profile) -> list[str]:
    by: dict[int, list[StepSample]] = {}
    for smp in underfilled(profile):
        by.setdefault(smp.B, []).append(smp)
    return [f"B={B}: {len(v)} sample(s) ran only {min(s.mean_batch or 0 for s in v):.0f}-"
            f"{max(s.mean_batch or 0 for s in v):.0f} requests a step (k="
            f"{','.join(str(k) for k in sorted({s.k for s in v}))}): the clients could not "
            f"keep {B} requests in the engine (still being admitted when the window opened, or "
            f"admitted slower than they finished), so T(B={B}) is for a smaller batch: treat "
            f"the table there as unmeasured" for B, v in sorted(by.items())]


def noise_line(profile: Profile) -> str | None:
    """How far repeats disagree, and how wide the cells' intervals came out."""
    spreads = repeat_spreads(profile)
    if not spreads:
        return None
    values = sorted(sp for sp, _ in spreads.values())
    extra = sum(1 for _, n in spreads.values() if n > profile.repeats)
    line = (f"repeats disagree by {np.median(values) * 100:.1f}% at the median cell, "
            f"{np.percentile(values, 90) * 100:.1f}% at the 90th percentile")
    if profile.max_repeats and profile.max_repeats > profile.repeats:
        rule = (f"while its {_level(profile) * 100:.1f}% interval was wider than "
                f"±{profile.ci_target * 100:.0f}%"
                if profile.ci_target else "where two repeats disagreed")
        line += (f"; {extra} of {len(spreads)} cells took more than {profile.repeats} repeats "
                 f"(up to {profile.max_repeats}, {rule})")
    return line


def _level(profile: Profile) -> float:
    """The level the profile's repeat rule gives each cell's interval (samples.cell_level)."""
    return cell_level(profile.repeats, profile.max_repeats)


def interval_line(profile: Profile) -> str | None:
    """The cells' intervals (Student t on their repeats' logs, at the level that pays for the
    repeat rule's looks), as ± share of their estimates (median and widest)."""
    level = _level(profile)
    by = profile.samples_by_cell()
    widths = [cell_estimate(v, level).halfwidth for v in by.values() if v]
    widths = [w for w in widths if np.isfinite(w)]
    if not widths:
        return None
    pooled = pooled_log_sd(by.values())
    # t(1) is 12.7: two repeats alone bound one cell loosely; the table rule pools them
    pool = "" if pooled is None else (f"; the table rule's sd between repeats, pooled over the "
                                      f"profile: {pooled * 100:.1f}%")
    return (f"cell step times ±{np.median(widths) * 100:.1f}% at the median cell, "
            f"±{max(widths) * 100:.1f}% at the widest ({level * 100:.1f}% t intervals over "
            f"each cell's own repeats){pool}")


def client_engine_gap(profile: Profile) -> float | None:
    """Median |client - engine| / engine over cells that have both."""
    gaps = [abs(c.client_ms - c.engine_ms) / c.engine_ms for c in profile.cells
            if c.engine_ms is not None and c.engine_ms > 0]
    return statistics.median(gaps) if gaps else None


def edge_lines(choice: Confident) -> list[str]:
    """Each range's k against the runner-up (gain with its 95% interval), each edge's confidence."""
    out = []
    for r in choice.ranges:
        vs = "no other k allowed" if r.runner_up is None else (
            f"vs k={r.runner_up}: {r.gain * 100:+.1f}% "
            f"({r.gain_low * 100:+.1f}% to {r.gain_high * 100:+.1f}%)")
        out.append(f"B={r.start}-{r.end}: k={r.k} ({vs})")
    for e in choice.edges:
        out.append(f"edge after B={e.end} (k={e.k_before} -> k={e.k_after}): "
                   f"{e.confidence * 100:.0f}% of the resampled profiles agree the switch gains")
    return out


def grid_warnings(profile: Profile) -> list[str]:
    """A grid that ends below max_num_seqs: the table above its last B rests on held times."""
    note = profile.unmeasured_top()
    return [] if note is None else [f"{note}; tune again with {profile.engine.max_num_seqs} in "
                                    "--grid"]


def honor_warnings(profile: Profile) -> list[str]:
    """What the honor check (tuner/core/honor.py) found wrong, one line each: the engine not
    verifying the table's k, or its drafter drafting the startup K whatever the table asks."""
    h = profile.honor
    if h is None:
        return []
    out = []
    if h.verified == "ignored":
        out.append(f"the engine verified about K={h.K} drafts per request whatever the table asked: "
                   "a table changes nothing on this engine (see the honor check)")
    elif h.verified == "partial":
        off = [f"k={c.k} at B={c.B}: {c.drafts}" for c in [*h.cells, *h.edge]
               if c.k < h.K and c.verdict not in ("honored", "unmeasured")]
        out.append("the engine verified the table's k only in part (" + "; ".join(off[:4])
                   + "): see the honor check")
    if h.drafted == "startup_k":
        out.append(f"the drafter drafts the startup K={h.K} every step whatever the table asks: a "
                   "table changes only the verification work (see the honor check)")
    return out
