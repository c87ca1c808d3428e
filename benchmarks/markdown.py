"""summary.md: a bench's Analysis in words (pure). Verdict words come from summary.WORDS only."""

from __future__ import annotations

import statistics
from typing import Any

from benchmarks.cells import Window
from benchmarks.stats import Analysis, Comparison, policy_key
from benchmarks.summary import dropped_reasons, fmt, steps_json, word


def _cell(c: Comparison, t: float) -> str:
    return f"{fmt(c.ratio)} {word(c.verdict, t)}"


def _design_lines(design: dict[str, Any], a: Analysis) -> list[str]:
    achieved = ", ".join(f"N={n}: {b}" for n, b in a.blocks.items())
    if design.get("kind") == "fixed":
        return [f"**Design: fixed** — {design.get('planned_blocks')} blocks per load planned "
                f"before the run ({design.get('basis', '')}); achieved: {achieved}."]
    return [f"**Design: {design.get('kind', '?')}** — {design.get('note', '')}. Blocks: {achieved}."]


def _family_lines(a: Analysis) -> list[str]:
    f, t = a.family, a.settings.threshold
    return [f"**Error control**: the run's {f.size} verdicts (every policy against the reference "
            f"at every load, the A/A and the head-to-head pairs) are one family, corrected by "
            f"{f.method.title()}: the chance of at least one false \"better\" or \"worse\" is at "
            f"most {f.level * 100:g}%. Each interval is at the level Holm tested it at (about "
            f"{min((c.level for c in a.every() if c.p_holm is not None), default=0.95) * 100:.2f}% "
            f"for most), so an interval clears ±{t * 100:g}% exactly when its verdict is better "
            "or worse."]


def _aa_lines(a: Analysis) -> list[str]:
    if not a.aa:
        return ["No A/A pair in this run: nothing says how large its noise is."]
    sd = f"; per-block sd of its log ratios {a.aa_sd * 100:.1f}%" if a.aa_sd is not None else ""
    lines = [f"**Noise floor (A/A)**: the same table under two names; widest interval half-width "
             f"**±{(a.aa_halfwidth or 0) * 100:.1f}%**{sd}. Differences smaller than this are "
             "not findings.", "", "| load | A/A ratio [CI] | blocks | verdict |", "|---|---|---|---|"]
    for n, c in sorted(a.aa.items()):
        broken = " — **a false verdict, or a broken method**" if c.verdict in ("better", "worse") else ""
        lines.append(f"| N={n} | {fmt(c.ratio)} | {c.n_blocks} | "
                     f"{word(c.verdict, a.settings.threshold)}{broken} |")
    return lines


def _policy_table(a: Analysis, policies: list[str]) -> list[str]:
    lines = ["| policy | " + " | ".join(f"N={n} ({a.blocks[n]} blocks)" for n in a.loads) + " |",
             "|---" * (len(a.loads) + 1) + "|"]
    for p in policies:
        cells = []
        for n in a.loads:
            c = a.comparisons.get((p, n))
            if c is None:
                cells.append("")
            elif c.verdict == "reference":
                cells.append(f"**reference** ({a.medians[(p, n)]:.0f} tok/s)")
            else:
                cells.append(_cell(c, a.settings.threshold))
        lines.append(f"| {p} | " + " | ".join(cells) + " |")
    return lines


def _worst_lines(a: Analysis) -> list[str]:
    lines = ["| policy | worst-case loss [CI] | at load (blocks there) | over loads |",
             "|---|---|---|---|"]
    for w in sorted(a.worst.values(), key=lambda w: w.loss.median):
        lines.append(f"| {w.policy} | {fmt(w.loss, pct=True)} | N={w.at_load} ({w.n_blocks}) | "
                     f"{w.loads} |")
    return lines


