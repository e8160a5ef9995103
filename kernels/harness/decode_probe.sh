#!/usr/bin/env bash
# Builds the decode harness (kernels/harness/decode_probe.cu) into .gpu/decode/decode_probe (OUT_BIN names another
# file); extra arguments go to nvcc (-DDN_CTAS=4). Run it on the GPU machine: .gpu/decode/decode_probe [--iters N].
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v nvcc >/dev/null 2>&1 || . /opt/cuda-13.0/env.sh
out=${OUT_BIN:-.gpu/decode/decode_probe}
mkdir -p "$(dirname "$out")"
nvcc -O3 -std=c++17 -arch=sm_90 -Xptxas -v "$@" -o "$out" kernels/harness/decode_probe.cu 2>&1 \
  | grep -E "error|warning|spill" | grep -v " 0 bytes spill" || true
test -x "$out"
strip "$out"
