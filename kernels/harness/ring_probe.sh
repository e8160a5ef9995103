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
cat > .gpu/ring/run.sh <<'EOS'
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
if ldd "$HERE/ring_probe" | grep -q 'libcublas.*not found'; then
  lib=$(find / -name 'libcublas.so.13' 2>/dev/null | head -1)
  [ -n "$lib" ] || { echo "libcublas.so.13 not found on this machine" >&2; exit 2; }
  export LD_LIBRARY_PATH="$(dirname "$lib")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
"$HERE/ring_probe" "$@"
EOS
ls -la .gpu/ring
