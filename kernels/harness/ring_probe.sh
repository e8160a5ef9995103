#!/usr/bin/env bash
# Builds the decode-through-L2 harness (kernels/harness/ring_probe.cu) into .gpu/ring/ring_probe, with a run.sh that
# finds cuBLAS on the GPU machine: bash .gpu/ring/run.sh [options]. Extra arguments go to nvcc.
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v nvcc >/dev/null 2>&1 || . /opt/cuda-13.0/env.sh
mkdir -p .gpu/ring
nvcc -O3 -std=c++17 -arch=sm_90 -Xptxas -v "$@" -o .gpu/ring/ring_probe kernels/harness/ring_probe.cu -lcublas 2>&1 \
  | grep -E "error|warning|spill" | grep -v " 0 bytes spill" || true
test -x .gpu/ring/ring_probe
strip .gpu/ring/ring_probe
# shellcheck disable=SC1091
. kernels/harness/probe_run.sh
write_cublas_run .gpu/ring 'ring_probe'
ls -la .gpu/ring
