#!/usr/bin/env bash
# `make bench`: the field bench's CPU preset on the embedded tiny model (issue #35): every fixed
# k, vLLM's documented table, the tuned table and the sidecar from the quarter-shrunk table,
# measured by vLLM's own benchmark client under closed loops at 1, 4 and 16 and bursty Poisson
# arrivals; 6 blocks (~20 minutes on 2 cores; it stops before a block that would pass BUDGET_S).
# PROMPTS=your.jsonl runs it on your own prompts (vLLM's custom dataset) instead of random ones.
# Results: $OUT/summary.json and README-ready figures (the committed run: benchmarks/results/cpu-tiny-field/).
set -euo pipefail
OUT=${OUT:-runs/cpu-field}
PY=${PY:-.venv/bin/python}
TT=${TT:-.venv/bin/tabletune}
mkdir -p "$OUT"
$TT table benchmarks/results/cpu-tiny/profile.json --save "$OUT/profile.json" | tail -1
$PY -m benchmarks.field --profile "$OUT/profile.json" --out "$OUT" \
    --policies "${POLICIES:-fixed-k*,documented,tuned,sidecar-from-quarter}" \
    --shapes "${SHAPES:-burst,poisson}" --concurrency "${CONCURRENCY:-1,4,16}" --rates "${RATES:-6}" \
    --run-s 12 --idle-s 1 --goodput "${SLO:-tpot:20}" --blocks "${BLOCKS:-6}" \
    --budget-s "${BUDGET_S:-2700}" ${PROMPTS:+--prompts "$PROMPTS"} "$@"
