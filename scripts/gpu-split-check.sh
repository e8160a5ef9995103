#!/usr/bin/env bash
# The split over two GPUs against one GPU, token for token, on the 8B-shaped model, under
# settings that order more or less (packed by scripts/gpu-suite.sh as .gpu/suite/split.sh; run
# on a machine of two GPUs). Each line: the setting and the first decode step whose token
# differs from GPU 0 alone ("none": equal). Found with it (2026-11-26, two H100s): candle's
# per-thread default stream made one cross-device wait land on the wrong GPU; since the devices
# have streams of their own (df11_llm::open_cuda) every line reads "none" (docs/PERFORMANCE.md).
set -uo pipefail
BIN=/tmp/df11-suite-bin
WORK=${E2E_WORK:-/tmp/df11-e2e-work}
STEPS=${SPLIT_STEPS:-32}
# shellcheck disable=SC1091
. "$(dirname "$0")/unpack.sh"
unpack_suite .gpu/suite "$BIN"
e2e_model "$BIN" "$WORK" "${OUT:-/tmp/df11-split}" > /dev/null || exit 1
tokens() {  # <out file> <env...> -- <bench args...>
  local out=$1; shift
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" "$BIN/qwen3-df11-bench" --model-dir "$WORK/df11" --decode-tokens "$STEPS" "$@" \
    2>/dev/null | python3 -c "import json, sys; print(json.dumps(json.load(sys.stdin)['tokens']))" > "$out"
}
tokens /tmp/split-ref.json X=1 --
# SPLIT_SETTINGS: other settings, ';'-separated (each one or more NAME=VALUE); SPLIT_GRAPHS:
# "both" (default) or "graph" (only the graph path); SPLIT_DEVICES: the split's --devices
# (default 0,1; "0" compares a one-GPU setting with the reference).
IFS=';' read -r -a settings <<< "${SPLIT_SETTINGS:-X=1;DF11_SPLIT_SYNC=1;DF11_DEBUG_SYNC=all;DF11_PEER_COPY=0;DF11_GPU_PACK=0;DF11_CUDA_STREAM=per-thread}"
graphs=("" "--no-cuda-graph")
[ "${SPLIT_GRAPHS:-both}" = graph ] && graphs=("")
for setting in "${settings[@]}"; do
  for graph in "${graphs[@]}"; do
    # shellcheck disable=SC2086
    tokens /tmp/split-run.json $setting -- --devices "${SPLIT_DEVICES:-0,1}" $graph
    python3 - "$setting $graph" /tmp/split-ref.json /tmp/split-run.json <<'PY'
import json, sys
label, a, b = sys.argv[1], json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
d = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
print(f"{label:45} first difference: {'none' if d is None else d}" + ("" if len(a) == len(b) else f" (lengths {len(a)} / {len(b)})"))
PY
  done
done