def _versus_lines(a: Analysis) -> list[str]:
    if not a.versus:
        return []
    lines = ["", "Head to head (paired in the same blocks):", "",
             "| pair | load | ratio [CI] | blocks | verdict |", "|---|---|---|---|---|"]
    for (x, y, n), c in a.versus.items():
        lines.append(f"| {x} / {y} | N={n} | {fmt(c.ratio)} | {c.n_blocks} | "
                     f"{word(c.verdict, a.settings.threshold)} |")
    return lines


def _steps_lines(windows: list[Window], a: Analysis, policies: list[str]) -> list[str]:
    """Median engine step and tokens per step per policy and load, where the plugin counted."""
    s = steps_json(windows)
    lines = [f"Windows counted with engine steps: {s['windows_with_steps']}; fewest steps in one: "
             f"{s['fewest_steps']}; below {s['min_steps']} steps (one step moves such a window by "
             f"more than 2%): {s['windows_below_min_steps']}.", "",
             "| policy | " + " | ".join(f"N={n}" for n in a.loads) + " |",
             "|---" * (len(a.loads) + 1) + "|"]
    for p in policies:
        cells = []
        for n in a.loads:
            got = [(w.step_ms, w.tokens_per_step, w.steps) for w in windows
                   if w.policy == p and w.load == n and w.step_ms is not None
                   and w.tokens_per_step is not None and w.steps is not None]
            ms, tok, steps = ([float(x[i] or 0) for x in got] for i in range(3))
            cells.append(f"{statistics.median(ms):.1f} ms, {statistics.median(tok):.0f} tok, "
                         f"{statistics.median(steps):.0f} steps" if got else "")
        if any(cells):
            lines.append(f"| {p} | " + " | ".join(cells) + " |")
    return lines


def _dropped_lines(windows: list[Window]) -> list[str]:
    reasons = dropped_reasons(windows)
    if not reasons:
        return []
    return ["**Windows left out of the analysis** (each is in cells.csv, `dropped` says why):", "",
            *[f"- {n} × {why}" for why, n in reasons.items()], ""]


def markdown(windows: list[Window], a: Analysis, title: str, facts: list[str],
             design: dict[str, Any]) -> str:
    policies = sorted(dict.fromkeys(p for p, _ in a.comparisons), key=policy_key)
    refs = ", ".join(f"N={n}: {p}" for n, p in a.references.items())
    t = a.settings.threshold
    out = [f"# {title}", "", *facts, "", *_design_lines(design, a), "", *_family_lines(a), "",
           *_dropped_lines(windows), *_aa_lines(a), "",
           "## Against the best fixed k at each load", "",
           "Reference: per load, the fixed k with the highest mean log ratio to the most-held fixed "
           "k, chosen on the other half of the blocks (cross-fitting: a k picked on the blocks it "
           f"is judged on wins partly by its noise); `A | B` where the halves differed: {refs}.",
           "", "Each cell: the geometric mean over blocks of the policy's window over the "
           "reference's window in the same block [the interval against the best fixed k: the "
           "least of the t-interval lower ends against each fixed k, the least of their upper "
           "ends at the level split over the fixed k's]. Better only when better than every "
           f"fixed k, worse when worse than any, both beyond ±{t * 100:g}%; within "
           f"±{t * 100:g}% when the interval lies wholly inside; otherwise undecided. Non-table "
           "policies are chained through their own paired blocks (`versus` in summary.json).",
           "", *_policy_table(a, policies), "", "## Worst case over loads", "",
           "Loss = 1 - ratio to the best fixed k (its upper end the largest of the per-k "
           "upper ends). Each load's interval is at 1 - α/L over the "
           "policy's L loads, so [largest low, largest high] covers the largest true loss with "
           f"probability ≥ {a.settings.confidence * 100:g}%. Loads with fewer than 4 blocks "
           "are left out of it.", "", *_worst_lines(a), *_versus_lines(a), "",
           "## Engine steps", "", *_steps_lines(windows, a, policies), "",
           "![ratios to the reference and the A/A interval](intervals.png)", ""]
    return "\n".join(out)

