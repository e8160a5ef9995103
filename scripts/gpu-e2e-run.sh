#!/usr/bin/env bash
# End-to-end Qwen3-8B-shaped bench on the GPU machine, packed by scripts/gpu-suite.sh as
# .gpu/suite/e2e.sh (run from the repository root after .gpu/suite/run.sh, which unpacks the
# binaries into /tmp/df11-suite-bin). Generates a BF16 model with N(0, 0.02) weights, compresses
# it with `df11 compress`, verifies it, and runs qwen3-df11-bench (separate processes, so each
# peak is its own) on the DF11 folder, the BF16 folder and, as the baseline row, the BF16 folder
# through stock candle-transformers' Qwen3 (--stock): batch 1 and 8 at context 512, batch 1 at
# context 8192, and DF11 without the CUDA graph. E2E_QUICK=1 runs batch 1 at context 512 only;
# E2E_BATCHES="1 8 32" sets the batches at context 512; E2E_NO_LONG=1 skips context 8192.
# With two GPUs or more, the DF11 model split over GPUs 0 and 1 (batch 1 and 8); and CPU
# offload (--max-gpu-memory 2.5GB and 6GB), next to the official runtime's cpu_offload=True when its
# wheels are in .whl/ (scripts/fetch-official-wheels.sh; E2E_NO_OFFLOAD=1 skips both).
set -uo pipefail
LOG=${OUT:-/tmp/df11-e2e}
BIN=/tmp/df11-suite-bin
WORK=${E2E_WORK:-/tmp/df11-e2e-work}
mkdir -p "$LOG" "$WORK"
# shellcheck disable=SC1091
. "$(dirname "$0")/unpack.sh"
unpack_suite .gpu/suite "$BIN"
e2e_model "$BIN" "$WORK" "$LOG" || exit 1
[ -n "${E2E_OFFICIAL_ONLY:-}" ] || : > "$LOG/bench.jsonl"
# The driver compiles the kernels' PTX at a process's first use of them and caches the result for
# the machine (~/.nv/ComputeCache): on a fresh machine the first timed row (DF11) would pay ~3 s of
# it in its load and warm the cache for the rows after it. One short untimed run of each format
# first, so that every row's load is a load (E2E_COLD=1 skips it; docs/PERFORMANCE.md,
# 2026-11-27, has the cold figures).
if [ -z "${E2E_COLD:-}${E2E_OFFICIAL_ONLY:-}" ]; then
  for fmt in df11 bf16; do
    flag=""; [ "$fmt" = bf16 ] && flag="--bf16"
    # shellcheck disable=SC2086
    "$BIN/qwen3-df11-bench" --model-dir "$WORK/$fmt" $flag --prompt-tokens 16 --decode-tokens 2 \
      > /dev/null 2>> "$LOG/bench.err" || echo "warm-up run ($fmt) failed"
  done
