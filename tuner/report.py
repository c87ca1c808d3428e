"""The tuning report: a Markdown summary and one PNG a person can read at a glance.

PNG panels: (1) measured T(B, k) per k with each cell's interval (its ci_level); (2) G(B, k) per k with
the chosen k shaded per B;
(3) predicted goodput loss of vLLM's documented table and of the tuned table against the best k;
(4) where samples record when they started: each sample's step time over its cell's median,
against time, so the host's drift and a slow stretch that hit one k show at a glance.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tuner import findings
from tuner.core.goodput import goodput, interpolate_step_times, predicted_loss
from tuner.core.honor import HonorCheck
from tuner.core.profile import Profile
from tuner.core.samples import usable
from tuner.core.table import Table, documented_table

COLORS = ["#444444", "#1f77b4", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf",
          "#bcbd22"]


def _series(profile: Profile) -> tuple[np.ndarray, np.ndarray, Table, Table, np.ndarray, np.ndarray]:
    assert profile.acceptance is not None and profile.table is not None
    a = profile.acceptance.a
    T = interpolate_step_times(profile.grid, profile.step_time_matrix(), profile.engine.max_num_seqs)
    G = goodput(T, a)
    tuned = Table.from_list(profile.table)
    doc = documented_table(profile.K, profile.engine.max_num_seqs)
    return T, G, tuned, doc, predicted_loss(tuned, T, a, profile.K), predicted_loss(doc, T, a, profile.K)


def over_time(profile: Profile) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(minutes since the first sample, step time / its cell's median over the usable samples,
    as the cell records it, k) for samples that record when they started; empty arrays for
    older profiles."""
    timed = [s for s in profile.samples if s.started is not None]
    if not timed:
        return np.empty(0), np.empty(0), np.empty(0, dtype=int)
    median = {key: float(np.median([x.step_ms for x in usable(v)]))
              for key, v in profile.samples_by_cell().items()}
    t0 = min(s.started for s in timed if s.started is not None)
    return (np.array([((s.started or t0) - t0) / 60 for s in timed]),
            np.array([s.step_ms / median[(s.B, s.k)] for s in timed]),
            np.array([s.k for s in timed]))


