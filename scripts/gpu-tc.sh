#!/usr/bin/env bash
# Kernel iteration on the tensor-core products, step 1 (here): packs the tc_exact test binary,
# tc_probe and gpu_bench (built by `cargo build --release --workspace --features cuda
# --all-targets --target-dir target/cuda`, as scripts/gpu-suite.sh builds them) into .gpu/tc/
# with scripts/gpu-tc-run.sh. Step 2, on the GPU machine (a checkout with .gpu/tc/ copied in):
#     bash .gpu/tc/run.sh [tc_probe batches...]
# runs df11-candle's tc unit tests, tc_exact (plain, then its streaming test under memcheck and
# racecheck) and tc_probe on a
# Qwen3-8B layer's seven matrices; TC_BENCH=1 adds gpu_bench. Seconds to pack, ~15 MB.
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET=target/cuda/release
OUTD=.gpu/tc
rm -rf "$OUTD" && mkdir -p "$OUTD"
exe=$(ls -t "$TARGET"/deps/tc_exact-* | grep -v '\.d$' | head -1)
cp "$exe" "$OUTD/tc_exact"
lib=$(ls -t "$TARGET"/deps/df11_candle-* | grep -v '\.\(d\|rlib\|rmeta\)$' | head -1)
cp "$lib" "$OUTD/lib_tests"
cp "$TARGET/tc_probe" "$TARGET/gpu_bench" "$OUTD/"
strip "$OUTD"/tc_exact "$OUTD"/lib_tests "$OUTD"/tc_probe "$OUTD"/gpu_bench
(cd "$OUTD" && tar cf - tc_exact lib_tests tc_probe gpu_bench | xz -T0 -3 > bins.tar.xz && rm tc_exact lib_tests tc_probe gpu_bench)
cp scripts/gpu-tc-run.sh "$OUTD/run.sh"
cp scripts/gpu-tc-prof.sh "$OUTD/prof.sh"
du -sh "$OUTD"
