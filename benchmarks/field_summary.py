"""The field bench's figures from its raw runs (pure): field.json -> summary.json.

Per traffic shape, over its blocks (each block ran the shape once under every policy, in a
shuffled order, on the same requests), what users of vLLM's benchmark client read:

- per policy: the medians over blocks of output throughput (the client's tokens over its
  durations), the engine's own generated tokens over the same durations (the cross-check),
  TTFT / TPOT / ITL at p50 and p99, the acceptance length vLLM's client reports, and the
  request goodput under the SLOs given (`--goodput`);
- comparisons, paired by block: each policy that is not a fixed k against every fixed k and
  the documented table, in output throughput (above 1 is faster) and in p50 TPOT (below 1 is
  faster): the geometric mean of the per-block ratios with its 95% Student's t-interval on
  their logs, and a word: `faster`, `slower`, or `same within noise` (the interval holds 1);
- against the best fixed k, which the data cannot name, in both metrics: "faster" only if
  faster than *every* fixed k (an intersection-union test, each at 5%), "slower" only if
  slower than some fixed k with the 5% split among them (Bonferroni). The figure is the
  per-k ratio against the fixed k that did best, its interval from the per-k ends (the
  least favourable lower end at 5% each, the least favourable upper end at Bonferroni's level).
  Under arrival-driven traffic below saturation every table delivers the arrivals' tokens, so
  output throughput is flat there and TPOT is the figure that moves.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks.noharm_summary import (ALPHA, Run, acceptance_length, arm_throughput,
                                       engine_throughput, latency, mean_of, median,
                                       ratio_interval)
from benchmarks.stats import is_fixed, policy_key

METRICS: dict[str, tuple[Callable[[Run], float], bool]] = {
    # name: (per-run figure, higher is better)
    "output_throughput": (arm_throughput, True),
    "p50_tpot": (mean_of("p50_tpot_ms"), False),
}
SAME = "same within noise"


def by_block(runs: Sequence[Run], shape: str) -> dict[tuple[int, int], dict[str, Run]]:
    """(part, block) -> policy -> its run of `shape`."""
    out: dict[tuple[int, int], dict[str, Run]] = {}
    for r in runs:
        if r["shape"] == shape:
            out.setdefault((r["part"], r["block"]), {})[r["arm"]] = r
    return dict(sorted(out.items()))


def pairs_of(blocks: dict[tuple[int, int], dict[str, Run]], versus: str,
             policy: str) -> list[tuple[Run, Run]]:
    return [(b[versus], b[policy]) for b in blocks.values() if versus in b and policy in b]


def word(ci: Sequence[float | None], higher_is_better: bool) -> str | None:
    lo, hi = ci
    if lo is None or hi is None:
        return None
    if lo > 1.0:
        return "faster" if higher_is_better else "slower"
    if hi < 1.0:
        return "slower" if higher_is_better else "faster"
    return SAME


def request_goodput(run: Run) -> float:
    """Requests meeting every SLO per second over the shape's runs (None: no SLO given)."""
    got = [(p["client"].get("request_goodput"), p["client"]["duration"]) for p in run["phases"]]
    if any(g is None for g, _ in got):
        return math.nan
    seconds = sum(d for _, d in got)
    return sum(g * d for g, d in got) / seconds if seconds > 0 else math.nan


def policy_figures(arms: Sequence[Run]) -> dict[str, Any]:
    return {"tokens_per_s": median([arm_throughput(r) for r in arms]),
            "engine_tokens_per_s": median([engine_throughput(r) for r in arms]),
            "latency_ms": latency(arms), "acceptance_length": acceptance_length(arms),
            "request_goodput": median([request_goodput(r) for r in arms])}


def compare(blocks: dict[tuple[int, int], dict[str, Run]], policy: str, versus: str,
            metric: str, alpha: float = ALPHA) -> dict[str, Any]:
    of, higher = METRICS[metric]
    got = ratio_interval(pairs_of(blocks, versus, policy), of, alpha)
    return {"policy": policy, "versus": versus, "metric": metric, "ratio": got["ratio"],
            "ci": got["ci"], "blocks": got["n"], "word": word(got["ci"], higher)}


def versus_best_fixed(blocks: dict[tuple[int, int], dict[str, Run]], policy: str,
                      fixed: Sequence[str], metric: str = "output_throughput") -> dict[str, Any] | None:
    """`policy` against the best fixed k in `metric` (see the module). For a metric where lower
    is better (TPOT) the figures are read as their inverses (a rate), tested, and turned back."""
    if not fixed:
        return None
    higher = METRICS[metric][1]
    each = [compare(blocks, policy, k, metric) for k in fixed]
    wide = [compare(blocks, policy, k, metric, ALPHA / len(fixed)) for k in fixed]
    if any(c["ratio"] is None for c in each):
        return None

    def rate(v: float) -> float:  # the figure as "higher is better"
        return v if higher else 1.0 / v

    worst = min(each, key=lambda c: rate(c["ratio"]))
    lows = [None if c["ci"][0] is None else rate(c["ci"][0 if higher else 1]) for c in each]
    highs = [None if c["ci"][0] is None else rate(c["ci"][1 if higher else 0]) for c in wide]
    if None in lows or None in highs:
        ci: list[float | None] = [None, None]
        said = None
    else:
        lo, hi = min(v for v in lows if v is not None), min(v for v in highs if v is not None)
        said = "faster" if lo > 1.0 else "slower" if hi < 1.0 else SAME
        ci = [round(lo, 4), round(hi, 4)] if higher else [round(1.0 / hi, 4), round(1.0 / lo, 4)]
    return {"policy": policy, "metric": metric, "ratio": worst["ratio"], "ci": ci,
            "closest": worst["versus"], "word": said}


def shape_summary(runs: Sequence[Run], shape: str, policies: Sequence[str]) -> dict[str, Any]:
    blocks = by_block(runs, shape)
    complete = [b for b in blocks.values() if all(p in b for p in policies)]
    fixed = sorted((p for p in policies if is_fixed(p)), key=policy_key)
    others = [p for p in policies if not is_fixed(p)]
    references = [*fixed, *(["documented"] if "documented" in policies else [])]
    comparisons = [compare(blocks, p, v, m) for p in others for v in references if v != p
                   for m in METRICS]
    return {"shape": shape, "blocks": len(complete),
            "policies": {p: policy_figures([b[p] for b in blocks.values() if p in b])
                         for p in policies},
            "comparisons": comparisons,
            "versus_best_fixed": [v for p in others for m in METRICS
                                  if (v := versus_best_fixed(blocks, p, fixed, m)) is not None]}


def summarize(record: dict[str, Any]) -> dict[str, Any]:
    """summary.json from field.json's record."""
    meta = record["meta"]
    names = [s["name"] for s in meta["shapes"]]
    policies = list(meta["policies"])
    shapes = [shape_summary(record["runs"], name, policies) for name in names]
    return {"shapes": shapes, "policies": policies, "tables": meta.get("tables", {}),
            "ci_level": 1 - ALPHA, "blocks": min((s["blocks"] for s in shapes), default=0),
            "parts": len(meta.get("parts", [])), "goodput_slo": meta.get("goodput"),
            "statistic": "geometric mean of per-block ratios policy / reference (output "
                         "throughput; p50 TPOT); 95% Student's t-interval on their logs; "
                         "against the best fixed k an intersection-union test",
            "command": meta.get("command")}
