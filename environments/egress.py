"""The egress proxy: the one way out of a sandbox (@docker, @bwrap).

In @bwrap it is always there (`Egress.asking`): any host on port 443 may be asked for, each as
the permission key `network:<host>` during the call, and a trusted `"docker": {"network":
{"allow": [...]}}` adds what it lists (other ports, addresses). In @docker it is there for
writable calls by default (`"network": "ask"`, `Egress.asking` too), and where a project names
an allowlist, that is the boundary, for every call: `{"allow": ["pypi.org",
"files.pythonhosted.org"]}` (`Egress`). Either way the container's network namespace is empty
but for loopback, and its agent relays 127.0.0.1:3128 (the container's HTTP_PROXY, HTTPS_PROXY
and the clients' own settings, `client_variables`) to a Unix socket this proxy listens on, in a
directory made for that sandbox alone and mounted into it (`directory`: a warm sandbox's was
made by the pool before any session claimed it, and the claiming session binds its proxy
there, so its connections are that session's questions).
In @bwrap the sandbox's helper listens on 127.0.0.1:3128 in its own network namespace and hands
that listening socket to the runtime (`EgressProxy.serving`), which accepts the sandbox's
connections on it directly: no Unix socket is reachable from inside at all. Not an IP network:
with a Docker "internal" network and the proxy on its gateway, every service of the host that
listens on all interfaces would be reachable at that gateway too
(Docker's isolation rules filter traffic forwarded through the host, not traffic to it, and an
engine started with --iptables=false has no rules at all). A Unix socket reaches one thing.

A connection is an HTTP CONNECT request (HTTPS, or any TCP protocol a client tunnels); a
plain-HTTP request is refused with a message saying to use https. The CONNECT target is what
is decided and reached, never a Host header. Each is decided in order:

1. the host may be asked for: the allowlist names it (`host`, `host:port`, `*.suffix`), or
   every host is asked and the port is 443;
2. it is resolved, once, and every address must be public unless the allowlist names that very
   address (`127.0.0.1:8443`): a name never leads to a loopback, private, link-local or
   metadata address (`foundation.hosts.address_refusal`), so a DNS answer cannot point it
   there; a host no allowlist names is resolved only after step 3 admitted it (a name nobody
   allowed is never looked up: no data leaves in the names a command asks for);
3. the call's `NetworkGate` admits it: the permission key `network:<host>`, asked like any other
   (a project may grant it for good: what comes back lands in the sandbox). A refusal is
   answered at once (403, its body saying which key and how to allow it), so a client fails
   fast instead of retrying a silent proxy.

Then the proxy connects to the checked address (never resolving the name again) and copies bytes
both ways. Every connection, refused or not, is reported to the gate when it ends (the runtime
audits it). Outside a call nothing is admitted, and a call's tunnels are closed when it ends.

Its limits hold on this side of the boundary, whatever runs in the sandbox: one event loop
thread carries every connection (reading heads, copying bytes), and a pool of `DECIDERS`
threads makes the decisions that may block (resolving a name, asking the human); at most
`MAX_CONNECTIONS` connections are open at once (the next is answered 503 and closed), and a
head must arrive within `HEAD_SECONDS`. So however many connections a sandbox opens, the
runtime's threads stay bounded and the next call is served.

In @docker only the agent's relay can reach the socket: the directory holding it is mounted
inside a root-only tmpfs in the container (`containers.EGRESS_MOUNT`), which the command user
cannot enter; the agent (root, owner of that tmpfs) connects. The directory is made read-only
once the socket is bound, so the agent never takes it for a place a command could write.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import ipaddress
import logging
import os
import shutil
import socket
import ssl
import stat
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from codecoder.environments.base import Connection, NetworkGate
from codecoder.environments.broker import CredentialBroker, CredentialRoute
from codecoder.foundation.errors import ExecutionFailed
from codecoder.foundation.hosts import (
    Resolver,
    address_refusal,
    is_address,
    parse_host_entry,
    system_resolver,
)
from codecoder.foundation.scratch import scratch_directory

__all__ = [
    "DEFAULT_PORTS",
    "MAX_CONNECTIONS",
    "PROXY_PORT",
    "Egress",
    "EgressProxy",
    "client_variables",
]

log = logging.getLogger(__name__)

PROXY_PORT: Final = 3128  # where the agent (the helper) listens inside the sandbox
# The ports every host is asked for where every host is (@bwrap): https. Anything else is
# reached only where a trusted allowlist names `host:port`.
DEFAULT_PORTS: Final = frozenset({443})
SOCKET_NAME: Final = "proxy.sock"
HEAD_LIMIT: Final = 16 * 1024
HEAD_SECONDS: Final = 10.0
CONNECT_SECONDS: Final = 10.0
# How long the end of a call waits for its connections to be recorded.
HANDLER_SECONDS: Final = 2.0
CHUNK: Final = 65536
# Connections open at once (the relay in the container allows 128 too), and threads deciding.
MAX_CONNECTIONS: Final = 128
DECIDERS: Final = 4


def client_variables() -> dict[str, str]:
    """The environment that points the common clients inside a sandbox at the proxy: the
    variables most honour (`HTTPS_PROXY`, and the lower-case ones curl, wget and git's libcurl
    read), and each client's own where it has one: npm and pnpm (`npm_config_*`), yarn
    (`YARN_*`), pip (`PIP_PROXY`), cargo (`CARGO_HTTP_PROXY`), Node's own fetch
    (`NODE_USE_ENV_PROXY`); go reads `HTTPS_PROXY`. The loopback names stay direct (a test
    server the command starts). And the clients' own calls home are off (npm's and pip's
    checks for a newer version of themselves, telemetry): each would be a host question
    nobody asked for, in every call (`npm test` alone would ask for registry.npmjs.org). npm
    writes no debug log: it would end with the sandbox's private home, while its last line
    sent the human there ("A complete log of this run can be found in ..."); what it printed
    is the call's output."""
    url = f"http://127.0.0.1:{PROXY_PORT}"
    direct = "localhost,127.0.0.1,::1"
    names = (
        *("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"),
        *("npm_config_proxy", "npm_config_https_proxy", "YARN_HTTP_PROXY"),
        *("YARN_HTTPS_PROXY", "PIP_PROXY", "CARGO_HTTP_PROXY"),
    )
    found = dict.fromkeys(names, url)
    found |= {"NO_PROXY": direct, "no_proxy": direct, "npm_config_noproxy": direct}
    found["NODE_USE_ENV_PROXY"] = "1"
    found |= {
        "npm_config_update_notifier": "false",
        "npm_config_logs_max": "0",
        "NO_UPDATE_NOTIFIER": "1",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "DO_NOT_TRACK": "1",
        "YARN_ENABLE_TELEMETRY": "0",
        "NEXT_TELEMETRY_DISABLED": "1",
    }
    return found


