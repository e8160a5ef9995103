#!/usr/bin/env bash
# Replays one GPU test binary several times with a seed each (packed by scripts/gpu-suite.sh as
# .gpu/suite/replay.sh; run from the repository root on the GPU machine, after run.sh or alone):
# to tell a failure or hang that depends on a test's random draw from one that does not.
#     bash .gpu/suite/replay.sh <binary prefix>[@<crate folder>] [RUNS] [VAR=value ...] [-- <test args>]
# e.g. bash .gpu/suite/replay.sh modules_exact 4 DF11_TILE=all -- rows_decode_to_the_originals
# Each run: DF11_TEST_SEED (a fresh one, or REPLAY_SEEDS="s1 s2 ..."), --test-threads=1
# --nocapture, stopped after ${REPLAY_TIMEOUT:-120} s; one line a run: the seed, PASS / FAIL /
# TIMEOUT and the last test started. A run that times out is first looked at with cuda-gdb
# (host threads' backtraces and the kernels on the device, in replay_<n>.where). Logs in ${OUT:-/tmp/df11-replay}/replay_<n>.log.
set -uo pipefail
SUITE=.gpu/suite
BIN=/tmp/df11-suite-bin
LOG=${OUT:-/tmp/df11-replay}
mkdir -p "$BIN" "$LOG"
[ $# -ge 1 ] || { sed -n '2,9p' "$0"; exit 2; }
target=$1
shift
runs=3
if [[ ${1:-} =~ ^[0-9]+$ ]]; then runs=$1; shift; fi
settings=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do settings+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
# shellcheck disable=SC1091
. "$(dirname "$0")/unpack.sh"
unpack_suite "$SUITE" "$BIN"
name=${target%@*} dir=
[[ $target == *@* ]] && dir=${target#*@}
read -r bin crate < <(awk -v p="^$name-" -v d="$dir" '$1 ~ p && (d == "" || $2 == d) {print $1, $2; exit}' "$SUITE/tests.txt")
[ -n "${bin:-}" ] || { echo "no test binary $target in $SUITE/tests.txt"; exit 2; }
read -r -a seeds <<< "${REPLAY_SEEDS:-}"
for ((n = 0; n < runs || n < ${#seeds[@]}; n++)); do
  seed=${seeds[$n]:-$(( (RANDOM << 15) | RANDOM ))}
  log=$LOG/replay_$n.log
  t0=$(date +%s)
  (cd "$crate" && exec env "${settings[@]}" CARGO_MANIFEST_DIR=$PWD DF11_TEST_SEED=$seed \
    "$BIN/$bin" --test-threads=1 --nocapture "$@") > "$log" 2>&1 &
  pid=$!
  waited=0
  while kill -0 $pid 2>/dev/null && [ $waited -lt "${REPLAY_TIMEOUT:-120}" ]; do sleep 1; waited=$((waited + 1)); done
  if kill -0 $pid 2>/dev/null; then
    # Still running: where it is (host threads, and any kernel on the device) before it is killed.
    if command -v cuda-gdb > /dev/null; then
      timeout -k 5 60 cuda-gdb -batch -ex 'set non-stop off' -p $pid -ex 'info threads' \
        -ex 'thread apply all bt 25' -ex 'info cuda kernels' > "$LOG/replay_$n.where" 2>&1
      echo "  where it hung: $LOG/replay_$n.where"
      grep -E '^(\*| ) +[0-9]+ +Thread|^#[0-9]+ |Kernel|kernel' "$LOG/replay_$n.where" | head -40 | sed 's/^/    /'
    fi
    kill -KILL $pid 2>/dev/null
    # A process inside the driver's teardown of a faulted context may not go at once: bounded.
    for _ in $(seq 1 30); do kill -0 $pid 2>/dev/null || break; sleep 1; done
    kill -0 $pid 2>/dev/null && echo "  pid $pid did not end 30 s after SIGKILL"
    rc=124
  else
    wait $pid
    rc=$?
  fi
  case $rc in 0) what=PASS ;; 124) what=TIMEOUT ;; *) what="FAIL (exit $rc)" ;; esac
  echo "run $n: DF11_TEST_SEED=$seed ${settings[*]}: $what in $(( $(date +%s) - t0 )) s; last test started: $(grep -oE "^test [^ ]+ \.\.\." "$log" | tail -1)"
done
