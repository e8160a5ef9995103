#!/usr/bin/env bash
# Compiles every kernel in kernels/ to PTX for each GPU generation we target, with nvcc 13.0.
# Installs the toolchain from PyPI wheels first if it is not there (../shared/cuda/setup-cuda-13.0.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX=${CUDA_PREFIX:-/opt/cuda-13.0}
if [ ! -x "$PREFIX/bin/nvcc" ]; then
  setup=../shared/cuda/setup-cuda-13.0.sh
  [ -f "$setup" ] || { echo "no nvcc at $PREFIX and no $setup to install it"; exit 1; }
  bash "$setup" "$PREFIX" || bash "$setup" "$PREFIX"   # one retry for a flaky download
fi
# shellcheck disable=SC1091
. "$PREFIX/env.sh"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# One kernel file a job, as many jobs as cores.
ptx_all() {  # <kernel.cu>: its PTX for each target
  local arch
  for arch in 90 80 75; do
    nvcc --ptx -O3 -std=c++17 -arch=compute_$arch -o "$out/$(basename "$1" .cu)_$arch.ptx" "$1"
  done
  echo "ok: $1 (compute_90, compute_80, compute_75)"
}
export -f ptx_all
export out
printf '%s\n' kernels/*.cu | xargs -P "$(nproc)" -n 1 bash -c 'ptx_all "$1"' _
# The warpgroup product kernels as the build makes them for CUDA_COMPUTE_CAP=90 (wgmma, mbarriers, bulk copies:
# sm_90a machine code, so ptxas checks the asm too).
for k in df11_tc_wg df11_ws_gemm; do
  nvcc --cubin -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o "$out/${k}_90a.cubin" "kernels/$k.cu"
  echo "ok: kernels/$k.cu (sm_90a)"
done
# The streaming kernels' measurement builds (docs/PERFORMANCE.md: their floors), so that they keep compiling.
for flag in TS_NO_DECODE TS_NO_DRAM; do
  nvcc --ptx -O3 -std=c++17 -D$flag -arch=compute_90 -o "$out/df11_tc_stream_$flag.ptx" kernels/df11_tc_stream.cu
  echo "ok: kernels/df11_tc_stream.cu -D$flag (compute_90)"
done
# The host check that the streaming kernels' two decodes agree on every code word (kernels/harness/escape_bits_check.cu).
nvcc -O2 -std=c++17 -o "$out/escape_bits_check" kernels/harness/escape_bits_check.cu
"$out/escape_bits_check"
# The tensor-core identity harness (wgmma: sm_90a machine code, so ptxas checks the asm too).
# (ptxas notes where it adds warpgroup.arrive for the register operands: information, not a fault.)
nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o "$out/mma_identity" kernels/harness/mma_identity.cu \
  2>&1 | { grep -v -E "C7519|C7511" || true; }
echo "ok: kernels/harness/mma_identity.cu (sm_90a)"
# The product and decode measurement harnesses (host code too: compiled, not linked).
for h in tall_probe decode_probe ring_probe; do
  nvcc -c -O3 -std=c++17 -arch=sm_90 -o "$out/$h.o" "kernels/harness/$h.cu"
  echo "ok: kernels/harness/$h.cu (sm_90)"
done
for h in ss_probe ws_probe; do
  nvcc -c -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o "$out/$h.o" "kernels/harness/$h.cu"
  echo "ok: kernels/harness/$h.cu (sm_90a)"
done

# Run the kernel's own decode functions on the CPU (the harness's emulation mode) over every
# fixture unit and the real Qwen3-4B slice: bit-exact against the originals, status word clear.
bash kernels/harness/build.sh "$out/df11_harness"
python3 kernels/harness/export_fixture.py "$out/units" --fixtures tests/fixtures > /dev/null
"$out/df11_harness" --cpu "$out"/units/* | tail -1 | tee "$out/summary.txt"
grep -q "failed=0" "$out/summary.txt"
