#!/usr/bin/env bash
# The GPU suite, step 1 (here, no GPU needed): builds every test and bench binary with
# `--features cuda`, strips and packs them into .gpu/suite/ with scripts/gpu-suite-run.sh.
# Step 2 (on the GPU machine: a checkout of the same commit with .gpu/suite/ copied into it, from
# the repository root):
#     bash .gpu/suite/run.sh
# which runs every test binary on the GPU, compute-sanitizer memcheck over the decode tests, and
# the GPU bench, packs its logs into $OUT/suite-logs.tgz where OUT names a folder for the logs, and
# prints a summary (SUITE_PARTS: run.sh's header).
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX=${CUDA_PREFIX:-/opt/cuda-13.0}
if [ ! -x "$PREFIX/bin/nvcc" ]; then
  bash ../shared/cuda/setup-cuda-13.0.sh "$PREFIX"
fi
# shellcheck disable=SC1091
. "$PREFIX/env.sh"
export CUDA_COMPUTE_CAP=${CUDA_COMPUTE_CAP:-90}
TARGET=target/cuda
SUITE=.gpu/suite
rm -rf "$SUITE" && mkdir -p "$SUITE"

# --all-targets unifies dev-dependency features like `cargo test` does, so candle (and its
# 30-minute kernel build) is compiled once for both commands.
PKGS=${GPU_SUITE_PACKAGES:-"--workspace"}
# shellcheck disable=SC2086
cargo build --release $PKGS --features cuda --all-targets --target-dir "$TARGET"
# shellcheck disable=SC2086
cargo test --release $PKGS --features cuda --no-run --target-dir "$TARGET" \
  --message-format=json > "$SUITE/build.json"

# One line per test binary: <packed name> <crate folder relative to the repo root>.
python3 - "$SUITE" <<'PY'
import json, os, shutil, subprocess, sys
suite = sys.argv[1]
root = os.getcwd()
lines = []
for line in open(os.path.join(suite, "build.json")):
    m = json.loads(line)
    if m.get("reason") != "compiler-artifact" or not m.get("executable") or not m["profile"]["test"]:
        continue
    exe = m["executable"]
    crate_dir = os.path.relpath(os.path.dirname(m["manifest_path"]), root)
    name = os.path.basename(exe)
    shutil.copy(exe, os.path.join(suite, name))
    lines.append(f"{name} {crate_dir}")
open(os.path.join(suite, "tests.txt"), "w").write("\n".join(lines) + "\n")
PY
rm "$SUITE/build.json"
# The bench binaries (gpu_bench: the suite's bench part; sanitizer_probe: its sanitize part;
# tc_probe: kernel measurements). SUITE_NO_BENCH=1 leaves them out, for a pack that must stay
# small (then run the tests and variants parts only).
benches=(gpu_bench sanitizer_probe tc_probe)
[ -z "${SUITE_NO_BENCH:-}" ] || benches=()
for b in "${benches[@]}"; do cp "$TARGET/release/$b" "$SUITE/"; done
# The end-to-end bench's tools (scripts/gpu-e2e-run.sh uses them).
cp "$TARGET/release/synth_model" "$TARGET/release/df11" "$TARGET/release/qwen3-df11-bench" \
  "$TARGET/release/flux-df11-bench" "$SUITE/"
# The model binaries, for the models' end-to-end CLI tests (found beside the test binaries); a
# model crate without one (a library) has none to copy.
for m in models/*/; do
  m=$(basename "$m")
  [ -f "$TARGET/release/$m" ] || continue
  cp "$TARGET/release/$m" "$SUITE/"
  strip "$SUITE/$m"
done
# The binaries share most of their bytes (candle's embedded PTX): one xz stream with a window
# larger than all of them stores those bytes once (2.5 GB -> ~47 MB; ~10 GB of RAM to pack).
# SUITE_SYMBOLS="modules_exact ...": those test binaries keep their symbols (backtraces of a
# hang under cuda-gdb name the functions: scripts/gpu-test-replay.sh).
for f in "$SUITE"/*-* "${benches[@]/#/$SUITE/}" "$SUITE/synth_model" "$SUITE/df11"; do
  keep=""
  for s in ${SUITE_SYMBOLS:-}; do [[ $(basename "$f") == "$s"-* ]] && keep=1; done
  [ -n "$keep" ] || strip "$f"
done
# SUITE_SPLIT=1: three packs instead of one, for a GPU machine that takes a limited upload:
# bins-tests.tar.xz (the test binaries of crates/ and benches/, sanitizer_probe, df11),
# bins-models.tar.xz (the test binaries of models/ and the model programs) and
# bins-bench.tar.xz (gpu_bench, tc_probe, the end-to-end bench's tools). The scripts unpack
# whichever packs .gpu/suite holds (unpack.sh) and name the test binaries of the others as
# skipped, so the packs can be given one at a time (tests, sanitize and variants with the first
# two; bench and e2e.sh with the third, df11 from the first for its serve run).
pack() {  # <pack name> <file of binary names, in $SUITE>
  (cd "$SUITE" && tar cf - -T "$2" | xz -T1 --lzma2=preset=3,dict=1GiB > "$1.tar.xz" \
    && xargs rm -f < "$2" && rm "$2")
}
(cd "$SUITE" && find . -maxdepth 1 -type f ! -name '*.txt' -printf '%P\n' | sort > bins.txt)
if [ -n "${SUITE_SPLIT:-}" ]; then
  python3 - "$SUITE" <<'PY'
import os, sys
suite = sys.argv[1]
bins = open(os.path.join(suite, "bins.txt")).read().split()
crate_of = dict(line.split() for line in open(os.path.join(suite, "tests.txt")) if line.strip())
programs = {os.path.basename(m.rstrip("/")) for m in os.listdir("models")}
bench = {"gpu_bench", "tc_probe", "synth_model", "qwen3-df11-bench", "flux-df11-bench"}
packs = {"tests": [], "models": [], "bench": []}
for b in bins:
    if b in bench:
        packs["bench"].append(b)
    elif b in programs or crate_of.get(b, "").startswith("models/"):
        packs["models"].append(b)
    else:
        packs["tests"].append(b)
for name, names in packs.items():
    open(os.path.join(suite, f"{name}-bins.txt"), "w").write("".join(n + "\n" for n in names))
PY
  rm "$SUITE/bins.txt"
  for p in tests models bench; do pack "bins-$p" "$p-bins.txt"; done
else
  pack bins bins.txt
fi
cp scripts/gpu-suite-run.sh "$SUITE/run.sh"
cp scripts/gpu-unpack.sh "$SUITE/unpack.sh"
cp scripts/gpu-e2e-run.sh "$SUITE/e2e.sh"
cp scripts/gpu-prefill-run.sh "$SUITE/prefill.sh"
cp scripts/gpu-soak.sh "$SUITE/soak.sh"
cp scripts/gpu-split-check.sh "$SUITE/split.sh"
cp scripts/gpu-test-replay.sh "$SUITE/replay.sh"
cp scripts/gpu-exit-check.sh "$SUITE/exit.sh"
du -sh "$SUITE"
echo "now copy $SUITE/ into a checkout of this commit on the GPU machine and run there: bash $SUITE/run.sh"
