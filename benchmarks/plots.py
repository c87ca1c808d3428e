"""intervals.png: every ratio with its interval, so no figure of the bench stands without one.

Left: ratio to the reference per load, one error bar per policy (geometric mean and its Holm-level interval),
the ±threshold band shaded. Middle: the A/A interval per load (the noise floor). Right: each
policy's worst-case loss with its interval.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.stats import Analysis

if TYPE_CHECKING:
    from matplotlib.axes import Axes

STYLE = {"nospec": "#888888", "documented": "#d62728", "tuned": "#2ca02c", "quarter": "#ff7f0e",
         "turbospec-style": "#9467bd", "nightjar-style": "#e377c2",
         "sidecar-from-quarter": "#17becf", "sidecar-from-documented": "#8c564b",
         "sidecar-from-tuned": "#bcbd22"}


def plot(a: Analysis, path: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(16, 4.8),
                                        gridspec_kw={"width_ratios": [2.2, 1, 1.4]})
    policies = list(dict.fromkeys(p for p, _ in a.comparisons))
    thr = a.settings.threshold
    x = {n: i for i, n in enumerate(a.loads)}
    shown = [p for p in policies if any(q == p and c.verdict != "reference"
                                        for (q, _), c in a.comparisons.items())]
    for j, p in enumerate(shown):
        cs = [c for (q, _), c in a.comparisons.items() if q == p and c.verdict != "reference"]
        off = (j - (len(shown) - 1) / 2) * 0.7 / max(len(shown), 1)  # side by side around N
        fixed = p.startswith("fixed-k")
        color = STYLE.get(p) or (plt.cm.Blues(0.35 + 0.65 * fixed_rank(p, shown)) if fixed else None)
        ax1.errorbar([x[c.load] + off for c in cs], [c.ratio.median for c in cs],
                     yerr=[[c.ratio.median - c.ratio.low for c in cs],
                           [c.ratio.high - c.ratio.median for c in cs]],
                     fmt="s" if fixed else "o", ms=3.5, capsize=2, lw=0.9 if fixed else 1.6,
                     color=color, label=p, alpha=0.8 if fixed else 1.0)
    ax1.axhspan(1 - thr, 1 + thr, color="grey", alpha=0.15, lw=0)
    ax1.axhline(1.0, color="black", lw=0.8)
    ax1.set(xlim=(-0.6, len(a.loads) - 0.4), xticks=list(x.values()),
            xticklabels=[f"N={n}\n{a.references.get(n, '')}" for n in a.loads],
            ylabel="ratio to the reference (family-wise CI)", title="Each policy against the best fixed k")
    ax1.legend(fontsize=7, ncol=2)
    _aa(ax2, a)
    _worst(ax3, a, policies)
    for ax in (ax1, ax2, ax3):
        ax.grid(alpha=0.3)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def fixed_rank(policy: str, policies: list[str]) -> float:
    """0 for the smallest fixed k shown, 1 for the largest: shades of one colour, apart from the
    named policies' colours."""
    fixed = [p for p in policies if p.startswith("fixed-k")]
    return fixed.index(policy) / max(len(fixed) - 1, 1)


def _aa(ax: Axes, a: Analysis) -> None:
    thr = a.settings.threshold
    cs = sorted(a.aa.items())
    ax.errorbar([str(n) for n, _ in cs], [c.ratio.median for _, c in cs],
                yerr=[[c.ratio.median - c.ratio.low for _, c in cs],
                      [c.ratio.high - c.ratio.median for _, c in cs]],
                fmt="o", capsize=3, color="black")
    ax.axhspan(1 - thr, 1 + thr, color="grey", alpha=0.15, lw=0)
    ax.axhline(1.0, color="black", lw=0.8)
    name = next((c.policy for _, c in cs), "no A/A")
    ax.set(xlabel="load N", ylabel="A/A ratio (family-wise CI)",
           title=f"Noise floor: {name}")


def _worst(ax: Axes, a: Analysis, policies: list[str]) -> None:
    ws = [a.worst[p] for p in policies if p in a.worst]
    ws.sort(key=lambda w: w.loss.median)
    ys = range(len(ws))
    ax.errorbar([w.loss.median * 100 for w in ws], list(ys),
                xerr=[[(w.loss.median - w.loss.low) * 100 for w in ws],
                      [(w.loss.high - w.loss.median) * 100 for w in ws]],
                fmt="o", capsize=3, color="black")
    ax.set_yticks(list(ys), [f"{w.policy} (N={w.at_load})" for w in ws], fontsize=7)
    ax.axvline(0.0, color="black", lw=0.8)
    ax.set(xlabel="worst-case loss, % (covers the worst load at 95%)", title="Worst case over loads")
