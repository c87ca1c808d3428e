#!/bin/bash
# TableTune on a GPU machine with vLLM 0.26.0 unpacked in /tmp/site (see ../shared/gpu/README.md:
# `bash ../shared/gpu/prepare.sh` and `bash benchmarks/gpu/prepare_settings.sh` here, then
# `.gpu/bin/device_run.sh recv unpack` there).
# Run from the repo root on the GPU machine:  SETTING=... bash benchmarks/gpu/h200.sh STAGE [STAGE...]
#   install      the project (no deps, no network) into /tmp/tt, missing wheels from .whl/ into /tmp/whl
#   moe-kernels  put vLLM's MoE kernels into /tmp/site/vllm: carried as .gpu/moe_kernels.xz, or in
#                two calls as its halves .gpu/m1 and .gpu/m2 (kept in /tmp/parts until both came)
#   tune         tabletune tune for the setting, K=3, emulated a=0.75/0.55/0.40 (resumable: a stage
#                killed by its time budget continues on the next call)
#   bench        the paired, interval-based bench (python -m benchmarks) against the setting's
#                profile: this session's tune if there is one, else the committed one under
#                benchmarks/results/ with its table rebuilt by this tuner; it stops itself inside BENCH_S (default 560 s, server start
#                included) and goes on from an earlier call's blocks in the same runs/ folder
#   goodput      does the sidecar end on the k that measures best? (benchmarks/goodput.py) from the
#                committed profile as measured: the fixed k's KS in BLOCKS paired blocks at each of
#                LOADS, then RUNS fresh sidecars from the profile's table, FOLLOW_S each
#   switch       the workload switch (benchmarks/switch.py) at LOAD (64): acceptance replayed at
#                EMULATE, dropped to EMULATE_B (0.1,0.02,0.01) through PUT /v1/emulation at each
#                switch; CYCLES paired cycles of stale / best (best fixed k or B's table) / sidecar
#   hooks        the plugin's per-step Python cost on this machine's CPU (no server)
#   ab           throughput with vs without the plugin on the setting's target (ngram, K=3): two
#                vLLM starts in the order AB_ORDER (off,on; run a second GPU with on,off)
#   noharm       do no harm (python -m benchmarks.noharm): the profile's table (32b-ngram: the goodput
#                baseline's, rebuilt by `tabletune table`) alone vs with the sidecar at its defaults,
#                driven by vLLM's own client: NOHARM_SHAPES (burst,poisson): bursts at NOHARM_C (8,192),
#                a bursty Poisson at NOHARM_RATE (8/s), 512/192-token requests +-50%; blocks until
#                NOHARM_S, resumed next call
#                (RUN_S 20, WAVES 3, WARMUP 1, BLOCKS 6: its --run-s, --waves, --warmup-rounds, --blocks)
#   field        the field bench (python -m benchmarks.field): FIELD_POLICIES (fixed-k*,documented,tuned)
#                on FIELD_PROFILE (a profile file, used as it is), else this session's tune, else
#                the committed profile (table rebuilt), vLLM's own client:
#                FIELD_SHAPES (burst) at FIELD_C (1,16,64,256), 512/192-token requests +-50%, SLO
#                (tpot:50) for request goodput; blocks until FIELD_S (540) or BLOCKS in all (50:
#                the budget decides, so one stage and one sidecar span the call), resumed next call;
#                FIELD_SIDECAR_ARGS: flags after the sidecar's defaults (e.g. --dry-run)
#   honor        does the engine honor the table? (python -m benchmarks.honor) every one-range
#                table k=0..3 at HONOR_B (1,32,128) and an edge table [[1,EDGE,3],[EDGE+1,256,1]]
#                (EDGE 32) on the setting's engine, then the tables k=0..REF_K at the same B on a
#                second engine started with K=REF_K (1; 0: none): verified drafts from the ring,
#                drafting from the two engines' step times; honor.json, honor.csv (HONOR_S 540)
# SETTING (model, drafter, runner):
#   32b-ngram        32B-shaped dense Llama, ngram, V1 runner, one vLLM per k (the first run)
#   moe30b-ngram     Qwen3-30B-A3B-shaped MoE, ngram, V1 runner
#   3b-ngram-v1      Llama-3.2-3B-shaped, ngram, V1 runner
#   3b-draft-v1      Llama-3.2-3B-shaped, draft_model (4-layer dummy drafter), V1 runner; acceptance
#                    forced by vLLM's synthetic sampling (a dummy drafter never agrees with its target)
#   3b-eagle3-v2     Llama-3.2-3B-shaped, a one-layer dummy EAGLE-3 head, V2 runner (full CUDA graphs
#                    per K of the startup table; 0.26's V2 refuses ngram and draft_model)
#   32b-eagle3-v2    32B-shaped dense Llama, a one-layer dummy EAGLE-3 head at its width
#                    (.gpu/model32/eagle3 from prepare_settings.sh), V2 runner, synthetic acceptance
#   moe30b-eagle3-v2 Qwen3-30B-A3B-shaped MoE, a one-layer dummy EAGLE-3 head at its width
#                    (.gpu/moe30b/eagle3), V2 runner (0.26's V2 lists no MoE limit), synthetic
#                    acceptance; needs the moe-kernels stage first
# env: OUT (results), TUNE_S / BENCH_S (time budgets), LOADS, POLICIES, GRID, REPEATS, MAX_REPEATS, EMULATE,
#      MAX_SEQS (tune: max_num_seqs, 256; the field bench takes the profile's),
#      WINDOW_S, PRIME_S, BLOCKS, NOISE_CV, MIX (steady|chat: the bench's --workload-mix), SEED,
#      ONE_SERVER (1: one vLLM, tables swapped; default 1 except 32b-ngram), GPU_UTIL,
#      GPU (which GPU; settings on different GPUs run side by side: see parallel.sh),
#      WORKLOAD (PROMPT:OUTPUT for tune --workload; results under <setting>-wl<P>x<O>)
set -u
SETTING=${SETTING:-32b-ngram}
BY=plugin
DRAFTER=
case $SETTING in
  32b-ngram)    MODEL_DIR=model32; SPEC=(--method ngram);                                   ONE=${ONE_SERVER:-0}
                DONE=h200-vllm0.26-32b-ngram-emulated ;;
  moe30b-ngram) MODEL_DIR=moe30b;  SPEC=(--method ngram);                                   ONE=${ONE_SERVER:-1}
                DONE=h200-vllm0.26-moe30b-ngram-emulated ;;
  3b-ngram-v1)  MODEL_DIR=model;   SPEC=(--method ngram);                                   ONE=${ONE_SERVER:-1}
                DONE=h200-vllm0.26-3b-ngram-v1 ;;
  3b-draft-v1)  MODEL_DIR=model;   SPEC=(--method draft_model --drafter /tmp/model/drafter); ONE=${ONE_SERVER:-1}; BY=vllm
                DRAFTER=/tmp/model/drafter; DONE=h200-vllm0.26-3b-draft-v1 ;;
  3b-eagle3-v2) MODEL_DIR=model;   SPEC=(--method eagle3 --drafter /tmp/model/eagle3);      ONE=${ONE_SERVER:-1}; BY=vllm
                DRAFTER=/tmp/model/eagle3; DONE=h200-vllm0.26-3b-eagle3-v2
                export VLLM_USE_V2_MODEL_RUNNER=1 ;;
  32b-eagle3-v2) MODEL_DIR=model32; SPEC=(--method eagle3 --drafter /tmp/model32/eagle3);  ONE=${ONE_SERVER:-1}; BY=vllm
                DRAFTER=/tmp/model32/eagle3; DONE=h200-vllm0.26-32b-eagle3-v2
                export VLLM_USE_V2_MODEL_RUNNER=1 ;;
  moe30b-eagle3-v2) MODEL_DIR=moe30b; SPEC=(--method eagle3 --drafter /tmp/moe30b/eagle3); ONE=${ONE_SERVER:-1}; BY=vllm
                DRAFTER=/tmp/moe30b/eagle3; DONE=h100-vllm0.26-moe30b-eagle3-v2  # tuned on an H100
                export VLLM_USE_V2_MODEL_RUNNER=1 ;;
  *) echo "unknown SETTING $SETTING"; exit 2 ;;