@dataclass(frozen=True, slots=True)
class Egress:
    """`"network": {"allow": [...]}`: the sandbox's only way out is the runtime's egress proxy,
    which admits these hosts (`host`, `host:port`, `*.suffix`; `foundation.hosts.
    parse_host_entry` spellings), each also a permission key `network:<host>` asked like any
    other."""

    allow: tuple[str, ...]
    # @bwrap's default: every host on `DEFAULT_PORTS` besides the listed ones, each asked.
    every_host: bool = False

    def __post_init__(self) -> None:
        if not self.allow and not self.every_host:
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
    def asking(cls, listed: Egress | None = None) -> Egress:
        """@bwrap's egress: any host on port 443, each asked as `network:<host>`, and what
        `listed` (the project's trusted allowlist) names besides (other ports, addresses)."""
        return cls(listed.allow if listed is not None else (), every_host=True)

    @classmethod
    def of(cls, value: object) -> Egress | None:
        """The allowlist a `network` value names, or None for an engine network mode."""
        if isinstance(value, Egress):
            return value
        if isinstance(value, Mapping):
            if set(value) != {"allow"}:
                raise ValueError('network must be "ask", "none" or {"allow": [hosts]}')
            hosts = value["allow"]
            if isinstance(hosts, str) or not isinstance(hosts, Sequence):
                raise ValueError("network.allow must be a list of hosts")
            return cls(tuple(str(h) for h in hosts))
        return None

    def to_json(self) -> dict[str, list[str]]:
        return {"allow": list(self.allow)}

    def admits(self, host: str, port: int) -> bool:
        """Whether `host:port` may be asked for at all (the proxy's first check): an entry of
        the allowlist names it, or every host is asked and the port is a default one."""
        if self.every_host and port in DEFAULT_PORTS:
            return True
        return _rule_for([parse_host_entry(entry) for entry in self.allow], host, port) is not None


