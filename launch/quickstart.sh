#!/usr/bin/env bash
# The whole pipeline on the tiny config: prepare WikiText-103, train on 2 ranks (CPU or GPUs)
# with the DeepSpeed launcher, ZeRO-2 and bf16, evaluate, checkpoint. A few minutes on 2 CPU cores.
#
#   TXL_DATA_SOURCE=DIR   a local copy of WikiText-103 (offline); unset: the official download
#   TXL_DATA_DIR, TXL_OUT_DIR, TXL_NPROC   where the shards and the run go, and how many ranks
#   extra arguments go to launch/pretrain.py, e.g. --set train.max_steps=200
set -euo pipefail
cd "$(dirname "$0")/.."
data="${TXL_DATA_DIR:-runs/data/wikitext-103}"
out="${TXL_OUT_DIR:-runs/tiny}"
nproc="${TXL_NPROC:-2}"

source_args=()
[ -n "${TXL_DATA_SOURCE:-}" ] && source_args=(--source "$TXL_DATA_SOURCE")
.venv/bin/txl-prepare --dataset wikitext-103 "${source_args[@]}" --out "$data"

# The tiny config takes its vocabulary size from the data (model.n_token "auto"); a split the
# source lacks is not evaluated.
settings=(--set "data.path=$data" --set "train.out_dir=$out")
[ -f "$data/test/manifest.json" ] || settings+=(--set data.test_split=null)

exec .venv/bin/deepspeed --num_gpus "$nproc" launch/pretrain.py --config configs/tiny.json \
  "${settings[@]}" --resume auto "$@"
