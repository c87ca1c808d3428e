#!/usr/bin/env bash
# `make bench-suite`: the CPU benchmark suite on the embedded tiny model (2 cores: ~45 minutes; the
# bench stops itself after BENCH_BUDGET_S, default 20 minutes).
# Results land in benchmarks/results/cpu-tiny/ (commit them with the command line below).
set -euo pipefail
OUT=${OUT:-benchmarks/results/cpu-tiny}
TEMP=${TEMP:-0}     # greedy on repetitive prompts: the drafter's real acceptance is ~1.0 ...
EMULATE=${EMULATE:-0.6,0.35,0.2}  # ... and the plugin's emulator replays a moderate profile, under
                                  # which the best k changes with load (sampling at T=1 gave a1=0.02)
TT=${TT:-.venv/bin/tabletune}
BENCH=${BENCH:-.venv/bin/python -m benchmarks}
PY=${PY:-.venv/bin/python}
mkdir -p "$OUT"
echo "== tune"; $TT tune -K 3 --max-num-seqs 32 --temperature "$TEMP" --repeats 2 --emulate "$EMULATE" --out "$OUT/profile.json"
echo "== bench"; $BENCH --profile "$OUT/profile.json" --loads "${LOADS:-1,4,16,32}" \
    --policies "${POLICIES:-fixed-k*,documented,tuned,quarter,aa:fixed-kK,nospec,sidecar-from-quarter}" \
    --temperature "$TEMP" --emulate "$EMULATE" --window-s "${WINDOW_S:-2}" \
    --budget-s "${BENCH_BUDGET_S:-1200}" --out "$OUT/bench"
echo "== workload switch"; $PY -m benchmarks.switch --profile "$OUT/profile.json" --out "$OUT/switch"
echo "== overhead"; $PY -m benchmarks.overhead --out "$OUT/overhead"
