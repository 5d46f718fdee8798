#!/bin/sh
# Rebuild the committed WASI modules from their C sources with Debian's clang for wasm32-wasi:
#   fileops/fileops.wasm  the confined file layer of the @wasm tools
#   escapes/probe.wasm    the module `codecoder audit` runs to attack @wasm
#
#   sandboxes/build.sh          rebuild them in place
#   sandboxes/build.sh --check  rebuild into temporary files and fail if a committed build differs
#
# Needs: apt-get install -y clang lld wasi-libc libclang-rt-14-dev-wasm32
# The output is deterministic for a given toolchain: no debug info, no names section, no
# build paths; the producers section only records the clang version. CI runs --check.
set -eu
root=$(cd "$(dirname "$0")" && pwd)
check=false
[ "${1:-}" = "--check" ] && check=true
stale=0
for module in fileops/fileops escapes/probe; do
    dir="$root/$(dirname "$module")"
    name=$(basename "$module")
    out="$dir/$name.wasm"
    if $check; then
        out=$(mktemp)
    fi
    clang --target=wasm32-wasi -O2 -std=c11 -Wall -Wextra -Werror \
        -ffile-prefix-map="$dir"=. \
        -Wl,--strip-all \
        -o "$out" "$dir/$name.c"
    chmod 644 "$out"
    if $check; then
        if cmp -s "$out" "$dir/$name.wasm"; then
            echo "$module.wasm is up to date"
        else
            echo "$module.wasm is stale: run sandboxes/build.sh and commit the result" >&2
            stale=1
        fi
        rm -f "$out"
    fi
done
exit $stale
