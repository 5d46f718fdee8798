#!/usr/bin/env bash
# Installs codecoder with its test dependencies, then runs the main job: a recorded agent run
# replayed through the permission chain (examples/first-run.jsonl), which needs no Docker engine.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m pip install --quiet --disable-pip-version-check -e '.[dev]'

echo "== codecoder tools"
codecoder tools
echo
echo "== codecoder replay examples/first-run.jsonl (answers come from the file; none = deny)"
workdir=$(mktemp -d)
git -C "$workdir" init --quiet
codecoder replay examples/first-run.jsonl --project "$workdir" || true
rm -rf "$workdir"
