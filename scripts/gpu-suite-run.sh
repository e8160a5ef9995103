#!/usr/bin/env bash
# The GPU suite, step 2: runs on the GPU machine from the repository root (see scripts/gpu-suite.sh).
set -uo pipefail
SUITE=.gpu/suite
LOG=${OUT:-/tmp/df11-suite}
BIN=/tmp/df11-suite-bin
mkdir -p "$LOG" "$BIN"
for f in "$SUITE"/*.xz; do xz -dc "$f" > "$BIN/$(basename "$f" .xz)"; done
chmod +x "$BIN"/*
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$LOG/device.txt"

summary=()
fail=0
while read -r name crate; do
  [ -n "$name" ] || continue
  short=${name%-*}
  if (cd "$crate" && CARGO_MANIFEST_DIR=$PWD "$BIN/$name" --test-threads=1) > "$LOG/test_$short.log" 2>&1; then
    res=$(grep -E "^test result" "$LOG/test_$short.log" | tail -1)
    summary+=("PASS $short: $res")
  else
    fail=1
    summary+=("FAIL $short: $(grep -E "^test result|panicked" "$LOG/test_$short.log" | head -3 | tr '\n' ' ')")
  fi
done < "$SUITE/tests.txt"

# compute-sanitizer over the decode tests: every fixture unit decoded on the GPU.
modules=$(awk '/^modules_exact-/ {print $1}' "$SUITE/tests.txt")
if command -v compute-sanitizer > /dev/null && [ -n "$modules" ]; then
  if (cd crates/df11-candle && CARGO_MANIFEST_DIR=$PWD compute-sanitizer --tool memcheck --error-exitcode 9 \
      "$BIN/$modules" --test-threads=1 units_decode) > "$LOG/memcheck.log" 2>&1; then
    summary+=("PASS memcheck: $(grep -E "ERROR SUMMARY" "$LOG/memcheck.log" | tail -1)")
  else
    fail=1
    summary+=("FAIL memcheck: $(grep -E "ERROR SUMMARY|panicked" "$LOG/memcheck.log" | head -2 | tr '\n' ' ')")
  fi
else
  summary+=("SKIP memcheck: compute-sanitizer not found")
fi

if "$BIN/gpu_bench" --json "$LOG/gpu_bench.json" > "$LOG/gpu_bench.txt" 2>&1; then
  summary+=("PASS gpu_bench (table below)")
else
  fail=1
  summary+=("FAIL gpu_bench: $(tail -3 "$LOG/gpu_bench.txt" | tr '\n' ' ')")
fi

echo "================ GPU suite summary ================"
cat "$LOG/gpu_bench.txt"
printf '%s\n' "${summary[@]}" | tee "$LOG/summary.txt"
exit $fail
