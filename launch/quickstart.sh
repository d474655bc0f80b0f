#!/usr/bin/env bash
# The whole pipeline on 2 ranks (CPU or GPUs) with the DeepSpeed launcher, ZeRO-2 and bf16.
#
# As it is, in any checkout and without a network: the corpus in launch/sample/ (Python's
# standard library docstrings, PSF license: launch/sample/README.md) prepared with a 2,000-token
# BPE into runs/data/sample, configs/own_bpe.json trained for 200 steps into runs/sample,
# exported to runs/sample-export, evaluated on the valid split, and a sample generated.
#
#   TXL_DATA_SOURCE=DIR   WikiText-103 instead, from a local copy at DIR: prepared into
#                         runs/data/wikitext-103, the tiny config trained into runs/tiny (the
#                         docs' examples go on from these)
#   TXL_DATASET=wikitext-103   the same from the official download
#   TXL_DATA_DIR, TXL_OUT_DIR, TXL_NPROC   where the shards and the run go, and how many ranks
#   extra arguments go to launch/pretrain.py, e.g. --set train.max_steps=500
# Running it again resumes the run from its latest checkpoint.
set -euo pipefail
cd "$(dirname "$0")/.."
nproc="${TXL_NPROC:-2}"
dataset="${TXL_DATASET:-}"
[ -n "${TXL_DATA_SOURCE:-}" ] && dataset=wikitext-103

if [ "$dataset" = wikitext-103 ]; then
  data="${TXL_DATA_DIR:-runs/data/wikitext-103}"
  out="${TXL_OUT_DIR:-runs/tiny}"
  source_args=()
  [ -n "${TXL_DATA_SOURCE:-}" ] && source_args=(--source "$TXL_DATA_SOURCE")
  .venv/bin/txl-prepare --dataset wikitext-103 "${source_args[@]}" --out "$data"
  # The tiny config takes its vocabulary size from the data (model.n_token "auto"); a split
  # the source lacks is not evaluated.
  settings=(--set "data.path=$data" --set "train.out_dir=$out")
  [ -f "$data/test/manifest.json" ] || settings+=(--set data.test_split=null)
  exec .venv/bin/deepspeed --num_gpus "$nproc" launch/pretrain.py --config configs/tiny.json \
    "${settings[@]}" --resume auto "$@"
fi
[ -z "$dataset" ] || { echo "quickstart.sh: TXL_DATASET=$dataset: only wikitext-103" >&2; exit 2; }

data="${TXL_DATA_DIR:-runs/data/sample}"
out="${TXL_OUT_DIR:-runs/sample}"
.venv/bin/txl-prepare --dataset jsonl --source launch/sample --out "$data" --tokenizer bpe:2000 \
  --no-progress
# A short run: a faster learning rate and warm-up than the config's 1,000 steps.
.venv/bin/deepspeed --num_gpus "$nproc" launch/pretrain.py --config configs/own_bpe.json \
  --set "data.path=$data" --set "train.out_dir=$out" --set train.max_steps=200 \
  --set train.eval_interval=100 --set train.save_interval=100 --set optim.warmup_steps=20 \
  --set optim.lr=0.001 --resume auto "$@"
rm -rf "$out-export"  # the export of this run's latest checkpoint, made again
.venv/bin/txl-export "$out" "$out-export"
.venv/bin/txl-eval --model "$out-export" --data "$data" --split valid
.venv/bin/txl-generate --model "$out-export" --prompt "Return a new" --max-tokens 40 --top-p 0.9 \
  --seed 1
