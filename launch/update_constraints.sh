#!/usr/bin/env bash
# Re-resolve every dependency to its newest release in a fresh environment, run the test suite
# there, and only if it passes rewrite launch/constraints.txt with the versions it passed with.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv-update
rm -rf "$VENV"
VENV="$VENV" CONSTRAINTS="" bash launch/install.sh
"$VENV/bin/python" -m pytest
{
  sed -n '1,/^# Re-resolve/p' launch/constraints.txt
  "$VENV/bin/pip" freeze --exclude-editable | grep -v '^torch==' | sort
} > launch/constraints.txt.new
mv launch/constraints.txt.new launch/constraints.txt
rm -rf "$VENV"
echo "launch/constraints.txt rewritten; review and commit it"
