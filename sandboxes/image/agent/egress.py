"""The relay from 127.0.0.1:PORT inside the container to the host's egress proxy.

When the set-up names an egress proxy (a Unix socket the host mounted into the container,
`environments.egress`), the agent listens on 127.0.0.1:PORT in the container's own
network namespace (which has nothing but loopback) and relays each connection to that socket,
unread: the proxy decides where, if anywhere, it goes. Commands find it in HTTP(S)_PROXY.

One thread carries every connection (a selector loop), so a command opening connections without
end costs the agent no thread and no process of the container's pids limit: past
`MAX_CONNECTIONS` open at once, a new one is closed at once. The socket's directory is mounted
where only root may go (a root-only tmpfs): the agent reaches it, commands do not.
"""

from __future__ import annotations

import contextlib
import errno
import selectors
import socket
import threading

from channel import READ_CHUNK, log

# What a connection may hold unsent in each direction before the other side is read again.
BUFFER_LIMIT = 256 * 1024


class _Side:
    """One socket of a relayed pair: what waits to be written to it, and whether it is done."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.pending = bytearray()
        self.eof = False  # nothing more will come from it
        self.shut = False  # its write side is shut (what the other sent is all written)
        self.connecting = False
        self.watched = 0  # the selector events registered for it


class _Pair:
    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self.client = _Side(client)
        self.upstream = _Side(upstream)
        self.upstream.connecting = True

    def other(self, side: _Side) -> _Side:
        return self.upstream if side is self.client else self.client


class Relay:
    """127.0.0.1:PORT (and [::1]:PORT) inside the container, relayed to the host's egress proxy.

    The container's network namespace has loopback only; this is its one way out. Bytes are
    copied, never read: the proxy on the host decides where a connection may go. Listening
    starts before any command runs, so no command can take the port first."""

    MAX_CONNECTIONS = 128

    def __init__(self, port: int, target: str) -> None:
        self.target = target
        self.selector = selectors.DefaultSelector()
        self.pairs: set[_Pair] = set()
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
            listener.setblocking(False)
            self.selector.register(listener, selectors.EVENT_READ, None)
            self.listeners.append(listener)
        threading.Thread(target=self._run, name="egress-relay", daemon=True).start()

    def _run(self) -> None:
        while True:
            try:
                events = self.selector.select()
            except OSError as exc:
                log(f"the egress relay's selector failed: {exc}")
                continue
            for key, mask in events:
                try:
                    if key.data is None:
                        self._accept(key.fileobj)  # type: ignore[arg-type]
                    else:
                        pair, side = key.data
                        self._serve(pair, side, mask)
                except Exception as exc:  # one connection's trouble must not stop the relay
                    log(f"egress relay: {type(exc).__name__}: {exc}")
                    if key.data is not None:
                        self._close(key.data[0])

    def _accept(self, listener: socket.socket) -> None:
        try:
            client, _ = listener.accept()
        except OSError:
            return
        if len(self.pairs) >= self.MAX_CONNECTIONS:
            client.close()  # a command opening connections without end gets no more
            return
        client.setblocking(False)
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        upstream.setblocking(False)
        pair = _Pair(client, upstream)
        self.pairs.add(pair)
        code = upstream.connect_ex(self.target)
        if code not in (0, errno.EINPROGRESS, errno.EAGAIN):
            log(f"the egress proxy cannot be reached: {errno.errorcode.get(code, code)}")
            self._close(pair)
            return
        # Nothing is read from the client until the proxy's side is connected.
        self._update(pair)

    def _serve(self, pair: _Pair, side: _Side, mask: int) -> None:
        if pair not in self.pairs:
            return  # closed by an earlier event of the same round
        if side.connecting and mask & selectors.EVENT_WRITE:
            code = side.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if code:
                log(f"the egress proxy cannot be reached: {errno.errorcode.get(code, code)}")
                self._close(pair)
                return
            side.connecting = False
        other = pair.other(side)
        if mask & selectors.EVENT_READ and not side.eof:
            try:
                data = side.sock.recv(READ_CHUNK)
            except BlockingIOError:
                data = None
            except OSError:
                self._close(pair)
                return
            if data == b"":
                side.eof = True
            elif data:
                other.pending += data
        if mask & selectors.EVENT_WRITE and side.pending and not side.connecting:
            try:
                sent = side.sock.send(side.pending)
            except BlockingIOError:
                sent = 0
            except OSError:
                self._close(pair)
                return
            del side.pending[:sent]
        for end in (pair.client, pair.upstream):
            # Its peer said all it will, and all of that has been written to it: shut it.
            if pair.other(end).eof and not end.pending and not end.shut and not end.connecting:
                end.shut = True
                with contextlib.suppress(OSError):
                    end.sock.shutdown(socket.SHUT_WR)
        if pair.client.shut and pair.upstream.shut:
            self._close(pair)
            return
        self._update(pair)

    def _update(self, pair: _Pair) -> None:
        """What each socket waits for: to be read while the other side's buffer has room, to
        be written while something is pending for it (or, the proxy's, until it connects)."""
        for side in (pair.client, pair.upstream):
            other = pair.other(side)
            events = 0
            if side.connecting:
                events = selectors.EVENT_WRITE
            else:
                if not side.eof and len(other.pending) < BUFFER_LIMIT and not other.connecting:
                    events |= selectors.EVENT_READ
                if side.pending:
                    events |= selectors.EVENT_WRITE
            if events == side.watched:
                continue
            if not events:
                self.selector.unregister(side.sock)
            elif side.watched:
                self.selector.modify(side.sock, events, (pair, side))
            else:
                self.selector.register(side.sock, events, (pair, side))
            side.watched = events

    def _close(self, pair: _Pair) -> None:
        self.pairs.discard(pair)
        for side in (pair.client, pair.upstream):
            if side.watched:
                with contextlib.suppress(KeyError, ValueError):
                    self.selector.unregister(side.sock)
                side.watched = 0
            side.sock.close()
