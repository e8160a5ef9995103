#!/usr/bin/env bash
# Builds the tall-chunk product harness (kernels/harness/tall_probe.cu) into .gpu/tall/tall_probe, with a run.sh
# that finds cuBLAS on the GPU machine: bash .gpu/tall/run.sh [ROWS...]. Extra arguments go to nvcc (-DTP_DEPTH=2).
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v nvcc >/dev/null 2>&1 || . /opt/cuda-13.0/env.sh
mkdir -p .gpu/tall
nvcc -O3 -std=c++17 -arch=sm_90 -Xptxas -v "$@" -o "${TALL_OUT:-.gpu/tall/tall_probe}" kernels/harness/tall_probe.cu -lcublas 2>&1 \
  | grep -E "error|warning|registers|spill|tall_" || true
test -x "${TALL_OUT:-.gpu/tall/tall_probe}"
strip "${TALL_OUT:-.gpu/tall/tall_probe}"
# shellcheck disable=SC1091
. kernels/harness/probe_run.sh
# shellcheck disable=SC2016
write_cublas_run .gpu/tall '${TALL_BIN:-tall_probe}'
ls -la .gpu/tall
