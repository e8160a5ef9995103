#!/usr/bin/env bash
# Builds the warp-specialized product harness (kernels/harness/ws_probe.cu) into .gpu/ws/ws_probe, with a run.sh that
# finds cuBLAS on the GPU machine: bash .gpu/ws/run.sh [options]. Extra arguments go to nvcc (-DWS_STAGES=8 ...);
# WS_BIN=name names the binary.
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v nvcc >/dev/null 2>&1 || . /opt/cuda-13.0/env.sh
mkdir -p .gpu/ws
nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Xptxas -v "$@" -o .gpu/ws/${WS_BIN:-ws_probe} kernels/harness/ws_probe.cu -lcublas -lcuda 2>&1 \
  | grep -E "error|warning|spill|registers" | grep -v " 0 bytes spill" || true
test -x .gpu/ws/${WS_BIN:-ws_probe}
strip .gpu/ws/${WS_BIN:-ws_probe}
# shellcheck disable=SC1091
. kernels/harness/probe_run.sh
# shellcheck disable=SC2016
write_cublas_run .gpu/ws '${WS_BIN:-ws_probe}'
ls -la .gpu/ws
