"""The relay from 127.0.0.1:PORT inside the container to the host's egress proxy.

When the set-up names an egress proxy (a Unix socket the host mounted into the container,
`environments.docker.egress`), the agent listens on 127.0.0.1:PORT in the container's own
network namespace (which has nothing but loopback) and relays each connection to that socket,
unread: the proxy decides where, if anywhere, it goes. Commands find it in HTTP(S)_PROXY.
"""

from __future__ import annotations

import contextlib
import socket
import threading

from channel import READ_CHUNK, log


class Relay:
    """127.0.0.1:PORT (and [::1]:PORT) inside the container, relayed to the host's egress proxy.

    The container's network namespace has loopback only; this is its one way out. Bytes are
    copied, never read: the proxy on the host decides where a connection may go. Listening
    starts before any command runs, so no command can take the port first."""

    MAX_CONNECTIONS = 128

    def __init__(self, port: int, target: str) -> None:
        self.target = target
        self.active = threading.BoundedSemaphore(self.MAX_CONNECTIONS)
        self.listeners = []
        for family, address in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
            listener = socket.socket(family, socket.SOCK_STREAM)
            try:
                listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    listener.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                listener.bind((address, port))
                listener.listen(64)
            except OSError:
                listener.close()
                if family == socket.AF_INET:
                    raise
                continue  # no IPv6 loopback in this container
            self.listeners.append(listener)
        for listener in self.listeners:
            threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                continue
            if not self.active.acquire(blocking=False):
                client.close()  # a command opening connections without end gets no more
                continue
            threading.Thread(target=self._relay, args=(client,), daemon=True).start()

    def _relay(self, client: socket.socket) -> None:
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(self.target)
            back = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
            back.start()
            _pump(client, upstream)
            back.join()
        except OSError as exc:
            log(f"the egress proxy cannot be reached: {exc}")
        finally:
            client.close()
            upstream.close()
            self.active.release()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(READ_CHUNK):
            sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)
