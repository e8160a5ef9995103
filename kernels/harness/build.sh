#!/usr/bin/env bash
# Build the DF11 decode harness: bash kernels/harness/build.sh OUTPUT_BINARY [extra nvcc flags, e.g. -DDF11_MIN_BLOCKS=4]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:?usage: build.sh OUTPUT_BINARY [nvcc flags]}"
shift
command -v nvcc >/dev/null 2>&1 || . /opt/cuda-13.0/env.sh
nvcc -O3 -std=c++17 -arch=sm_90 -Xptxas -v "$@" -o "$out" "$here/df11_harness.cu" 2>&1 | grep -E "error|warning|registers|spill" || true
test -x "$out"
