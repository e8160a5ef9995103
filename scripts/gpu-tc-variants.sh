#!/usr/bin/env bash
# Kernel measurements: builds variants of kernels/df11_tc_stream.cu's PTX (other -D settings) into
# .gpu/tc/ptx/ for tc_probe (after scripts/gpu-tc.sh). On the GPU machine, e.g.:
#     TC_VARIANTS="DF11_TC_STREAM_PTX=.gpu/tc/ptx/d3.ptx DF11_TC_STREAM_DEPTH=3" bash .gpu/tc/run.sh 1 8
# (tc/stream.rs: DF11_TC_STREAM_PTX replaces the embedded module, DF11_TC_STREAM_DEPTH gives its
# TS_DEPTH; variants that sum in another order need TC_PROBE_NO_CHECK=1.)
# Usage: scripts/gpu-tc-variants.sh NAME="-DFLAG=1 ..." ...
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .gpu/tc/ptx
cap=${CUDA_COMPUTE_CAP:-90}
for v in "$@"; do
  name=${v%%=*}
  flags=${v#*=}
  # shellcheck disable=SC2086
  (cd kernels && ${NVCC:-nvcc} --ptx -O3 -std=c++17 -arch=compute_$cap $flags -o "../.gpu/tc/ptx/$name.ptx" df11_tc_stream.cu)
  echo "built .gpu/tc/ptx/$name.ptx ($flags)"
done
