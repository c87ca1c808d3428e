"""The honor check's finding in words (tuner/core/honor.py holds the numbers and verdicts; pure).

One paragraph: whether the verified drafts follow the table (one-range tables and the edge
table), whether drafting does (two engines timed at the same k), and what a table still changes
in a step (T at k=0 against T at k=K).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tuner.core.honor import Drafted, DraftingCheck, HonorCell, Overall

__all__ = ["finding", "verification_change"]

REFERENCE_HINT = "`python -m benchmarks.honor --reference-k 1` times it against a K=1 engine"


def _batches(cells: Sequence[HonorCell]) -> str:
    return ", ".join(str(b) for b in sorted({c.B for c in cells}))


def _d(c: HonorCell) -> str:
    return "none" if c.drafts is None else f"{c.drafts:.2f}"


def _verified(cells: Sequence[HonorCell], K: int, verified: Overall) -> str:
    below = [c for c in cells if c.k < K and c.drafts is not None]
    if verified == "unknown":
        return (f"No steady decode step was measured below k={K}: whether the engine verifies the "
                "table's k is unknown.")
    per_k = []
    for k in sorted({c.k for c in below}):
        ds = [c.drafts for c in below if c.k == k and c.drafts is not None]
        span = f"{min(ds):.2f}" if max(ds) - min(ds) < 0.005 else f"{min(ds):.2f}-{max(ds):.2f}"
        per_k.append(f"{span} at k={k}")
    seen = f"{', '.join(per_k)} (B={_batches(below)})"
    if verified == "honored":
        return f"Verified drafts follow the table: drafts verified per request {seen}."
    if verified == "ignored":
        return (f"The engine IGNORES the table: it verified about K={K} drafts per request whatever "
                f"the table asked ({seen}); a swapped table changes no step.")
    off = [f"k={c.k} at B={c.B}: {_d(c)}" for c in cells if c.k < K and c.verdict != "honored"]
    return (f"Verified drafts follow the table only in part ({seen}); not where "
            + "; ".join(off[:6]) + ".")


def _edge(edge: Sequence[HonorCell]) -> str:
    if not edge:
        return ""
    shown = [f"{_d(c)} at B={c.B} (asked {c.k}{'' if c.verdict == 'honored' else ': ' + c.verdict})"
             for c in edge]
    return f"Edge table {edge[0].table}: verified drafts per request {', '.join(shown)}."


def _drafted(drafting: Sequence[DraftingCheck], K: int, drafted: Drafted, runner: str | None) -> str:
    if drafted == "unmeasured":
        if runner == "v2":
            return ("Drafting was not timed: on the V2 runner the drafter's k does not show in the "
                    "plugin's counters (under async scheduling the scheduler reserves the table's k "
                    f"whatever the drafter drafts); {REFERENCE_HINT}. On vLLM 0.26's V2 runner "
                    "(H200, EAGLE-3) it measured the drafter drafting its startup K every step "
                    "(docs/plugin.md).")
        return f"Drafting was not timed ({REFERENCE_HINT})."
    K_ref = drafting[0].K_ref
    each = "; ".join(f"B={c.B} k={c.k}: {(c.ratio - 1) * 100:+.1f}% [{(c.low - 1) * 100:+.1f}, "
                     f"{(c.high - 1) * 100:+.1f}]" for c in drafting)
    if drafted == "startup_k":
        return (f"Drafting does NOT follow the table: at the same (B, k) the K={K} engine's steps "
                f"are longer than a K={K_ref} engine's ({each}): the drafter drafts its startup "
                f"K={K} every step whatever the table says.")
    if drafted == "table_k":
        return (f"Drafting follows the table: at the same (B, k) the K={K} engine's steps cost what "
                f"a K={K_ref} engine's do ({each}).")
    return (f"Drafting: the K={K} and K={K_ref} engines' steps at the same k ({each}) tell neither "
            "the same drafting work nor more apart at this noise.")


def verification_change(cells: Sequence[HonorCell], K: int) -> list[tuple[int, float, float]]:
    """(B, T(B, 0), T(B, K)) at each B with both one-range cells: what the table changes in a
    step from k=K to k=0 (with a drafter that drafts its startup K: the verification work)."""
    T = {(c.B, c.k): c.step_ms for c in cells if c.step_ms}
    return [(B, T[(B, 0)], T[(B, K)]) for B in sorted({b for b, _ in T})
            if (B, 0) in T and (B, K) in T]


def _effect(cells: Sequence[HonorCell], K: int, drafted: Drafted) -> str:
    pairs = verification_change(cells, K)
    if not pairs:
        return ""
    each = ", ".join(f"{(t0 / tK - 1) * 100:+.0f}% at B={B}" for B, t0, tK in pairs)
    what = ("What the table still changes is the verification work" if drafted == "startup_k"
            else "What the table changes in a step")
    return f"{what}: a k=0 step against a k={K} step, {each}."


def finding(cells: Sequence[HonorCell], edge: Sequence[HonorCell],
            drafting: Sequence[DraftingCheck], K: int, verified: Overall, drafted: Drafted,
            runner: str | None) -> str:
    parts = [_verified([*cells, *edge], K, verified), _edge(edge),
             _drafted(drafting, K, drafted, runner), _effect(cells, K, drafted)]
    return " ".join(p for p in parts if p)
