#!/usr/bin/env bash
# Everything bench/gpu_check.sh needs that the GPU machine lacks, into ignored folders that
# travel with the working tree (the run's `carry`):
#   .whl/        wheels of our dependencies missing there (CPython 3.12, x86-64 Linux), at the
#                versions of launch/requirements.lock and checked against its hashes (pip
#                enforces a constraints file's hashes); deepspeed, published as a source archive
#                only, built here as its pure-Python wheel (its CUDA ops compile on first use)
#   .gpu-data/   the WikiText-103 prefix the engine rows train on (raw text; prepared there)
# Usage: bash bench/gpu_wheels.sh [SHARED_DATA]   (SHARED_DATA: the real corpora, ../shared/data)
# The reference for the speed rows is not fetched here: put a kimiyoung/transformer-xl checkout
# in .reference/transformer-xl (its pytorch/ folder suffices) to have those rows run.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA="${1:-../shared/data}"
PIP="${PIP:-.venv/bin/pip}"
# What the machine's image lacks of deepspeed's, webdataset's and pydantic's needs, and isal
# (checkpoints' CRC-32s); the rest (numpy, aiohttp, fsspec, safetensors, psutil, einops, msgpack,
# ninja, py-cpuinfo, tokenizers, ...) is there.
MISSING=(webdataset braceexpand hjson pydantic pydantic_core annotated-types typing-inspection
  typing_extensions isal)
PLATFORMS=(manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64)

rm -rf .whl && mkdir -p .whl
"$PIP" download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${PLATFORMS[@]/#/--platform=}" -c launch/requirements.lock -d .whl "${MISSING[@]}"
"$PIP" wheel --quiet --no-deps -c launch/requirements.lock -w .whl deepspeed

rm -rf .gpu-data && mkdir -p .gpu-data/wikitext-103
cp "$DATA"/wikitext-103/wiki.{train,valid}.tokens .gpu-data/wikitext-103/
du -sh .whl .gpu-data
