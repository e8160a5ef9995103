#!/usr/bin/env bash
# Builds the shared-memory decode GEMM harness (kernels/harness/ss_probe.cu) into .gpu/ss/ss_probe, with a run.sh that
# finds cuBLAS on the GPU machine: bash .gpu/ss/run.sh [options]. Extra arguments go to nvcc.
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v nvcc >/dev/null 2>&1 || . /opt/cuda-13.0/env.sh
mkdir -p .gpu/ss
nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Xptxas -v "$@" -o .gpu/ss/${SS_BIN:-ss_probe} kernels/harness/ss_probe.cu -lcublas 2>&1 \
  | grep -E "error|warning|spill" | grep -v " 0 bytes spill" || true
test -x .gpu/ss/${SS_BIN:-ss_probe}
strip .gpu/ss/${SS_BIN:-ss_probe}
# shellcheck disable=SC1091
. kernels/harness/probe_run.sh
# shellcheck disable=SC2016
write_cublas_run .gpu/ss '${SS_BIN:-ss_probe}'
ls -la .gpu/ss
