"""Where the pool's server listens, who may talk to it, and how a message travels.

One server per user, state directory, installation and Docker engine: its socket is
`<state dir>/pool/pool-<digest>.sock`, the digest naming the interpreter, the package's
location, PYTHONPATH, the user and DOCKER_HOST. The directory is 0700 and the user's (one that
is not is never used), the socket 0600, and each side checks the other's uid (SO_PEERCRED):
only the same user's processes, which could run Docker themselves, can claim a sandbox. The
socket, its directory, the peer checks and the start on demand are the decision server's too
(`foundation.localserver`).

A message is one SOCK_SEQPACKET datagram holding one JSON object; a claimed sandbox's stream
travels with its answer as a descriptor (SCM_RIGHTS), received close-on-exec.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any, Final

from codecoder.environments.docker.engine import _engine_address
from codecoder.foundation import localserver
from codecoder.foundation.state import state_directory

__all__ = [
    "MAX_MESSAGE",
    "identity",
    "receive",
    "send",
    "socket_directory",
    "socket_name",
]

MAX_MESSAGE: Final = 1 << 20
# The folder holding environments/ (the repository, or site-packages/codecoder when installed).
_PACKAGE_ROOT: Final = Path(__file__).resolve().parents[3]


def socket_directory(state_home: Path | None = None) -> Path:
    """`<state dir>/pool`, of `state_home` when given (what XDG_STATE_HOME would say)."""
    if state_home is not None:
        return state_home / "codecoder" / "pool"
    return state_directory() / "pool"


def identity() -> str:
    """Which code and which engine a server serves: a client is served only by a server of
    the same identity."""
    python_path = os.environ.get("PYTHONPATH", "")
    engine: str = _engine_address()
    return "\n".join(
        [localserver.interpreter(), str(_PACKAGE_ROOT), python_path, str(os.geteuid()), engine]
    )


def socket_name(ident: str) -> str:
    return localserver.socket_name("pool", ident)


def send(sock: socket.socket, message: dict[str, Any], fd: int | None = None) -> None:
    data = json.dumps(message, separators=(",", ":")).encode()
    if fd is None:
        sock.send(data)
    else:
        socket.send_fds(sock, [data], [fd])


def receive(sock: socket.socket) -> tuple[dict[str, Any], int | None]:
    """One message and the descriptor that came with it; `ValueError` for anything that is
    not one JSON object with at most one descriptor (any descriptor received is closed)."""
    data, fds, flags, _ = socket.recv_fds(sock, MAX_MESSAGE, 1, socket.MSG_CMSG_CLOEXEC)
    fd = fds[0] if fds else None
    try:
        if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC) or len(fds) > 1:
            raise ValueError("a message too long, or with more than one descriptor")
        if not data:
            raise ValueError("the other side closed the connection")
        message = json.loads(data)
        if not isinstance(message, dict):
            raise ValueError("a message that is not a JSON object")
    except ValueError:
        for extra in fds:
            os.close(extra)
        raise
    return message, fd
