#!/bin/sh
# Rebuild probe.wasm, the module `codecoder audit` runs to attack @wasm, from probe.c with
# Debian's clang for wasm32-wasi.
#
#   ./build.sh          rebuild probe.wasm in place
#   ./build.sh --check  rebuild into a temporary file and fail if the committed build differs
#
# Needs: apt-get install -y clang lld wasi-libc libclang-rt-14-dev-wasm32
# The output is deterministic for a given toolchain: no debug info, no names section, no
# build paths; the producers section only records the clang version. CI runs --check.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out="$here/probe.wasm"
if [ "${1:-}" = "--check" ]; then
    out=$(mktemp)
    trap 'rm -f "$out"' EXIT
fi
clang --target=wasm32-wasi -O2 -std=c11 -Wall -Wextra -Werror \
    -ffile-prefix-map="$here"=. \
    -Wl,--strip-all \
    -o "$out" "$here/probe.c"
chmod 644 "$out"
if [ "${1:-}" = "--check" ]; then
    if cmp -s "$out" "$here/probe.wasm"; then
        echo "probe.wasm is up to date"
    else
        echo "probe.wasm is stale: run sandboxes/escapes/build.sh and commit the result" >&2
        exit 1
    fi
fi
