"""A bench's results as data (summary.json) and in words (summary.md), from its Analysis (pure).

summary.json holds, at the top, `aa_ci_halfwidth` (the widest A/A interval: the noise floor);
under `loads`, per load and policy, `ratio_median`, `ratio_ci_low`, `ratio_ci_high`, `verdict`
(against that load's reference), `versus`, `n_blocks`, `resolved`, `tokens_per_s_median`; under
`worst_case`, per policy, `loss_median`, `loss_ci_low`, `loss_ci_high`, `at_load`; and the A/A
per load, the head-to-head pairs, what stayed unresolved, the references and the run's facts.
"""

from __future__ import annotations

import statistics
from typing import Any

from benchmarks.cells import Window
from benchmarks.stats import FEW, Analysis, Comparison, Interval

WORDS = {"better": "better", "worse": "worse", "indistinguishable": "indistinguishable at this noise",
         "reference": "reference", FEW: "too few blocks for a verdict"}


def _r(x: float) -> float:
    return round(x, 4)


def comparison_json(c: Comparison) -> dict[str, Any]:
    return {"ratio_median": _r(c.ratio.median), "ratio_ci_low": _r(c.ratio.low),
            "ratio_ci_high": _r(c.ratio.high), "verdict": c.verdict, "versus": c.versus,
            "n_blocks": c.n_blocks, "resolved": c.resolved}


def to_json(a: Analysis, meta: dict[str, Any]) -> dict[str, Any]:
    s = a.settings
    loads: dict[str, Any] = {}
    for (p, n), c in a.comparisons.items():
        loads.setdefault(str(n), {})[p] = {**comparison_json(c),
                                           "tokens_per_s_median": round(a.medians.get((p, n), 0.0), 2)}
    return {
        "aa_ci_halfwidth": None if a.aa_halfwidth is None else _r(a.aa_halfwidth),
        "windows_dropped": a.dropped,
        "aa": {str(n): comparison_json(c) for n, c in a.aa.items()},
        "threshold": s.threshold, "ci_target": s.ci_target, "confidence": s.confidence,
        "n_boot": s.n_boot, "references": {str(n): p for n, p in a.references.items()},
        "blocks": {str(n): b for n, b in a.blocks.items()},
        "loads": loads,
        "worst_case": {p: {"loss_median": _r(w.loss.median), "loss_ci_low": _r(w.loss.low),
                           "loss_ci_high": _r(w.loss.high), "at_load": w.at_load}
                       for p, w in a.worst.items()},
        "best_single_fixed_k": a.best_fixed,
        "worst_case_vs_best_fixed_k": {p: comparison_json(c) for p, c in a.worst_vs_best.items()},
        "head_to_head": {f"{x} / {y}": {str(n): comparison_json(c) for (x2, y2, n), c in a.versus.items()
                                        if (x2, y2) == (x, y)}
                         for x, y in dict.fromkeys((x, y) for x, y, _ in a.versus)},
        "unresolved": [{"load": c.load, "policy": c.policy, "versus": c.versus,
                        "ratio_ci_low": _r(c.ratio.low), "ratio_ci_high": _r(c.ratio.high)}
                       for c in a.unresolved()],
        "meta": meta,
    }


def fmt(iv: Interval, pct: bool = False) -> str:
    if pct:
        return f"{iv.median * 100:+.1f}% [{iv.low * 100:+.1f}, {iv.high * 100:+.1f}]"
    return f"{iv.median:.3f} [{iv.low:.3f}, {iv.high:.3f}]"


def _aa_lines(a: Analysis) -> list[str]:
    if not a.aa:
        return ["No A/A pair in this run: nothing says how large its noise is."]
    lines = [f"**Noise floor (A/A)**: the same table under two names; widest interval half-width "
             f"**±{(a.aa_halfwidth or 0) * 100:.1f}%**. Differences smaller than this are not findings.",
             "", "| load | A/A ratio [95% CI] | blocks | verdict |", "|---|---|---|---|"]
    for n, c in sorted(a.aa.items()):
        broken = (" — **excludes 1**: by chance at about one load in 20 (95%); more often "
                  "means the method is broken") if not c.ratio.low <= 1 <= c.ratio.high \
            and c.verdict != FEW else ""
        lines.append(f"| N={n} | {fmt(c.ratio)} | {c.n_blocks} | {WORDS[c.verdict]}{broken} |")
    return lines


def _policy_table(a: Analysis, policies: list[str]) -> list[str]:
    head = "| policy | " + " | ".join(f"N={n}" for n in a.loads) + " |"
    lines = [head, "|---" * (len(a.loads) + 1) + "|"]
    for p in policies:
        cells = []
        for n in a.loads:
            c = a.comparisons.get((p, n))
            if c is None:
                cells.append("")
            elif c.verdict == "reference":
                cells.append(f"**reference** ({a.medians[(p, n)]:.0f} tok/s)")
            else:
                cells.append(f"{fmt(c.ratio)} {WORDS[c.verdict]}")
        lines.append(f"| {p} | " + " | ".join(cells) + " |")
    return lines


