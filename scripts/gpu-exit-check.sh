#!/usr/bin/env bash
# Exit statuses on the GPU machine (packed by scripts/gpu-suite.sh as .gpu/suite/exit.sh; run from
# the repository root after .gpu/suite/run.sh or replay.sh unpacked the binaries): every process
# must end with status 0 (docs/RELIABILITY.md, "Shutdown").
#   1. EXIT_RUNS (1000) batched runs of the model binaries: each architecture's tiny fixture,
#      DF11 and BF16, with and without the CUDA graph, three prompts (`--prompt A --prompt B
#      --prompt C --json -n 20`, so the continuous-batching scheduler thread owns the model),
#      EXIT_JOBS (8) processes at a time.
#   2. EXIT_CYCLES (100) `df11 serve` cycles: start on a free port, wait for /health, one chat
#      request that must answer 200, SIGTERM, and the process must exit 0 within 60 s.
# One line per failure (its command and the end of its log), then a summary line per part;
# logs of failures in ${OUT:-/tmp/df11-exit}. Exit status 1 when any process did not exit 0.
set -uo pipefail
SUITE=.gpu/suite
BIN=/tmp/df11-suite-bin
LOG=${OUT:-/tmp/df11-exit}
RUNS=${EXIT_RUNS:-1000}
CYCLES=${EXIT_CYCLES:-100}
JOBS=${EXIT_JOBS:-8}
mkdir -p "$BIN" "$LOG"
# shellcheck disable=SC1091
. "$(dirname "$0")/unpack.sh"
unpack_suite "$SUITE" "$BIN"
FIX=tests/fixtures/models
ARCHS="qwen3 qwen2 llama mistral-nemo phi4 gemma3"

# The run list: RUNS lines "<binary> <model dir> <flags>", cycling over arch x format x graph.
combos=()
for a in $ARCHS; do
  for fmt in df11 bf16; do
    for graph in "" "--no-cuda-graph"; do
      flag=""
      [ "$fmt" = bf16 ] && flag="--bf16"
      # No trailing blank: xargs -L would join the next line to this one.
      combos+=("$(echo "$a-df11 $FIX/$a-tiny/$fmt $flag $graph" | sed 's/ *$//')")
    done
  done
done
list=$LOG/runs.txt
: > "$list"
for ((i = 0; i < RUNS; i++)); do echo "$i ${combos[$((i % ${#combos[@]}))]}" >> "$list"; done

# One chat request to a server; prints the HTTP status (or the exception's name).
cat > "$LOG/request.py" <<'PY'
import json, sys, urllib.error, urllib.request
body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 8})
req = urllib.request.Request(sys.argv[1] + "/v1/chat/completions", data=body.encode(),
                             headers={"Content-Type": "application/json"})
try:
    with urllib.request.urlopen(req, timeout=60) as r:
        json.load(r)
        print(r.status)
except urllib.error.HTTPError as e:
    print(e.code)
except Exception as e:  # connection refused, timeout, bad JSON
    print(type(e).__name__)
PY

# df11 serve: start / request / SIGTERM, one cycle after another (beside the batched runs).
serve_cycles() {
  local t0 served=0 fail=0 c log a pid url status rc
  t0=$(date +%s)
  for ((c = 0; c < CYCLES; c++)); do
    log=$LOG/serve_$c.log
    a=$(echo $ARCHS | cut -d' ' -f$(( c % 6 + 1 )))
    "$BIN/df11" serve --model-dir "$FIX/$a-tiny/df11" --port 0 --max-batch 4 --served-model-name m \
      > "$log" 2>&1 &
    pid=$!
    url=""
    for _ in $(seq 1 600); do
      url=$(grep -oE 'listening on http://[0-9.:]+' "$log" | head -1 | sed 's/listening on //')
      [ -n "$url" ] && break
      kill -0 $pid 2>/dev/null || break
      sleep 0.1
    done
    status=none
    if [ -n "$url" ]; then
      status=$(python3 "$LOG/request.py" "$url")
    fi
    kill -TERM $pid 2>/dev/null
    rc=timeout
    for _ in $(seq 1 600); do
      if ! kill -0 $pid 2>/dev/null; then
        wait $pid
        rc=$?
        break
      fi
      sleep 0.1
    done
    if [ "$rc" = timeout ]; then
      kill -KILL $pid 2>/dev/null
      wait $pid 2>/dev/null
    fi
    if [ "$rc" = 0 ] && [ "$status" = 200 ]; then
      served=$((served + 1))
      rm -f "$log"
    else
      fail=1
      echo "FAIL serve cycle $c ($a): HTTP $status, exit $rc: $(tail -2 "$log" | tr '\n' ' ')"
    fi
  done
  echo "df11 serve: $served of $CYCLES start/request/SIGTERM cycles answered 200 and exited 0 ($(( $(date +%s) - t0 )) s)"
  return $fail
}
serve_cycles > "$LOG/serve.out" 2>&1 &
serve_pid=$!

one_run() {  # <index> <binary> <model dir> [flags...]
  local i=$1 bin=$2 dir=$3
  shift 3
  local log=$LOG/run_$i.log
  timeout 120 "$BIN/$bin" --model-dir "$dir" "$@" --dtype bf16 --json -n 20 \
    --prompt "The capital of France" --prompt "Once upon a time" --prompt "1, 2, 3," > "$log" 2>&1
  local rc=$?
  if [ $rc = 0 ]; then
    rm -f "$log"
    echo "ok"
  else
    echo "FAIL run $i (exit $rc): $bin --model-dir $dir $*: $(tail -2 "$log" | tr '\n' ' ')"
  fi
}
export -f one_run
export BIN LOG
t0=$(date +%s)
results=$LOG/runs.out
xargs -P "$JOBS" -L 1 bash -c 'one_run "$@"' _ < "$list" > "$results"
ok=$(grep -c '^ok$' "$results")
grep -v '^ok$' "$results"
fail=0
[ "$ok" = "$RUNS" ] || fail=1
echo "model binaries: $ok of $RUNS batched runs exited 0 ($(( $(date +%s) - t0 )) s, $JOBS at a time)"
dmesg 2>/dev/null | grep -i segfault | tail -3

wait $serve_pid || fail=1
cat "$LOG/serve.out"
exit $fail
