#!/usr/bin/env bash
# mypy (strict, as configured in pyproject.toml) over the code as it is installed: runtime/ is
# the package codecoder, environments/ codecoder.environments, and so on. mypy cannot follow the
# import hook of an editable install, so it reads a tree of links with that layout.
# The interpreter is $PYTHON (the one running the tests passes itself), else python3.
set -euo pipefail
cd "$(dirname "$0")/.."
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
bash scripts/package-tree.sh "$tree"
MYPYPATH="$tree" "${PYTHON:-python3}" -m mypy "$@" --exclude '/sandboxes/image/agent/' -p codecoder
# The sandbox image's agent is no package of codecoder: the interpreter in the container runs its
# directory, whose modules import one another by their bare names (sandboxes/image/agent/).
MYPYPATH=sandboxes/image/agent "${PYTHON:-python3}" -m mypy "$@" --explicit-package-bases sandboxes/image/agent
