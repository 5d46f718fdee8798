#!/usr/bin/env bash
# Lays the folders out as they are installed, under the directory given ($1), as links:
# $1/codecoder holds runtime/'s entries (runtime/ is the package `codecoder`) and environments/,
# sandboxes/, benchmarks/ as its subpackages. Tools that walk a package's own directory (mypy,
# import-linter's grimp) cannot follow the editable install's mapping; they read this tree.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tree=${1:?usage: package-tree.sh DIRECTORY}
mkdir -p "$tree/codecoder"
for entry in "$repo"/runtime/*; do
    [ "$(basename "$entry")" = __pycache__ ] || ln -sfn "$entry" "$tree/codecoder/$(basename "$entry")"
done
for folder in environments sandboxes benchmarks; do
    ln -sfn "$repo/$folder" "$tree/codecoder/$folder"
done
