#!/usr/bin/env bash
# Create .venv (or $VENV) with txl-dist and its dev tools.
# The CPU build of torch goes in first so pip never pulls a multi-GB CUDA build; on a GPU
# machine set TORCH_SPEC to the build you want (e.g. TORCH_SPEC="torch --index-url ...") or to
# "" to keep the torch already in the environment. Every other package comes at the version in
# $CONSTRAINTS (launch/constraints.txt: what the suite last passed with; "" for the newest).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
TORCH_SPEC="${TORCH_SPEC-torch==2.13.0}"
CONSTRAINTS="${CONSTRAINTS-launch/constraints.txt}"

[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip
if [ -n "$TORCH_SPEC" ]; then
  # shellcheck disable=SC2086  # TORCH_SPEC may carry pip options
  "$VENV/bin/pip" install --quiet $TORCH_SPEC
fi
pinned=()
[ -n "$CONSTRAINTS" ] && pinned=(-c "$CONSTRAINTS")
"$VENV/bin/pip" install --quiet "${pinned[@]}" -e ".[dev]"
echo "installed into $VENV: $("$VENV/bin/python" -c 'import torch; print("torch", torch.__version__)')"