def _worst_lines(a: Analysis, policies: list[str]) -> list[str]:
    lines = ["| policy | worst-case loss [95% CI] | at load | against the best single fixed k |",
             "|---|---|---|---|"]
    for p in sorted((p for p in policies if p in a.worst), key=lambda p: a.worst[p].loss.median):
        w, vs = a.worst[p], a.worst_vs_best.get(p)
        mark = " (best single fixed k)" if p == a.best_fixed else ""
        against = f"{fmt(vs.ratio)} {WORDS[vs.verdict]}" if vs else ""
        lines.append(f"| {p}{mark} | {fmt(w.loss, pct=True)} | N={w.at_load} | {against} |")
    return lines


def _versus_lines(a: Analysis) -> list[str]:
    if not a.versus:
        return []
    lines = ["", "Head to head (paired in the same blocks):", "",
             "| pair | load | ratio [95% CI] | verdict |", "|---|---|---|---|"]
    for (x, y, n), c in a.versus.items():
        lines.append(f"| {x} / {y} | N={n} | {fmt(c.ratio)} | {WORDS[c.verdict]} |")
    return lines


def _steps_lines(windows: list[Window], a: Analysis, policies: list[str]) -> list[str]:
    """Median engine step and tokens per step per policy and load, where the plugin counted."""
    lines = ["| policy | " + " | ".join(f"N={n}" for n in a.loads) + " |",
             "|---" * (len(a.loads) + 1) + "|"]
    for p in policies:
        cells = []
        for n in a.loads:
            pairs = [(w.step_ms, w.tokens_per_step) for w in windows if w.policy == p
                     and w.load == n and w.step_ms is not None and w.tokens_per_step is not None]
            ms = [m for m, _ in pairs if m is not None]
            tok = [t for _, t in pairs if t is not None]
            cells.append(f"{statistics.median(ms):.1f} ms, {statistics.median(tok):.0f} tok"
                         if ms and tok else "")
        if any(cells):
            lines.append(f"| {p} | " + " | ".join(cells) + " |")
    return lines


def _unresolved_lines(a: Analysis) -> list[str]:
    left = a.unresolved()
    if not left:
        return ["Every comparison resolved: each verdict's interval is clear of ±"
                f"{a.settings.threshold * 100:g}% or narrower than ±{a.settings.ci_target * 100:g}%."]
    lines = [f"{len(left)} comparison(s) stayed unresolved (interval wider than "
             f"±{a.settings.ci_target * 100:g}% and not clear of ±{a.settings.threshold * 100:g}%):", ""]
    lines += [f"- N={c.load} {c.policy} / {c.versus}: {fmt(c.ratio)}, ±{c.ratio.halfwidth * 100:.1f}% "
              f"over {c.n_blocks} blocks" for c in left]
    return lines


def markdown(windows: list[Window], a: Analysis, title: str, facts: list[str]) -> str:
    policies = list(dict.fromkeys(p for p, _ in a.comparisons))
    refs = ", ".join(f"N={n}: {p} ({a.medians[(p, n)]:.0f} tok/s)" for n, p in a.references.items())
    t = a.settings
    dropped = ([f"**{a.dropped} window(s) left out**: their engine count could not be right (a "
                "generated-token count that fell, or exceeded what the window's steps carried; "
                "`implausible` in tuner/step_clock.py).", ""] if a.dropped else [])
    out = [f"# {title}", "", *facts, "", *dropped, *_aa_lines(a), "",
           "## Against the best fixed k at each load", "",
           "Reference: the fixed k with the highest median ratio, paired in the same blocks, to "
           "the fixed k held by every block (the A/A twin), chosen once from all blocks at that "
           f"load (raw median tokens/s in brackets): {refs}.",
           "", f"Ratio of each policy's window to the reference's window in the same block: median "
           f"over blocks [{t.confidence * 100:g}% bootstrap interval, blocks resampled]. A policy "
           f"counts as better or worse only when the whole interval lies beyond ±{t.threshold * 100:g}%; "
           "non-table policies are chained through their own paired blocks (`versus` in summary.json).",
           "", *_policy_table(a, policies), "",
           "## Worst case over loads", "",
           "Loss = 1 - ratio to the reference, at the load where it is largest; the interval is "
           "the worst case recomputed in every bootstrap replicate (joint over loads; a max over "
           "noisy loads leans high, so the point sits low in its interval). Against the best "
           "single fixed k: (1 - worst loss) / (1 - its worst loss), in the same replicates: "
           "above 1 holds up better at its worst load.", "",
           *_worst_lines(a, policies), *_versus_lines(a), "", "## What stayed open", "",
           *_unresolved_lines(a), "", "## Engine steps", "",
           "Per policy and load, the median over windows of the engine's time per step and the "
           "tokens a step carried (decodes, drafts, prefill), from the plugin's exact totals.", "",
           *_steps_lines(windows, a, policies), "",
           "![ratios to the reference and the A/A interval](intervals.png)", ""]
    return "\n".join(out)
