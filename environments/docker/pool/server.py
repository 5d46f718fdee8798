"""The pool's server: one long-lived process per user that keeps sandboxes warm and hands them out.

Started on demand by the first session that finds none (`environments.docker.pool.client`),
with that session's template, so the next session finds it warm; it exits after `IDLE` seconds
without a request once no sandbox it handed out still runs, or on SIGTERM, removing every warm
sandbox first. Killed outright, it leaves nothing running either: each warm sandbox's agent
reads its stdin from the stream only this process held, and exits when it closes; the next
server (and any session's start) removes the stopped containers (`codecoder.pool` label).

Requests, one per connection (`environments.docker.pool.wire`):

    {"op": "claim", "template": {...}, "size": n}
        -> {"sandbox": {"id", "name", "key": hex, "hello": {...}, "runtime", "egress": path}}
           + the stream, or {"miss": reason}
    {"op": "release", "id": ...}     -> {"released": bool}   (the server removes it)
    {"op": "status"}                 -> {"pid", "templates": [...], "claimed": [...], ...}
    {"op": "stop"}                   -> {"stopping": true}, then the server exits

A server whose code changed on disk since it started (an upgrade) refuses and exits.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from typing import Any, Final

from codecoder.environments.docker import labels as labelling
from codecoder.environments.docker.engine import DockerEngine
from codecoder.environments.docker.labels import LABEL_HOST, LABEL_POOL, LABEL_RUNTIME
from codecoder.environments.docker.pool import wire
from codecoder.environments.docker.pool.eligible import refusal
from codecoder.environments.docker.pool.warm import Ready, WarmPool
from codecoder.environments.engineseam import SandboxTemplate
from codecoder.foundation import localserver
from codecoder.foundation.errors import SandboxUnavailable
from codecoder.foundation.loadedcode import loaded_code

__all__ = ["IDLE", "serve"]

log = logging.getLogger(__name__)

IDLE: Final = 900.0  # seconds without a request after which the server exits
_TICK: Final = 2.0


def serve(idle: float = IDLE, first: dict[str, Any] | None = None) -> int:
    """Listen until idle for `idle` seconds (or told to stop); the exit status. `first` is the
    claim of the session that started this server, warmed at once."""
    ident = wire.identity()
    snapshot = loaded_code()
    directory = wire.socket_directory()
    try:
        listening = localserver.Listening.claim(str(directory), wire.socket_name(ident))
    except PermissionError:
        log.error("%s is not private to this user; not serving", directory)
        return 1
    if listening is None:
        return 0  # another server of this identity is already listening
    try:
        return _serve_claimed(idle, first, listening, snapshot)
    finally:
        listening.close()


def _serve_claimed(
    idle: float,
    first: dict[str, Any] | None,
    listening: localserver.Listening,
    snapshot: dict[str, tuple[int, int]],
) -> int:
    engine = DockerEngine()
    pool = WarmPool(engine, _labels(), memory=_engine_memory(engine))
    _reap_dead_pools(engine)
    listener = listening.listen(128)
    listener.settimeout(_TICK)
    stopping = threading.Event()

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    pool.start()
    if first is not None:
        _answer(pool, first, None)
    last = time.monotonic()
    try:
        while not stopping.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                quiet = time.monotonic() - last > idle and not pool.claimed_running()
                if quiet or not listening.still_ours():
                    return 0
                continue
            last = time.monotonic()
            if localserver.peer_uid(conn) != os.geteuid():
                conn.close()
                continue
            # One thread per connection: a client slow to send holds up nobody else's claim.
            threading.Thread(
                target=_serve_connection,
                args=(pool, conn, snapshot, stopping),
                name="codecoder-pool-request",
                daemon=True,
            ).start()
        return 0
    finally:
        listening.stop_listening()
        pool.close()
        engine.close()


def _serve_connection(
    pool: WarmPool,
    conn: socket.socket,
    snapshot: dict[str, tuple[int, int]],
    stopping: threading.Event,
) -> None:
    with conn:
        # The request is read first, even when it is refused: closing a Unix socket with
        # unread data resets it, and the reply would be lost.
        try:
            conn.settimeout(5.0)
            request, fd = wire.receive(conn)
        except (OSError, ValueError) as exc:
            _reply(conn, {"refused": f"unreadable request: {exc}"})
            return
        if fd is not None:
            os.close(fd)
        # Claims (and status) wait for an upgraded server; a release or a stop is served by any
        # (removing a sandbox needs no new code, and the session's end then needs no engine).
        if request.get("op") in ("claim", "status") and _code_changed(snapshot):
            _reply(conn, {"refused": "the installed code changed; start a new server"})
            stopping.set()
            return
        if request.get("op") == "stop":
            _reply(conn, {"stopping": True})
            stopping.set()
            return
        _answer(pool, request, conn)


def _answer(pool: WarmPool, request: dict[str, Any], conn: socket.socket | None) -> None:
    """Serve one request; `conn` None for the first claim, made before anyone listens."""
    op = request.get("op")
    if op == "claim":
        try:
            template = SandboxTemplate.from_json(request.get("template") or {})
            size = int(request.get("size", 1))
        except (TypeError, ValueError) as exc:
            _reply(conn, {"refused": str(exc)})
            return
        problem = refusal(template)
        if problem is not None:
            log.warning("refused to make a sandbox: %s", problem)
            _reply(conn, {"refused": f"the pool makes no such sandbox: {problem}"})
            return
        ready = pool.claim(template, size)
        if ready is None:
            _reply(conn, {"miss": "no warm sandbox of this template yet"})
            return
        if conn is None:
            pool.release(ready.id)
            return
        _hand_over(pool, ready, conn)
    elif op == "release":
        _reply(conn, {"released": pool.release(str(request.get("id")))})
    elif op == "status":
        _reply(conn, {"pid": os.getpid(), **pool.status()})
    else:
        _reply(conn, {"refused": f"unknown request {op!r}"})


def _hand_over(pool: WarmPool, ready: Ready, conn: socket.socket) -> None:
    greeted = ready.greeted
    message = {
        "sandbox": {
            "id": ready.id,
            "name": ready.name,
            "key": greeted.key.hex(),
            "hello": dict(greeted.hello),
            "runtime": greeted.runtime,
            "egress": None if ready.egress is None else str(ready.egress),
        }
    }
    try:
        wire.send(conn, message, ready.stream.fileno())
    except OSError as exc:
        # Never sent: nobody else may have it either.
        log.warning("handing over %s failed (%s); removed", ready.name, exc)
        pool.release(ready.id)
    pool.handed_over(ready)


def _reply(conn: socket.socket | None, message: dict[str, Any]) -> None:
    if conn is None:
        return
    with contextlib.suppress(OSError):
        wire.send(conn, message)


def _labels() -> dict[str, str]:
    pid = os.getpid()
    return {
        LABEL_RUNTIME: "1",
        labelling.LABEL_SESSION: f"pool-{pid}",
        LABEL_HOST: socket.gethostname(),
        labelling.LABEL_BOOT: labelling._boot_id(),
        labelling.LABEL_PID: str(pid),
        labelling.LABEL_PID_START: labelling._process_start(pid) or "",
    }


def _engine_memory(engine: DockerEngine) -> int | None:
    try:
        memory = engine.info().get("MemTotal")
    except SandboxUnavailable:
        return None
    return int(memory) if isinstance(memory, int) and memory > 0 else None


def _reap_dead_pools(engine: DockerEngine) -> None:
    """Remove what servers that died left: their containers that no longer run (a running one
    was claimed, and is its session's until it stops)."""
    host, boot = socket.gethostname(), labelling._boot_id()
    try:
        for summary in engine.list({LABEL_POOL: "1"}):
            labels = summary.labels
            if labels.get(LABEL_HOST) != host or summary.running:
                continue
            if labelling._owner_alive(dict(labels), boot):
                continue
            engine.remove(summary.id)
    except SandboxUnavailable as exc:
        log.warning("removing what dead pools left: %s", exc)


def _code_changed(snapshot: dict[str, tuple[int, int]]) -> bool:
    """Whether a module file loaded at the start changed since (modules imported later, as
    the SDK imports some lazily, are not a change)."""
    now = loaded_code()
    return any(now.get(path, (-1, -1)) != mark for path, mark in snapshot.items())


def main() -> int:
    from codecoder.environments.docker.pool.client import FIRST_CLAIM

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s codecoder-pool[%(process)d] %(message)s"
    )
    first: dict[str, Any] | None = None
    with contextlib.suppress(ValueError):
        parsed = json.loads(os.environ.pop(FIRST_CLAIM, "") or "null")
        first = parsed if isinstance(parsed, dict) else None
    idle = float(os.environ.get("CODECODER_POOL_IDLE", IDLE))
    return serve(idle, first)


if __name__ == "__main__":
    sys.exit(main())
