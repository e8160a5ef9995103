#!/usr/bin/env bash
# Soaks on the GPU machine (.gpu/suite/soak.sh, run from the repository root after
# .gpu/suite/run.sh unpacked the
# binaries into /tmp/df11-suite-bin, and .gpu/suite/e2e.sh made the 8B-shaped model in
# /tmp/df11-e2e-work; QWEN3_BENCH overrides the bench binary). The device memory of the soaked
# process is sampled every second with nvidia-smi; "flat" means its samples over the second half
# of the run (after load, prefill and graph capture) span at most 64 MiB.
#   SOAK=tokens (default): 20,000 generated tokens at batch 8 (1024-token prompts, 2500 decode
#     steps, the KV cache filled to its maximum context), DF11 then BF16: every sequence's tokens
#     equal, memory flat.
#   SOAK=server SOAK_SECONDS=600: df11 serve (DF11, --max-batch 16 --max-context 1024) under
#     scripts/serve-soak.py (16 streaming clients, 16-256 tokens each) for SECONDS: no error, memory flat.
set -uo pipefail
LOG=${OUT:-/tmp/df11-soak}
BIN=/tmp/df11-suite-bin
WORK=${E2E_WORK:-/tmp/df11-e2e-work}
BENCH=${QWEN3_BENCH:-$BIN/qwen3-df11-bench}
mkdir -p "$LOG"
sample() {  # <csv> <pid>: the process's device memory (MiB) every second while it runs
  while kill -0 "$2" 2>/dev/null; do
    nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits \
      | awk -F', ' -v p="$2" '$1 == p {print $2}' >> "$1"
    sleep 1
  done
}
flat() {  # <csv> <label>
  python3 - "$1" "$2" <<'PY'
import sys
v = [int(l) for l in open(sys.argv[1]) if l.strip().isdigit()]
tail = v[len(v) // 2:]
span = max(tail) - min(tail) if tail else -1
print(f"{sys.argv[2]}: {len(v)} samples, peak {max(v) if v else 0} MiB, second half {min(tail) if tail else 0}.."
      f"{max(tail) if tail else 0} MiB (span {span} MiB): {'flat' if 0 <= span <= 64 else 'NOT FLAT'}")
sys.exit(0 if 0 <= span <= 64 else 1)
PY
}
fail=0
if [ "${SOAK:-tokens}" = tokens ]; then
  for fmt in df11 bf16; do
    flag=""; [ "$fmt" = bf16 ] && flag="--bf16"
    t0=$(date +%s)
    "$BENCH" --model-dir "$WORK/$fmt" $flag --batch 8 --prompt-tokens 1024 --decode-tokens 2500 \
      > "$LOG/soak_$fmt.json" 2> "$LOG/soak_$fmt.err" &
    bpid=$!
    sample "$LOG/mem_$fmt.csv" $bpid
    wait $bpid || { echo "$fmt soak failed"; tail -3 "$LOG/soak_$fmt.err"; fail=1; }
    echo "$fmt: $(( $(date +%s) - t0 )) s"
    flat "$LOG/mem_$fmt.csv" "$fmt memory" || fail=1
  done
  python3 - "$LOG/soak_df11.json" "$LOG/soak_bf16.json" <<'PY' || fail=1
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
rows = len(a["all_tokens"])
gen = sum(len(r) - 1 for r in a["all_tokens"])
same = a["all_tokens"] == b["all_tokens"]
print(f"tokens: {rows} sequences, {gen} generated each run (+1 from the prefill); DF11 {'==' if same else '!='} BF16 "
      f"for every sequence; decode DF11 {a['decode_tok_s']:.1f} tok/s, BF16 {b['decode_tok_s']:.1f} tok/s; "
      f"peak DF11 {a['peak_bytes'] / 1e9:.2f} GB, BF16 {b['peak_bytes'] / 1e9:.2f} GB")
sys.exit(0 if same else 1)
PY
else
  "$BIN/df11" serve --model-dir "$WORK/df11" --port 18001 --max-batch 16 --max-context 1024 \
    --served-model-name soak > "$LOG/serve.out" 2> "$LOG/serve.err" &
  spid=$!
  for _ in $(seq 1 180); do grep -q "listening on" "$LOG/serve.err" && break; sleep 1; done
  sample "$LOG/mem_server.csv" $spid &
  python3 scripts/serve-soak.py http://127.0.0.1:18001 --model soak --seconds "${SOAK_SECONDS:-600}" \
    --concurrency 16 | tee "$LOG/serve_soak.json" || fail=1
  kill -INT $spid; wait $spid; echo "server exit status $?"
  wait
  flat "$LOG/mem_server.csv" "server memory" || fail=1
fi
exit $fail
