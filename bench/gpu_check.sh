#!/usr/bin/env bash
# The GPU check of one H100 in one command (under 8 minutes): installs the carried wheels, then
# runs bench/gpu_check.py, which prints its table and writes $OUT/gpu_check.json.
#
# Before, on a machine with PyPI (once):   bash bench/gpu_wheels.sh
#   and a kimiyoung/transformer-xl checkout in .reference/transformer-xl for the reference rows.
# Then, with the device tool:
#   run(command="bash bench/gpu_check.sh", carry=[".whl", ".gpu-data", ".reference"],
#       timeout_s=540)
# Extra arguments go to gpu_check.py: e.g. a rerun of what a time limit cut off,
#   run(command="bash bench/gpu_check.sh --only speed", ...)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-runs/gpu_check}"
mkdir -p "$OUT"
if [ ! -d .whl ]; then
  echo "gpu_check.sh: no .whl/: run bench/gpu_wheels.sh where PyPI is reachable, carry .whl" >&2
  exit 2
fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl
export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
args=(--out "$OUT")
[ -d .gpu-data/wikitext-103 ] && args+=(--data .gpu-data/wikitext-103)
[ -d .reference/transformer-xl ] && args+=(--reference .reference/transformer-xl)
set -o pipefail
python3 bench/gpu_check.py "${args[@]}" "$@" 2>&1 | tee "$OUT/gpu_check.log"
