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
cat > .gpu/tall/run.sh <<'EOS'
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
if ldd "$HERE/${TALL_BIN:-tall_probe}" | grep -q 'libcublas.*not found'; then
  lib=$(find / -name 'libcublas.so.13' 2>/dev/null | head -1)
  [ -n "$lib" ] || { echo "libcublas.so.13 not found on this machine" >&2; exit 2; }
  export LD_LIBRARY_PATH="$(dirname "$lib")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
"$HERE/${TALL_BIN:-tall_probe}" "$@"
EOS
ls -la .gpu/tall
