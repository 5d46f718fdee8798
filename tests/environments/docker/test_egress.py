"""The egress allowlist (`"docker": {"network": {"allow": [...]}}`): the proxy on its own, then
end to end from inside a real sandbox and through the permission chain. Loopback servers stand in
for a registry; nothing here reaches outside this machine."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from codecoder.environments.base import CommandRequest, Connection
from codecoder.environments.docker.channel import AGENT_PROTOCOL, LABEL_AGENT
from codecoder.environments.docker.environment import DockerEnvironment, DockerSettings
from codecoder.environments.docker.settings import Egress
from codecoder.environments.egress import EgressProxy
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.decision import Answer
from codecoder.foundation.errors import SandboxUnavailable
from codecoder.session import Runtime
from tests.conftest import RecordingAsker, write_config

docker_test = pytest.mark.docker


class Upstream:
    """A TCP server on a loopback address that greets every connection with its name."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.server = socket.create_server((host, 0))
        self.host = host
        self.port = self.server.getsockname()[1]
        self.received: list[bytes] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            with conn:
                conn.sendall(f"hello from {self.host}\n".encode())
                conn.settimeout(2)
                with contextlib.suppress(OSError):
                    self.received.append(conn.recv(100))

    @property
    def entry(self) -> str:
        return f"{self.host}:{self.port}"

    def close(self) -> None:
        self.server.close()


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    server = Upstream("127.0.0.1")
    yield server
    server.close()


@pytest.fixture
def other_upstream() -> Iterator[Upstream]:
    server = Upstream("127.0.0.2")
    yield server
    server.close()


@dataclass
class Gate:
    """A NetworkGate that admits the hosts it is given and keeps every record."""

    admitted: Sequence[str] = ()
    records: list[Connection] = field(default_factory=list)

    def admit(self, host: str, port: int) -> str | None:
        return None if host in self.admitted else f"network:{host} was not allowed (the gate)"

    def record(self, connection: Connection) -> None:
        self.records.append(connection)


def fake_resolver(names: dict[str, list[str]]) -> Any:
    def resolve(host: str, port: int) -> list[str]:
        return names[host]

    return resolve


