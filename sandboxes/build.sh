#!/bin/sh
# Rebuild the committed builds from their C sources with Debian's clang:
#   fileops/fileops.wasm      the confined file layer of the @wasm tools (wasm32-wasi)
#   escapes/probe.wasm        the module `codecoder audit` runs to attack @wasm (wasm32-wasi)
#   image/runas-x86_64        the static helper the sandbox agent starts commands through
#   image/runas-aarch64       (the same for arm64 images; no libc, so no sysroot is needed)
#   bwrap/confine-x86_64      the static helper that applies Landlock and seccomp inside @bwrap
#   bwrap/confine-aarch64     (and alone, in @confined), just before a contained command runs
#
#   sandboxes/build.sh          rebuild them in place
#   sandboxes/build.sh --check  rebuild into temporary files and fail if a committed build differs
#
# Needs: apt-get install -y clang lld wasi-libc libclang-rt-14-dev-wasm32
# The output is deterministic for a given toolchain: no debug info, no names section, no
# build id, no build paths; the producers section only records the clang version. CI runs
# --check.
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
for helper in image/runas bwrap/confine; do
    for arch in x86_64 aarch64; do
        out="$root/$helper-$arch"
        if $check; then
            out=$(mktemp)
        fi
        clang --target="$arch-linux-gnu" -std=c11 -O2 -Wall -Wextra -Werror \
            -static -nostdlib -ffreestanding -fno-builtin -fno-stack-protector -fno-pie \
            -fno-asynchronous-unwind-tables -fuse-ld=lld \
            -Wl,--build-id=none -Wl,--strip-all -Wl,-z,noexecstack \
            -o "$out" "$root/$helper.c"
        chmod 755 "$out"
        if $check; then
            if cmp -s "$out" "$root/$helper-$arch"; then
                echo "$helper-$arch is up to date"
            else
                echo "$helper-$arch is stale: run sandboxes/build.sh and commit the result" >&2
                stale=1
            fi
            rm -f "$out"
        fi
    done
done
exit $stale
