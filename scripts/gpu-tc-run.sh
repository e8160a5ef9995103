#!/usr/bin/env bash
# Kernel iteration, step 2 (on the GPU machine; see scripts/gpu-tc.sh). Logs under $OUT, the
# folder logs go to (default /tmp/df11-tc).
set -uo pipefail
LOG=${OUT:-/tmp/df11-tc}
BIN=/tmp/df11-tc-bin
mkdir -p "$LOG" "$BIN"
xz -dc .gpu/tc/bins.tar.xz | tar xf - -C "$BIN" && chmod +x "$BIN"/*
cd crates/df11-candle
export CARGO_MANIFEST_DIR=$PWD
summary=()
if "$BIN/lib_tests" --test-threads=1 cuda::tc > "$LOG/lib_tests.log" 2>&1; then
  summary+=("PASS lib tc: $(grep '^test result' "$LOG/lib_tests.log")")
else
  summary+=("FAIL lib tc: $(grep -E 'panicked|^test result' "$LOG/lib_tests.log" | head -3 | tr '\n' ' ')")
fi
if "$BIN/tc_exact" --test-threads=1 > "$LOG/tc_exact.log" 2>&1; then
  summary+=("PASS tc_exact: $(grep '^test result' "$LOG/tc_exact.log")")
else
  summary+=("FAIL tc_exact: $(grep -E 'panicked|^test result' "$LOG/tc_exact.log" | head -3 | tr '\n' ' ')")
fi
for tool in memcheck racecheck; do
  if [ -z "${TC_NO_SANITIZE:-}" ]; then
    if compute-sanitizer --tool $tool --error-exitcode 9 "$BIN/tc_exact" --test-threads=1 streamed \
        > "$LOG/$tool.log" 2>&1; then
      summary+=("PASS $tool streamed: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$LOG/$tool.log" | tail -1)")
    else
      summary+=("FAIL $tool streamed: $(grep -E 'SUMMARY|panicked' "$LOG/$tool.log" | head -2 | tr '\n' ' ')")
    fi
  fi
done
cd ../..
"$BIN/tc_probe" 0 0 "${@:-1 2 8 16 32 64}" 2>&1 | tee "$LOG/tc_probe.log"
[ -n "${TC_BENCH:-}" ] && "$BIN/gpu_bench" --json "$LOG/gpu_bench.json" 2>&1 | tee "$LOG/gpu_bench.log"
printf '%s\n' "${summary[@]}"
# TC_VARIANTS="A=1 B=2;C=3": tc_probe again under each set of environment settings (measurements).
IFS=';' read -ra variants <<< "${TC_VARIANTS:-}"
for v in "${variants[@]}"; do
  echo "== $v"
  env $v "$BIN/tc_probe" 0 0 "${@:-1 2 8 16 32 64}" 2>&1 | tail -n +2 | tee -a "$LOG/tc_probe_variants.log"
done