def tunnel(address: str, target: str, payload: bytes = b"ping") -> tuple[bytes, bytes]:
    """CONNECT `target` through the proxy's socket: its answer head, then what came through."""
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(5)
        sock.connect(address)
        sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = sock.recv(4096)
            if not chunk:
                return head, b""
            head += chunk
        head, _, rest = head.partition(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            return head, rest
        sock.sendall(payload)
        body = rest
        while b"\n" not in body:
            chunk = sock.recv(4096)
            if not chunk:
                break
            body += chunk
        return head, body


# --- the proxy on its own ----------------------------------------------------------------------


def connect_through(address: tuple[str, int], target: str) -> bytes:
    """CONNECT `target` through a TCP listener the proxy accepts on: its answer head."""
    with socket.create_connection(address, timeout=5) as sock:
        sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = sock.recv(4096)
            if not chunk:
                break
            head += chunk
        return head


def test_a_listener_the_sandbox_shuts_down_under_the_proxy_ends_quietly(
    upstream: Upstream, caplog: pytest.LogCaptureFixture
) -> None:
    # @bwrap hands the proxy the listening socket of its sandbox; the sandbox keeps it too and
    # may shut it down while the proxy waits to accept (or the call ends and closes it): the
    # accept fails (EINVAL). That is the sandbox taking no more connections, not a crash: no
    # asyncio traceback (CI saw one call in five print one under load).
    proxy = EgressProxy(Egress((upstream.entry,)), unix=False)
    gate = Gate(admitted=["127.0.0.1"])
    try:
        for _ in range(10):
            listener = socket.create_server(("127.0.0.1", 0))
            sandbox_end = socket.socket(fileno=os.dup(listener.fileno()))
            with proxy.serving(listener, gate):
                head = connect_through(listener.getsockname(), upstream.entry)
                assert head.startswith(b"HTTP/1.1 200"), head
                sandbox_end.shutdown(socket.SHUT_RDWR)  # under the proxy, accept pending
                time.sleep(0.2)
            listener.close()
            sandbox_end.close()
    finally:
        proxy.close()
    crashes = [r for r in caplog.records if r.levelname == "ERROR" or r.exc_info]
    assert crashes == [], [r.getMessage() for r in crashes]


def test_a_listed_host_is_tunnelled_and_the_connection_recorded(upstream: Upstream) -> None:
    proxy = EgressProxy(Egress((upstream.entry,)))
    gate = Gate(admitted=["127.0.0.1"])
    try:
        with proxy.call(gate):
            head, body = tunnel(proxy.address, upstream.entry)
            # The greeting may arrive before the payload is relayed; the call's end closes the
            # tunnel, so it waits for the upstream to have what was sent.
            deadline = time.monotonic() + 5
            while not upstream.received and time.monotonic() < deadline:
                time.sleep(0.01)
    finally:
        proxy.close()

    assert head.startswith(b"HTTP/1.1 200")
    assert body == b"hello from 127.0.0.1\n"
    (record,) = gate.records
    assert (record.host, record.port, record.allowed, record.address) == (
        "127.0.0.1",
        upstream.port,
        True,
        "127.0.0.1",
    )
    assert (record.received, record.sent) == (len(body), 4)
    assert not proxy.directory.exists()


@pytest.mark.parametrize(
    ("target", "names", "refusal"),
    [
        ("127.0.0.2:443", {}, "127.0.0.2:443 is not in docker.network.allow"),
        ("registry.test:80", {}, "registry.test:80 is not in docker.network.allow"),
        (
            "registry.test:443",
            {"registry.test": ["10.20.30.40"]},
            "registry.test resolves to 10.20.30.40, a private address",
        ),
        (
            "registry.test:443",
            {"registry.test": ["93.184.216.34", "169.254.169.254"]},
            "resolves to 169.254.169.254, a cloud metadata address",
        ),
        (
            "registry.test:443",
            {"registry.test": ["::ffff:127.0.0.1"]},
            "a loopback address (as ::ffff:7f00:1)",
        ),
        ("evil.registry.test:443", {}, "is not in docker.network.allow"),
    ],
)
def test_what_is_not_listed_or_resolves_to_a_local_address_is_refused(
    target: str, names: dict[str, list[str]], refusal: str
) -> None:
    proxy = EgressProxy(Egress(("registry.test:443", "127.0.0.1")), resolver=fake_resolver(names))
    gate = Gate(admitted=["registry.test", "127.0.0.2"])
    try:
        with proxy.call(gate):
            head, body = tunnel(proxy.address, target)
    finally:
        proxy.close()

    assert head.startswith(b"HTTP/1.1 403"), head
    assert refusal in body.decode()
    assert [(r.allowed, refusal in r.reason) for r in gate.records] == [(False, True)]


def test_an_address_that_does_not_answer_gives_way_to_the_next(
    upstream: Upstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host's addresses are tried in the resolver's order, as a client on the host tries them
    (an unreachable IPv6 address or a dead CDN edge listed first), each already vetted; the
    one reached is the one recorded. Loopback addresses stand in for public ones here."""
    from codecoder.environments import egress

    monkeypatch.setattr(egress, "address_refusal", lambda address: None)
    names = {
        "registry.test": ["127.0.0.3", "127.0.0.1"],  # nothing listens on the first
        "dead.test": ["127.0.0.3", "127.0.0.4"],
    }
    proxy = EgressProxy(
        Egress((f"registry.test:{upstream.port}", f"dead.test:{upstream.port}")),
        resolver=fake_resolver(names),
    )
    gate = Gate(admitted=["registry.test", "dead.test"])
    try:
        with proxy.call(gate):
            head, body = tunnel(proxy.address, f"registry.test:{upstream.port}")
            dead_head, dead_body = tunnel(proxy.address, f"dead.test:{upstream.port}")
    finally:
        proxy.close()

    assert head.startswith(b"HTTP/1.1 200"), head
    assert body == b"hello from 127.0.0.1\n"
    assert dead_head.startswith(b"HTTP/1.1 502"), dead_head
    assert f"cannot connect to dead.test:{upstream.port}" in dead_body.decode()
    reached, refused = sorted(gate.records, key=lambda r: r.host != "registry.test")
    assert (reached.allowed, reached.address) == (True, "127.0.0.1")
    assert (refused.allowed, refused.address) == (False, None)


def test_a_host_the_gate_refuses_is_not_reached(upstream: Upstream) -> None:
    proxy = EgressProxy(Egress((upstream.entry,)))
    gate = Gate(admitted=[])
    try:
        with proxy.call(gate):
            head, body = tunnel(proxy.address, upstream.entry)
    finally:
        proxy.close()

    assert head.startswith(b"HTTP/1.1 403")
    assert b"was not allowed (the gate)" in body
    assert upstream.received == []


def test_nothing_is_admitted_outside_a_call_and_a_calls_tunnels_end_with_it(
    upstream: Upstream,
) -> None:
    proxy = EgressProxy(Egress((upstream.entry,)))
    try:
        outside, body = tunnel(proxy.address, upstream.entry)
        with socket.socket(socket.AF_UNIX) as sock:
            with proxy.call(Gate(admitted=["127.0.0.1"])):
                sock.connect(proxy.address)
                sock.sendall(f"CONNECT {upstream.entry} HTTP/1.1\r\n\r\n".encode())
                sock.settimeout(5)
                opened = sock.recv(4096)
            sock.settimeout(5)
            after = b"".join(iter(lambda: sock.recv(4096), b""))
    finally:
        proxy.close()

    assert outside.startswith(b"HTTP/1.1 503") and b"no call" in body
    assert opened.startswith(b"HTTP/1.1 200")
    assert b"hello" not in after or after.endswith(b"\n")  # then end of stream: the tunnel closed


@pytest.mark.parametrize(
    "request_head",
    [
        b"GET http://127.0.0.1/ HTTP/1.1\r\n\r\n",
        b"CONNECT 127.0.0.1 HTTP/1.1\r\n\r\n",
        b"CONNECT *.example.com:443 HTTP/1.1\r\n\r\n",
        b"\x16\x03\x01 not http\r\n\r\n",
        b"CONNECT " + b"a" * 20000 + b":443 HTTP/1.1\r\n\r\n",
    ],
)
def test_requests_other_than_a_plain_connect_are_refused(request_head: bytes) -> None:
    proxy = EgressProxy(Egress(("127.0.0.1",)))
    try:
        with proxy.call(Gate(admitted=["127.0.0.1"])), socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(5)
            sock.connect(proxy.address)
            with contextlib.suppress(OSError):  # the proxy may answer before reading it all
                sock.sendall(request_head)
            answer = sock.recv(4096)
    finally:
        proxy.close()

    assert answer.split(b" ")[1] in (b"400", b"405", b"431")


class SlowGate(Gate):
    """A gate that takes its time to decide, as a human asked would."""

    def admit(self, host: str, port: int) -> str | None:
        time.sleep(0.5)
        return super().admit(host, port)


class Silent:
    """A TCP server that accepts and never says anything (tunnels that stay open)."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0), backlog=2048)
        self.port = self.server.getsockname()[1]
        self.held: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                self.held.append(self.server.accept()[0])
            except OSError:
                return

    def close(self) -> None:
        self.server.close()
        for conn in self.held:
            conn.close()


FLOODS = {
    # nothing sent: each waits for a head
    "idle": b"",
    # a head that never ends
    "trickle": b"CONNECT 127.0.0.1:",
    # a tunnel admitted and held open by a silent upstream
    "tunnel": b"CONNECT 127.0.0.1:{silent} HTTP/1.1\r\n\r\n",
    # a decision that takes its time (the gate sleeps)
    "slow decision": b"CONNECT 127.0.0.1:{silent} HTTP/1.1\r\n\r\n",
}


@pytest.mark.parametrize("flood", list(FLOODS))
def test_a_thousand_connections_leave_the_threads_bounded_and_the_next_call_working(
    upstream: Upstream, flood: str
) -> None:
    silent = Silent()
    proxy = EgressProxy(Egress((upstream.entry, f"127.0.0.1:{silent.port}")))
    gate = SlowGate(admitted=["127.0.0.1"]) if flood == "slow decision" else Gate(["127.0.0.1"])
    first = FLOODS[flood].replace(b"{silent}", str(silent.port).encode())
    threads = threading.active_count()
    peak, most_open, refused = threads, 0, 0
    clients: list[socket.socket] = []
    try:
        with proxy.call(gate):
            for _ in range(1000):
                client = socket.socket(socket.AF_UNIX)
                client.settimeout(10)
                while client.connect_ex(proxy.address) != 0:  # the backlog is full: again
                    time.sleep(0.001)
                if first:
                    # One past the limit is answered 503 and closed before anything is read: by
                    # the time its head is sent, it may be closed already (the 503 stays readable).
                    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                        client.sendall(first)
                clients.append(client)
                peak = max(peak, threading.active_count())
                most_open = max(most_open, proxy.active)
            time.sleep(1)
            peak = max(peak, threading.active_count())
            for client in clients:
                client.settimeout(0.01)
                with contextlib.suppress(OSError):
                    refused += client.recv(200).startswith(b"HTTP/1.1 503")
            for client in clients:
                client.close()
        with proxy.call(Gate(admitted=["127.0.0.1"])):
            head, body = tunnel(proxy.address, upstream.entry)
    finally:
        proxy.close()
        silent.close()

    assert peak - threads <= 4  # the deciding pool, whatever the flood
    assert most_open <= 128
    assert refused >= 1000 - 128
    assert head.startswith(b"HTTP/1.1 200") and body == b"hello from 127.0.0.1\n"


@pytest.mark.parametrize(
    ("allow", "problem"),
    [
        ([], "allows nothing"),
        (["*"], "name the hosts a build needs"),
        (["pypi.org:99999"], "must have a port from 1 to 65535"),
    ],
)
def test_an_allowlist_that_says_everything_or_nothing_is_refused(
    allow: list[str], problem: str
) -> None:
    with pytest.raises(ValueError, match=problem):
        DockerSettings(network={"allow": allow})


# --- end to end --------------------------------------------------------------------------------

CLIENT = """python3 - <<'EOF'
import os, socket
print("proxy", os.environ["HTTPS_PROXY"])
for target in {targets!r}:
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    s.sendall(f"CONNECT {{target}} HTTP/1.1\\r\\n\\r\\n".encode())
    s.settimeout(10)
    answer = b""
    while True:
        chunk = s.recv(4096)
        if not chunk:
            break
        answer += chunk
        if answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"\\n") and b"hello" in answer:
            break
    print(target, answer.split(b"\\r\\n")[0].decode(), answer.rsplit(b"\\n", 2)[-2].decode())
for direct in [("1.1.1.1", 443), ("172.17.0.1", 2375)]:
    try:
        socket.create_connection(direct, timeout=2)
        print("direct", direct, "connected")
    except OSError as exc:
        print("direct", direct, "refused", exc.errno)
EOF"""


@pytest.fixture(params=["runc", "runsc"])
def runtime_name(request: pytest.FixtureRequest, docker_engine: Any) -> str:
    name = str(request.param)
    if name not in (docker_engine.info().get("Runtimes") or {}):
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true, so the egress tests must run under {name}")
        pytest.skip(f"the engine has no {name}")
    return name


@docker_test
def test_from_the_sandbox_only_the_listed_loopback_host_is_reached(
    workspace: Path, upstream: Upstream, other_upstream: Upstream, runtime_name: str
) -> None:
    settings = DockerSettings(
        network={"allow": [upstream.entry, "registry.test"]}, runtime=runtime_name
    )
    gate = Gate(admitted=["127.0.0.1", "127.0.0.2", "registry.test"])
    targets = [upstream.entry, other_upstream.entry, "registry.test:443"]
    resolver = fake_resolver({"registry.test": ["192.168.7.7"]})
    with DockerEnvironment(workspace, settings, resolver=resolver) as env:
        result = env.run(
            CommandRequest(
                cwd=workspace, script=CLIENT.format(targets=targets), network=gate, timeout=60
            )
        )

    lines = result.stdout.splitlines()
    assert lines[:2] == [
        "proxy http://127.0.0.1:3128",
        f"{upstream.entry} HTTP/1.1 200 Connection established hello from 127.0.0.1",
    ]
    assert lines[2] == (
        f"{other_upstream.entry} HTTP/1.1 403 Refused codecoder egress: {other_upstream.entry} "
        f"is not in docker.network.allow ({upstream.entry}, registry.test)"
    )
    assert lines[3].startswith(
        "registry.test:443 HTTP/1.1 403 Refused codecoder egress: registry.test resolves to "
        "192.168.7.7, a private address"
    )
    assert [line.split()[-2] for line in lines[4:]] == ["refused", "refused"]
    assert other_upstream.received == []
    assert sorted((r.host, r.allowed) for r in gate.records) == [
        ("127.0.0.1", True),
        ("127.0.0.2", False),
        ("registry.test", False),
    ]


@docker_test
def test_a_command_cannot_take_the_relays_port_or_go_around_the_proxy(
    workspace: Path, upstream: Upstream, runtime_name: str
) -> None:
    settings = DockerSettings(network={"allow": [upstream.entry]}, runtime=runtime_name)
    script = """python3 - <<'EOF'
import glob, os, socket
try:
    socket.create_server(("127.0.0.1", 3128))
    print("bound the relay's port")
except OSError as exc:
    print("port taken", exc.errno)
found = set(glob.glob("/opt/codecoder/*/*.sock") + glob.glob("/opt/codecoder/*/*/*.sock"))
for line in open("/proc/self/mountinfo"):
    point = line.split()[4]
    if "codecoder" in point:
        found.update([point + "/proxy.sock", point + "/egress/proxy.sock"])
for root in ("", "/proc/1/root", "/proc/self/root"):
    found.add(root + "/opt/codecoder/relay/egress/proxy.sock")
found.add("/opt/codecoder/egress/proxy.sock")
for path in sorted(found):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(path)
        s.sendall(b"CONNECT 127.0.0.1:22 HTTP/1.1\\r\\n\\r\\n")
        print("reached", path, s.recv(200).split(b"\\r\\n")[0].decode())
    except OSError as exc:
        print("refused", exc.errno)
EOF"""
    with DockerEnvironment(workspace, settings) as env:
        result = env.run(CommandRequest(cwd=workspace, script=script, network=Gate(["127.0.0.1"])))
    lines = result.stdout.splitlines()

    assert lines[0] == "port taken 98"
    assert len(lines) > 4 and not [line for line in lines[1:] if not line.startswith("refused")]


FLOOD = """python3 - <<'EOF'
import socket, time
held, refused = [], 0
for i in range(1000):
    try:
        s = socket.create_connection(("127.0.0.1", 3128), timeout=0.2)
        s.sendall(b"CONNECT 127.0.0.1:{port} HTTP/1.1\\r\\n\\r\\n")
        held.append(s)
    except OSError:
        refused += 1
time.sleep(2)
answered = 0
for s in held:
    s.settimeout(0.01)
    try:
        answered += s.recv(100).startswith(b"HTTP/1.1 200")
    except OSError:
        pass
print("held", len(held) + refused, "tunnels", answered)
EOF"""


@docker_test
def test_a_thousand_connections_from_the_sandbox_leave_the_runtime_bounded(
    workspace: Path, upstream: Upstream
) -> None:
    silent = Silent()
    settings = DockerSettings(network={"allow": [upstream.entry, f"127.0.0.1:{silent.port}"]})
    samples: list[int] = []
    running = threading.Event()

    def sample() -> None:
        while not running.is_set():
            samples.append(threading.active_count())
            time.sleep(0.01)

    try:
        with DockerEnvironment(workspace, settings) as env:
            gate = Gate(["127.0.0.1"])
            env.run(CommandRequest(cwd=workspace, argv=("true",), network=gate))
            sampler = threading.Thread(target=sample)
            sampler.start()
            before = threading.active_count()  # the sampler's own thread included
            try:
                flood = env.run(
                    CommandRequest(
                        cwd=workspace,
                        script=FLOOD.format(port=silent.port),
                        network=gate,
                        timeout=120,
                    )
                )
            finally:
                running.set()
                sampler.join()
            after = env.run(
                CommandRequest(
                    cwd=workspace, script=CLIENT.format(targets=[upstream.entry]), network=gate
                )
            )
    finally:
        silent.close()

    held, tunnels = (int(n) for n in flood.stdout.split()[1::2])
    assert held == 1000
    assert tunnels <= 128  # the relay's cap, and the proxy's
    assert max(samples) - before <= 4
    assert f"{upstream.entry} HTTP/1.1 200 Connection established hello" in after.stdout


def workspace_project(project: Path) -> Path:
    """The project as the sandbox user's own workspace."""
    project.chmod(0o755)
    os.chown(project, 10001, 10001)
    return project


@docker_test
def test_each_host_is_a_permission_key_asked_granted_and_audited(
    project: Path, upstream: Upstream
) -> None:
    write_config(workspace_project(project), {"docker": {"network": {"allow": [upstream.entry]}}})
    command = {"command": CLIENT.format(targets=[upstream.entry])}
    asker = RecordingAsker(Answer.SESSION, Answer.PROJECT)
    with Runtime(project, asker=asker) as runtime:
        session = runtime.session()
        outcome = session.call("run_container", command)
        again = session.call("run_container", command)
        audit = [entry for entry in runtime.audit.read() if entry["tool"] == "network"]

    assert [(r.tool, r.environment.value) for r in asker.requests] == [
        ("run_container", "@docker"),
        ("network", "@docker"),
    ]
    assert asker.requests[1].key == "network:127.0.0.1"
    assert "hello from 127.0.0.1" in outcome.unwrap().output
    assert "hello from 127.0.0.1" in again.unwrap().output
    saved = json.loads((project / "codecoder.json").read_text())["allowlist"]
    assert saved == {"network:127.0.0.1": "AlwaysThisProject"}
    assert [(e["key"], e["outcome"], e["source"]) for e in audit] == [
        ("network:127.0.0.1", "ok", "project"),
        ("network:127.0.0.1", "ok", "project"),
    ]
    assert (audit[0]["network"]["address"], audit[0]["network"]["port"]) == (
        "127.0.0.1",
        upstream.port,
    )


@docker_test
def test_names_that_resolve_to_local_addresses_are_refused_and_every_connection_audited(
    project: Path, upstream: Upstream, other_upstream: Upstream
) -> None:
    allow = [upstream.entry, "sneaky.test", "metadata.test:80", "mixed.test"]
    write_config(workspace_project(project), {"docker": {"network": {"allow": allow}}})
    resolver = fake_resolver(
        {
            "sneaky.test": ["127.0.0.1"],
            "metadata.test": ["169.254.169.254"],
            "mixed.test": ["93.184.216.34", "127.0.0.1"],
        }
    )
    env = DockerEnvironment(project, DockerSettings(network={"allow": allow}), resolver=resolver)
    targets = [
        upstream.entry,
        "sneaky.test:443",
        "metadata.test:80",
        "mixed.test:443",
        other_upstream.entry,
    ]
    asker = RecordingAsker(Answer.SESSION, Answer.SESSION)
    with env, Runtime(project, asker=asker, environments={EnvironmentTag.DOCKER: env}) as runtime:
        outcome = runtime.session().call(
            "run_container", {"command": CLIENT.format(targets=targets)}
        )
        audit = [entry for entry in runtime.audit.read() if entry["tool"] == "network"]

    lines = outcome.unwrap().output.splitlines()
    assert "hello from 127.0.0.1" in lines[1]
    assert all(" 403 Refused" in line for line in lines[2:6]), lines
    assert [(r.tool, r.key) for r in asker.requests][1:] == [("network", "network:127.0.0.1")]
    by_host = {entry["network"]["host"]: entry for entry in audit}
    assert sorted(by_host) == [
        "127.0.0.1",
        "127.0.0.2",
        "metadata.test",
        "mixed.test",
        "sneaky.test",
    ]
    assert by_host["127.0.0.1"]["outcome"] == "ok"
    assert "a loopback address" in by_host["sneaky.test"]["error"]
    assert "a cloud metadata address" in by_host["metadata.test"]["error"]
    assert "resolves to 127.0.0.1" in by_host["mixed.test"]["error"]
    assert "is not in docker.network.allow" in by_host["127.0.0.2"]["error"]
    assert {by_host[h]["outcome"] for h in by_host if h != "127.0.0.1"} == {"denied"}
    assert other_upstream.received == []


def test_network_cannot_be_bound_outside_the_container(project: Path) -> None:
    write_config(
        project,
        {
            "docker": {"network": {"allow": ["pypi.org"]}},
            "environments": {"network": "@shell"},
            "allowlist": {"network:pypi.org": "AlwaysThisProject"},
        },
    )
    with Runtime(project) as runtime:
        errors = [(d.code, d.key) for d in runtime.diagnostics if d.severity == "error"]

    # The grant stays (it is @docker's: SessionNetwork decides every connection there).
    assert errors == [("invalid_binding", "network")]


@docker_test
def test_a_deny_rule_refuses_a_host_without_asking(project: Path, upstream: Upstream) -> None:
    write_config(
        workspace_project(project),
        {"docker": {"network": {"allow": [upstream.entry]}}, "deny": ["network:*"]},
    )
    asker = RecordingAsker(Answer.ONCE)
    with Runtime(project, asker=asker) as runtime:
        denied = runtime.session().call(
            "run_container", {"command": CLIENT.format(targets=[upstream.entry])}
        )
        audit = [entry for entry in runtime.audit.read() if entry["tool"] == "network"]

    assert "network:127.0.0.1 is refused by deny rule 'network:*'" in denied.unwrap().output
    assert [r.tool for r in asker.requests] == ["run_container"]
    assert [(e["outcome"], e["source"]) for e in audit] == [("denied", "deny")]
    assert upstream.received == []


def test_network_keys_are_checked_like_any_tools_and_project_grantable(project: Path) -> None:
    write_config(
        project,
        {
            "docker": {"network": {"allow": ["pypi.org"]}},
            "allowlist": {"network:pypi.org": "AlwaysThisProject", "netwrk:pypi.org": "Once"},
        },
    )
    with Runtime(project) as runtime:
        codes = [(d.code, d.key) for d in runtime.diagnostics]
        key = runtime.session().grant("network:files.pythonhosted.org")

    assert ("ceiling_violation", "network:pypi.org") not in codes
    assert ("unknown_tool", "netwrk:pypi.org") in codes
    assert key.raw == "network:files.pythonhosted.org"


def test_an_untrusted_project_cannot_open_the_network(project: Path) -> None:
    write_config(project, {"docker": {"network": {"allow": ["pypi.org"]}}}, trusted=False)
    with Runtime(project) as runtime:
        settings = runtime.config.docker
        warnings = [d for d in runtime.diagnostics if d.code == "untrusted"]

    # The default: the egress proxy for writable calls, each host asked (never the list).
    assert settings.network == "ask" and settings.egress is None
    assert [w.key for w in warnings] == ["docker.network"]


def test_with_a_remote_engine_the_allowlist_is_refused(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "tcp://203.0.113.5:2376")
    image = SimpleNamespace(labels={LABEL_AGENT: str(AGENT_PROTOCOL)})
    client = SimpleNamespace(
        ping=lambda: True, images=SimpleNamespace(get=lambda name: image), close=lambda: None
    )
    env = DockerEnvironment(
        workspace, DockerSettings(network={"allow": ["pypi.org"]}), client_factory=lambda: client
    )

    with pytest.raises(SandboxUnavailable, match="its allowlist needs a local engine"):
        env.run(CommandRequest(cwd=workspace, argv=("true",)))
