#!/usr/bin/env bash
# Prepare this machine for codecoder's @docker environment, from nothing to a usable sandbox image.
#
# Idempotent: every step checks first and says what it found, so running it twice is cheap.
#   1. install docker.io, docker-compose (v1), debootstrap, busybox-static and runsc (gVisor)
#      when missing
#   2. register runsc with the engine (in $CODECODER_DOCKER_CONFIG), then start dockerd in the
#      background when no engine answers (log: $CODECODER_DOCKERD_LOG), or have the running one
#      reload its configuration (SIGHUP to the pid in $CODECODER_DOCKERD_PIDFILE)
#   3. build the base image codecoder-base:bookworm with debootstrap + docker import, because no
#      container registry is reachable here and `FROM debian:bookworm` cannot be pulled
#   4. build codecoder-sandbox from the top-level Dockerfile (cached layers make a rebuild quick,
#      and rebuilding every time picks up changes to sandboxes/image/)
#
# Environment knobs:
#   CODECODER_CACHE           where the debootstrap rootfs lives (default /var/cache/codecoder;
#                             never inside the repository)
#   CODECODER_DEBIAN_MIRROR   Debian mirror for debootstrap (default http://deb.debian.org/debian)
#   CODECODER_DOCKERD_LOG     dockerd's log file (default /var/log/codecoder-dockerd.log)
#   CODECODER_DOCKER_CONFIG   the engine's configuration file, where runsc is registered (default
#                             /etc/docker/daemon.json; what else it holds is kept)
#   CODECODER_DOCKERD_PIDFILE the running engine's pid file, for the reload (default
#                             /var/run/docker.pid); DOCKER_HOST says which engine to talk to
#   CODECODER_REBUILD_BASE    set to 1 to rebuild the base image from a fresh rootfs
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${CODECODER_CACHE:-/var/cache/codecoder}
MIRROR=${CODECODER_DEBIAN_MIRROR:-http://deb.debian.org/debian}
DOCKERD_LOG=${CODECODER_DOCKERD_LOG:-/var/log/codecoder-dockerd.log}
DOCKER_CONFIG_FILE=${CODECODER_DOCKER_CONFIG:-/etc/docker/daemon.json}
DOCKERD_PIDFILE=${CODECODER_DOCKERD_PIDFILE:-/var/run/docker.pid}
SUITE=bookworm
BASE_IMAGE=codecoder-base:$SUITE
SANDBOX_IMAGE=codecoder-sandbox
# Packages the sandbox image needs beyond minbase: the agent's interpreter is bundled from
# python3 (not python3-minimal, which lacks json), tools expect git; bash and coreutils are
# Essential anyway but are named so the image's contract is written down in one place.
BASE_PACKAGES=python3,git,bash,coreutils,ca-certificates
# gVisor's runsc as the engine runs it for codecoder (`"docker": {"runtime": "runsc"}`):
#   --network=none   no network stack of its own: the sandbox's one way out, when a project has
#                    an egress allowlist, is a relay on loopback to a Unix socket (and Debian's
#                    2022 runsc cannot set up Docker's network namespace on these machines)
#   --host-uds=open  that socket, mounted from the host, may be connected to (no other host
#                    socket is ever mounted into a sandbox)
# Not --oci-seccomp: with Docker's profile applied inside it, this gVisor answers clone3 with
# EPERM instead of ENOSYS, and glibc 2.36 then cannot start a thread (`codecoder audit` shows
# what user namespaces, which gVisor then allows, can and cannot do there).
RUNSC_ARGS='["--network=none", "--host-uds=open"]'

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
command -v runsc >/dev/null || missing+=(runsc)
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
    info "docker.io, docker-compose, debootstrap, busybox-static, runsc: already present"
fi

# --- 2. engine ---------------------------------------------------------------------------------
step "runsc (gVisor) in $DOCKER_CONFIG_FILE"
# Merged into what the file holds, and written only when it changes (exit 0: changed).
registered_now=0
if python3 - "$DOCKER_CONFIG_FILE" "$(command -v runsc)" "$RUNSC_ARGS" <<'EOF'
import json, os, sys

path, runsc, args = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
try:
    with open(path) as file:
        config = json.load(file)
except FileNotFoundError:
    config = {}
wanted = {"path": runsc, "runtimeArgs": args}
if config.get("runtimes", {}).get("runsc") == wanted:
    sys.exit(1)
config.setdefault("runtimes", {})["runsc"] = wanted
os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
with open(path + ".codecoder-new", "w") as file:
    json.dump(config, file, indent=2)
    file.write("\n")
os.replace(path + ".codecoder-new", path)
EOF
then
    registered_now=1
    info "registered: runsc = $(command -v runsc) $RUNSC_ARGS"
else
    info "already registered as codecoder runs it"
fi

step "docker engine"
engine_up() { docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }
engine_has_runsc() { docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q '"runsc"'; }
if engine_up; then
    info "engine answers: $(docker version --format 'server {{.Server.Version}}')"
    if [[ $registered_now == 1 ]] || ! engine_has_runsc; then
        # dockerd reloads its runtimes on SIGHUP, without stopping any container.
        if [[ -f $DOCKERD_PIDFILE ]]; then
            info "asking dockerd (pid $(cat "$DOCKERD_PIDFILE")) to reload its configuration"
            kill -HUP "$(cat "$DOCKERD_PIDFILE")"
            sleep 1
            for _ in $(seq 1 20); do
                engine_has_runsc && break
                sleep 0.5
            done
        fi
    fi
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
if engine_has_runsc; then
    info "runtimes: $(docker info --format '{{range $name, $_ := .Runtimes}}{{$name}} {{end}}')"
else
    echo "the engine does not offer runsc: was it started with another configuration file" \
        "than $DOCKER_CONFIG_FILE (CODECODER_DOCKER_CONFIG), or another pid file than" \
        "$DOCKERD_PIDFILE (CODECODER_DOCKERD_PIDFILE)?" >&2
    exit 1
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
