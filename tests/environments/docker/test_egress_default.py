"""@docker's default network (`"network": "ask"`): a writable call's only way out is the egress
proxy, each host asked as `network:<host>` during the call, as in @bwrap; warm sandboxes keep it
(each with an egress directory of its own, the claiming session's proxy in it); a read-only
call and `"none"` have no way out at all. Real containers; a loopback server stands in for
every host (the proxy's `upstream`), so nothing here reaches outside this machine."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from codecoder.environments.base import CommandRequest, CommandResult
from codecoder.environments.docker.containers import EGRESS_MOUNT
from codecoder.environments.docker.environment import DockerEnvironment, DockerSettings
from codecoder.environments.egress import SOCKET_NAME
from tests.environments.docker.test_egress import Gate, Upstream, fake_resolver, upstream
from tests.environments.docker.test_pool import pool, warm

pytestmark = pytest.mark.docker

__all__ = ["pool", "upstream"]  # fixtures, used by name

# A name that resolves to a public address (the proxy's rule for every host); the proxy then
# connects to the stand-in instead (`upstream`).
HOST = "pkg.test"
RESOLVER = fake_resolver({HOST: ["93.184.216.34"]})

CLIENT = f"""python3 - <<'EOF'
import os, socket
print("proxy", os.environ.get("HTTPS_PROXY"), os.environ.get("npm_config_https_proxy"))
try:
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
except OSError as exc:
    print("no relay", exc.errno)
    raise SystemExit(0)
s.sendall(b"CONNECT {HOST}:443 HTTP/1.1\\r\\n\\r\\n")
s.settimeout(10)
answer = b""
while True:
    chunk = s.recv(4096)
    if not chunk:
        break
    answer += chunk
    if b"hello" in answer or answer.startswith(b"HTTP/1.1 403") and answer.endswith(b"\\n"):
        break
print(answer.split(b"\\r\\n")[0].decode(), "|", answer.rsplit(b"\\n", 2)[-2].decode())
EOF"""


def call(env: DockerEnvironment, gate: Gate | None, *, writable: bool = True) -> CommandResult:
    return env.run(
        CommandRequest(
            cwd=env.workspace, script=CLIENT, network=gate, writable=writable, timeout=60
        )
    )


def egress_source(attrs: dict[str, Any]) -> str | None:
    return next((m["Source"] for m in attrs["Mounts"] if m["Destination"] == EGRESS_MOUNT), None)


def test_a_writable_call_asks_each_host_during_the_call_and_reaches_it_when_granted(
    workspace: Path, upstream: Upstream
) -> None:
    gate = Gate(admitted=[HOST])
    with DockerEnvironment(
        workspace,
        DockerSettings(),
        resolver=RESOLVER,
        upstream=(upstream.host, upstream.port),
        pool=False,
    ) as env:
        result = call(env, gate)

    lines = result.stdout.splitlines()
    assert lines[0] == "proxy http://127.0.0.1:3128 http://127.0.0.1:3128", result
    assert lines[1] == "HTTP/1.1 200 Connection established | hello from 127.0.0.1"
    assert [(r.host, r.port, r.allowed) for r in gate.records] == [(HOST, 443, True)]


def test_a_refused_host_fails_at_once_naming_its_key(workspace: Path, upstream: Upstream) -> None:
    gate = Gate(admitted=[])
    with DockerEnvironment(
        workspace,
        DockerSettings(),
        resolver=RESOLVER,
        upstream=(upstream.host, upstream.port),
        pool=False,
    ) as env:
        result = call(env, gate)

    assert f"HTTP/1.1 403 Refused | codecoder egress: network:{HOST} was not allowed" in (
        result.stdout
    )
    assert upstream.received == []
    assert [(r.host, r.allowed) for r in gate.records] == [(HOST, False)]


@pytest.mark.parametrize(("network", "writable"), [("ask", False), ("none", True), ("none", False)])
def test_read_only_calls_and_none_have_no_way_out_not_even_the_relay(
    workspace: Path, upstream: Upstream, network: str, writable: bool
) -> None:
    gate = Gate(admitted=[HOST])
    with DockerEnvironment(
        workspace,
        DockerSettings(network=network),
        resolver=RESOLVER,
        upstream=(upstream.host, upstream.port),
        pool=False,
    ) as env:
        result = call(env, gate, writable=writable)
        attrs = env.engine.client.api.inspect_container(result.extra["container"])

    assert result.stdout.splitlines() == ["proxy None None", "no relay 111"]
    assert egress_source(attrs) is None
    assert attrs["HostConfig"]["NetworkMode"] == "none"
    assert gate.records == [] and upstream.received == []


def test_a_command_cannot_take_the_relay_or_reach_the_egress_directory(
    workspace: Path,
) -> None:
    script = """python3 - <<'EOF'
import glob, os, socket
try:
    socket.create_server(("127.0.0.1", 3128))
    print("bound the relay's port")
except OSError as exc:
    print("port taken", exc.errno)
for path in ("/opt/codecoder/relay", "/opt/codecoder/relay/egress"):
    try:
        print("listed", path, os.listdir(path))
    except OSError as exc:
        print("refused", exc.errno)
for root in ("", "/proc/1/root", "/proc/self/root"):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(root + "/opt/codecoder/relay/egress/proxy.sock")
        print("reached the socket")
    except OSError as exc:
        print("refused", exc.errno)
