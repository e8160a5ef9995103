#!/usr/bin/env bash
# End-to-end Qwen3-8B-shaped bench on the GPU machine, packed by scripts/gpu-suite.sh as
# .gpu/suite/e2e.sh (run from the repository root after .gpu/suite/run.sh, which unpacks the
# binaries into /tmp/df11-suite-bin). Generates a BF16
# model with N(0, 0.02) weights, compresses it with `df11 compress`, verifies it, and runs
# qwen3-df11-bench on the DF11 and the BF16 folders (separate processes, so each peak is its own).
set -uo pipefail
LOG=${OUT:-/tmp/df11-e2e}
BIN=/tmp/df11-suite-bin
WORK=${E2E_WORK:-/tmp/df11-e2e-work}
mkdir -p "$LOG" "$WORK"
if [ ! -x "$BIN/synth_model" ]; then
  mkdir -p "$BIN" && xz -dc .gpu/suite/bins.tar.xz | tar xf - -C "$BIN" && chmod +x "$BIN"/*
fi
t0=$(date +%s)
"$BIN/synth_model" --template tests/fixtures/models/qwen3-tiny/bf16 --out "$WORK/bf16" 2> "$LOG/synth.log" || { tail "$LOG/synth.log"; exit 1; }
t1=$(date +%s)
"$BIN/df11" compress "$WORK/bf16" "$WORK/df11" 2>/dev/null | tee "$LOG/compress.txt" || exit 1
t2=$(date +%s)
"$BIN/df11" verify "$WORK/df11" "$WORK/bf16" 2>/dev/null | tee -a "$LOG/compress.txt" || exit 1
echo "synth ${t1}-${t0}=$((t1 - t0)) s, compress $((t2 - t1)) s" | tee -a "$LOG/compress.txt"
du -sh "$WORK/bf16" "$WORK/df11" | tee -a "$LOG/compress.txt"
: > "$LOG/bench.jsonl"
for batch in 1 8; do
  for fmt in df11 bf16; do
    flag=""; [ "$fmt" = bf16 ] && flag="--bf16"
    "$BIN/qwen3-df11-bench" --model-dir "$WORK/$fmt" $flag --batch $batch ${BENCH_ARGS:-} \
      >> "$LOG/bench.jsonl" 2>> "$LOG/bench.err" || { echo "bench $fmt batch $batch failed"; tail -5 "$LOG/bench.err"; }
  done
done
# The BF16 model through cuBLAS at every batch size (DF11_MATMUL=decode): the stock-candle-like
# baseline the fused path is also compared with. And the DF11 model with its exponents kept as the
# Huffman stream (DF11_EXPONENTS=huffman) instead of packed (the default where it fits).
DF11_MATMUL=decode "$BIN/qwen3-df11-bench" --model-dir "$WORK/bf16" --bf16 --batch 1 ${BENCH_ARGS:-} \
  > "$LOG/bench_cublas.jsonl" 2>> "$LOG/bench.err" || echo "bench bf16 cublas failed"
DF11_EXPONENTS=huffman "$BIN/qwen3-df11-bench" --model-dir "$WORK/df11" --batch 1 ${BENCH_ARGS:-} \
  >> "$LOG/bench_cublas.jsonl" 2>> "$LOG/bench.err" || echo "bench df11 huffman failed"
cat "$LOG/bench.jsonl" "$LOG/bench_cublas.jsonl"
# Lossless means the same greedy tokens: DF11 and BF16 must agree at each batch size.
python3 - "$LOG/bench.jsonl" <<'PY'
import json, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ok = True
for b in sorted({r["batch"] for r in runs}):
    t = {r["format"]: r["tokens"] for r in runs if r["batch"] == b}
    same = t.get("df11") is not None and t.get("df11") == t.get("bf16")
    ok &= same
    print(f"batch {b}: DF11 tokens {'==' if same else '!='} BF16 tokens")
sys.exit(0 if ok else 1)
PY
