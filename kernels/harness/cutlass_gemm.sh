#!/usr/bin/env bash
# Builds the CUTLASS-vs-cuBLAS BF16 GEMM benchmark (kernels/harness/cutlass_gemm.cu, sm_90a) into
# .gpu/cutlass/cutlass_gemm, and writes .gpu/cutlass/run.sh, which runs it on the GPU machine.
# Usage (here, no GPU needed): bash kernels/harness/cutlass_gemm.sh [extra nvcc flags]
#   Fetches the CUTLASS headers first if needed (scripts/fetch-cutlass.sh). The source is compiled
#   as four translation units, one after the other (CG_PART=0: main and cuBLAS; 1..3: the
#   configuration tables; ~1.5 min and ~6 GB of memory each for 1..3); a part whose object is
#   newer than the source, this script and the flags is not compiled again.
# Then, on the GPU machine (a checkout with .gpu/cutlass/ copied in):
#   bash .gpu/cutlass/run.sh [ROWS...]      (options for the binary: CUTLASS_GEMM_ARGS="--exact")
set -euo pipefail
SELF=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
cd "$(dirname "$0")/../.."
SRC=kernels/harness/cutlass_gemm.cu
OUTD=.gpu/cutlass
OBJ=$OUTD/obj
bash scripts/fetch-cutlass.sh
command -v nvcc >/dev/null 2>&1 || . /opt/cuda-13.0/env.sh
mkdir -p "$OBJ"
FLAGS=(-O3 -std=c++17 -arch=sm_90a --expt-relaxed-constexpr -DNDEBUG
       -I.cutlass/include -I.cutlass/util/include "$@")
echo "${FLAGS[*]}" > "$OBJ/flags.new"
cmp -s "$OBJ/flags.new" "$OBJ/flags" || mv "$OBJ/flags.new" "$OBJ/flags"
rm -f "$OBJ/flags.new"
objs=()
for part in 0 1 2 3; do
  o="$OBJ/part$part.o"
  objs+=("$o")
  if [ -f "$o" ] && [ "$o" -nt "$SRC" ] && [ "$o" -nt "$SELF" ] && [ "$o" -nt "$OBJ/flags" ]; then
    echo "part $part: up to date"
    continue
  fi
  start=$SECONDS
  nvcc "${FLAGS[@]}" -DCG_PART=$part -c "$SRC" -o "$o.tmp"
  mv "$o.tmp" "$o"
  echo "part $part: compiled in $((SECONDS - start)) s"
done
nvcc -arch=sm_90a "${objs[@]}" -lcublas -o "$OUTD/cutlass_gemm"
strip "$OUTD/cutlass_gemm"
size=$(stat -c %s "$OUTD/cutlass_gemm")
if [ "$size" -ge $((20 << 20)) ]; then
  echo "error: $OUTD/cutlass_gemm is $size bytes (limit 20 MiB)" >&2
  exit 1
fi

cat > "$OUTD/run.sh" <<'EOS'
#!/usr/bin/env bash
# Runs the CUTLASS-vs-cuBLAS BF16 GEMM benchmark (built by kernels/harness/cutlass_gemm.sh) on a
# Hopper GPU: Qwen3-8B's four per-layer products, one process per row count (a fatal error in
# one loses only that one), then the per-layer sums of all of them.
# Usage: bash .gpu/cutlass/run.sh [ROWS...]   (default 1 8 16 32 64 128 512 4096)
#   CUTLASS_GEMM_ARGS: more options for the binary (e.g. "--exact", "--configs coop,pp");
#   logs in $OUT (default /tmp/df11-cutlass).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=$HERE/cutlass_gemm
LOG=${OUT:-/tmp/df11-cutlass}
mkdir -p "$LOG"
if ldd "$BIN" | grep -q 'libcublas.*not found'; then
  lib=$(find / -name 'libcublas.so.13' 2>/dev/null | head -1)
  if [ -z "$lib" ]; then echo "libcublas.so.13 not found on this machine" >&2; exit 2; fi
  export LD_LIBRARY_PATH="$(dirname "$lib")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "cuBLAS from $(dirname "$lib")"
fi
nvidia-smi -L 2>/dev/null || true
rows=("$@")
[ ${#rows[@]} -gt 0 ] || rows=(1 8 16 32 64 128 512 4096)
"$BIN" --list
status=()
for r in "${rows[@]}"; do
  # shellcheck disable=SC2086
  "$BIN" --rows "$r" ${CUTLASS_GEMM_ARGS:-} 2>&1 | tee "$LOG/rows$r.txt"
  rc=${PIPESTATUS[0]}
  status+=("rows $r: $(tail -1 "$LOG/rows$r.txt") (exit $rc)")
done
echo
echo "== per-layer sums (qkv+o+gate_up+down), us"
grep -h '^SUM' "$LOG"/rows*.txt | sort -k2,2n -s | uniq
printf '%s\n' "${status[@]}"
EOS
chmod +x "$OUTD/run.sh" "$OUTD/cutlass_gemm"
ls -la "$OUTD/cutlass_gemm" "$OUTD/run.sh"