fi
bench() {  # <label> <args...>
  local label=$1; shift
  if out=$("$BIN/qwen3-df11-bench" "$@" ${BENCH_ARGS:-} 2>> "$LOG/bench.err"); then
    echo "{\"run\": \"$label\", \"result\": $out}" >> "$LOG/bench.jsonl"
  else
    echo "bench $label failed"; grep -v "^ *[0-9]*: \|^ *at " "$LOG/bench.err" | tail -3
  fi
}
# E2E_OFFICIAL_ONLY=1: only the official runtime rows (e.g. a later run on the same machine, the
# model's folder already made, once .whl/ is there too).
if [ -z "${E2E_OFFICIAL_ONLY:-}" ]; then
  batches=${E2E_BATCHES:-"1 8"}; [ -n "${E2E_QUICK:-}" ] && batches=1
  # E2E_FORMATS="df11" runs our DF11 rows only (the BF16 and stock rows need the time);
  # "bf16-cublas" adds BF16 rows with every product through cuBLAS; "df11-ws bf16-ws" rows with
  # the warp-specialized products.
  formats=${E2E_FORMATS:-"df11 bf16 stock"}
  for batch in $batches; do
    for fmt in $formats; do
      case $fmt in
        df11) bench "df11 b$batch ctx512" --model-dir "$WORK/df11" --batch "$batch" ;;
        bf16) bench "bf16 b$batch ctx512" --model-dir "$WORK/bf16" --bf16 --batch "$batch" ;;
        # Every BF16 product through cuBLAS (--matmul decode): what our BF16 path is held to.
        bf16-cublas) bench "bf16 b$batch ctx512 cublas" --model-dir "$WORK/bf16" --bf16 --matmul decode --batch "$batch" ;;
        stock) bench "stock b$batch ctx512" --model-dir "$WORK/bf16" --stock --batch "$batch" ;;
        # The warp-specialized products at 17-64 rows (DF11_TC_WS=on, off by default), for both
        # formats: their own summation order, so DF11 == BF16 is checked within the pair.
        df11-ws) DF11_TC_WS=on bench "df11 b$batch ctx512 ws" --model-dir "$WORK/df11" --batch "$batch" ;;
        bf16-ws) DF11_TC_WS=on bench "bf16 b$batch ctx512 ws" --model-dir "$WORK/bf16" --bf16 --batch "$batch" ;;
      esac
    done
  done
  # E2E_NO_EXTRA=1 skips the no-graph, CPU-pack, decode-ahead and prompt-attention rows.
  if [ -z "${E2E_NO_EXTRA:-}" ]; then
    bench "df11 b1 ctx512 no-graph" --model-dir "$WORK/df11" --no-cuda-graph
    # The packed form built on the CPU at load (DF11_GPU_PACK=0; the default builds it on the
    # GPU): the load time against the row above, and the same tokens.
    DF11_GPU_PACK=0 bench "df11 b1 ctx512 cpu-pack" --model-dir "$WORK/df11"
    # The prompt's units decoded a layer ahead on a second stream (DecodeOptions::decode_ahead):
    # its prefill tok/s against the first row's, and the same tokens.
    DF11_DECODE_AHEAD=1 bench "df11 b1 ctx512 decode-ahead" --model-dir "$WORK/df11"
    # The prompt's attention the other ways (DecodeOptions::prompt_attention; the default is
    # the flash kernel): candle's matmul attention for DF11 and BF16 (the path before 5aa0729),
    # and the flash-decoding kernel. Prefill tok/s; the tokens may differ from the default rows'
    # (another summation order), DF11 == BF16 within each setting.
    DF11_PROMPT_ATTENTION=matmul bench "df11 b1 ctx512 matmul-prompt" --model-dir "$WORK/df11"
    DF11_PROMPT_ATTENTION=matmul bench "bf16 b1 ctx512 matmul-prompt" --model-dir "$WORK/bf16" --bf16
    DF11_PROMPT_ATTENTION=flash-decoding bench "df11 b1 ctx512 flash-decoding-prompt" --model-dir "$WORK/df11"
  fi
  # DF11 and BF16 rows at batch 1 and 8 under one setting: pair <SETTING=value> <label>.
  pair() {
    for batch in 1 8; do
      (
        export "${1?}"
        bench "df11 b$batch ctx512 $2" --model-dir "$WORK/df11" --batch "$batch"
        bench "bf16 b$batch ctx512 $2" --model-dir "$WORK/bf16" --bf16 --batch "$batch"
      )
    done
  }
  # E2E_ROW_ORDER=1: the layers' linears kept in row order (DF11_TILE=off, the default before
  # 739e540: the CUDA-core kernels at 1-2 rows, for the BF16 rows too); DF11 == BF16 tokens.
  [ -n "${E2E_ROW_ORDER:-}" ] && pair DF11_TILE=off row-order
  # E2E_NO_STACK=1: q/k/v and gate/up loaded one by one (DF11_STACK=off).
  [ -n "${E2E_NO_STACK:-}" ] && pair DF11_STACK=off no-stack
  # E2E_NO_STREAM=1: the streaming kernels off (DF11_TC_STREAM=off); E2E_NO_PDL=1: programmatic
  # dependent launches off (DF11_PDL=off).
  [ -n "${E2E_NO_STREAM:-}" ] && pair DF11_TC_STREAM=off no-stream
  [ -n "${E2E_NO_PDL:-}" ] && pair DF11_PDL=off no-pdl
  if [ -z "${E2E_QUICK:-}${E2E_NO_LONG:-}" ]; then
    for fmt in df11 bf16; do
      flag=""; [ "$fmt" = bf16 ] && flag="--bf16"
      bench "$fmt b1 ctx8192" --model-dir "$WORK/$fmt" $flag --prompt-tokens 8192 --prefill-chunk 1024
    done
  fi
  # Several GPUs: the DF11 model split over GPUs 0 and 1 (layers balanced by free memory).
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU")
  if [ "$gpus" -ge 2 ]; then
    for batch in 1 8; do
      bench "df11 b$batch ctx512 split" --model-dir "$WORK/df11" --batch "$batch" --devices 0,1
    done
  else
    echo "multi-GPU runs: skipped ($gpus GPU on this machine)"
  fi