esac
WORKLOAD=${WORKLOAD:-}  # e.g. 96:128: tune --workload (steps timed with their prefill)
TAG=$SETTING${WORKLOAD:+-wl${WORKLOAD/:/x}}  # its own profile: never resumes a pure-decode one
DONE=benchmarks/results/$DONE${WORKLOAD:+-wl${WORKLOAD/:/x}}  # the committed profile, if no tune ran
O=${OUT:-/tmp/out}/$TAG; R=runs/h200-$TAG; mkdir -p "$O" "$R"
SHAPE=(--max-tokens 128); [ -n "$WORKLOAD" ] && SHAPE=()  # else the bench serves the profile's shape
export PYTHONPATH=/tmp/site:/tmp/tt:/tmp/whl HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
       VLLM_NO_USAGE_STATS=1 VLLM_USE_FLASHINFER_SAMPLER=0 VLLM_CACHE_ROOT=/tmp/vllm_cache/$SETTING-${GPU:-0} \
       PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false TABLETUNE_CACHE=/tmp/tabletune/$SETTING-${GPU:-0}
# one compile cache per setting and GPU: runs side by side never share a file
[ -n "${GPU:-}" ] && export CUDA_VISIBLE_DEVICES=$GPU
MODEL=/tmp/$MODEL_DIR
EMULATE=${EMULATE:-0.75,0.55,0.40}
ENGINE=(--engine-arg=--load-format=dummy --engine-arg=--dtype=bfloat16
        --engine-arg=--gpu-memory-utilization=${GPU_UTIL:-0.85} --engine-arg=--max-model-len=2048
        --engine-arg=--attention-backend=FLASH_ATTN)