class _Refused(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(slots=True)
class _Asked:
    """What one connection asked for, and how far it got (recorded when it ends)."""

    started: float
    host: str = "?"
    port: int = 0
    address: str | None = None  # the one connected to (until then, the first vetted)
    addresses: tuple[str, ...] = ()  # every vetted address, in the resolver's order
    reason: str = ""
    tunnelled: bool = False
    counts: list[int] = field(default_factory=lambda: [0, 0])
    # Requests the credential broker refused on a routed connection (each audited apart).
    refusals: list[str] = field(default_factory=list)

    def refused(self, why: str) -> Connection:
        return Connection(self.host, self.port, False, why, None, 0, 0, _since(self.started))

    def ended(self) -> Connection:
        sent, received = self.counts
        return Connection(
            self.host,
            self.port,
            True,
            self.reason,
            self.address,
            sent,
            received,
            _since(self.started),
        )


class EgressProxy:
    """An HTTP CONNECT proxy admitting the hosts of `egress` for the calls in progress.

    Two ways in: a Unix socket in a private directory (`directory`, mounted into @docker's
    container; `unix=False` makes none), whose connections are decided through the gate of the
    block `call(gate)` runs; and listening sockets handed over from a sandbox's own network
    namespace (`serving(listener, gate)`, @bwrap), each decided through its own gate, so one
    proxy serves every call of an environment at once."""

    def __init__(
        self,
        egress: Egress,
        *,
        resolver: Resolver = system_resolver,
        max_connections: int = MAX_CONNECTIONS,
        broker: CredentialBroker | None = None,
        unix: bool = True,
        upstream: tuple[str, int] | None = None,
        directory: Path | None = None,
    ) -> None:
        """`upstream`: where every admitted connection goes instead of the address decided
        (a stand-in server on loopback, for the questions benchmark's replay; never set by the
        runtime): everything up to the connection is decided as always. `directory`: where
        the Unix socket is bound instead of a scratch directory of its own: the empty, private
        directory made for a @docker sandbox and already mounted in it (a warm pool's, made
        before any session claimed it: `environments.docker.pool.warm`); removed on close the
        same way."""
        self.egress = egress
        self._upstream = upstream
        self.rules = [parse_host_entry(entry) for entry in egress.allow]
        self._broker = broker
        self._resolver = resolver
        self.max_connections = max_connections
        server: socket.socket | None = None
        self.directory: Path | None = None
        self.path: Path | None = None
        self.address: str | None = None
        self._directory_fd: int | None = None
        if unix:
            # Outside the workspace, in the process's scratch (foundation.scratch).
            self.directory = (
                scratch_directory("codecoder-egress-")
                if directory is None
                else _private_empty(directory)
            )
            self.path = self.directory / SOCKET_NAME
            # A Unix socket's address has at most 107 bytes, and the state directory may lie
            # deep in a home: where the path is longer, it is reached through this descriptor.
            self._directory_fd = os.open(self.directory, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            self.address = (
                str(self.path)
                if len(os.fsencode(self.path)) < 100
                else f"/proc/self/fd/{self._directory_fd}/{SOCKET_NAME}"
            )
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.bind(self.address)
            # The container's root reaches it without any capability (it is not the owner when
            # the runtime is not root): the socket is 0666 and the directory 0555, read-only
            # once the socket is in it. Inside the container a root-only tmpfs keeps commands
            # out.
            self.path.chmod(0o666)
            self.directory.chmod(0o555)
            server.listen(64)
            server.setblocking(False)
        self._lock = threading.Lock()
        # The calls in progress and their gates; the Unix socket's connections belong to
        # `_unix_call` (the block `call()` runs), 0 when none runs.
        self._calls: dict[int, NetworkGate | None] = {}
        self._unix_call = 0
        self._next_call = 0
        self._closed = False
        # Per call: the connections open (their handlers' tasks) and those not yet recorded.
        self._open: dict[int, set[asyncio.Task[None]]] = {}
        self._unrecorded: dict[int, int] = {}
        self._recorded = threading.Condition(self._lock)
        self._active = 0
        self._deciders = concurrent.futures.ThreadPoolExecutor(
            DECIDERS, thread_name_prefix="codecoder-egress-decide"
        )
        # Listening sockets of sandboxes (@bwrap) this loop accepts on (`serving`), each with
        # the call its connections belong to.
        self._listeners: dict[socket.socket, int] = {}
        self._server: asyncio.AbstractServer | None = None
        self._loop = asyncio.new_event_loop()
        started = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(server, started), name="codecoder-egress", daemon=True
        )
        self._thread.start()
        started.wait(10)

    @contextlib.contextmanager
    def call(self, gate: NetworkGate | None) -> Iterator[None]:
        """Admit the Unix socket's connections through `gate` while the block runs; when it
        ends, end them, and wait (a little) until each is recorded."""
        call = self._begin(gate)
        with self._lock:
            self._unix_call = call
        try:
            yield
        finally:
            with self._lock:
                if self._unix_call == call:
                    self._unix_call = 0
            self._end(call)

    @contextlib.contextmanager
    def serving(self, listener: socket.socket, gate: NetworkGate | None) -> Iterator[None]:
        """Accept connections on `listener` (a socket listening inside a sandbox's own network
        namespace, handed over by @bwrap's helper), decided through `gate`, while the block
        runs; then stop accepting (its owner closes it), end them, and wait (a little) until
        each is recorded.

        Accepted here rather than by an asyncio server: the sandbox holds the same listening
        socket and may shut it down at any moment, which wakes the loop to an accept that fails
        (EINVAL); an asyncio server would print that as a crash report for a call that worked.
        Here it only means the sandbox takes no more connections."""
        call = self._begin(gate)
        listener.setblocking(False)

        async def serve() -> None:
            self._listeners[listener] = call
            self._loop.add_reader(listener.fileno(), self._accept_from, listener)

        async def release() -> None:
            self._forget_listener(listener)

        try:
            asyncio.run_coroutine_threadsafe(serve(), self._loop).result(HEAD_SECONDS)
            yield
        finally:
            # Before its owner closes it: a descriptor closed while the loop still watched its
            # number could be another socket's by then.
            with contextlib.suppress(RuntimeError, concurrent.futures.TimeoutError):
                asyncio.run_coroutine_threadsafe(release(), self._loop).result(HEAD_SECONDS)
            self._end(call)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._calls.clear()
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._stop)
        self._thread.join(HANDLER_SECONDS + 1)
        self._deciders.shutdown(wait=False, cancel_futures=True)
        if self.directory is not None:
            with contextlib.suppress(OSError):
                self.directory.chmod(0o700)
            shutil.rmtree(self.directory, ignore_errors=True)
        if self._directory_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._directory_fd)

    @property
    def active(self) -> int:
        """Connections open now (for `check` and the tests)."""
        return self._active

    # -- calls ------------------------------------------------------------------------------------

    def _begin(self, gate: NetworkGate | None) -> int:
        with self._lock:
            self._next_call += 1
            call = self._next_call
            if not self._closed:
                self._calls[call] = gate
        return call

    def _end(self, call: int) -> None:
        """End `call`: its tunnels closed, its decisions still queued dropped; wait (a little)
        until each of its connections is recorded."""
        with self._lock:
            self._calls.pop(call, None)
        if not self._closed:
            with contextlib.suppress(RuntimeError):  # the loop stopped meanwhile
                self._loop.call_soon_threadsafe(self._end_call, call)
        deadline = time.monotonic() + HANDLER_SECONDS
        with self._recorded:
            while self._unrecorded.get(call) and time.monotonic() < deadline:
                self._recorded.wait(max(deadline - time.monotonic(), 0.0))
            self._unrecorded.pop(call, None)

    def _live(self, call: int, gate: NetworkGate) -> bool:
        with self._lock:
            return not self._closed and self._calls.get(call) is gate

    # -- the event loop ---------------------------------------------------------------------------

    def _run(self, server: socket.socket | None, started: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            with self._lock:
                call = self._unix_call
            await self._handle(reader, writer, call)

        if server is not None:
            self._server = self._loop.run_until_complete(
                asyncio.start_unix_server(handle, sock=server, limit=HEAD_LIMIT)
            )
        started.set()
        try:
            self._loop.run_forever()
        finally:
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.close()

    def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for listener in list(self._listeners):
            self._forget_listener(listener)
        ending = [task for tasks in self._open.values() for task in tasks]
        for task in ending:
            task.cancel()
        if not ending:
            self._loop.stop()  # nothing to see end: an idle proxy closes at once
            return

        async def settle() -> None:
            # A moment (at most) for the handlers to see their connections end, then stop.
            await asyncio.wait(ending, timeout=0.2)
            self._loop.stop()

        self._loop.create_task(settle())

    def _forget_listener(self, listener: socket.socket) -> None:
        """No more accepting on `listener` (in the loop's thread); its owner closes it."""
        if self._listeners.pop(listener, None) is not None:
            with contextlib.suppress(OSError, ValueError):
                self._loop.remove_reader(listener.fileno())

    def _accept_from(self, listener: socket.socket) -> None:
        """Take the connections waiting on a sandbox's listener (see `serving`)."""
        call = self._listeners.get(listener)
        if call is None:
            return
        for _ in range(64):
            try:
                conn, _ = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                # Shut down or closed by the sandbox (EINVAL, EBADF): it takes no more.
                self._forget_listener(listener)
                return
            self._loop.create_task(self._accepted(conn, call))

    async def _accepted(self, conn: socket.socket, call: int) -> None:
        """Serve an accepted connection as an asyncio server would: the server side of its
        streams (a brokered connection's TLS is the server's), `_handle` in a task of its own."""
        conn.setblocking(False)
        reader = asyncio.StreamReader(limit=HEAD_LIMIT, loop=self._loop)

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self._handle(reader, writer, call)

        protocol = asyncio.StreamReaderProtocol(reader, handle, loop=self._loop)
        try:
            await self._loop.connect_accepted_socket(lambda: protocol, sock=conn)
        except OSError:
            conn.close()

    def _end_call(self, call: int) -> None:
        """End every connection of `call`: tunnels closed, decisions still queued dropped."""
        for task in list(self._open.get(call, ())):
            task.cancel()

    async def _handle(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, call: int
    ) -> None:
        if self._active >= self.max_connections:
            # Refused before anything is read: a command opening connections without end gets
            # no more, and costs nothing.
            writer.write(_answer(503, f"more than {self.max_connections} connections at once"))
            writer.transport.abort()
            return
        task = asyncio.current_task()
        assert task is not None
        with self._lock:
            gate = self._calls.get(call)
            if gate is not None:
                self._unrecorded[call] = self._unrecorded.get(call, 0) + 1
        self._active += 1
        self._open.setdefault(call, set()).add(task)
        asked = _Asked(time.monotonic())
        connection: Connection | None = None
        try:
            connection = await self._serve(reader, writer, gate, call, asked)
        except asyncio.CancelledError:
            if asked.host != "?":
                why = "the call ended before the connection did"
                connection = asked.refused(why) if not asked.tunnelled else asked.ended()
        finally:
            self._active -= 1
            self._open[call].discard(task)
            if not self._open[call]:
                del self._open[call]
            writer.transport.abort()
        if gate is not None:
            refusals = [asked.refused(why) for why in asked.refusals]
            for record in [connection, *refusals] if connection is not None else refusals:
                with contextlib.suppress(Exception):  # a gate's failure is not the proxy's
                    await self._loop.run_in_executor(self._deciders, gate.record, record)
            with self._recorded:
                self._unrecorded[call] = self._unrecorded.get(call, 1) - 1
                self._recorded.notify_all()

    async def _serve(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        gate: NetworkGate | None,
        call: int,
        asked: _Asked,
    ) -> Connection | None:
        """Serve one connection; what to record of it (None: nothing was asked for)."""
        try:
            asked.host, asked.port = await asyncio.wait_for(_read_connect(reader), HEAD_SECONDS)
            if gate is None:
                raise _Refused(503, "no call of the sandbox is running")
            asked.addresses, asked.reason = await self._loop.run_in_executor(
                self._deciders, self._decide, gate, asked.host, asked.port
            )
            asked.address = asked.addresses[0]
            route = self._broker.route_for(asked.host, asked.port) if self._broker else None
            if route is not None:
                return await self._brokered(reader, writer, gate, call, asked, route)
            up_reader, up_writer = await self._connect(asked)
        except _Refused as refused:
            with contextlib.suppress(OSError, RuntimeError):
                writer.write(_answer(refused.status, refused.reason))
                await asyncio.wait_for(writer.drain(), HEAD_SECONDS)
            return asked.refused(refused.reason) if asked.host != "?" else None
        except (OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
            if asked.host == "?":
                return None
            why = getattr(exc, "strerror", None) or repr(exc)
            reason = f"cannot connect to {asked.host}:{asked.port}: {why}"
            # Said at once: a client waiting on a silent proxy retries for a minute.
            with contextlib.suppress(OSError, RuntimeError, TimeoutError):
                writer.write(_answer(502, reason))
                await asyncio.wait_for(writer.drain(), HEAD_SECONDS)
            return asked.refused(reason)
        try:
            if not self._live(call, gate):
                return asked.refused("the call ended while the connection was being decided")
            asked.tunnelled = True
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await asyncio.gather(
                _pump(reader, up_writer, asked.counts, 0), _pump(up_reader, writer, asked.counts, 1)
            )
            return asked.ended()
        finally:
            up_writer.transport.abort()

    async def _connect(self, asked: _Asked) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """The first of `asked`'s vetted addresses that answers, in the resolver's order (as a
        client on the host goes past an unreachable IPv6 address or a dead CDN edge), each
        given its share of what is left of `CONNECT_SECONDS`; the one reached is recorded."""
        upstream = [self._upstream] if self._upstream is not None else []
        targets = upstream or [(address, asked.port) for address in asked.addresses]
        deadline = time.monotonic() + CONNECT_SECONDS
        failure: BaseException = TimeoutError("no address answered")
        for n, target in enumerate(targets):
            left = deadline - time.monotonic()
            share = left if n == len(targets) - 1 else max(left / (len(targets) - n), 1.0)
            try:
                opened = asyncio.open_connection(*target, limit=CHUNK)
                connected = await asyncio.wait_for(opened, min(share, left))
            except (OSError, TimeoutError) as exc:
                failure = exc
                continue
            asked.address = asked.address if upstream else target[0]
            return connected
        raise failure

    async def _brokered(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        gate: NetworkGate,
        call: int,
        asked: _Asked,
        route: CredentialRoute,
    ) -> Connection:
        """A connection to a host with a credential route: the broker terminates its TLS and
        forwards git smart-HTTP requests only (`environments.broker`)."""
        assert self._broker is not None and asked.address is not None
        if not self._live(call, gate):
            return asked.refused("the call ended while the connection was being decided")
        asked.tunnelled = True
        asked.reason += " (through the credential broker)"
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        with contextlib.suppress(OSError, ssl.SSLError, asyncio.IncompleteReadError):
            await writer.drain()
            await self._broker.serve(
                reader, writer, route, asked.address, asked.counts, asked.refusals.append
            )
        return asked.ended()

    def _decide(self, gate: NetworkGate, host: str, port: int) -> tuple[tuple[str, ...], str]:
        """The addresses to connect to (each vetted) and what admitted them; `_Refused` saying
        why not.

        A host the trusted allowlist names is resolved and checked first (nobody is asked about
        a connection that would be refused anyway); any other host is asked for before its name
        is resolved: a name nobody allowed is never looked up, so a command cannot carry data
        out in the names it asks for (DNS)."""
        rule = self._rule_for(host, port)
        every = self.egress.every_host and port in DEFAULT_PORTS
        if rule is None and not every:
            if self.egress.every_host:
                raise _Refused(
                    403,
                    f"{host}:{port}: only port {', '.join(map(str, sorted(DEFAULT_PORTS)))} "
                    "(https) is reached from a sandbox, unless a trusted codecoder.json lists "
                    f'"{_shown(host, port)}" in docker.network.allow',
                )
            allowed = ", ".join(_shown(h, p) for h, p in self.rules)
            raise _Refused(403, f"{host}:{port} is not in docker.network.allow ({allowed})")
        if rule is not None:
            addresses = self._addresses(host, port, rule)
        why_not = gate.admit(host, port)
        if why_not is not None:
            raise _Refused(403, why_not)
        if rule is None:
            return self._addresses(host, port, None), f"allowed as network:{host} (port {port})"
        return addresses, f"allowed by docker.network.allow entry {_shown(*rule)}"

    def _addresses(
        self, host: str, port: int, rule: tuple[str, int | None] | None
    ) -> tuple[str, ...]:
        """The addresses `host` resolves to, once, if every address it has is public (or is the
        very address the allowlist names); `_Refused` otherwise."""
        listed = rule[0] if rule is not None and is_address(rule[0]) else None
        if is_address(host):
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
            if refusal is not None and text != listed:
                raise _Refused(
                    403,
                    f"{host} resolves to {text}, {refusal}; such an address is reached only "
                    "when docker.network.allow names the address itself",
                )
        return tuple(addresses)

    def _rule_for(self, host: str, port: int) -> tuple[str, int | None] | None:
        return _rule_for(self.rules, host, port)


def _rule_for(
    rules: Sequence[tuple[str, int | None]], host: str, port: int
) -> tuple[str, int | None] | None:
    for rule_host, rule_port in rules:
        if rule_port is not None and rule_port != port:
            continue
        if rule_host == host or (
            rule_host.startswith("*.") and host.endswith(rule_host[1:]) and host != rule_host[2:]
        ):
            return rule_host, rule_port
    return None


async def _read_connect(reader: asyncio.StreamReader) -> tuple[str, int]:
    """The host and port of the CONNECT request at the start of the stream."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError:
        raise _Refused(431, "request headers too large") from None
    except asyncio.IncompleteReadError:
        raise _Refused(400, "the request ended before its headers did") from None
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


def _answer(status: int, reason: str) -> bytes:
    body = f"codecoder egress: {reason}\n".encode()
    return (
        f"HTTP/1.1 {status} Refused\r\nContent-Type: text/plain\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )


async def _pump(
    source: asyncio.StreamReader, sink: asyncio.StreamWriter, counts: list[int], index: int
) -> None:
    with contextlib.suppress(OSError, RuntimeError):
        while data := await source.read(CHUNK):
            sink.write(data)
            counts[index] += len(data)
            await sink.drain()
    with contextlib.suppress(OSError, RuntimeError):
        if sink.can_write_eof():
            sink.write_eof()


def _private_empty(directory: Path) -> Path:
    """`directory`, checked to be what a sandbox's egress directory must be before a socket is
    bound in it: a directory (no link), this user's, writable by nobody else, and empty (no
    socket of anyone else's); `ExecutionFailed` otherwise."""
    try:
        info = os.lstat(directory)
        entries = os.listdir(directory)
    except OSError as exc:
        raise ExecutionFailed(f"the sandbox's egress directory {directory}: {exc}") from None
    if (
        not stat.S_ISDIR(info.st_mode)
        or info.st_uid != os.geteuid()
        or info.st_mode & 0o022
        or entries
    ):
        raise ExecutionFailed(
            f"the sandbox's egress directory {directory} is not an empty directory private to "
            "this user; its egress proxy is not started there"
        )
    return directory


def _shown(host: str, port: int | None) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"{shown}:{port}" if port is not None else shown


def _since(started: float) -> float:
    return time.monotonic() - started
