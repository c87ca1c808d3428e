#!/bin/bash
# TableTune on a GPU machine with vLLM 0.26.0 unpacked in /tmp/site (see ../shared/gpu/README.md:
# `bash ../shared/gpu/prepare.sh` here, then `.gpu/bin/device_run.sh recv unpack` there).
# Run from the repo root on the GPU machine:  bash benchmarks/gpu/h200.sh STAGE [STAGE...]
#   install  the project (no deps, no network) into /tmp/tt, missing wheels from .whl/ into /tmp/whl
#   tune     tabletune tune on the 32B-shaped dummy model, ngram K=3, emulated a=0.75/0.55/0.40
#            (resumable: a stage killed by its time budget continues on the next call)
#   bench    tabletune bench against that profile
# env: MODEL_DIR (model32), OUT (results), TUNE_S / BENCH_S (time budgets), LOADS, POLICIES
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O" runs/h200
export PYTHONPATH=/tmp/site:/tmp/tt:/tmp/whl HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
       VLLM_NO_USAGE_STATS=1 VLLM_USE_FLASHINFER_SAMPLER=0 VLLM_CACHE_ROOT=/tmp/vllm_cache \
       PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false TABLETUNE_CACHE=/tmp/tabletune
MODEL=/tmp/${MODEL_DIR:-model32}
EMULATE=${EMULATE:-0.75,0.55,0.40}
ENGINE=(--engine-arg=--load-format=dummy --engine-arg=--dtype=bfloat16
        --engine-arg=--gpu-memory-utilization=${GPU_UTIL:-0.85} --engine-arg=--max-model-len=2048
        --engine-arg=--attention-backend=FLASH_ATTN)
keep() { cp -r "$@" "$O/" 2>/dev/null; true; }
for stage in "$@"; do case $stage in
 install)
  python3 -m pip install -q --no-deps --no-build-isolation --no-index --target /tmp/tt . 2>&1 | tail -3
  [ -d .whl ] && python3 -m pip install -q --no-deps --no-index --target /tmp/whl .whl/*.whl 2>&1 | tail -3
  python3 -c "import tuner.cli, sidecar.settings, vllm_patch.plugin; print('tabletune importable')" ;;
 tune)
  timeout "${TUNE_S:-520}" python3 -m tuner.cli tune --model "$MODEL" -K 3 --max-num-seqs 256 \
     --grid "${GRID:-1,4,8,16,32,64,96,128,192,256}" --repeats "${REPEATS:-2}" --decode-tokens 33 \
     --num-prompts 64 --emulate "$EMULATE" --out runs/h200/profile.json "${ENGINE[@]}" 2>&1 \
     | tr '\r' '\n' | grep -v "cell-rep/s\]$" | tail -40
  keep runs/h200/profile.json runs/h200/profile-report.md runs/h200/profile-report.png ;;
 bench)
  timeout "${BENCH_S:-540}" python3 -m tuner.cli bench --profile runs/h200/profile.json \
     --loads "${LOADS:-1,8,32,64,128,256}" --policies "${POLICIES:-fixed-k*,documented,tuned,nospec}" \
     --repeats 1 --warmup-s 2 --window-s 4 --max-tokens 128 --emulate "$EMULATE" \
     --out runs/h200/bench "${ENGINE[@]}" 2>&1 | tr '\r' '\n' | grep -v "cell/s\]$" | tail -40
  keep runs/h200/bench/cells.csv runs/h200/bench/summary.md runs/h200/bench/throughput.png ;;
 *) echo "unknown stage $stage" ;;
esac; done
ls runs/logs 2>/dev/null | tail -3; for f in $(ls -t runs/logs/vllm-*.log 2>/dev/null | head -1); do grep -E "Error|error" "$f" | tail -5; done