[ "$ONE" = 1 ] && ONE_FLAG=(--one-server) || ONE_FLAG=()
keep() { cp -r "$@" "$O/" 2>/dev/null; true; }
# a stage killed by its `timeout` leaves vLLM's engine process holding this GPU's memory, and the
# next call's server then refuses to start (2026-12-03: 20 of 140 GiB free): clear this GPU first
free_gpu() { nvidia-smi -i "${GPU:-0}" --query-compute-apps=pid --format=csv,noheader 2>/dev/null \
               | xargs -r kill -9 2>/dev/null; sleep 2; true; }
STATUS=0; need() { [ -s "$1" ] || { echo "stage $stage left no $1"; STATUS=1; }; }
# prepare_settings.sh leaves the drafter heads' tokenizer.json behind (carry size), and each
# `device_run.sh recv` copies the model folders again: the target's, before any stage
for m in model model32 moe30b; do for d in eagle3 drafter; do
  if [ -d /tmp/$m/$d ] && [ ! -f /tmp/$m/$d/tokenizer.json ]; then cp /tmp/$m/tokenizer.json /tmp/$m/$d/; fi
done; done
for stage in "$@"; do
case $stage in tune|bench|goodput|switch|ab|field) free_gpu ;; esac
case $stage in
 install)
  python3 -m pip install -q --no-deps --no-build-isolation --no-index --target /tmp/tt . 2>&1 | tail -3
  [ -d .whl ] && python3 -m pip install -q --no-deps --no-index --target /tmp/whl .whl/*.whl 2>&1 | tail -3
  python3 -c "import tabletune.cli, sidecar.settings, vllm_patch.plugin; print('tabletune importable')" ;;
 moe-kernels)
  SO=/tmp/site/vllm/_moe_C_stable_libtorch.abi3.so; H=/tmp/moe_halves; mkdir -p $H
  for h in m1 m2; do [ -f .gpu/$h ] && cp .gpu/$h $H/$h; done
  # written aside and moved: a broken stream leaves no partial file for a later call to trust
  if [ ! -d /tmp/site/vllm ]; then echo "MoE kernels: unpack vLLM first"
  elif [ ! -f $SO ] && [ -f .gpu/moe_kernels.xz ]; then xz -dc .gpu/moe_kernels.xz > $SO.part && mv $SO.part $SO
  elif [ ! -f $SO ] && [ -f $H/m1 ] && [ -f $H/m2 ]; then cat $H/m1 $H/m2 | xz -dc > $SO.part && mv $SO.part $SO
  fi
  ls -la $SO 2>/dev/null || { echo "MoE kernels: halves here: $(ls $H | tr '\n' ' ')(carry the other next call)"; STATUS=1; }
  for m in moe30b; do [ -d .gpu/$m ] && { rm -rf /tmp/$m; cp -r .gpu/$m /tmp/$m; }; done
  [ -d /tmp/moe30b/eagle3 ] && cp /tmp/moe30b/tokenizer.json /tmp/moe30b/eagle3/; true ;;
 tune)
  /usr/bin/time -f "tune wall %e s" timeout "${TUNE_S:-520}" python3 -m tabletune.cli tune --model "$MODEL" \
     "${SPEC[@]}" -K 3 --max-num-seqs "${MAX_SEQS:-256}" "${ONE_FLAG[@]}" \
     --grid "${GRID:-1,4,8,16,32,64,96,128,192,256}" --repeats "${REPEATS:-2}" --decode-tokens 33 \
     ${MAX_REPEATS:+--max-repeats $MAX_REPEATS} \
     --num-prompts 64 --emulate "$EMULATE" --emulate-with $BY --out $R/profile.json \
     ${WORKLOAD:+--workload $WORKLOAD} "${ENGINE[@]}" 2>&1 \
     | tr '\r' '\n' | grep -v "cell-rep/s\]$" | tail -40
  keep $R/profile.json $R/profile-report.md $R/profile-report.png
  python3 -c "import json,sys; sys.exit(0 if json.load(open(sys.argv[1])).get('table') else 1)" \
    $R/profile.json 2>/dev/null || { echo "stage tune left no tuned profile"; STATUS=1; } ;;
 bench)
  P=$R/profile.json
  if [ ! -s "$P" ]; then
    # no tune this session: the committed measurements, with the table this tuner's confidence
    # rule builds from them (an older tune stored the table of an older rule)
    P=$R/profile-committed.json
    python3 -m tabletune.cli table "$DONE/profile.json" --save "$P" >/dev/null || STATUS=1
    keep "$P"
  fi
  echo "bench against $P"
  # --budget-s: the bench ends itself (files written) before the outer timeout; --resume: a
  # second call in the same warm machine adds blocks to the first call's
  timeout $(( ${BENCH_S:-560} + 25 )) python3 -m benchmarks --profile "$P" --model "$MODEL" \
     ${DRAFTER:+--drafter $DRAFTER} --loads "${LOADS:-1,16,64,256}" \
     --policies "${POLICIES:-fixed-k*,documented,tuned,quarter,aa:fixed-kK}" \
     --window-s "${WINDOW_S:-2}" --prime-s "${PRIME_S:-1}" --budget-s "${BENCH_S:-560}" \
     ${BLOCKS:+--blocks $BLOCKS} --noise-cv "${NOISE_CV:-0.05}" \
     --workload-mix "${MIX:-steady}" --seed "${SEED:-0}" --resume "${SHAPE[@]}" \
     --emulate "$EMULATE" --emulate-with $BY --out $R/bench "${ENGINE[@]}" 2>&1 \
     | grep -v "^(APIServer\|^(EngineCore" | tail -60
  keep $R/bench/cells.csv $R/bench/summary.md $R/bench/summary.json $R/bench/intervals.png
  need $R/bench/summary.json ;;
 goodput)
  timeout $(( ${GOODPUT_S:-540} + 25 )) python3 -m benchmarks.goodput --profile "$DONE/profile.json" \
     --model "$MODEL" --scale none --ks "${KS:-1,2,3}" --loads "${LOADS:-128}" --runs "${RUNS:-1}" \
     --blocks "${BLOCKS:-3}" --window-s "${WINDOW_S:-7}" --follow-s "${FOLLOW_S:-180}" \
     --prompt-tokens 96 --max-tokens 128 --emulate "$EMULATE" --emulate-with $BY \
     --out $R/goodput "${ENGINE[@]}" 2>&1 | grep -v "^(APIServer\|^(EngineCore" | tail -30
  tar czf "$O/goodput-logs.tgz" -C $R/goodput logs 2>/dev/null
  keep $R/goodput/goodput.json; need $R/goodput/goodput.json ;;
 switch)
  timeout $(( ${SWITCH_S:-540} + 25 )) python3 -m benchmarks.switch --profile "$DONE/profile.json" \
     --model "$MODEL" --load "${LOAD:-64}" --emulate "$EMULATE" --emulate-b "${EMULATE_B:-0.1,0.02,0.01}" \
     --blocks "${BLOCKS:-2}" --cycles "${CYCLES:-3}" --adapt-s "${ADAPT_S:-10}" --follow-s 30 \
     --window-s "${WINDOW_S:-3.5}" --prompt-tokens 96 --max-tokens 128 \
     --out $R/switch "${ENGINE[@]}" 2>&1 | grep -v "^(APIServer\|^(EngineCore" | tail -30
  tar czf "$O/switch-logs.tgz" -C $R/switch logs 2>/dev/null
  keep $R/switch/switch.json; need $R/switch/switch.json ;;
 hooks)
  python3 -m benchmarks.overhead --hooks-only --out $R/overhead | tail -12
  keep $R/overhead/overhead.json; need $R/overhead/overhead.json ;;
 ab)
  timeout "${AB_S:-540}" python3 -m benchmarks.overhead --model "$MODEL" --order "${AB_ORDER:-off,on}" \
     --loads "${AB_LOADS:-1,64,256}" --max-num-seqs 256 --window-s 5 --sidecar-s 0 \
     --out $R/ab-gpu${GPU:-0} "${ENGINE[@]}" 2>&1 | grep -v "^(APIServer\|^(EngineCore" | tail -30
  cp $R/ab-gpu${GPU:-0}/overhead.json "$O/ab-overhead-gpu${GPU:-0}.json" 2>/dev/null
  need $R/ab-gpu${GPU:-0}/overhead.json ;;
 noharm)
  free_gpu
  NP=${NOHARM_PROFILE:-$DONE/profile.json}
  [ "$SETTING" = 32b-ngram ] && NP=${NOHARM_PROFILE:-benchmarks/results/h200-vllm0.26-32b-ngram-goodput-baseline/profile-committed.json}
  P=$R/profile-noharm.json  # with the table this tuner's rule builds from it: the start table
  python3 -m tabletune.cli table "$NP" --save "$P" >/dev/null || STATUS=1
  keep "$P"
  timeout $(( ${NOHARM_S:-540} + 25 )) python3 -m benchmarks.noharm --profile "$P" --model "$MODEL" \
     --shapes "${NOHARM_SHAPES:-burst,poisson}" --concurrency "${NOHARM_C:-8,192}" --rates "${NOHARM_RATE:-8}" \
     --input-len 512 --output-len 192 --range-ratio 0.5 --run-s "${RUN_S:-20}" --waves "${WAVES:-3}" \
     --idle-s 5 --warmup-rounds "${WARMUP:-1}" --blocks "${BLOCKS:-6}" --budget-s "${NOHARM_S:-540}" \
     --resume --emulate "$EMULATE" --emulate-with $BY --out $R/noharm ${DRAFTER:+--drafter $DRAFTER} \
     "${ENGINE[@]}" 2>&1 \
     | grep -v "^(APIServer\|^(EngineCore" | tail -40
  tar czf "$O/noharm-files.tgz" -C $R/noharm --exclude=logs . 2>/dev/null
  keep $R/noharm/noharm.json $R/noharm/summary.json; need $R/noharm/summary.json ;;
 field)
  free_gpu
  # FIELD_PROFILE, else this session's tune, else the committed one with this tuner's table
  P=${FIELD_PROFILE:-$R/profile.json}
  if [ ! -s "$P" ]; then
    P=$R/profile-committed.json
    python3 -m tabletune.cli table "$DONE/profile.json" --save "$P" >/dev/null || STATUS=1
  fi
  keep "$P"
  timeout $(( ${FIELD_S:-540} + 25 )) python3 -m benchmarks.field --profile "$P" --model "$MODEL" \
     --policies "${FIELD_POLICIES:-fixed-k*,documented,tuned}" --shapes "${FIELD_SHAPES:-burst}" \
     --concurrency "${FIELD_C:-1,16,64,256}" --rates "${FIELD_RATE:-8}" --input-len 512 \
     --output-len 192 --range-ratio 0.5 --waves "${WAVES:-2}" --run-s "${RUN_S:-15}" --idle-s 2 \
     --warmup-rounds "${WARMUP:-0}" --blocks "${BLOCKS:-50}" --budget-s "${FIELD_S:-540}" \
     --goodput "${SLO:-tpot:50}" --resume --emulate "$EMULATE" --emulate-with $BY --out $R/field \
     ${DRAFTER:+--drafter $DRAFTER} $(for a in ${FIELD_SIDECAR_ARGS:-}; do echo "--sidecar-arg=$a"; done) \
     "${ENGINE[@]}" 2>&1 | grep -v "^(APIServer\|^(EngineCore\|more tokens than expected" | tail -40
  tar czf "$O/field-files.tgz" -C $R/field --exclude=logs . 2>/dev/null
  keep $R/field/field.json $R/field/summary.json; need $R/field/summary.json ;;
 honor)
  free_gpu
  timeout $(( ${HONOR_S:-540} + 25 )) python3 -m benchmarks.honor --model "$MODEL" "${SPEC[@]}" -K 3 \
     --max-num-seqs 256 --batch-sizes "${HONOR_B:-1,32,128}" --edge "${EDGE:-32}" \
     --reference-k "${REF_K:-1}" --decode-tokens 65 --repeats "${REPEATS:-2}" --budget-s "${HONOR_S:-540}" \
     --emulate "$EMULATE" --emulate-with $BY --out $R/honor "${ENGINE[@]}" 2>&1 \
     | grep -v "^(APIServer\|^(EngineCore" | tail -50
  keep $R/honor/honor.json $R/honor/honor.csv; need $R/honor/honor.json ;;
 *) echo "unknown stage $stage"; STATUS=1 ;;
esac; done
for f in $(ls -t runs/logs/vllm-*.log 2>/dev/null | head -1); do grep -E "Error|error" "$f" | tail -5; done
# exit status: 0 when every stage left what it should (parallel.sh goes on to a fallback if not)
exit $STATUS