fi
# CPU offload: everything the GPU holds kept within each of E2E_OFFLOAD_BUDGETS (default 2.5GB,
# where the official runtime's cpu_offload=True runs, and 6GB); the official runtime offloading
# too. Our offload rows decode as many steps as the rows they are compared with: the KV cache is
# sized for the prompt and the steps, and the flash-decoding split (so the attention's summation
# order) follows the cache's size, so rows of other lengths are not bit-comparable.
if [ -z "${E2E_NO_OFFLOAD:-}" ]; then
  if [ -z "${E2E_OFFICIAL_ONLY:-}" ]; then
    for budget in ${E2E_OFFLOAD_BUDGETS:-2.5GB 6GB}; do
      bench "df11 b1 ctx512 offload-$budget" --model-dir "$WORK/df11" --max-gpu-memory "$budget"
    done
  fi
  if ls .whl/dfloat11-*.whl > /dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --target /tmp/official-site .whl/*.whl \
      > "$LOG/official-pip.log" 2>&1
    modes=("" "--cpu-offload")
    # E2E_OFFICIAL_OFFLOAD_ONLY=1: only the official runtime's cpu_offload=True row.
    [ -z "${E2E_OFFICIAL_OFFLOAD_ONLY:-}" ] || modes=("--cpu-offload")
    for mode in "${modes[@]}"; do
      label="official b1 ctx512${mode:+ offload}"
      if out=$(PYTHONPATH=/tmp/official-site python3 scripts/official-bench.py "$WORK/df11" \
          $mode --decode-tokens 32 2>> "$LOG/official.err"); then
        echo "{\"run\": \"$label\", \"result\": $out}" >> "$LOG/bench.jsonl"
      else
        echo "official $mode failed"; tail -3 "$LOG/official.err"
      fi
    done
  else
    echo "official runtime: skipped (no .whl/dfloat11-*.whl: scripts/fetch-official-wheels.sh)"
  fi
fi
# The server: `df11 serve` with 1, 8 and 32 concurrent streaming clients,
# on the DF11 folder and on the BF16 folder (E2E_SERVE_FORMATS), one after the other.
if [ -z "${E2E_NO_SERVE:-}${E2E_OFFICIAL_ONLY:-}" ]; then
  for fmt in ${E2E_SERVE_FORMATS:-df11 bf16}; do
    flag=""; [ "$fmt" = bf16 ] && flag="--bf16"
    # shellcheck disable=SC2086
    "$BIN/df11" serve --model-dir "$WORK/$fmt" $flag --port 18000 --max-batch 32 --max-context 1024 \
      --served-model-name qwen3-8b-shaped > "$LOG/serve-$fmt.out" 2> "$LOG/serve-$fmt.err" &
    spid=$!
    for _ in $(seq 1 120); do grep -q "listening on" "$LOG/serve-$fmt.err" && break; sleep 1; done
    echo "serve $fmt:"
    python3 scripts/serve-bench.py http://127.0.0.1:18000 --model qwen3-8b-shaped \
      --concurrency 1 8 32 --requests 2 --max-tokens 128 | tee "$LOG/serve-$fmt.jsonl" || echo "serve bench failed"
    kill $spid; wait $spid 2>/dev/null
  done
fi
# A table, and lossless means the same greedy tokens: DF11 and BF16 must agree in each setting.
python3 - "$LOG/bench.jsonl" <<'PY'
import json, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(f"{'run':28} {'load s':>7} {'prefill tok/s':>14} {'decode tok/s':>13} {'ms/step':>8} {'peak GB':>8}")
for r in runs:
    x = r["result"]
    peak = x["peak_bytes"] / 1e9 if x["peak_bytes"] else float("nan")
    per = x.get("peak_bytes_per_device") or []
    each = " (" + " + ".join(f"{p / 1e9:.2f}" for p in per if p) + ")" if len(per) > 1 else ""
    print(f"{r['run']:28} {x['load_s']:7.2f} {x['prefill_tok_s']:14.0f} {x['decode_tok_s']:13.1f} "
          f"{x['decode_ms_per_step']:8.2f} {peak:8.2f}{each}")
by = {r["run"]: r["result"] for r in runs}
ok = True
for key in sorted(k for k in by if k.startswith("df11 ")):
    other = "bf16 " + key[5:]
    if other in by:
        same = by[key]["tokens"] == by[other]["tokens"]
        ok &= same
        d, b = by[key]["decode_tok_s"], by[other]["decode_tok_s"]
        print(f"{key[5:]}: DF11 tokens {'==' if same else '!='} BF16 tokens; decode DF11/BF16 {d / b:.3f}")
    if key.endswith("no-graph"):
        same = by[key]["tokens"] == by[key.replace(" no-graph", "")]["tokens"]
        ok &= same
        print(f"graph vs no graph: tokens {'==' if same else '!='}")
    for suffix in (" split", " offload-", " cpu-pack", " decode-ahead"):
        at = key.rfind(suffix)
        if at > 0 and (suffix.endswith("-") or key.endswith(suffix)) and key[:at] in by:
            base = by[key[:at]]
            a, b = by[key]["tokens"], base["tokens"]
            n = min(len(a), len(b))  # the offload run decodes fewer steps
            same = n > 0 and a[:n] == b[:n]
            ok &= same
            ratio = by[key]["decode_tok_s"] / base["decode_tok_s"]
            print(f"{key[5:]}: tokens {'==' if same else '!='} one GPU's; decode {ratio:.3f}x")
official = by.get("official b1 ctx512 offload")
for key in sorted(k for k in by if " offload-" in k and official):
    print(f"{key[5:]}: decode {by[key]['decode_tok_s'] / official['decode_tok_s']:.2f}x the official "
          f"cpu_offload=True; peak {by[key]['peak_bytes'] / 1e9:.2f} GB against "
          f"{official['peak_bytes'] / 1e9:.2f}; load {by[key]['load_s']:.1f} s against {official['load_s']:.1f}")
sys.exit(0 if ok else 1)
PY
