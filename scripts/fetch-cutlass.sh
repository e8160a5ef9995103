#!/usr/bin/env bash
# Fetches the CUTLASS 4.2.0 C++ headers (CuTe, CUTLASS, and the tools/util headers) from NVIDIA's
# PyPI wheel `nvidia-cutlass==4.2.0.0`, pinned by its sha256, for the standalone CUTLASS
# benchmarks (kernels/harness/cutlass_gemm.sh). Only the headers are kept (~30 MB):
#     $CUTLASS_DIR/include        cute/, cutlass/
#     $CUTLASS_DIR/util/include   cutlass/util/
# CUTLASS_DIR defaults to <repo>/.cutlass (ignored by git). Needs python3 with pip and PyPI.
# Usage: bash scripts/fetch-cutlass.sh        (then: nvcc -I.cutlass/include -I.cutlass/util/include)
# Runs once: a stamp file records the version and hash; a second run with the same stamp does
# nothing. A wheel whose hash differs from the pinned one is refused and nothing is installed.
set -euo pipefail
VERSION=4.2.0.0
SHA256=f9599ada45c7bcb6bf53f7d3f0a7d154183e53451c01bfa59eecd37dd4a693f6
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DEST=${CUTLASS_DIR:-$ROOT/.cutlass}
STAMP="$DEST/.stamp"
want="nvidia-cutlass==$VERSION sha256=$SHA256"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] \
    && [ -f "$DEST/include/cutlass/cutlass.h" ] && [ -f "$DEST/include/cute/tensor.hpp" ] \
    && [ -d "$DEST/util/include/cutlass/util" ]; then
  echo "CUTLASS $VERSION headers already in $DEST"
  exit 0
fi
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: "nvidia-cutlass==$VERSION" -d "$W"
whl=$(ls "$W"/nvidia_cutlass-"$VERSION"-*.whl)
got=$(sha256sum "$whl" | cut -d' ' -f1)
if [ "$got" != "$SHA256" ]; then
  echo "error: $(basename "$whl") has sha256 $got, expected $SHA256 (pinned in $0); not installed" >&2
  exit 1
fi
src=cutlass_library/source
unzip -q "$whl" "$src/include/cute/*" "$src/include/cutlass/*" "$src/tools/util/include/cutlass/util/*" -d "$W/x"
rm -rf "$DEST/include" "$DEST/util" "$STAMP"
mkdir -p "$DEST/util"
mv "$W/x/$src/include" "$DEST/include"
mv "$W/x/$src/tools/util/include" "$DEST/util/include"
echo "$want" > "$STAMP"
echo "CUTLASS $VERSION headers in $DEST ($(du -sh "$DEST" | cut -f1))"
