#!/usr/bin/env bash
# Create .venv (or $VENV) with txl-dist and its dev tools as the suite last passed with them:
# every package, pip and the build backend too, at the version in launch/requirements.lock and
# checked against the hashes there (pip's --require-hashes; bash launch/update_lock.sh
# regenerates the lock), then `pip check` that nothing is missing. txl-dist itself is this
# checkout, installed editable without build isolation (by the lock's setuptools).
#   TORCH_SPEC   unset: the lock's torch, its CPU build (pip never pulls a multi-GB CUDA build).
#                On a GPU machine the build you want, installed as asked and not hash-checked
#                (e.g. TORCH_SPEC="torch" or "torch --index-url ..."), or "" to keep the torch
#                already in the environment; the lock's other packages stay hash-checked.
#   CONSTRAINTS  the lock to install (default launch/requirements.lock); "" for the newest
#                releases, unpinned and unchecked (torch: TORCH_SPEC, unset the lock's version).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
CONSTRAINTS="${CONSTRAINTS-launch/requirements.lock}"
PIP=("$VENV/bin/python" -m pip install --quiet)

# The entries of the lock (a "name==version \" line and the indented lines under it) of the
# packages named, or, after "except", of all the others.
lock_entries() {
  local except=0
  [ "${1-}" = except ] && except=1 && shift
  awk -v names=" $* " -v except="$except" '
    /^[^ #]/ { split($1, pin, "=="); keep = (index(names, " " pin[1] " ") > 0) != except }
    keep' "${CONSTRAINTS:-launch/requirements.lock}"
}

[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
if [ -z "$CONSTRAINTS" ]; then
  "${PIP[@]}" --upgrade pip
  torch="${TORCH_SPEC-$(lock_entries torch | cut -d' ' -f1)}"
  # shellcheck disable=SC2086  # TORCH_SPEC may carry pip options
  [ -z "$torch" ] || "${PIP[@]}" $torch
  "${PIP[@]}" -e ".[dev]"
else
  "${PIP[@]}" --require-hashes --no-deps -r <(lock_entries pip)  # a new venv's own is older
  # shellcheck disable=SC2086
  [ -z "${TORCH_SPEC-}" ] || "${PIP[@]}" $TORCH_SPEC
  # With TORCH_SPEC set, even to "", the lock's torch stays out. deepspeed is published as a
  # source archive only: the archive is hash-checked, and the setuptools of its isolated build is
  # held to the lock's version (pip checks no hashes of build dependencies).
  "${PIP[@]}" --require-hashes --no-deps --build-constraint "$CONSTRAINTS" \
    -r <(lock_entries except ${TORCH_SPEC+torch})
  "${PIP[@]}" --no-deps --no-build-isolation -e .
  "$VENV/bin/python" -m pip check
fi
# DeepSpeed's CPU shared-memory kernel, built now (about a minute, once) rather than in silence
# by the first CPU run; nothing to build on a GPU machine. A failure here only defers it.
"$VENV/bin/python" -c "from txl_dist.process.dist import prebuild_cpu_kernel as b; b(print)" \
  2>/dev/null || echo "install.sh: the kernel was not built; the first CPU run builds it" >&2
echo "installed into $VENV: $("$VENV/bin/python" -c 'import torch; print("torch", torch.__version__)')"
