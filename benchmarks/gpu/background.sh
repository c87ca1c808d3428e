#!/bin/bash
# A stage of h200.sh across several device calls: the first call starts it in its own process
# session (the device kills a call's other processes when it returns, not a setsid one), every
# call waits on it and copies its record to $OUT after each block, so a call cut short, or a
# machine taken back, loses at most the block in flight. Run from the checkout's root:
#   first call:  BG_START="FIELD_S=1400 WAVES=1 SETTING=32b-eagle3-v2 bash benchmarks/gpu/h200.sh field" \
#                CALL_S=595 bash benchmarks/gpu/background.sh
#   next calls:  CALL_S=595 bash benchmarks/gpu/background.sh
# CALL_S: the call's timeout_s; the wait ends 20 s before it (its limit counts from the call's
# start, so a script started late in the call passes CALL_S - $SECONDS). RECORD: the files copied
# (default: the field bench's record and sidecar logs). Issue the next call within the machine's 30-s idle release.
set -u
CALL_S=${CALL_S:-595}
RECORD=${RECORD:-runs/h200-32b-eagle3-v2/field/field.json runs/h200-32b-eagle3-v2/field/summary.json runs/h200-32b-eagle3-v2/field/sidecar-part*.log.gz}
BG=/tmp/bg; mkdir -p $BG "${OUT:-/tmp/out}"
if [ -n "${BG_START:-}" ]; then
  OUT=$BG setsid bash -c "$BG_START" > $BG/stage.log 2>&1 < /dev/null &
  echo $! > $BG/pid
  echo "started: $BG_START (pid $(cat $BG/pid))"
fi
pid=$(cat $BG/pid 2>/dev/null || echo none)
copy() { for f in $RECORD; do [ -f "$f" ] && cp "$f" "${OUT:-/tmp/out}/"; done; true; }
while [ $SECONDS -lt $(( CALL_S - 20 )) ] && kill -0 "$pid" 2>/dev/null; do
  sleep 5; copy
done
copy
if kill -0 "$pid" 2>/dev/null; then
  echo "still running after ${SECONDS}s: call again within 30 s"
else
  echo "ended after ${SECONDS}s"; tail -40 $BG/stage.log; cp $BG/stage.log "${OUT:-/tmp/out}/"
  find $BG -maxdepth 2 -type f -newer $BG/pid -exec cp {} "${OUT:-/tmp/out}/" \; 2>/dev/null
fi
true
