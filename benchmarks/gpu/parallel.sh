#!/bin/bash
# Run h200.sh stages for several settings side by side, one GPU each, on a machine with as many
# GPUs as settings (e.g. the lent 2 x H200): device time is counted per machine, not per GPU.
#   bash benchmarks/gpu/parallel.sh "STAGES" SETTING_FOR_GPU0 [SETTING_FOR_GPU1 ...]
# A setting may name fallbacks, SETTING|FALLBACK: when the stages leave no profile for SETTING
# (e.g. its engine does not start), the same GPU goes on with FALLBACK.  Each GPU's log is
# $OUT/gpuN.log; at the end everything under $OUT is packed into $OUT/results.tar.gz, since only
# 8 files come back from the lent machine.  Per-setting env (e.g. AB_ORDER) can be given as
# SETTING@VAR=value, e.g. 3b-ngram-v1@AB_ORDER=on,off.  BUDGET_S (default 540): each try gets
# what is left of it as the time limit of each of its stages (so give one stage per call, or
# split the budget yourself), and none starts with < 120 s left.
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
      bash benchmarks/gpu/h200.sh $STAGES && return 0  # 0: every stage left its results
    echo "=== $(date +%T) GPU $gpu: $name failed (see above)"
  done
  return 1
}
gpu=0; pids=()
for chain in "$@"; do
  run_gpu $gpu "$chain" > "$OUTDIR/gpu$gpu.log" 2>&1 &
  pids+=($!); gpu=$((gpu + 1))
done
rc=0; for p in "${pids[@]}"; do wait $p || rc=1; done
tail -n 25 "$OUTDIR"/gpu*.log
cd "$OUTDIR" && tar czf /tmp/results.tar.gz --exclude=results.tar.gz . && mv /tmp/results.tar.gz . \
  && find . -mindepth 1 ! -name results.tar.gz -delete && ls -la
exit $rc
