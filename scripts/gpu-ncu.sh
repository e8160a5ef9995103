#!/usr/bin/env bash
# ncu counters of the streaming tensor-core kernels at several rows of x (docs/PERFORMANCE.md,
# 2026-11-27): packs tc_probe from the CUDA build (scripts/gpu-suite.sh or scripts/gpu-tc.sh
# built it) into .gpu/ncu. Copy .gpu/ncu/ to the GPU machine and run, from the folder that holds
# .gpu/:
#     ROWS="1 8 16 32" bash .gpu/ncu/run.sh
set -euo pipefail
cd "$(dirname "$0")/.."
OUTD=.gpu/ncu
rm -rf "$OUTD" && mkdir -p "$OUTD"
cp target/cuda/release/tc_probe "$OUTD/tc_probe"
strip "$OUTD/tc_probe"
xz -T0 -3 "$OUTD/tc_probe"
cp scripts/gpu-ncu-run.sh "$OUTD/run.sh"
du -sh "$OUTD"
