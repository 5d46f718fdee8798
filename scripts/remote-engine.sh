#!/usr/bin/env bash
# A second Docker engine on this machine that behaves like one on another machine, for the
# tests of @docker with a remote engine (tests/environments/docker/test_remote.py and the
# sync-mode runs of the ordinary and attack tests). It shares nothing with the workspace:
#   - its own data root, exec root, pid file and configuration file (not /etc/docker/daemon.json)
#   - its own mount namespace, where /tmp, /var/tmp, /home, /root, /work, /srv, /mnt, this
#     repository, /run (the first engine's socket), /var/lib/docker and /etc/docker (the first
#     engine's identity key) are empty tmpfs: no workspace path (tests make theirs under /tmp)
#     exists there, so nothing can be bind-mounted
#   - its own network namespace, joined to this one by a veth pair; reached over TCP with TLS
#     (a CA, a server and a client certificate made here), as DOCKER_HOST=tcp://ADDRESS:2376
#   - its own PID namespace, cgroup parent and containerd (it starts its own)
# The sandbox image is copied into it through the TLS client (`docker save | docker load`).
#
#   remote-engine.sh start    start it (idempotent: an engine that answers is kept) and load
#                             the codecoder-sandbox image when the engine's copy differs
#   remote-engine.sh stop     stop it and remove its namespace (its data root is kept)
#   remote-engine.sh env      print DOCKER_HOST, DOCKER_TLS_VERIFY and DOCKER_CERT_PATH for it
#   remote-engine.sh status   say whether it answers
#
# Environment knobs:
#   CODECODER_REMOTE_ROOT     where its data root, certificates and log live
#                             (default /var/lib/codecoder-remote-engine)
#   CODECODER_REMOTE_NET      the first three octets of its /30 link (default 10.250.250):
#                             this side .1, the engine .2
#   CODECODER_REMOTE_IMAGES   images to copy in (default: codecoder-sandbox:latest)
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ROOT=${CODECODER_REMOTE_ROOT:-/var/lib/codecoder-remote-engine}
NET=${CODECODER_REMOTE_NET:-10.250.250}
IMAGES=${CODECODER_REMOTE_IMAGES:-codecoder-sandbox:latest}
NS=codecoder-remote
HOST_SIDE=ccremote0
ENGINE_SIDE=ccremote1
ADDRESS=$NET.2
PORT=2376
CERTS=$ROOT/certs
CLIENT=$ROOT/client
PIDFILE=$ROOT/engine.pid # the engine's pid on this side (pid 1 of its own namespace)
LOG=$ROOT/dockerd.log

info() { printf '    %s\n' "$*"; }
remote() {
    DOCKER_HOST=tcp://$ADDRESS:$PORT DOCKER_TLS_VERIFY=1 DOCKER_CERT_PATH=$CLIENT docker "$@"
}
answers() { remote version --format '{{.Server.Version}}' >/dev/null 2>&1; }

if [[ $(id -u) -ne 0 ]]; then
    echo "remote-engine.sh makes namespaces and starts dockerd: run it as root" >&2
    exit 1
fi

