#!/usr/bin/env bash
# Downloads, here, the wheels the official DFloat11 runtime needs on the GPU machine (which has
# PyTorch, cupy, accelerate and safetensors but no network): dfloat11 0.5.0, dahuffman 0.4.2,
# the transformers 4.51 line with the tokenizers and huggingface_hub it accepts, and a setuptools
# that still has pkg_resources (dfloat11 imports it) (~15 MB) into
# .whl/ (ignored by git; copy it to the GPU machine with the repository). There, before
# scripts/official-bench.py:
#     python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
#     export PYTHONPATH=/tmp/site
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d .whl \
  dfloat11==0.5.0 dahuffman==0.4.2 transformers==4.51.3 "tokenizers>=0.21,<0.22" \
  "huggingface_hub>=0.30,<1.0" "setuptools<81"
ls -la .whl