EOF"""
    with DockerEnvironment(workspace, DockerSettings(), pool=False) as env:
        result = env.run(CommandRequest(cwd=workspace, script=script, writable=True))
    lines = result.stdout.splitlines()

    assert lines[0] == "port taken 98"
    assert len(lines) == 6 and all(line.startswith("refused") for line in lines[1:]), lines


def test_a_claimed_warm_sandbox_serves_the_claiming_sessions_proxy_and_no_other(
    workspace: Path, upstream: Upstream, pool: Any, docker_engine: Any
) -> None:
    """Session A holds a sandbox with its proxy; session B claims a warm one: B's connection
    is decided by B's gate alone, through B's own egress directory, never A's."""
    settings = DockerSettings()
    made = {"resolver": RESOLVER, "upstream": (upstream.host, upstream.port)}
    first, second = Gate(admitted=[HOST]), Gate(admitted=[HOST])
    with DockerEnvironment(workspace, settings, **made) as a:
        first_result = call(a, first)
        a_source = egress_source(docker_engine.api.inspect_container(a_id := first_id(a)))
        warm(pool)
        with DockerEnvironment(workspace, settings, **made) as b:
            second_result = call(b, second)
            channel = b._channels["rw"]
            b_attrs = docker_engine.api.inspect_container(channel.container_id)
            b_source = egress_source(b_attrs)
            assert channel.proxy is not None and channel.proxy.path is not None
            bound = channel.proxy.path
            a_socket = Path(str(a_source)) / SOCKET_NAME
            a_alive = a_socket.exists()
            b_mode = os.stat(str(b_source)).st_mode & 0o777
        gone_after_b = not Path(str(b_source)).exists()
    gone_after_a = not Path(str(a_source)).exists()

    assert channel.claimed, "the second session's sandbox came from the pool"
    assert "hello from 127.0.0.1" in first_result.stdout
    assert "hello from 127.0.0.1" in second_result.stdout
    assert [r.host for r in first.records] == [HOST]
    assert [r.host for r in second.records] == [HOST]
    # B's socket is in B's own directory, made by the pool for that sandbox alone; A's socket
    # is in A's, which B's container does not mount at all.
    assert a_source and b_source and a_source != b_source and a_id != channel.container_id
    assert bound == Path(b_source) / SOCKET_NAME and a_alive
    assert str(a_source) not in {m["Source"] for m in b_attrs["Mounts"]}
    assert b_mode == 0o555  # read-only once the socket is in it
    # Each directory goes with its session.
    assert gone_after_b and gone_after_a


def first_id(env: DockerEnvironment) -> str:
    return str(env._channels["rw"].container_id)


def test_an_untrusted_project_may_turn_the_network_off_but_not_on(project: Path) -> None:
    from codecoder.session import Runtime
    from tests.conftest import write_config

    seen = {}
    for network in ("none", "bridge"):
        write_config(project, {"docker": {"network": network}}, trusted=False)
        with Runtime(project) as runtime:
            warned = [d.key for d in runtime.diagnostics if d.code == "untrusted"]
            seen[network] = (runtime.config.docker.network, warned)

    assert seen == {"none": ("none", []), "bridge": ("ask", ["docker.network"])}


def test_a_host_granted_for_the_project_during_a_writable_call_is_saved(
    project: Path, upstream: Upstream
) -> None:
    """The default's question, answered for the project while a writable call runs: the call
    reaches the host, and the grant is written to codecoder.json (by the runtime, not the
    sandbox, which sees it read-only); nothing of the runtime's is written at the start."""
    from codecoder.foundation.ceiling import EnvironmentTag
    from codecoder.foundation.decision import Answer
    from codecoder.session import Runtime
    from tests.conftest import RecordingAsker, write_config

    project.chmod(0o755)
    os.chown(project, 10001, 10001)
    write_config(project, {"allowlist": {"run_container:**": "AlwaysThisProject"}})
    env = DockerEnvironment(
        project, DockerSettings(), resolver=RESOLVER, upstream=(upstream.host, upstream.port)
    )
    asker = RecordingAsker(Answer.PROJECT)
    with env, Runtime(project, asker=asker, environments={EnvironmentTag.DOCKER: env}) as runtime:
        outcome = runtime.session().call("run_container", {"command": CLIENT})

    assert "hello from 127.0.0.1" in outcome.unwrap().output, outcome.to_json()
    assert [r.key for r in asker.requests] == [f"network:{HOST}"]
    saved = json.loads((project / "codecoder.json").read_text())["allowlist"]
    assert saved[f"network:{HOST}"] == "AlwaysThisProject"


def test_a_proxy_binds_only_in_an_empty_directory_private_to_its_user(tmp_path: Path) -> None:
    """What a claimed sandbox's directory must be before this session's socket goes in: never
    one holding another socket (an earlier session's), nor one others may write."""
    from codecoder.environments.egress import Egress, EgressProxy
    from codecoder.foundation.errors import ExecutionFailed

    held = tmp_path / "held"
    held.mkdir(mode=0o700)
    (held / SOCKET_NAME).write_text("")
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    link = tmp_path / "link"
    link.symlink_to(shared)
    for directory in (held, shared, link, tmp_path / "missing"):
        with pytest.raises(ExecutionFailed, match="egress directory"):
            EgressProxy(Egress.asking(), directory=directory)
    fresh = tmp_path / "fresh"
    fresh.mkdir(mode=0o700)
    proxy = EgressProxy(Egress.asking(), directory=fresh)
    try:
        assert proxy.path == fresh / SOCKET_NAME and proxy.path.is_socket()
    finally:
        proxy.close()
    assert not fresh.exists()