packages() {
    local missing=()
    command -v openssl >/dev/null || missing+=(openssl)
    command -v ip >/dev/null || missing+=(iproute2)
    command -v nsenter >/dev/null || missing+=(util-linux)
    command -v dockerd >/dev/null || {
        echo "no dockerd here: run scripts/docker-setup.sh first" >&2
        exit 1
    }
    if ((${#missing[@]})); then
        info "installing: ${missing[*]}"
        DEBIAN_FRONTEND=noninteractive apt-get update -q
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
    fi
}

certificates() {
    [[ -f $CLIENT/key.pem && -f $CERTS/server-key.pem ]] && return
    info "making a CA, a server certificate for $ADDRESS and a client certificate ($CERTS)"
    mkdir -p "$CERTS" "$CLIENT"
    chmod 700 "$ROOT" "$CERTS" "$CLIENT"
    (
        cd "$CERTS"
        openssl req -x509 -newkey rsa:3072 -nodes -days 3650 -subj "/CN=codecoder remote engine CA" \
            -keyout ca-key.pem -out ca.pem 2>/dev/null
        openssl req -newkey rsa:3072 -nodes -subj "/CN=$ADDRESS" \
            -keyout server-key.pem -out server.csr 2>/dev/null
        printf 'subjectAltName = IP:%s\nextendedKeyUsage = serverAuth\n' "$ADDRESS" >server.ext
        openssl x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 3650 \
            -extfile server.ext -out server-cert.pem 2>/dev/null
        openssl req -newkey rsa:3072 -nodes -subj "/CN=codecoder tests" \
            -keyout client-key.pem -out client.csr 2>/dev/null
        printf 'extendedKeyUsage = clientAuth\n' >client.ext
        openssl x509 -req -in client.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 3650 \
            -extfile client.ext -out client-cert.pem 2>/dev/null
        rm -f server.csr client.csr server.ext client.ext
    )
    cp "$CERTS/ca.pem" "$CLIENT/ca.pem"
    cp "$CERTS/client-cert.pem" "$CLIENT/cert.pem"
    cp "$CERTS/client-key.pem" "$CLIENT/key.pem"
    chmod 600 "$CERTS"/*-key.pem "$CLIENT/key.pem"
}

network() {
    ip netns list | grep -qx "$NS\( .*\)\?" || ip netns add "$NS"
    if ! ip link show "$HOST_SIDE" >/dev/null 2>&1; then
        ip link add "$HOST_SIDE" type veth peer name "$ENGINE_SIDE" netns "$NS"
        ip addr add "$NET.1/30" dev "$HOST_SIDE"
        ip link set "$HOST_SIDE" up
        ip -n "$NS" addr add "$ADDRESS/30" dev "$ENGINE_SIDE"
        ip -n "$NS" link set "$ENGINE_SIDE" up
        ip -n "$NS" link set lo up
    fi
}

start_engine() {
    mkdir -p "$ROOT/data"
    # Its own configuration file, so that nothing of the first engine's is read; gVisor is
    # registered as scripts/docker-setup.sh registers it for the first engine.
    cat >"$ROOT/daemon.json" <<EOF
{
  "runtimes": {"runsc": {"path": "$(command -v runsc || echo /usr/bin/runsc)",
                         "runtimeArgs": ["--network=none", "--host-uds=open"]}}
}
EOF
    # What the engine's mount namespace hides: every place a workspace or a test's files could
    # be, the first engine's sockets and state. Its own data root stays visible.
    local hide="/tmp /var/tmp /home /root /work /srv /mnt /run /var/lib/docker /etc/docker"
    case $REPO in /var/lib/codecoder-remote-engine*) ;; *) hide="$hide $REPO" ;; esac
    local script='
        for dir in '"$hide"'; do
            [ -d "$dir" ] && mount -t tmpfs -o mode=755 codecoder-hidden "$dir"
        done
        exec dockerd --config-file "$0/daemon.json" --data-root "$0/data" \
            --exec-root /run/docker --pidfile /run/docker.pid \
            --host tcp://'"$ADDRESS:$PORT"' --tlsverify --tlscacert "$0/certs/ca.pem" \
            --tlscert "$0/certs/server-cert.pem" --tlskey "$0/certs/server-key.pem" \
            --bridge none --iptables=false --ip6tables=false --ip-masq=false \
            --cgroup-parent codecoder-remote-engine
    '
    info "starting dockerd in its own mount, network and PID namespaces (log: $LOG)"
    # nsenter joins the network namespace without touching mounts (`ip netns exec` would
    # remount /sys, and the engine would lose the cgroup hierarchies).
    # A service outlives whoever started it, and takes nothing of their environment: not their
    # terminal's size (a test worker's COLUMNS=80 made the engine's `docker top` cut every
    # command line at 80 columns), nor their TMPDIR (a test worker's, gone with it and hidden
    # in the engine's namespace anyway: gVisor's runsc, which inherits it, could then make no
    # sandbox at all).
    setsid nohup env -i PATH="$PATH" HOME="${HOME:-/root}" LANG=C.UTF-8 nsenter --net="/run/netns/$NS" \
        unshare --mount --pid --fork --mount-proc --propagation private --kill-child=SIGTERM \
        sh -c "$script" "$ROOT" >>"$LOG" 2>&1 </dev/null &
    local outer=$!
    for _ in $(seq 1 120); do
        answers && break
        if ! kill -0 "$outer" 2>/dev/null; then
            echo "dockerd ended at once; last lines of $LOG:" >&2
            tail -n 20 "$LOG" >&2
            exit 1
        fi
        sleep 0.5
    done
    if ! answers; then
        echo "the engine did not answer within 60 s; last lines of $LOG:" >&2
        tail -n 20 "$LOG" >&2
        exit 1
    fi
    pgrep -P "$outer" >"$PIDFILE"
    info "engine up: $(remote version --format 'server {{.Server.Version}}') at tcp://$ADDRESS:$PORT"
}

load_images() {
    local image here there
    for image in $IMAGES; do
        here=$(docker image inspect -f '{{.Id}}' "$image" 2>/dev/null) || {
            echo "this machine's engine has no image $image: run scripts/docker-setup.sh first" >&2
            exit 1
        }
        there=$(remote image inspect -f '{{.Id}}' "$image" 2>/dev/null || true)
        if [[ $here == "$there" ]]; then
            info "$image: already there ($here)"
            continue
        fi
        local t=$SECONDS
        docker save "$image" | remote load >/dev/null
        info "$image: copied over TLS in $((SECONDS - t))s"
    done
}

write_env() {
    printf 'DOCKER_HOST=tcp://%s:%s\nDOCKER_TLS_VERIFY=1\nDOCKER_CERT_PATH=%s\n' \
        "$ADDRESS" "$PORT" "$CLIENT" >"$ROOT/env"
}

stop_engine() {
    if [[ -f $PIDFILE ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
        local pid
        pid=$(cat "$PIDFILE")
        info "stopping dockerd (pid $pid here)"
        kill -TERM "$pid"
        for _ in $(seq 1 60); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.5
        done
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$PIDFILE" "$ROOT/env"
    ip link del "$HOST_SIDE" 2>/dev/null || true
    ip netns del "$NS" 2>/dev/null || true
}

case ${1:-} in
start)
    mkdir -p "$ROOT"
    chmod 700 "$ROOT"
    packages
    certificates
    network
    if answers; then
        info "engine already answers at tcp://$ADDRESS:$PORT"
    else
        start_engine
    fi
    load_images
    write_env
    ;;
stop) stop_engine ;;
env) cat "$ROOT/env" ;;
status)
    if answers; then
        echo "answers at tcp://$ADDRESS:$PORT ($(remote version --format '{{.Server.Version}}'))"
    else
        echo "not running"
        exit 1
    fi
    ;;
*)
    echo "usage: $0 start|stop|env|status" >&2
    exit 2
    ;;
esac
