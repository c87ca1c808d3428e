#!/usr/bin/env bash
# `make bench`: the CPU benchmark suite on the embedded tiny model (2 cores: ~45 minutes).
# Results land in benchmarks/results/cpu-tiny/ (commit them with the command line below).
set -euo pipefail
OUT=${OUT:-benchmarks/results/cpu-tiny}
TEMP=${TEMP:-1.0}   # sampled: moderate acceptance (a1 ~ 0.5), so the best k changes with load
TT=${TT:-.venv/bin/tabletune}
PY=${PY:-.venv/bin/python}
mkdir -p "$OUT"
echo "== tune"; $TT tune -K 3 --max-num-seqs 32 --temperature "$TEMP" --repeats 2 --out "$OUT/profile.json"
echo "== bench"; $TT bench --profile "$OUT/profile.json" --loads "${LOADS:-1,2,4,8,16,32}" --repeats 2 \
    --temperature "$TEMP" --window-s "${WINDOW_S:-6}" --out "$OUT"
echo "== workload switch"; $PY -m benchmarks.switch --profile "$OUT/profile.json" --out "$OUT/switch"
echo "== overhead"; $PY -m benchmarks.overhead --out "$OUT/overhead"
