#!/usr/bin/env bash
# Prepare this machine for codecoder's @docker environment, from nothing to a usable sandbox image.
#
# Idempotent: every step checks first and says what it found, so running it twice is cheap.
#   1. install docker.io, docker-compose (v1), debootstrap and busybox-static when missing
#   2. start dockerd in the background when no engine answers (log: $CODECODER_DOCKERD_LOG)
#   3. build the base image codecoder-base:bookworm with debootstrap + docker import, because no
#      container registry is reachable here and `FROM debian:bookworm` cannot be pulled
#   4. build codecoder-sandbox from the top-level Dockerfile (cached layers make a rebuild quick,
#      and rebuilding every time picks up changes to sandboxes/image/)
#
# Environment knobs:
#   CODECODER_CACHE         where the debootstrap rootfs lives (default /var/cache/codecoder;
#                           never inside the repository)
#   CODECODER_DEBIAN_MIRROR Debian mirror for debootstrap (default http://deb.debian.org/debian)
#   CODECODER_DOCKERD_LOG   dockerd's log file (default /var/log/codecoder-dockerd.log)
#   CODECODER_REBUILD_BASE  set to 1 to rebuild the base image from a fresh rootfs
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${CODECODER_CACHE:-/var/cache/codecoder}
MIRROR=${CODECODER_DEBIAN_MIRROR:-http://deb.debian.org/debian}
DOCKERD_LOG=${CODECODER_DOCKERD_LOG:-/var/log/codecoder-dockerd.log}
SUITE=bookworm
BASE_IMAGE=codecoder-base:$SUITE
SANDBOX_IMAGE=codecoder-sandbox
# Packages the sandbox image needs beyond minbase: the agent is Python (python3, not
# python3-minimal, which lacks json), tools expect git; bash and coreutils are Essential anyway
# but are named so the image's contract is written down in one place.
BASE_PACKAGES=python3,git,bash,coreutils,ca-certificates

step() { printf '\n==> %s\n' "$*"; }
info() { printf '    %s\n' "$*"; }
elapsed() { printf '%ss' "$((SECONDS - $1))"; }

if [[ $(id -u) -ne 0 ]]; then
    echo "docker-setup.sh installs packages and starts dockerd: run it as root (sudo $0)" >&2
    exit 1
fi

# --- 1. packages -------------------------------------------------------------------------------
step "packages"
missing=()
# Probe by command, not by package name, so an engine installed another way (docker-ce, a
# static client in /usr/local/bin) is accepted instead of fought with.
command -v dockerd >/dev/null || missing+=(docker.io)
command -v docker-compose >/dev/null || missing+=(docker-compose)
command -v debootstrap >/dev/null || missing+=(debootstrap)
# The canary image needs a *static* busybox: a FROM-scratch image has no libc.
dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q 'install ok installed' \
    || missing+=(busybox-static)
if ((${#missing[@]})); then
    t=$SECONDS
    info "installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends "${missing[@]}"
    info "installed in $(elapsed "$t")"
else
    info "docker.io, docker-compose, debootstrap, busybox-static: already present"
fi

# --- 2. engine ---------------------------------------------------------------------------------
step "docker engine"
engine_up() { docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }
if engine_up; then
    info "engine answers: $(docker version --format 'server {{.Server.Version}}')"
else
    t=$SECONDS
    info "no engine answers; starting dockerd (log: $DOCKERD_LOG)"
    mkdir -p "$(dirname "$DOCKERD_LOG")"
    # setsid + nohup: the daemon must outlive this script and the terminal that ran it.
    setsid nohup dockerd >>"$DOCKERD_LOG" 2>&1 </dev/null &
    for _ in $(seq 1 60); do
        engine_up && break
        sleep 0.5
    done
    if ! engine_up; then
        echo "dockerd did not answer within 30 s; last lines of $DOCKERD_LOG:" >&2
        tail -n 20 "$DOCKERD_LOG" >&2 || true
        exit 1
    fi
    info "dockerd up in $(elapsed "$t"): $(docker version --format 'server {{.Server.Version}}')"
fi

# --- 3. base image -----------------------------------------------------------------------------
step "base image $BASE_IMAGE"
if [[ ${CODECODER_REBUILD_BASE:-0} == 1 ]]; then
    info "CODECODER_REBUILD_BASE=1: discarding the cached rootfs"
    rm -rf "$CACHE/rootfs-$SUITE"
fi
if [[ ${CODECODER_REBUILD_BASE:-0} != 1 ]] && docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
    info "already built ($(docker image inspect -f '{{.Created}}' "$BASE_IMAGE"))"
else
    rootfs=$CACHE/rootfs-$SUITE
    mkdir -p "$CACHE"
    if [[ -f $rootfs/.codecoder-complete ]]; then
        info "reusing the debootstrap rootfs in $rootfs"
    else
        t=$SECONDS
        # Bootstrap into a scratch directory and rename at the end, so an interrupted run
        # never leaves a half-made rootfs that a later run would mistake for a finished one.
        work=$CACHE/rootfs-$SUITE.partial
        rm -rf "$work"
        info "debootstrap --variant=minbase --include=$BASE_PACKAGES $SUITE ($MIRROR), ~35 s"
        debootstrap --variant=minbase --include="$BASE_PACKAGES" "$SUITE" "$work" "$MIRROR"
        # Package caches are dead weight in an image that never runs apt.
        rm -rf "$work"/var/cache/apt/archives/*.deb "$work"/var/lib/apt/lists/*
        touch "$work/.codecoder-complete"
        rm -rf "$rootfs"
        mv "$work" "$rootfs"
        info "rootfs ready in $(elapsed "$t")"
    fi
    t=$SECONDS
    info "docker import $rootfs -> $BASE_IMAGE"
    tar --exclude=./.codecoder-complete -C "$rootfs" -c . | docker import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' \
        --change 'CMD ["/bin/bash"]' \
        - "$BASE_IMAGE" >/dev/null
    info "imported in $(elapsed "$t"): $(docker image inspect -f '{{.Size}}' "$BASE_IMAGE") bytes"
fi

# --- 4. sandbox image --------------------------------------------------------------------------
step "sandbox image $SANDBOX_IMAGE (from $REPO/Dockerfile)"
t=$SECONDS
# The classic builder prints every step; BuildKit would need the buildx plugin, which Debian's
# docker.io does not ship (and a newer client without it refuses DOCKER_BUILDKIT=1).
DOCKER_BUILDKIT=0 docker build -t "$SANDBOX_IMAGE" -f "$REPO/Dockerfile" "$REPO"
info "built in $(elapsed "$t")"

step "done"
info "engine:  $(docker version --format 'server {{.Server.Version}}, API {{.Server.APIVersion}}')"
info "images:  $(docker image ls --format '{{.Repository}}:{{.Tag}}' | grep -E '^codecoder-' | tr '\n' ' ')"
