#!/usr/bin/env bash
# Prefill of the Qwen3-8B-shaped model at several prompt lengths on the GPU machine (copied by
# scripts/gpu-suite.sh as .gpu/suite/prefill.sh; run from the repository root): DF11 and BF16
# through our engine, DF11 with the next layer decoded ahead on a second stream
# (DF11_DECODE_AHEAD=1), and stock candle, each in its own process, batch 1, the prompt in one
# forward pass. The model folder is the one e2e.sh makes (made here if missing).
#     PREFILL_TOKENS="512 4096" PREFILL_RUNS="df11 bf16 ahead stock" bash .gpu/suite/prefill.sh
# One JSON line per run in $OUT/prefill.jsonl (OUT: a folder for the logs).
set -uo pipefail
LOG=${OUT:-/tmp/df11-prefill}
BIN=/tmp/df11-suite-bin
WORK=${E2E_WORK:-/tmp/df11-e2e-work}
mkdir -p "$LOG" "$WORK"
# shellcheck disable=SC1091
. "$(dirname "$0")/unpack.sh"
unpack_suite .gpu/suite "$BIN"
e2e_model "$BIN" "$WORK" "$LOG" > /dev/null || exit 1
: > "$LOG/prefill.jsonl"
for fmt in df11 bf16; do   # untimed: the driver's first compile of our PTX
  flag=""; [ "$fmt" = bf16 ] && flag="--bf16"
  # shellcheck disable=SC2086
  "$BIN/qwen3-df11-bench" --model-dir "$WORK/$fmt" $flag --prompt-tokens 16 --decode-tokens 2 > /dev/null 2>&1
done
for p in ${PREFILL_TOKENS:-512 4096}; do
  for run in ${PREFILL_RUNS:-df11 bf16 ahead stock}; do
    case $run in
      df11) args=(--model-dir "$WORK/df11"); envs=() ;;
      bf16) args=(--model-dir "$WORK/bf16" --bf16); envs=() ;;
      ahead) args=(--model-dir "$WORK/df11"); envs=(DF11_DECODE_AHEAD=1) ;;
      stock) args=(--model-dir "$WORK/bf16" --stock); envs=() ;;
      *) echo "unknown run $run" >&2; exit 2 ;;
    esac
    if out=$(env "${envs[@]}" "$BIN/qwen3-df11-bench" "${args[@]}" --prompt-tokens "$p" --decode-tokens 8 2>> "$LOG/bench.err"); then
      echo "{\"run\": \"$run p$p\", \"result\": $out}" | tee -a "$LOG/prefill.jsonl" \
        | python3 -c 'import json,sys; r=json.loads(sys.stdin.read()); x=r["result"]; print(r["run"], "prefill %.0f tok/s" % x["prefill_tok_s"], "peak %.2f GB" % (x["peak_bytes"]/1e9), "tokens", x["tokens"][:4])'
    else
      echo "run $run p$p failed"; tail -3 "$LOG/bench.err"
    fi
  done
done
