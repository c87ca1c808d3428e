"""`tabletune status`: one screen of what a sidecar sees, from its GET /v1/state (pure).

The first thing an operator types: the engine and the table in force (and its version), the
recommended table where it differs, â per position with the evidence behind it, live against
profile step times, the last decisions, readiness and the age of the last scrape. ``render``
takes the state, parsed with the model the sidecar serves it from (sidecar/state.SidecarState),
and returns text: aligned columns with box rules for a terminal, plain ``key: value`` lines and
tab-separated rows when piped (grep- and cut-friendly). A table shows its first RANGES_SHOWN
ranges and "… N more".
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sidecar.state import BorrowedError, ModelError, SidecarState

__all__ = ["RANGES_SHOWN", "render"]


def _table(rows: Sequence[Sequence[Any]], tty: bool) -> list[str]:
    cells = [[("-" if v is None else str(v)) for v in row] for row in rows]
    if not tty:
        return ["\t".join(row) for row in cells]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    line = "  ".join("─" * w for w in widths)
    out = ["  ".join(v.ljust(w) for v, w in zip(cells[0], widths, strict=True)), line]
    out += ["  ".join(v.rjust(w) if _numeric(v) else v.ljust(w)
                      for v, w in zip(row, widths, strict=True)) for row in cells[1:]]
    return out


def _numeric(v: str) -> bool:
    try:
        float(v.rstrip("%x"))
    except ValueError:
        return False
    return True


def _when(t: float | None, now: float) -> str:
    if t is None:
        return "never"
    stamp = datetime.fromtimestamp(t, UTC).strftime("%H:%M:%S")
    return f"{stamp} UTC ({now - t:.0f} s ago)"


def _ago(seconds: float | None) -> str:
    return "never" if seconds is None else f"{seconds:.1f} s ago"


# ranges shown per table: a table of thousands of ranges must not flood the screen
RANGES_SHOWN = 8


def _ranges(table: list[list[int]] | None) -> str:
    if not table:
        return "unknown"
    shown = "  ".join(f"B {s}-{e}: k={k}" for s, e, k in table[:RANGES_SHOWN])
    more = len(table) - RANGES_SHOWN
    return shown + (f"  … {more} more" if more > 0 else "")


def _pairs(e: ModelError | BorrowedError) -> str:
    runs = f" ({e.unpaired_runs} runs unpaired)" if e.unpaired_runs else ""
    brief = "" if e.lined_up or e.pairable else " (held too briefly for a run)"
    entered = ("" if e.startable or e.pairable or not e.lined_up
               else " (entered under another k: no run can start)")
    return ("yes" if e.pairable else "no: the load passes through") + runs + brief + entered


def _section(title: str, tty: bool) -> str:
    return f"\n{title}" if tty else f"\n# {title}"


def render(state: SidecarState, url: str, tty: bool, now: float | None = None) -> str:
    """The status screen for a sidecar's /v1/state (see the module)."""
    now = time.time() if now is None else now
    ready = "ready" if state.ready else f"NOT READY ({state.ready_reason})"
    mode = "dry-run (recommends only)" if state.dry_run else "pushing tables"
    scrape, admin = _ago(state.last_scrape_age_s), _ago(state.admin_age_s)
    bias = state.bias_note
    lines = [f"sidecar {url}: {ready}, {mode}",
             f"counts from: {state.source or 'no scrape yet'}" + (f" — {bias}" if bias else ""),
             f"last complete scrape: {scrape}; admin endpoint answered: {admin}",
             f"engine table v{state.engine_table_version}: {_ranges(state.engine_table)}"]
    if state.recommended_table and state.recommended_table != state.engine_table:
        lines.append(f"recommended:     {_ranges(state.recommended_table)}")
    hold = state.foreign_hold
    if hold:
        lines.append(f"holding off: someone else wrote v{hold.version}; "
                     f"{hold.remaining_s:.0f} s left")
    bad = {k: v for k, v in state.conditions.items() if v != "ok"}
    if bad:
        lines.append("conditions: " + ", ".join(f"{k}={v}" for k, v in sorted(bad.items())))

    est = state.estimator
    prior, a_hat = state.prior_acceptance or est.prior, state.a_hat
    used = state.a_used or a_hat
    drafted, accepted = est.drafted, est.accepted
    lines.append(_section(f"acceptance (prior weight w = {est.w:g} drafts)", tty))
    # live: since the last halving
    rows: list[list[Any]] = [["position", "â used", "â", "prior", "live kept", "live drafted"]]
    for i, a in enumerate(a_hat):
        rows.append([i + 1, f"{used[i]:.3f}" if i < len(used) else None, f"{a:.3f}",
                     f"{prior[i]:.3f}" if i < len(prior) else None,
                     f"{accepted[i]:.0f}" if i < len(accepted) else None,
                     f"{drafted[i]:.0f}" if i < len(drafted) else None])
    lines += _table(rows, tty) if len(rows) > 1 else ["no estimate yet"]

    drift = state.drift
    lines.append(_section(f"step times, live against the profile (w_T = "
                          f"{state.step_times.prior_steps:g} steps)", tty))
    rows = [["B", "k", "live ms", "profile ms", "ratio", "live steps"]]
    rows += [[c.batch_size, c.k, f"{c.live_ms:.2f}", f"{c.profile_ms:.2f}",
              f"{c.ratio:.2f}x", f"{c.steps:.0f}"] for c in drift]
    lines += _table(rows, tty) if drift else ["no live step times yet (the plugin's series, "
                                              "5 steps a cell)"]

    lines.append(_section("the model against the engine (a switch by the model must beat the "
                          "error)", tty))
    rows = [["B up to", "k", "model tok/s", "measured tok/s", "error", "steps", "duels pair"]]
    rows += [[e.batch_size, e.k, f"{e.predicted_tokens_per_s:.0f}",
              f"{e.realized_tokens_per_s:.0f}", f"{e.error:.1%}", f"{e.steps:.0f}",
              _pairs(e)]
             for e in state.model_error]
    lines += _table(rows, tty) if state.model_error else [
        "not measured yet (the plugin's step ring, 32 steady steps of the table's k a bucket)"]
    lines += [f"B up to {b.batch_size}: too few steps, borrows {b.error:.1%} (between "
              f"{b.between[0]} and {b.between[1]}); duels pair: {_pairs(b)}"
              for b in state.borrowed_error]
    # once pairs have checked the model's ratios, that error bounds it (sidecar/model_error.py)
    checked = state.last_decision.model_ratio_error if state.last_decision else None
    if checked is not None:
        lines.append(f"its ratios, checked by pairs: off at most {checked:.1%} (a 90% bound; "
                     "this, not the error above, is what a switch by the model must beat)")

    lines.append(_section("duels: the smallest gain each finds by max_pairs pairs (in half its "
                          "runs; smaller ends as a tie)", tty))
    rows = [["B up to", "k vs", "pairs", "sd", "smallest gain"]]
    rows += [[p.batch_size, f"{p.k} vs {p.ref}", f"{p.pairs}/{p.max_pairs}", f"{p.sd:.3f}",
              f"{p.smallest_gain:.1%}"] for p in state.duel_power]
    lines += _table(rows, tty) if state.duel_power else [
        "no comparison with enough pairs yet (24 paired runs a bucket and k)"]
    ex = state.exploration
    asked = "; ".join(f"B {lo}-{hi}: k {', '.join(map(str, ks))}" for lo, hi, ks in ex.duels)
    lines.append(f"asked of the plugin: {asked or 'no duels'}{' (urgent share)' if ex.urgent else ''}; "
                 f"rotation over {'k ' + ', '.join(map(str, ex.rotation)) if ex.rotation else 'every k'}")

    decisions = state.recent_decisions
    lines.append(_section(f"last decisions (traffic changes {state.traffic_changes}, "
                          f"rollbacks {state.guardrail.rollbacks})", tty))
    rows = [["when", "outcome", "trigger", "table", "reason"]]
    rows += [[_when(d.time, now), d.outcome, d.trigger, _ranges(d.new_table),
              d.reason[:80]] for d in reversed(decisions)]
    lines += _table(rows, tty) if decisions else ["no rebuild yet"]
    for h in state.guardrail.held_out:
        lines.append(f"held out by the guardrail until {_when(h.until, now)}: {_ranges(h.table)}")
    return "\n".join(lines) + "\n"