def plot(profile: Profile, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    T_grid = profile.step_time_matrix(monotone=False)  # as measured
    _, G, tuned, doc, loss_tuned, loss_doc = _series(profile)
    B = np.arange(1, profile.engine.max_num_seqs + 1)
    minutes, ratio, sample_k = over_time(profile)
    panels = 4 if minutes.size else 3
    fig, axes = plt.subplots(1, panels, figsize=(5.4 * panels, 4.6))
    lo, hi = (profile._grid_matrix(v) for v in ("ci_low_ms", "ci_high_ms"))
    for k in range(profile.K + 1):
        err = np.array([T_grid[:, k] - lo[:, k], hi[:, k] - T_grid[:, k]])
        axes[0].errorbar(profile.grid, T_grid[:, k], yerr=np.nan_to_num(np.clip(err, 0, None)),
                         fmt="o-", ms=3, capsize=2, color=COLORS[k % 9], label=f"k={k}")
        axes[1].plot(B, G[:, k], color=COLORS[k % 9], label=f"k={k}")
    for b in profile.graph_boundaries():  # where steps leave the CUDA graphs / token budget
        axes[0].axvline(b.B_last + 0.5, color=COLORS[b.k % 9], ls=":", lw=1)
    axes[0].set(title=f"Measured step time T(B, k), {_levels(profile)} intervals; dotted: graph limits",
                xlabel="batch size B", ylabel="ms / step")
    ks = np.asarray(tuned.dense(profile.engine.max_num_seqs, profile.K)[1:])
    for start, end, k in tuned.to_list():
        axes[1].axvspan(start - 0.5, end + 0.5, color=COLORS[k % 9], alpha=0.12, lw=0)
        axes[1].text((start + end) / 2, G.max() * 0.97, f"k={k}", ha="center", fontsize=8)
    axes[1].plot(B, G[np.arange(len(B)), ks], "k--", lw=1, label="tuned table")
    axes[1].set(title="Goodput G(B, k) = B·τ(k)/T(B, k); shaded: tuned k", xlabel="batch size B",
                ylabel="tokens / ms")
    axes[2].plot(B, loss_doc * 100, color="#d62728", label=f"documented {doc.to_list()}")
    axes[2].plot(B, loss_tuned * 100, color="#2ca02c", label=f"tuned {tuned.to_list()}")
    axes[2].set(title="Predicted loss vs the best k at each B", xlabel="batch size B", ylabel="%")
    if minutes.size:
        for k in range(profile.K + 1):
            mine = sample_k == k
            axes[3].plot(minutes[mine], ratio[mine], "o", ms=3, color=COLORS[k % 9], label=f"k={k}")
        axes[3].axhline(1.0, color="k", lw=0.8)
        axes[3].set(title="Each repeat over its cell's median, in time order",
                    xlabel="minutes into the sweep", ylabel="step time / cell median")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"TableTune — {profile.engine.model}, {profile.engine.method}, "
                 f"K={profile.K}, {profile.engine.hardware}", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _levels(profile: Profile) -> str:
    """The cells' interval levels in words: profiles before schema 2 stored 95% ones."""
    levels = sorted({c.ci_level or 0.95 for c in profile.cells})
    return "/".join(f"{x * 100:.4g}%" for x in levels) or "95%"


def markdown(profile: Profile, png_name: str) -> str:
    T_grid = profile.step_time_matrix(monotone=False)  # as measured
    _, _, tuned, doc, loss_tuned, loss_doc = _series(profile)
    acc = profile.acceptance
    assert acc is not None
    gap = findings.client_engine_gap(profile)
    e = profile.engine
    lines = [f"# TableTune report: {e.model}", "",
             f"- engine: {e.vllm_version}, {e.hardware}, method `{e.method}`, K={e.num_speculative_tokens}, "
             f"max_num_seqs={e.max_num_seqs}, temperature {e.temperature}",
             f"- acceptance a_i ({acc.source}, {acc.num_prompts} prompts): "
             + ", ".join(f"a{i + 1}={x:.3f}" for i, x in enumerate(acc.a))
             + (f" — {acc.note}" if acc.note else ""),
             "- step times: " + (
                 "pure decode steps (reject-all, the paper's method)" if profile.workload is None else
                 f"steady serving of {profile.workload.prompt_tokens}-token prompts and "
                 f"{profile.workload.output_tokens}-token outputs: each step carries the prefill "
                 "of the requests that replace finished ones"),
             f"- **tuned table**: `{tuned.to_list()}` (splits only where a k's gain beats the tie "
             f"of {profile.tie * 100:.1f}% at {profile.confidence * 100:.0f}% confidence; ranges of "
             f"at least {profile.min_width} batch sizes unless a measured cliff forces one)",
             f"- speculative config: `{profile.speculative_config(tuned)}`",
             f"- predicted worst-case loss vs the best k: tuned {loss_tuned.max() * 100:.1f}%, "
             f"documented `{doc.to_list()}` {loss_doc.max() * 100:.1f}%",
             "- client vs engine step time, median gap: "
             + ("n/a" if gap is None else f"{gap * 100:.1f}%"),
             "- tuning wall time: " + ", ".join(f"{k} {v:.0f}s" for k, v in profile.timings_s.items()),
             "", f"![report]({png_name})", "",
             "## Recommendation", "", f"**{profile.recommendation().summary}**", "",
             "## Why this table", ""] + [f"- {line}" for line in findings.edge_lines(profile.build())] + [
             "", f"Step times in ms, estimate [{_levels(profile)} interval]:", "",
             "| B | " + " | ".join(f"T(k={k}) ms" for k in range(profile.K + 1))
             + " | tuned k | loss tuned | loss documented |",
             "|---" * (profile.K + 5) + "|"]
    lo, hi = (profile._grid_matrix(v) for v in ("ci_low_ms", "ci_high_ms"))

    def cell(g: int, k: int) -> str:
        ci = "" if np.isnan(lo[g, k]) else f" [{lo[g, k]:.2f}, {hi[g, k]:.2f}]"
        return f"{T_grid[g, k]:.2f}{ci}"

    for g, B in enumerate(profile.grid):
        lines.append(f"| {B} | " + " | ".join(cell(g, k) for k in range(profile.K + 1))
                     + f" | {tuned.k_at(B)} | {loss_tuned[B - 1] * 100:.1f}%"
                     + f" | {loss_doc[B - 1] * 100:.1f}% |")
    cells = [c for c in profile.cells]
    if cells:
        lines += ["", f"Per-cell measuring time: median {np.median([c.wall_s for c in cells]):.1f}s "
                      f"over {len(cells)} cells ({profile.repeats} repeats each or more)."]
    noise = [x for x in (findings.interval_line(profile), findings.noise_line(profile)) if x]
    if noise:
        lines += ["", f"Noise: {'; '.join(noise)}."]
    limits = profile.graph_boundaries()
    if limits:
        lines += ["", "CUDA-graph and token-budget limits the engine reported: "
                  + "; ".join(f"k={b.k} past B={b.B_last} ({b.tokens} tokens)" for b in limits)
                  + " (both sides measured; table edges within 10% snap onto them)."]
    warnings = (findings.grid_warnings(profile) + findings.cliff_lines(profile)
                + findings.batch_warnings(profile))
    if warnings:
        lines += ["", "## Warnings", ""] + [f"- {w}" for w in warnings]
    if profile.preflight:
        pf = profile.preflight
        lines += ["", "## Preflight: no speculation vs the table's k=0", "",
                  "| B | no speculation ms | k=0 ms |", "|---|---|---|"]
        lines += [f"| {B} | {n:.2f} | {z:.2f} |" for B, n, z in zip(pf.B, pf.nospec_ms, pf.k0_ms)]
        lines += [""] + [f"- {w}" for w in pf.warnings]
    if profile.honor:
        lines += honor_lines(profile.honor)
    return "\n".join(lines) + "\n"


def honor_lines(h: HonorCheck) -> list[str]:
    """The honor check: its finding, then the drafts each request verified per (B, k asked)."""
    lines = ["", "## Preflight: does the engine honor the table?", "",
             f"Verified drafts: **{h.verified}**; drafting: **{h.drafted}**. {h.finding}", "",
             "Drafts verified per request (tokens / B - 1 on steady decode steps), per k the "
             "one-range table asked:", "",
             "| B | " + " | ".join(f"k={k}" for k in range(h.K + 1)) + " |", "|---" * (h.K + 2) + "|"]
    by = {(c.B, c.k): c for c in h.cells}
    for B in sorted({c.B for c in h.cells}):
        row = [by.get((B, k)) for k in range(h.K + 1)]
        lines.append(f"| {B} | " + " | ".join(
            "" if c is None or c.drafts is None else
            f"{c.drafts:.2f}" + ("" if c.verdict == "honored" else f" ({c.verdict})") for c in row) + " |")
    lines += [""] if h.edge or h.drafting else []
    lines += [f"- edge table {c.table}, B={c.B}: asked {c.k}, verified {c.drafts} ({c.verdict}, "
              f"{c.steps} steps, {c.step_ms} ms a step)" for c in h.edge]
    lines += [f"- K={d.K} vs K={d.K_ref} engine at B={d.B}, k={d.k}: {d.ratio:.3f} [{d.low:.3f}, "
              f"{d.high:.3f}] ({d.verdict})" for d in h.drafting]
    return lines


def write_report(profile: Profile, stem: Path) -> tuple[Path, Path]:
    png = plot(profile, stem.with_name(stem.name + "-report.png"))
    md = stem.with_name(stem.name + "-report.md")
    md.write_text(markdown(profile, png.name))
    return md, png
