"""A bench's results as data (summary.json) and in words (summary.md), from its Analysis (pure).

summary.json (schema 2) holds at the top the design (`design`: fixed or adaptive, planned and
achieved blocks), the family its verdicts are corrected in (`family`: which comparisons, the
method, the family-wise level, its size), the noise floor (`aa_ci_halfwidth`, `aa_sd_log`) and
the windows left out with their reasons; under `loads`, per load and policy, `ratio` (geometric
mean of paired block ratios), `ratio_ci_low`, `ratio_ci_high`, `ci_level` (the level Holm
tested it at), `p_holm`, `verdict`, `versus`, `n_blocks`, `tokens_per_s_median`; under
`worst_case`, per policy, the loss interval that covers the largest true loss over loads, with
its load and that load's blocks; the A/A per load, the head-to-head pairs, the references.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from benchmarks.cells import Window, counted
from benchmarks.stats import FEW, UNDECIDED, WITHIN, Analysis, Comparison, Interval

SCHEMA = 2
MIN_STEPS = 50   # a window shorter than this many engine steps moves by >2% with one step

# verdict words come only from here, so every file says what the verdict said
WORDS = {"better": "better", "worse": "worse", WITHIN: "within ±{t}%",
         UNDECIDED: "undecided at this noise", "reference": "reference",
         FEW: "too few blocks for a verdict"}

# what a bench before this schema did: rounds were added until its intervals resolved
ADAPTIVE = {"kind": "adaptive", "planned_blocks": None,
            "note": "blocks were added until the intervals resolved (the bench before schema 2): "
                    "the number of blocks depended on the data, so the error rates below hold "
                    "only approximately (optional stopping inflates them)"}


def word(verdict: str, threshold: float) -> str:
    return WORDS[verdict].format(t=f"{threshold * 100:g}")


def _r(x: float) -> float:
    return round(x, 4)


def comparison_json(c: Comparison) -> dict[str, Any]:
    return {"ratio": _r(c.ratio.median), "ratio_ci_low": _r(c.ratio.low),
            "ratio_ci_high": _r(c.ratio.high), "ci_level": c.level,
            "p_holm": None if c.p_holm is None else float(f"{c.p_holm:.4g}"),
            "verdict": c.verdict, "versus": c.versus, "n_blocks": c.n_blocks}


def dropped_reasons(windows: list[Window]) -> dict[str, int]:
    return dict(Counter(w.dropped or "implausible engine count (checked at analysis)"
                        for w in windows if not counted(w)))


def step_counts(steps: list[int]) -> dict[str, Any]:
    """Engine steps per window against the rule of at least MIN_STEPS (docs/measurement.md)."""
    return {"min_steps": MIN_STEPS, "windows_with_steps": len(steps),
            "fewest_steps": min(steps, default=None),
            "windows_below_min_steps": sum(s < MIN_STEPS for s in steps)}


def steps_json(windows: list[Window]) -> dict[str, Any]:
    return step_counts([w.steps for w in windows if counted(w) and w.steps is not None])


def family_json(a: Analysis) -> dict[str, Any]:
    return {"comparisons": "every policy against the reference at every load, the A/A at every "
                           "load and the head-to-head pairs, each with >= 4 blocks",
            "method": a.family.method, "family_wise_level": a.family.level, "size": a.family.size,
            "hypotheses": f"better: ratio > 1 + {a.settings.threshold:g}; worse: ratio < "
                          f"1 - {a.settings.threshold:g}"}


def to_json(a: Analysis, meta: dict[str, Any], windows: list[Window] | None = None) -> dict[str, Any]:
    loads: dict[str, Any] = {}
    for (p, n), c in a.comparisons.items():
        loads.setdefault(str(n), {})[p] = {**comparison_json(c),
                                           "tokens_per_s_median": round(a.medians.get((p, n), 0.0), 2)}
    blocks = {str(n): b for n, b in a.blocks.items()}
    return {
        "schema": SCHEMA,
        "design": {**meta.get("design", ADAPTIVE), "achieved_blocks": blocks},
        "family": family_json(a),
        "statistic": "geometric mean of paired block ratios; t-interval on the log ratios; "
                     "against the best fixed k an intersection-union test (better only if "
                     "better than every fixed k, worse if worse than any, Bonferroni)",
        "reference": "per load, the best fixed k chosen on the other half of the blocks "
                     "(cross-fitting; the ratio shown); `A | B` when the halves chose differently",
        "threshold": a.settings.threshold, "confidence": a.settings.confidence,
        "aa_ci_halfwidth": None if a.aa_halfwidth is None else _r(a.aa_halfwidth),
        "aa_sd_log": None if a.aa_sd is None else _r(a.aa_sd),
        "windows_dropped": a.dropped,
        "dropped_reasons": dropped_reasons(windows or []),
        "steps": steps_json(windows or []),
        "references": {str(n): p for n, p in a.references.items()},
        "blocks": blocks,
        "aa": {str(n): comparison_json(c) for n, c in a.aa.items()},
        "loads": loads,
        "worst_case": {p: {"loss": _r(w.loss.median), "loss_ci_low": _r(w.loss.low),
                           "loss_ci_high": _r(w.loss.high), "at_load": w.at_load,
                           "n_blocks": w.n_blocks, "over_loads": w.loads}
                       for p, w in a.worst.items()},
        "head_to_head": {f"{x} / {y}": {str(n): comparison_json(c) for (x2, y2, n), c in a.versus.items()
                                        if (x2, y2) == (x, y)}
                         for x, y in dict.fromkeys((x, y) for x, y, _ in a.versus)},
        "meta": meta,
    }


def fmt(iv: Interval, pct: bool = False) -> str:
    if pct:
        return f"{iv.median * 100:+.1f}% [{iv.low * 100:+.1f}, {iv.high * 100:+.1f}]"
    return f"{iv.median:.3f} [{iv.low:.3f}, {iv.high:.3f}]"
