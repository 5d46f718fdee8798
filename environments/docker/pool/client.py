"""Claiming from the warm pool: what a session's `DockerEngine` asks the pool's server.

`pool_for(settings)` is the pool a session uses, or None: when `settings.pool` is 0,
`CODECODER_POOL` is `0`/`off`, or the engine is not reached through a Unix socket (the stream
is handed over as a descriptor, which a TLS or SSH connection cannot be). A claim never fails a
call: a server that is missing, refuses, or has nothing warm is a miss, and the session creates
its own sandbox. A missing server is started in the background with the claim that found it
missing, so the next session of that template finds one warm.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from pathlib import Path
from typing import Any, Final

from codecoder.environments.docker.engine import _engine_address
from codecoder.environments.docker.pool import wire
from codecoder.environments.docker.pool.eligible import refusal
from codecoder.environments.docker.settings import DockerSettings
from codecoder.environments.engineseam import Greeted, Sandbox, SandboxTemplate
from codecoder.foundation import localserver

__all__ = ["FIRST_CLAIM", "OFF", "PoolClient", "pool_for"]

OFF: Final = frozenset({"0", "off", "no", "false"})
# The claim that started a server, for it to warm at once (an environment variable of its own).
FIRST_CLAIM: Final = "CODECODER_POOL_FIRST_CLAIM"
_TIMEOUT: Final = 10.0


def pool_for(settings: DockerSettings) -> PoolClient | None:
    """The warm pool sessions with `settings` claim from, or None when there is none."""
    if settings.pool <= 0:
        return None
    if os.environ.get("CODECODER_POOL", "").strip().lower() in OFF:
        return None
    if not _engine_address().startswith("unix://"):
        return None
    return PoolClient(settings.pool)


class PoolClient:
    """Claims and releases sandboxes through this user's pool server (`WarmPoolClaims`)."""

    def __init__(
        self, size: int = 1, *, start: bool = True, state_home: Path | None = None
    ) -> None:
        """`state_home`: the pool of that state home (what XDG_STATE_HOME would say) rather
        than the user's (`codecoder audit` attacks a pool of its own)."""
        self.size = size
        self.start = start
        self.state_home = state_home
        self.ident = wire.identity()
        self.name = wire.socket_name(self.ident)

    def claim(self, template: SandboxTemplate) -> Sandbox | None:
        if refusal(template) is not None:
            return None  # the server would refuse it: not worth the round trip
        request = {"op": "claim", "template": template.to_json(), "size": self.size}
        try:
            answer, fd = self._ask(request, start=self.start)
        except (OSError, ValueError):
            return None
        sandbox = answer.get("sandbox")
        if fd is None or not isinstance(sandbox, dict):
            if fd is not None:
                os.close(fd)
            return None
        try:
            stream = socket.socket(fileno=fd)
        except OSError:
            os.close(fd)
            return None
        try:
            greeted = Greeted(
                bytes.fromhex(sandbox["key"]), dict(sandbox["hello"]), str(sandbox["runtime"])
            )
            egress = sandbox.get("egress")
            if (egress is None) != (template.egress_target is None):
                raise ValueError("an egress directory where the template has none, or none")
            return Sandbox(
                str(sandbox["id"]),
                str(sandbox["name"]),
                stream,
                greeted=greeted,
                egress=None if egress is None else Path(str(egress)),
            )
        except (KeyError, TypeError, ValueError):
            stream.close()
            with contextlib.suppress(OSError, ValueError):
                self._ask({"op": "release", "id": str(sandbox.get("id"))})
            return None

    def release(self, sandbox_id: str) -> bool:
        """Give a claimed sandbox back to the server to remove; False when it cannot."""
        try:
            answer, fd = self._ask({"op": "release", "id": sandbox_id})
        except (OSError, ValueError):
            return False
        if fd is not None:
            os.close(fd)
        return answer.get("released") is True

    def status(self) -> dict[str, Any] | None:
        """What the server keeps warm and has handed out; None when no server runs."""
        try:
            answer, fd = self._ask({"op": "status"})
        except (OSError, ValueError):
            return None
        if fd is not None:
            os.close(fd)
        return None if "refused" in answer else answer

    def stop(self) -> bool:
        """Ask the server to remove its warm sandboxes and exit; False when none runs."""
        try:
            answer, _ = self._ask({"op": "stop"})
        except (OSError, ValueError):
            return False
        return answer.get("stopping") is True

    def _ask(
        self, request: dict[str, Any], *, start: bool = False
    ) -> tuple[dict[str, Any], int | None]:
        sock = self._connect()
        if sock is None:
            if start:
                self._start_server(request)
            raise ConnectionRefusedError("no pool server is listening")
        with sock:
            sock.settimeout(_TIMEOUT)
            wire.send(sock, request)
            return wire.receive(sock)

    def _connect(self) -> socket.socket | None:
        try:
            return localserver.connect(str(wire.socket_directory(self.state_home)), self.name)
        except OSError:
            return None

    def _start_server(self, first: dict[str, Any]) -> None:
        """Start a server in the background, handing it the claim that found none; never wait
        for it (this session creates its own sandbox meanwhile)."""
        environment = {**os.environ, FIRST_CLAIM: json.dumps(first)}
        if self.state_home is not None:
            environment["XDG_STATE_HOME"] = str(self.state_home)
        localserver.start(
            "codecoder.environments.docker.pool.server",
            str(wire.socket_directory(self.state_home)),
            "pool.log",
            environ=environment,
        )
