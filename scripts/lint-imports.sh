#!/usr/bin/env bash
# import-linter's layer and cycle contracts (pyproject.toml) over the code as it is installed:
# grimp walks a package's own directory, so it reads the tree of links scripts/package-tree.sh
# lays out (runtime/ is the package codecoder, environments/ codecoder.environments ...).
# The interpreter is $PYTHON (the one running the tests passes itself), else python3.
set -euo pipefail
cd "$(dirname "$0")/.."
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
bash scripts/package-tree.sh "$tree"
PYTHONPATH="$tree${PYTHONPATH:+:$PYTHONPATH}" "${PYTHON:-python3}" -c \
    'import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())' \
    --no-cache "$@"
