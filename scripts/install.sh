#!/usr/bin/env bash
# Sets codecoder up from this clone on any Linux with Python 3.11 or later, as root or not,
# wherever the clone is, without touching the system's Python:
#
#   bubblewrap   the @bwrap sandbox that contains commands: root installs it with apt; anyone
#                else is told the one line to run (without it commands run confined by Landlock
#                alone, or on the host, and codecoder says which)
#   .venv/       a virtual environment in the clone, its pip bootstrapped from a pinned wheel
#                when the system has no ensurepip (Debian without python3-venv)
#   codecoder    installed into it: editable with the test dependencies (the README's set-up),
#                or with --wheel a wheel built from the clone, without them
#   the PATH     a link to .venv/bin/codecoder in /usr/local/bin (root) or ~/.local/bin
#                (anyone else); CODECODER_BIN_DIR chooses another directory
#
# then runs the main job: says where commands run, runs one contained command, and replays a
# recorded agent run through the permission chain (examples/first-run.jsonl). It exits non-zero
# when any step fails.
#
#   bash scripts/install.sh               set up, or upgrade after a `git pull`
#   bash scripts/install.sh --wheel       the same with a non-editable install
#   bash scripts/install.sh --uninstall   remove the link and .venv (says what stays)
#
# docs/install.md is the user's guide; docs/decisions/install.md says why it is done this way.
set -euo pipefail
cd "$(dirname "$0")/.."
clone=$PWD
venv=$clone/.venv
python=${PYTHON:-python3}

# pip, for a venv made without it: a pinned release, checked against its digest before it runs.
PIP_WHEEL_URL=https://files.pythonhosted.org/packages/44/3c/d717024885424591d5376220b5e836c2d5293ce2011523c9de23ff7bf068/pip-25.3-py3-none-any.whl
PIP_WHEEL_SHA256=9655943313a94722b7774661c21049070f6bbb0a1516bf02f7c8d5d9201514cd

mode=editable
case "${1:-}" in
    "") ;;
    --wheel) mode=wheel ;;
    --uninstall) mode=uninstall ;;
    -h | --help)
        sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
        exit 0
        ;;
    *)
        echo "install.sh: unknown option $1 (--wheel, --uninstall or none)" >&2
        exit 2
        ;;
esac

if [ "$(id -u)" = 0 ]; then
    bin_dir=${CODECODER_BIN_DIR:-/usr/local/bin}
else
    bin_dir=${CODECODER_BIN_DIR:-$HOME/.local/bin}
fi
link=$bin_dir/codecoder

fail() {
    echo "install.sh: $*" >&2
    exit 1
}

# Whether `$1` is a link this script made for some clone's venv (never someone else's file).
our_link() {
    [ -L "$1" ] && case "$(readlink "$1")" in */.venv/bin/codecoder) true ;; *) false ;; esac
}

if [ "$mode" = uninstall ]; then
    if our_link "$link" && [ "$(readlink "$link")" = "$venv/bin/codecoder" ]; then
        rm -f "$link"
        echo "removed $link"
    elif [ -e "$link" ] || [ -L "$link" ]; then
        echo "left $link alone: it is not this clone's (it leads to $(readlink -f "$link"))"
    fi
    if [ -f "$venv/pyvenv.cfg" ]; then
        rm -rf "$venv"
        echo "removed $venv"
    fi
    state=${XDG_STATE_HOME:-$HOME/.local/state}/codecoder
    config=${XDG_CONFIG_HOME:-$HOME/.config}/codecoder
    echo "kept (yours to remove): the audit log, trust records and notes in $state;"
    echo "  your rules in $config; codecoder.json and .codecoder/ in your projects;"
    echo "  bubblewrap (apt-get remove bubblewrap); the Docker image (docker rmi codecoder-sandbox)"
    exit 0
fi

echo "== bubblewrap: commands run contained (@bwrap)"
if command -v bwrap >/dev/null; then
    echo "bubblewrap is installed: $(command -v bwrap)"
elif [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends bubblewrap
else
    echo "bubblewrap is missing. Install it with:"
    echo "    sudo apt-get install bubblewrap"
    echo "(or your distribution's bubblewrap package), then run this again. Until then commands"
    echo "run confined by Landlock alone (@confined), or on the host, and codecoder says which."
fi

echo "== Python: a venv in $venv"
command -v "$python" >/dev/null || fail "no $python: install Python 3.11 or later (apt-get install python3)"
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' ||
    fail "$("$python" --version 2>&1) is too old: codecoder needs Python 3.11 or later (set PYTHON=...)"
venv_works() {
    [ -x "$venv/bin/python" ] &&
        [ "$("$venv/bin/python" -c 'import sys; print(sys.prefix)' 2>/dev/null)" = "$venv" ] &&
        "$venv/bin/python" -m pip --version >/dev/null 2>&1
}
if venv_works; then
    echo "using the venv already there"
else
    # A venv that does not work here (the clone was moved, its Python went away) is made again.
    if [ -f "$venv/pyvenv.cfg" ]; then
        rm -rf "$venv"
    fi
    [ ! -e "$venv" ] || fail "$venv exists and is not a venv: move it away"
    if "$python" -c 'import ensurepip' 2>/dev/null; then
        "$python" -m venv "$venv"
    else
        echo "this Python has no ensurepip: pip comes from its wheel on PyPI (pinned, checked)"
        "$python" -m venv --without-pip "$venv" ||
            fail "$python cannot make a venv (its venv module is missing: apt-get install python3-venv)"
        "$venv/bin/python" - "$PIP_WHEEL_URL" "$PIP_WHEEL_SHA256" <<'EOF' || { rm -rf "$venv"; fail "pip could not be bootstrapped"; }
import hashlib
import os
import subprocess
import sys
import tempfile
import urllib.request

url, digest = sys.argv[1:3]
try:
    with urllib.request.urlopen(url, timeout=120) as response:
        data = response.read()
except OSError as exc:
    sys.exit(
        f"could not download pip ({url}): {getattr(exc, 'reason', exc)}. Behind a proxy, set "
        "https_proxy; behind one that inspects TLS, add its CA to the system's store "
        "(/usr/local/share/ca-certificates, then update-ca-certificates)"
    )
if hashlib.sha256(data).hexdigest() != digest:
    sys.exit(f"{url} is not the pip release this script pins (its sha256 differs)")
with tempfile.TemporaryDirectory() as directory:
    wheel = os.path.join(directory, url.rsplit("/", 1)[1])
    with open(wheel, "wb") as handle:
        handle.write(data)
    pip = os.path.join(wheel, "pip")  # a wheel is a zip that Python can run pip from
    command = [sys.executable, pip, "install", "--quiet", "--no-index", wheel]
    subprocess.run([*command, "--disable-pip-version-check"], check=True)
EOF
    fi
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check)

