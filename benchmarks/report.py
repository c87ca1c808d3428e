"""Benchmark outputs: cells.csv (every cell), summary.md, throughput-and-loss PNG."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.analysis import Summary, markdown, steps_markdown

STYLE = {"nospec": ("#888888", ":"), "documented": ("#d62728", "-"), "tuned": ("#2ca02c", "-"),
         "quarter": ("#ff7f0e", "--"), "turbospec-style": ("#9467bd", "-."),
         "nightjar-style": ("#e377c2", "-."),
         "sidecar-from-quarter": ("#17becf", "-"), "sidecar-from-documented": ("#8c564b", "-")}


def plot(s: Summary, path: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.6))
    for p in s.policies:
        color, ls = STYLE.get(p, (None, "-"))
        lw = 0.8 if p.startswith("fixed-k") else 1.8
        loads = [n for n in s.loads if (p, n) in s.median]
        ax1.plot(loads, [s.median[(p, n)] for n in loads], ls, color=color, lw=lw, marker="o",
                 ms=3, label=p)
        if p in s.worst:
            ax2.plot(loads, [s.loss[(p, n)] * 100 for n in loads], ls, color=color, lw=lw,
                     marker="o", ms=3, label=f"{p} (worst {s.worst[p] * 100:.1f}%)")
    ax1.set(xscale="log", xlabel="open requests N", ylabel="output tokens/s",
            title="Throughput per policy")
    ax2.set(xscale="log", xlabel="open requests N", ylabel="% below the best fixed k",
            title="Loss against the best fixed k at each load")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write(s: Summary, out: Path, title: str, meta: dict[str, object]) -> None:
    png = plot(s, out / "throughput.png", title)
    text = [f"# {title}", "", "```", json.dumps(meta, indent=1), "```", "",
            f"Best single fixed k (chosen after the fact): **{s.best_fixed_k}**", "",
            markdown(s), f"![throughput]({png.name})", "", steps_markdown(s)]
    (out / "summary.md").write_text("\n".join(text))
