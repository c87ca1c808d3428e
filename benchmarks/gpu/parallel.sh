#!/bin/bash
# Run h200.sh stages for several settings side by side, one GPU each, on a machine with as many
# GPUs as settings (e.g. the lent 2 x H200): device time is counted per machine, not per GPU.
#   bash benchmarks/gpu/parallel.sh "STAGES" SETTING_FOR_GPU0 [SETTING_FOR_GPU1 ...]
# A setting may name fallbacks, SETTING|FALLBACK: when the stages leave no profile for SETTING
# (e.g. its engine does not start), the same GPU goes on with FALLBACK.  Each GPU's log is
# $OUT/gpuN.log; at the end everything under $OUT is packed into $OUT/results.tar.gz, since only
# 8 files come back from the lent machine.  Per-setting env (e.g. AB_ORDER) can be given as
# SETTING@VAR=value, e.g. 3b-ngram-v1@AB_ORDER=on,off.  BUDGET_S (default 540) bounds the whole
# run: each try gets what is left as its TUNE_S/BENCH_S/AB_S, and none starts with < 120 s left.
set -u
STAGES=$1; shift
OUTDIR=${OUT:-/tmp/out}; mkdir -p "$OUTDIR"
T_END=$(( $(date +%s) + ${BUDGET_S:-540} ))
run_gpu() { # gpu "setting[|fallback...]"
  local gpu=$1 s
  IFS='|' read -ra chain <<< "$2"
  for s in "${chain[@]}"; do
    local name=${s%%@*} envs=() left=$(( T_END - $(date +%s) ))
    [ "$name" != "$s" ] && IFS='@' read -ra envs <<< "${s#*@}"
    [ $left -lt 120 ] && { echo "=== GPU $gpu: $name skipped, only ${left}s left"; return 1; }
    echo "=== $(date +%T) GPU $gpu: $name: $STAGES ${envs[*]} (${left}s left)"
    env GPU=$gpu SETTING=$name TUNE_S=$left BENCH_S=$left AB_S=$left "${envs[@]}" \
      bash benchmarks/gpu/h200.sh $STAGES && return 0  # 0: the setting has a tuned profile
    echo "=== $(date +%T) GPU $gpu: $name left no tuned profile"
  done
}
gpu=0
for chain in "$@"; do
  run_gpu $gpu "$chain" > "$OUTDIR/gpu$gpu.log" 2>&1 &
  gpu=$((gpu + 1))
done
wait
tail -n 25 "$OUTDIR"/gpu*.log
cd "$OUTDIR" && tar czf /tmp/results.tar.gz --exclude=results.tar.gz . && mv /tmp/results.tar.gz . \
  && find . -mindepth 1 ! -name results.tar.gz -delete && ls -la
