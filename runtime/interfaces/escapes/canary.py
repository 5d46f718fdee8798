"""The canary: a TCP service on the host that the docker layer's sandbox must not reach. It answers
with the audit's token and remembers every peer, so a connection is seen even when the sandbox
says nothing.
"""

from __future__ import annotations

import contextlib
import socket
import threading


class _Canary:
    """A TCP service on the host that the sandbox must not reach: it answers with the token and
    remembers every peer, so a connection is seen even when the sandbox says nothing."""

    def __init__(self, token: str) -> None:
        self._server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("0.0.0.0", 0))
        self._server.listen(16)
        self._server.settimeout(0.2)
        self.port: int = self._server.getsockname()[1]
        self.peers: list[str] = []
        self._token = token
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="codecoder-canary", daemon=True)
        self._thread.start()

    @staticmethod
    def hosts() -> list[str]:
        """Addresses of this host a container might try, besides its default gateway."""
        found = ["172.17.0.1"]  # docker0's usual address
        with contextlib.suppress(OSError):
            for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET):
                found.append(str(info[4][0]))
        return list(dict.fromkeys(h for h in found if not h.startswith("127.")))

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, peer = self._server.accept()
            except (TimeoutError, OSError):
                continue
            self.peers.append(f"{peer[0]}:{peer[1]}")
            with contextlib.suppress(OSError), conn:
                conn.sendall(f"{self._token}\n".encode())

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._server.close()
