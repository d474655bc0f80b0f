#!/usr/bin/env bash
# Regenerate launch/requirements.lock, the hashed lock launch/install.sh installs: resolve
# pyproject.toml's dependencies, its dev extra and launch/requirements.in (pip-tools'
# pip-compile, through pip and its configuration, so where torch's CPU build is found too), with
# every file's hash from the index; install the result in a fresh environment, run the test suite
# there, and keep the new lock only if it passes.
# Usage: bash launch/update_lock.sh [PIP_COMPILE_OPTIONS]
#   no options                  every package to its newest release (--upgrade)
#   --upgrade-package NAME      only NAME (and what it needs) to its newest release
#   --no-upgrade                the same pins: after a change to pyproject.toml's dependencies
set -euo pipefail
cd "$(dirname "$0")/.."
LOCK=launch/requirements.lock
VENV=.venv-update
TOOLS="$(mktemp -d)"
trap 'rm -rf "$TOOLS" "$VENV"' EXIT
cp "$LOCK" "$TOOLS/previous.lock"
restore() {
  cp "$TOOLS/previous.lock" "$LOCK"
  echo "$1: $LOCK left as it was" >&2
  exit 1
}

python3 -m venv "$TOOLS/venv"
"$TOOLS/venv/bin/pip" install --quiet pip-tools==7.6.2
CUSTOM_COMPILE_COMMAND="bash launch/update_lock.sh" "$TOOLS/venv/bin/pip-compile" --quiet \
  --generate-hashes --allow-unsafe --strip-extras --no-emit-index-url --no-emit-find-links \
  --extra dev --output-file "$LOCK" "${@:---upgrade}" pyproject.toml launch/requirements.in
rm -rf "$VENV"
VENV="$VENV" bash launch/install.sh || restore "the new lock did not install"
"$VENV/bin/python" -m pytest || restore "the suite failed with the new lock"
git diff --stat -- "$LOCK"
echo "$LOCK rewritten; review and commit it"
