#!/usr/bin/env bash
# Installs bubblewrap (the @bwrap sandbox that contains run_command) and codecoder with its test
# dependencies, then runs the main job: a recorded agent run replayed through the permission
# chain (examples/first-run.jsonl), which needs no Docker engine.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v bwrap >/dev/null; then
    echo "== bubblewrap: commands run contained (@bwrap)"
    if [ "$(id -u)" = 0 ]; then
        apt-get update -q
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends bubblewrap
    else
        echo "bubblewrap is missing: run 'sudo apt-get install bubblewrap', or commands run" \
            "confined by Landlock only (@confined), or on the host" >&2
    fi
fi

python3 -m pip install --quiet --disable-pip-version-check -e '.[dev]'

echo "== where commands run (codecoder check)"
checked=$(mktemp -d)
codecoder check --project "$checked" | grep '^commands:' || true
rm -rf "$checked"

echo "== codecoder tools"
codecoder tools
echo
echo "== codecoder replay examples/first-run.jsonl (answers come from the file; none = deny)"
workdir=$(mktemp -d)
git -C "$workdir" init --quiet
codecoder replay examples/first-run.jsonl --project "$workdir" || true
rm -rf "$workdir"
