#!/usr/bin/env bash
# Regenerate launch/requirements.lock, the hashed lock launch/install.sh installs: resolve
# pyproject.toml's dependencies, its dev extra and launch/requirements.in (pip-tools'
# pip-compile, through pip and its configuration, so where torch's CPU build is found too), with
# every file's hash from the index; install the result in a fresh environment, run the test suite
# there, and keep the new lock only if it passes.
# pip-tools itself is installed from launch/pip-tools.lock, hash-checked like everything else:
# the tool that computes every hash of the lock is the file locked, not whatever the index serves.
# Usage: bash launch/update_lock.sh [PIP_COMPILE_OPTIONS]
#   no options                  every package to its newest release (--upgrade)
#   --upgrade-package NAME      only NAME (and what it needs) to its newest release
#   --no-upgrade                the same pins: after a change to pyproject.toml's dependencies
#   --tools [OPTIONS]           regenerate launch/pip-tools.lock instead (launch/pip-tools.in's
#                               pin, by the pip-tools locked now); review it and commit it
set -euo pipefail
cd "$(dirname "$0")/.."
LOCK=launch/requirements.lock
VENV=.venv-update
TOOLS="$(mktemp -d)"
trap 'rm -rf "$TOOLS" "$VENV"' EXIT
compile() {  # pip-compile OUTPUT [OPTIONS] INPUTS..., hashes of every file from the index
  local output="$1"
  shift
  CUSTOM_COMPILE_COMMAND="bash launch/update_lock.sh${tools:+ --tools}" \
    "$TOOLS/venv/bin/pip-compile" --quiet --generate-hashes --allow-unsafe --strip-extras \
    --no-emit-index-url --no-emit-find-links --output-file "$output" "$@"
}

python3 -m venv "$TOOLS/venv"
"$TOOLS/venv/bin/pip" install --quiet --require-hashes --no-deps -r launch/pip-tools.lock
"$TOOLS/venv/bin/pip" check --quiet
tools=""
if [ "${1-}" = --tools ]; then
  tools=1
  shift
  compile launch/pip-tools.lock "$@" launch/pip-tools.in
  git diff --stat -- launch/pip-tools.lock
  echo "launch/pip-tools.lock rewritten; review and commit it"
  exit 0
fi
cp "$LOCK" "$TOOLS/previous.lock"
restore() {
  cp "$TOOLS/previous.lock" "$LOCK"
  echo "$1: $LOCK left as it was" >&2
  exit 1
}

compile "$LOCK" --extra dev "${@:---upgrade}" pyproject.toml launch/requirements.in
rm -rf "$VENV"
VENV="$VENV" bash launch/install.sh || restore "the new lock did not install"
"$VENV/bin/python" -m pytest || restore "the suite failed with the new lock"
git diff --stat -- "$LOCK"
echo "$LOCK rewritten; review and commit it"