if [ "$mode" = wheel ]; then
    echo "== codecoder into the venv, from a wheel built from this clone"
    built=$(mktemp -d)
    trap 'rm -rf "$built"' EXIT
    "${pip[@]}" wheel --quiet --no-deps --wheel-dir "$built" .
    wheel=$(echo "$built"/codecoder_runtime-*.whl)
    "${pip[@]}" install --quiet "$wheel"
    # The same version number as an install before it: reinstalled, so an upgrade takes.
    "${pip[@]}" install --quiet --force-reinstall --no-deps "$wheel"
else
    echo "== codecoder into the venv, editable, with the test dependencies (minutes the first time)"
    "${pip[@]}" install --quiet -e '.[dev]'
fi
codecoder=$venv/bin/codecoder
[ -x "$codecoder" ] || fail "pip did not install $codecoder"

echo "== codecoder on the PATH: $link"
mkdir -p "$bin_dir"
if [ -L "$link" ] || [ ! -e "$link" ]; then
    if our_link "$link" && [ "$(readlink "$link")" != "$codecoder" ]; then
        echo "it led to $(readlink "$link") (another clone); now to this one"
    elif [ -L "$link" ] && ! our_link "$link"; then
        fail "$link is a link to $(readlink "$link"), not made by this script: remove it, or set CODECODER_BIN_DIR"
    fi
    ln -sfn "$codecoder" "$link"
else
    fail "$link exists and is not a link (an earlier install with pip?): remove it, or set CODECODER_BIN_DIR"
fi
found=$(command -v codecoder || true)
if [ "$found" != "$link" ]; then
    if [ -z "$found" ]; then
        echo "$bin_dir is not on your PATH in this shell. Debian's ~/.profile adds ~/.local/bin"
        echo "at your next login; or add it now (and to your shell's start-up file):"
        echo "    export PATH=\"$bin_dir:\$PATH\""
    else
        echo "note: 'codecoder' in this shell is $found, which comes before $link on your PATH"
    fi
fi

echo "== where commands run (codecoder check)"
work=$(mktemp -d)
trap 'rm -rf "$work" ${built:+"$built"}' EXIT
scratch=$work/project
mkdir "$scratch"
git -C "$scratch" init --quiet 2>/dev/null || true
"$codecoder" check --project "$scratch" | grep '^commands:' || fail "codecoder check failed"

echo "== a contained command (codecoder call run_command -- echo contained)"
"$codecoder" call --project "$scratch" --json --answer once run_command -- echo contained \
    >"$work/call.json" || true
"$venv/bin/python" - "$work/call.json" <<'EOF' || { fail "the contained command failed: codecoder cannot run commands here"; }
import json
import sys

with open(sys.argv[1]) as handle:
    text = handle.read()
try:
    outcome = json.loads(text)
except json.JSONDecodeError:
    sys.exit(text.strip() or "no output")
where = outcome.get("decision", {}).get("environment")
if not outcome.get("ok") or outcome["result"]["data"]["stdout"] != "contained\n":
    error = outcome.get("error") or outcome.get("result", {})
    sys.exit(f"in {where}: {error}")
print(f"it ran in {where}")
EOF

echo "== codecoder tools"
"$codecoder" tools
echo
echo "== codecoder replay examples/first-run.jsonl (answers come from the file; none = deny)"
# Line 3 has no answer, so it is refused: that refusal is the example's point. Any other outcome
# that is not a success is a failure of the main job.
"$codecoder" replay examples/first-run.jsonl --project "$scratch" --json >"$work/replay.json" || true
"$venv/bin/python" - "$work/replay.json" <<'EOF' || { fail "the replay failed: see above"; }
import json
import sys

with open(sys.argv[1]) as handle:
    text = handle.read()
try:
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
except json.JSONDecodeError:
    sys.exit(text.strip() or "no output")
failed = 0
for row in rows:
    decision = row.get("decision") or {}
    said = f"line {row.get('line')}: {row.get('tool')} {decision.get('key') or ''} "
    said += f"({decision.get('decision')}, {decision.get('source')}, in {decision.get('environment')})"
    error = row.get("error")
    if row.get("ok"):
        output = row["result"]["data"]["stdout"].strip().replace("\n", " | ")
        print(f"{said}: {output}")
    elif decision.get("decision") == "deny":
        print(f"{said}: refused: {(error or {}).get('message')}")
    else:
        failed += 1
        print(f"{said}: FAILED: {error or row.get('result')}", file=sys.stderr)
sys.exit(1 if failed or not rows else 0)
EOF
echo
echo "codecoder is set up: $link -> $codecoder"
