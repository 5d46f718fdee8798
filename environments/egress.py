"""The egress proxy: the one way out of a sandbox (@docker, @bwrap) whose network is an allowlist.

`"docker": {"network": {"allow": ["pypi.org", "files.pythonhosted.org"]}}` (`Egress`, the one
allowlist of the project's sandboxes) keeps the sandbox's network namespace empty but for
loopback. In @docker the agent in the container relays 127.0.0.1:3128 (the container's
HTTP_PROXY and HTTPS_PROXY) to a Unix socket this proxy listens on, mounted into the container;
in @bwrap the sandbox's helper listens on 127.0.0.1:3128 in its own network namespace and hands
that listening socket to the runtime (`serve_listener`), which accepts the sandbox's
connections on it directly: no Unix socket is reachable from inside at all. Not an IP network:
with a Docker "internal" network and the proxy on its gateway, every service of the host that
listens on all interfaces would be reachable at that gateway too
(Docker's isolation rules filter traffic forwarded through the host, not traffic to it, and an
engine started with --iptables=false has no rules at all). A Unix socket reaches one thing.

A connection is an HTTP CONNECT request (HTTPS, or any TCP protocol a client tunnels); a
plain-HTTP request is refused with a message saying to use https. Each is decided in order:

1. the host is in the allowlist (the trusted configuration's boundary: `host`, `host:port`,
   `*.suffix`);
2. it is resolved once, and every address must be public unless the allowlist names that very
   address (`127.0.0.1:8443`): a name never leads to a loopback, private, link-local or metadata
   address (`runtime.tools.web.address_refusal`), so a DNS answer cannot point it there;
3. the call's `NetworkGate` admits it: the permission key `network:<host>`, asked like any other
   (a project may grant it for good: what comes back lands in the container).

Then the proxy connects to the checked address (never resolving the name again) and copies bytes
both ways. Every connection, refused or not, is reported to the gate when it ends (the runtime
audits it). Outside a call nothing is admitted, and a call's tunnels are closed when it ends.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from codecoder.environments.base import Connection, NetworkGate
from codecoder.runtime.kernel.errors import ExecutionFailed
from codecoder.runtime.kernel.hosts import (
    Resolver,
    address_refusal,
    parse_host_entry,
    system_resolver,
)

__all__ = ["PROXY_PORT", "Egress", "EgressProxy"]

log = logging.getLogger(__name__)

PROXY_PORT: Final = 3128  # where the agent (the helper) listens inside the sandbox
SOCKET_NAME: Final = "proxy.sock"
HEAD_LIMIT: Final = 16 * 1024
HEAD_SECONDS: Final = 10.0
CONNECT_SECONDS: Final = 10.0
# How long the end of a call waits for its connections to be recorded.
HANDLER_SECONDS: Final = 2.0
CHUNK: Final = 65536


@dataclass(frozen=True, slots=True)
class Egress:
    """`"network": {"allow": [...]}`: the sandbox's only way out is the runtime's egress proxy,
    which admits these hosts (`host`, `host:port`, `*.suffix`; `runtime.kernel.hosts.
    parse_host_entry` spellings), each also a permission key `network:<host>` asked like any
    other."""

    allow: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.allow:
            raise ValueError('network {"allow": []} allows nothing: use "none"')
        for index, entry in enumerate(self.allow):
            try:
                host, _ = parse_host_entry(entry)
            except ValueError as exc:
                raise ValueError(f"network.allow[{index}] {exc}") from None
            if host == "*":
                raise ValueError(
                    f"network.allow[{index}] is *: name the hosts a build needs (a registry, "
                    "its file host); every host is a network without a sandbox around it"
                )

    @classmethod
    def of(cls, value: object) -> Egress | None:
        """The allowlist a `network` value names, or None for an engine network mode."""
        if isinstance(value, Egress):
            return value
        if isinstance(value, Mapping):
            if set(value) != {"allow"}:
                raise ValueError('network must be "none" or {"allow": [hosts]}')
            hosts = value["allow"]
            if isinstance(hosts, str) or not isinstance(hosts, Sequence):
                raise ValueError("network.allow must be a list of hosts")
            return cls(tuple(str(h) for h in hosts))
        return None

    def to_json(self) -> dict[str, list[str]]:
        return {"allow": list(self.allow)}


class _Refused(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class EgressProxy:
    """An HTTP CONNECT proxy on a Unix socket in a private directory (`directory`, to be
    mounted into the container), admitting the hosts of `egress` for the call in progress."""

    def __init__(self, egress: Egress, *, resolver: Resolver = system_resolver) -> None:
        self.rules = [parse_host_entry(entry) for entry in egress.allow]
        self._resolver = resolver
        # Short and outside the workspace: a Unix socket's path has at most 107 bytes.
        self.directory = Path(tempfile.mkdtemp(prefix="codecoder-egress-"))
        # The container's root reaches it without any capability (it is not the owner when the
        # runtime is not root); the socket is mode 0666 for the same reason.
        self.directory.chmod(0o755)
        self.path = self.directory / SOCKET_NAME
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(str(self.path))
        self.path.chmod(0o666)
        self._server.listen(64)
        self._lock = threading.Lock()
        self._gate: NetworkGate | None = None
        self._call = 0
        self._tunnels: dict[socket.socket, int] = {}
        self._handlers: dict[int, list[threading.Thread]] = {}
        self._closed = False
        threading.Thread(
            target=self._serve, args=(self._server,), name="codecoder-egress", daemon=True
        ).start()

    @contextlib.contextmanager
    def call(self, gate: NetworkGate | None) -> Iterator[None]:
        """Admit connections through `gate` while the block runs; when it ends, end them, and
        wait (a little) until each is recorded."""
        with self._lock:
            self._gate = gate
            self._call += 1
            call = self._call
        try:
            yield
        finally:
            with self._lock:
                self._gate = None
                ending = [sock for sock, owner in self._tunnels.items() if owner == call]
                handlers = self._handlers.pop(call, [])
            for sock in ending:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            deadline = time.monotonic() + HANDLER_SECONDS
            for handler in handlers:
                handler.join(max(deadline - time.monotonic(), 0.0))

    def serve_listener(self, listener: socket.socket) -> None:
        """Also accept connections on `listener` (a socket listening inside a sandbox's own
        network namespace, handed over by @bwrap's helper), decided like every other, until it
        is shut down."""
        threading.Thread(
            target=self._serve, args=(listener,), name="codecoder-egress-listener", daemon=True
        ).start()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._gate = None
            tunnels = list(self._tunnels)
        with contextlib.suppress(OSError):
            self._server.shutdown(socket.SHUT_RDWR)
        self._server.close()
        for sock in tunnels:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        shutil.rmtree(self.directory, ignore_errors=True)

    # -- connections --------------------------------------------------------------------------

    def _serve(self, server: socket.socket) -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                if self._closed or server is not self._server:
                    return
                time.sleep(0.05)
                continue
            with self._lock:
                gate, call = self._gate, self._call
                handler = threading.Thread(
                    target=self._handle, args=(client, gate, call), name="codecoder-egress-conn"
                )
                if gate is not None:
                    self._handlers.setdefault(call, []).append(handler)
            handler.start()

    def _handle(self, client: socket.socket, gate: NetworkGate | None, call: int) -> None:
        started = time.monotonic()
        host, port = "?", 0
        try:
            client.settimeout(HEAD_SECONDS)
            host, port = _read_connect(client)
            if gate is None:
                raise _Refused(503, "no call of the sandbox is running")
            address, reason = self._decide(gate, host, port)
            upstream = socket.create_connection((address, port), timeout=CONNECT_SECONDS)
        except _Refused as refused:
            with contextlib.suppress(OSError):
                body = f"codecoder egress: {refused.reason}\n".encode()
                client.sendall(
                    f"HTTP/1.1 {refused.status} Refused\r\nContent-Type: text/plain\r\n"
                    f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                    + body
                )
            client.close()
            if gate is not None and host != "?":
                gate.record(
                    Connection(host, port, False, refused.reason, None, 0, 0, _since(started))
                )
            return
        except OSError as exc:
            client.close()
            if gate is not None:
                why = f"cannot connect to {host}:{port}: {exc.strerror or exc}"
                gate.record(Connection(host, port, False, why, None, 0, 0, _since(started)))
            return
        client.settimeout(None)
        upstream.settimeout(None)
        with self._lock:
            live = self._gate is gate and self._call == call and not self._closed
            if live:
                self._tunnels[client] = call
                self._tunnels[upstream] = call
        try:
            if not live:
                why = "the call ended while the connection was being decided"
                gate.record(Connection(host, port, False, why, None, 0, 0, _since(started)))
                return
            client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            counts = [0, 0]
            back = threading.Thread(target=_pump, args=(upstream, client, counts, 1))
            back.start()
            _pump(client, upstream, counts, 0)
            back.join()
            gate.record(
                Connection(host, port, True, reason, address, counts[0], counts[1], _since(started))
            )
        except OSError:
            pass
        finally:
            with self._lock:
                self._tunnels.pop(client, None)
                self._tunnels.pop(upstream, None)
            client.close()
            upstream.close()

    def _decide(self, gate: NetworkGate, host: str, port: int) -> tuple[str, str]:
        """The address to connect to and what admitted it; `_Refused` saying why not."""
        rule = self._rule_for(host, port)
        if rule is None:
            allowed = ", ".join(_shown(h, p) for h, p in self.rules)
            raise _Refused(403, f"{host}:{port} is not in docker.network.allow ({allowed})")
        listed_address = _is_address(rule[0])
        if _is_address(host):
            addresses = [host]
        else:
            try:
                addresses = list(self._resolver(host, port))
            except ExecutionFailed as exc:
                raise _Refused(502, str(exc)) from None
            if not addresses:
                raise _Refused(502, f"{host} resolves to no address")
        for text in addresses:
            refusal = address_refusal(ipaddress.ip_address(text))
            if refusal is not None and not (listed_address and text == rule[0]):
                raise _Refused(
                    403,
                    f"{host} resolves to {text}, {refusal}; such an address is reached only "
                    "when docker.network.allow names the address itself",
                )
        why_not = gate.admit(host, port)
        if why_not is not None:
            raise _Refused(403, why_not)
        return addresses[0], f"allowed by docker.network.allow entry {_shown(*rule)}"

    def _rule_for(self, host: str, port: int) -> tuple[str, int | None] | None:
        for rule_host, rule_port in self.rules:
            if rule_port is not None and rule_port != port:
                continue
            if rule_host == host or (
                rule_host.startswith("*.")
                and host.endswith(rule_host[1:])
                and host != rule_host[2:]
            ):
                return rule_host, rule_port
        return None


def _read_connect(client: socket.socket) -> tuple[str, int]:
    """The host and port of the CONNECT request at the start of `client`'s stream."""
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = client.recv(4096)
        if not chunk:
            raise _Refused(400, "the request ended before its headers did")
        head += chunk
        if len(head) > HEAD_LIMIT:
            raise _Refused(431, "request headers too large")
    request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = request_line.split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise _Refused(400, f"not an HTTP request: {request_line[:80]!r}")
    method, target, _ = parts
    if method != "CONNECT":
        raise _Refused(
            405,
            f"{method} through the proxy is refused: only CONNECT tunnels are (use https://)",
        )
    try:
        host, port = parse_host_entry(target)
    except ValueError as exc:
        raise _Refused(400, f"CONNECT {target[:80]!r}: {exc}") from None
    if port is None or host.startswith("*"):
        raise _Refused(400, f"CONNECT {target[:80]!r} names no host and port")
    return host, port


def _pump(source: socket.socket, sink: socket.socket, counts: list[int], index: int) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(CHUNK):
            sink.sendall(data)
            counts[index] += len(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _shown(host: str, port: int | None) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"{shown}:{port}" if port is not None else shown


def _since(started: float) -> float:
    return time.monotonic() - started
