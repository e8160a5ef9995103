#!/usr/bin/env bash
# Builds the CUTLASS-vs-cuBLAS GEMM benchmarks (sm_90a) into .gpu/cutlass/: cutlass_gemm (BF16,
# kernels/harness/cutlass_gemm.cu) and cutlass_mixed (narrow weights converted in registers,
# kernels/harness/cutlass_mixed.cu), and writes .gpu/cutlass/run.sh, which runs them on the GPU
# machine.
# Usage (here, no GPU needed): [CUTLASS_BENCH="gemm mixed"] bash kernels/harness/cutlass_gemm.sh [extra nvcc flags]
#   CUTLASS_BENCH picks the benchmarks to build (default both). Fetches the CUTLASS headers first
#   if needed (scripts/fetch-cutlass.sh). Each source is compiled as several translation units,
#   one after the other (part 0: main, cuBLAS and the driver; 1..: a configuration table each;
#   ~1.5 min and ~6 GB of memory for a part of cutlass_gemm, ~1.5 min and ~4.5 GB for one of
#   cutlass_mixed); a part whose object is newer than its sources, this script and the flags is
#   not compiled again.
# Then, on the GPU machine (a checkout with .gpu/cutlass/ copied in):
#   bash .gpu/cutlass/run.sh [ROWS...]            the BF16 benchmark
#   MIXED=1 bash .gpu/cutlass/run.sh [ROWS...]    the mixed-input benchmark
#   (options for the binary: CUTLASS_GEMM_ARGS="--exact", "--configs u8_", ...)
set -euo pipefail
SELF=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
cd "$(dirname "$0")/../.."
H=kernels/harness
OUTD=.gpu/cutlass
# Objects stay out of .gpu/ (what travels to the GPU machine): next to the headers, ignored by git.
OBJ=${CUTLASS_OBJ:-.cutlass/obj}
bash scripts/fetch-cutlass.sh
command -v nvcc >/dev/null 2>&1 || . /opt/cuda-13.0/env.sh
mkdir -p "$OBJ" "$OUTD"
FLAGS=(-O3 -std=c++17 -arch=sm_90a --expt-relaxed-constexpr -DNDEBUG
       -I.cutlass/include -I.cutlass/util/include "$@")
echo "${FLAGS[*]}" > "$OBJ/flags.new"
cmp -s "$OBJ/flags.new" "$OBJ/flags" || mv "$OBJ/flags.new" "$OBJ/flags"
rm -f "$OBJ/flags.new"
# The headers each kind of part includes.
DEPS_MAIN=("$H/cutlass_bench_api.cuh" "$H/cutlass_bench.cuh" "$H/cutlass_bench_run.cuh"
           "$H/cutlass_bench_shape.cuh")
DEPS_CUTLASS=("$H/cutlass_bench_api.cuh" "$H/cutlass_sm90.cuh")

# build NAME MACRO PARTS: compiles $H/NAME.cu as parts 0..PARTS-1 (-DMACRO=part) and links
# $OUTD/NAME.
build() {
  local name=$1 macro=$2 parts=$3 src=$H/$1.cu objs=() part o deps dep fresh start
  for ((part = 0; part < parts; part++)); do
    o="$OBJ/${name}_part$part.o"
    objs+=("$o")
    if [ "$part" -eq 0 ]; then deps=("${DEPS_MAIN[@]}"); else deps=("${DEPS_CUTLASS[@]}"); fi
    fresh=1
    [ -f "$o" ] || fresh=0
    for dep in "$src" "$SELF" "$OBJ/flags" "${deps[@]}"; do
      [ "$fresh" -eq 1 ] && [ "$o" -nt "$dep" ] || fresh=0
    done
    if [ "$fresh" -eq 1 ]; then
      echo "$name part $part: up to date"
      continue
    fi
    start=$SECONDS
    mkdir -p "$OBJ"
    nvcc "${FLAGS[@]}" "-D$macro=$part" -c "$src" -o "$o.tmp"
    mv "$o.tmp" "$o"
    echo "$name part $part: compiled in $((SECONDS - start)) s"
  done
  nvcc -arch=sm_90a "${objs[@]}" -lcublas -o "$OUTD/$name"
  strip "$OUTD/$name"
  chmod +x "$OUTD/$name"
}

for bench in ${CUTLASS_BENCH:-gemm mixed}; do
  case $bench in
    gemm) build cutlass_gemm CG_PART 4 ;;
    mixed) build cutlass_mixed CM_PART 7 ;;
    *) echo "unknown benchmark $bench (gemm, mixed)" >&2; exit 2 ;;
  esac
done
total=0
for b in "$OUTD/cutlass_gemm" "$OUTD/cutlass_mixed"; do
  [ -f "$b" ] && total=$((total + $(stat -c %s "$b")))
done
if [ "$total" -ge $((10 << 20)) ]; then
  echo "error: the benchmarks in $OUTD are $total bytes together (limit 10 MiB)" >&2
  exit 1
fi

cat > "$OUTD/run.sh" <<'EOS'
#!/usr/bin/env bash
# Runs a CUTLASS-vs-cuBLAS GEMM benchmark (built by kernels/harness/cutlass_gemm.sh) on a Hopper
# GPU: Qwen3-8B's four per-layer products, one process per row count (a fatal error in one loses
# only that one), then the per-layer sums of all of them.
# Usage: bash .gpu/cutlass/run.sh [ROWS...]          BF16 (default rows 1 8 16 32 64 128 512 4096)
#        MIXED=1 bash .gpu/cutlass/run.sh [ROWS...]  mixed input (default 16 32 64 128 512 4096)
#   CUTLASS_GEMM_ARGS: more options for the binary (e.g. "--exact", "--configs coop,pp");
#   logs in $OUT (default /tmp/df11-cutlass).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
if [ "${MIXED:-0}" = 1 ]; then
  BIN=$HERE/cutlass_mixed; TAG=mixed_; DEFAULT_ROWS=(16 32 64 128 512 4096)
else
  BIN=$HERE/cutlass_gemm; TAG=; DEFAULT_ROWS=(1 8 16 32 64 128 512 4096)
fi
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
[ ${#rows[@]} -gt 0 ] || rows=("${DEFAULT_ROWS[@]}")
"$BIN" --list
status=()
for r in "${rows[@]}"; do
  f=$LOG/${TAG}rows$r.txt
  # shellcheck disable=SC2086
  "$BIN" --rows "$r" ${CUTLASS_GEMM_ARGS:-} 2>&1 | tee "$f"
  rc=${PIPESTATUS[0]}
  status+=("rows $r: $(tail -1 "$f") (exit $rc)")
done
echo
echo "== per-layer sums (qkv+o+gate_up+down), us"
grep -h '^SUM' "$LOG/${TAG}"rows*.txt | sort -k2,2n -s | uniq
printf '%s\n' "${status[@]}"
EOS
chmod +x "$OUTD/run.sh"
ls -la "$OUTD"/cutlass_gemm "$OUTD"/cutlass_mixed "$OUTD/run.sh" 2>/dev/null || true
