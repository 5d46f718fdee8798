"""@docker against an engine that really is elsewhere: the second engine of
scripts/remote-engine.sh, with its own data root and its own mount, network and PID namespaces
(the workspace path does not exist there), reached over TCP with TLS. DOCKER_HOST points there
for the whole module, as it would for a user of a remote engine, so the workspace is synced
into a volume (sync mode) and never bind-mounted.

Besides what is particular to a remote engine (below), the ordinary and the attack tests of
@docker run here again, against that engine: every test of test_environment.py, test_attacks.py
and test_sync.py, except the few whose mechanism is bind mode's (a protected path mounted
read-only, a call failed and its plant quarantined), which are replaced here by what sync mode
promises instead: whatever a call does to a protected path stays in the sandbox.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from codecoder.environments.base import CommandRequest, CommandResult
from codecoder.environments.docker.channel import _AgentChannel
from codecoder.environments.docker.engine import _client_from_env, engine_is_local, transport
from codecoder.environments.docker.environment import DockerEnvironment, DockerSettings
from codecoder.environments.docker.pool import wire
from codecoder.foundation.errors import ExecutionFailed, SandboxUnavailable
from tests.environments.conftest import SANDBOX_IMAGE, RemoteEngine
from tests.environments.docker.test_attacks import *  # noqa: F403
from tests.environments.docker.test_environment import *  # noqa: F403
from tests.environments.docker.test_sync import *  # noqa: F403

# Bind mode's mechanisms, which sync mode replaces (each by a test below or in test_sync.py):
del test_protected_paths_stay_read_only_on_a_writable_call  # noqa: F821  (kept in the sandbox)
del test_a_protected_path_created_by_a_writable_call_is_moved_out_and_reported  # noqa: F821
del test_a_protected_path_created_on_the_host_is_read_only_in_the_next_call  # noqa: F821
del test_a_symlinked_protected_path_refuses_writable_calls  # noqa: F821  (never mounted)
del test_a_protected_path_planted_at_any_depth_is_quarantined  # noqa: F821
del test_existing_nested_protected_paths_stay_read_only  # noqa: F821
del test_a_protected_name_missing_at_the_top_cannot_be_created_at_all  # noqa: F821  (below)
del test_moving_a_nested_repository_is_caught  # noqa: F821
del test_a_protected_path_made_on_the_host_between_calls_is_mounted_read_only  # noqa: F821
del test_a_writable_call_past_its_disk_budget_is_stopped  # noqa: F821  (test_sync: at copy-back)
# test_sync: test_sparse_files_count_whole_against_the_budget_and_never_come_back
del test_what_a_writable_call_wrote_counts_at_apparent_size_against_its_budget  # noqa: F821
# Not about an engine: fake clients of bind mode's calls, and the canary on this engine's bridge.
del test_every_engine_error_is_mapped_to_sandbox_unavailable  # noqa: F821
del test_the_canary_is_reachable_from_the_host_and_unreachable_from_the_sandbox  # noqa: F821
# The lying agent of this test reports no changes, so what it writes never comes back.
del test_a_forged_or_replayed_request_does_not_run  # noqa: F821

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module", autouse=True)
def _everything_here_uses_the_remote_engine(remote_engine: RemoteEngine) -> Iterator[None]:
    with remote_engine.as_docker_host():
        yield


@pytest.fixture(scope="module")
def docker_engine(remote_engine: RemoteEngine) -> Any:
    """What the tests inspect containers with: the remote engine."""
    return remote_engine.client


def run(env: DockerEnvironment, script: str, **options: Any) -> CommandResult:
    options.setdefault("timeout", 30.0)
    return env.run(CommandRequest(cwd=env.workspace, script=script, **options))


def owned(workspace: Path) -> Path:
    for path in [workspace, *workspace.rglob("*")]:
        os.chown(path, 10001, 10001, follow_symlinks=False)
    return workspace


# --- the engine is elsewhere --------------------------------------------------------------------


def test_the_engine_shares_nothing_with_the_workspace(
    remote_engine: RemoteEngine, workspace: Path
) -> None:
    (workspace / "here.txt").write_text("on this machine\n")
    engine_root = Path(f"/proc/{remote_engine.pid}/root")
    local = _local_client()

    assert not engine_is_local() and transport().tls == "verified"
    assert not os.path.lexists(f"{engine_root}{workspace}")  # not in its mount namespace
    assert os.readlink(f"/proc/{remote_engine.pid}/ns/mnt") != os.readlink("/proc/self/ns/mnt")
    assert os.readlink(f"/proc/{remote_engine.pid}/ns/net") != os.readlink("/proc/self/ns/net")
    assert remote_engine.client.info()["DockerRootDir"] != local.info()["DockerRootDir"]
    assert remote_engine.client.info()["ID"] != local.info()["ID"]
    with DockerEnvironment(workspace) as env:
        seen = run(env, "cat here.txt")
        assert env.sync
        assert {c.id for c in local.containers.list()}.isdisjoint(
            c.id for c in remote_engine.client.containers.list()
        )
    assert seen.stdout == "on this machine\n"


def _local_client() -> Any:
    names = ("DOCKER_HOST", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH")
    saved = {name: os.environ.pop(name, None) for name in names}
    try:
        return _client_from_env()
    finally:
        os.environ.update({k: v for k, v in saved.items() if v is not None})


def _endpoint(remote_engine: RemoteEngine) -> tuple[str, int]:
    host, _, port = remote_engine.address.removeprefix("tcp://").rpartition(":")
    return host, int(port)


def test_the_engine_answers_only_tls_clients_it_issued_a_certificate_to(
    remote_engine: RemoteEngine,
) -> None:
    host, port = _endpoint(remote_engine)
    certs = Path(remote_engine.environ["DOCKER_CERT_PATH"])

    def handshake(context: ssl.SSLContext) -> str:
        with socket.create_connection((host, port), timeout=10) as raw:
            try:
                with context.wrap_socket(raw, server_hostname=host) as tls:
                    tls.sendall(b"GET /version HTTP/1.0\r\n\r\n")
                    return tls.recv(12).decode()
            except (ssl.SSLError, ConnectionResetError, BrokenPipeError) as exc:
                return type(exc).__name__

    with socket.create_connection((host, port), timeout=10) as plain:
        plain.sendall(b"GET /version HTTP/1.0\r\n\r\n")
        answer = plain.recv(64)
    issued = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    issued.load_cert_chain(str(certs / "cert.pem"), str(certs / "key.pem"))
    anonymous = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    trusting_the_system = ssl.create_default_context()
    trusting_the_system.load_cert_chain(str(certs / "cert.pem"), str(certs / "key.pem"))

    assert not answer.startswith(b"HTTP/1.") or b" 400 " in answer  # no plain HTTP API
    assert handshake(issued) == "HTTP/1.0 200"
    assert handshake(anonymous) in ("SSLError", "ConnectionResetError", "BrokenPipeError", "")
    assert handshake(trusting_the_system) == "SSLCertVerificationError"


def test_a_ca_bundle_in_the_environment_does_not_replace_the_engines_own(
    remote_engine: RemoteEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """REQUESTS_CA_BUNDLE (set in many corporate environments) is what the SDK's HTTP library
    would verify the engine with; codecoder verifies it with DOCKER_CERT_PATH's CA."""
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", ssl.get_default_verify_paths().openssl_cafile)
    monkeypatch.setenv("CURL_CA_BUNDLE", ssl.get_default_verify_paths().openssl_cafile)

    assert _client_from_env().version()["Version"] == remote_engine.client.version()["Version"]


def test_bind_mode_is_refused_with_a_clear_message(workspace: Path) -> None:
    with (
        DockerEnvironment(workspace, DockerSettings(workspace="bind")) as env,
        pytest.raises(SandboxUnavailable) as raised,
    ):
        run(env, "true")

    assert str(raised.value) == (
        f"the Docker engine at {os.environ['DOCKER_HOST']} is on another machine, which cannot "
        'bind-mount this workspace: use "docker": {"workspace": "sync"} (or "auto")'
    )


def test_the_egress_allowlist_is_refused_with_the_reason(workspace: Path) -> None:
    settings = DockerSettings(network={"allow": ["pypi.org"]})
    with DockerEnvironment(workspace, settings) as env, pytest.raises(SandboxUnavailable) as raised:
        run(env, "true")

    assert str(raised.value) == (
        f"the Docker engine at {os.environ['DOCKER_HOST']} is on another machine, and the "
        "egress proxy of docker.network runs on this one: its allowlist needs a local engine"
    )


def test_with_the_default_network_commands_run_there_and_a_connection_fails_at_once(
    workspace: Path,
) -> None:
    """The default asks for each host through the egress proxy, whose socket cannot be mounted
    on another machine: there a writable call runs with no network at all, and a client trying
    to connect fails at once rather than hanging."""
    script = """python3 - <<'EOF'
import os, socket, time
print("proxy", os.environ.get("HTTPS_PROXY"))
started = time.monotonic()
for address in (("127.0.0.1", 3128), ("1.1.1.1", 443)):
    try:
        socket.create_connection(address, timeout=20)
        print("connected", address)
    except OSError as exc:
        print("refused", exc.errno)
print("fast", time.monotonic() - started < 5)
EOF"""
    with DockerEnvironment(workspace, DockerSettings()) as env:
        result = run(env, script, writable=True)
        attrs = env.engine.client.api.inspect_container(result.extra["container"])

    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines()[0] == "proxy None"
    assert result.stdout.splitlines()[1] == "refused 111"
    assert result.stdout.splitlines()[2].startswith("refused ")
    assert result.stdout.splitlines()[3] == "fast True"
    assert attrs["HostConfig"]["NetworkMode"] == "none"
    assert not any("relay" in m["Destination"] for m in attrs["Mounts"])


def test_a_remote_engine_has_no_warm_pool(
    workspace: Path, docker_engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pool hands a claimed sandbox's stream over as a descriptor, which a TLS connection
    cannot be: sessions on a remote engine make their own sandboxes, and start no pool server."""
    monkeypatch.setenv("CODECODER_POOL", "1")
    with DockerEnvironment(workspace, DockerSettings(pool=2)) as env:
        ran = run(env, "echo ran")
        assert env.engine.pool is None
        labels = [c.labels for c in docker_engine.containers.list()]

    assert ran.stdout == "ran\n"
    assert not any("codecoder.pool" in found for found in labels)
    assert not wire.socket_directory().exists()


def test_a_stream_hung_up_on_while_the_container_still_writes_lets_it_go_at_once(
    docker_engine: Any,
) -> None:
    """A channel that ends a stream (a protocol violation, an interrupted call, close) closes
    its descriptor, not only the socket object: the SDK's response holds it too, and over TCP a
    connection shut down but still open keeps taking the engine's writes until its window is
    full, after which the engine's copy blocks and so does removing the container (a minute
    here, until the client's read timeout)."""
    container = docker_engine.api.create_container(
        SANDBOX_IMAGE,
        ["sh", "-c", "head -c 20000000 /dev/zero; sleep 300"],
        stdin_open=True,
        labels={"codecoder": "1"},
    )["Id"]
    try:
        attached = docker_engine.api.attach_socket(
            container, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
        )
        channel = _AgentChannel(container, "hung-up", "ro", attached)
        docker_engine.api.start(container)
        deadline = time.monotonic() + 30
        while channel.gone is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert channel.gone is not None and "a line longer than" in channel.gone
        time.sleep(2)  # the engine has more to write than any buffer holds
        channel.close()

        assert channel._sock.fileno() == -1  # the descriptor itself, not only the object
        started = time.monotonic()
        docker_engine.api.remove_container(container, force=True)
        assert time.monotonic() - started < 10
        # and the client's pool of connections was not handed the closed one
        for _ in range(12):
            docker_engine.api.ping()
    finally:
        with contextlib.suppress(Exception):
            docker_engine.api.remove_container(container, force=True)


def check(project: Path, env: dict[str, str]) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "codecoder", "check", "--json"],
        capture_output=True,
        text=True,
        cwd=project,
        env=env,
        timeout=120,
        check=False,
    )
    report = json.loads(proc.stdout)
    assert isinstance(report, dict)
    return report


def test_check_reports_the_engine_its_tls_and_the_workspace_mode(
    remote_engine: RemoteEngine, project: Path
) -> None:
    env = {**os.environ, "REQUESTS_CA_BUNDLE": ssl.get_default_verify_paths().openssl_cafile}
    certs = remote_engine.environ["DOCKER_CERT_PATH"]
    address = remote_engine.address
    verified = check(project, env)
    unverified = check(project, {**env, "DOCKER_TLS_VERIFY": ""})
    plain = check(project, {**env, "DOCKER_TLS_VERIFY": "", "DOCKER_CERT_PATH": ""})

    assert (verified["ok"], verified["diagnostics"]) == (True, [])
    docker = verified["docker"]
    assert docker["transport"] == {
        "address": address,
        "local": False,
        "tls": "verified",
        "ca": f"{certs}/ca.pem",
        "client_certificate": f"{certs}/cert.pem",
    }
    assert (docker["reachable"], docker["workspace"], docker["problems"]) == (True, "sync", [])
    assert unverified["docker"]["transport"]["tls"] == "unverified"
    assert unverified["docker"]["reachable"]  # the certificate is not checked, the client's is
    (warning,) = unverified["diagnostics"]
    assert warning["code"] == "docker_transport" and "not verified" in warning["message"]
    assert plain["docker"]["transport"]["tls"] == "off"
    assert not plain["docker"]["reachable"]  # the engine speaks only TLS
    assert [d["code"] for d in plain["diagnostics"]] == ["docker_transport"]


def test_check_says_it_in_words(remote_engine: RemoteEngine, project: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "codecoder", "check"],
        capture_output=True,
        text=True,
        cwd=project,
        timeout=120,
        check=True,
    )
    line = next(line for line in proc.stdout.splitlines() if line.startswith("@docker"))
    assert line.startswith(
        f"@docker: engine {remote_engine.address} (another machine, TLS verified, client "
        "certificate), image codecoder-sandbox (agent "
    )
    assert line.endswith(
        "runtime runc, workspace sync (the engine is on another machine), network none (the "
        "engine is on another machine, where the egress proxy's socket cannot be mounted: "
        "commands run there with no network, and a connection fails at once)"
    )


def test_a_call_of_the_command_line_runs_there_and_its_writes_come_back(
    remote_engine: RemoteEngine, project: Path
) -> None:
    (project / "input.txt").write_text("from the host\n")
    owned(project)
    command = {"command": "cat input.txt > copied.txt; hostname"}
    started = int(time.time()) - 1
    proc = subprocess.run(
        [sys.executable, "-m", "codecoder", "call", "run_container", json.dumps(command),
         "--answer", "once", "--json"],
        capture_output=True,
        text=True,
        cwd=project,
        timeout=120,
        check=False,
    )  # fmt: skip
    outcome = json.loads(proc.stdout)
    created = remote_engine.client.api.events(
        since=started,
        until=int(time.time()) + 1,
        filters={"type": "container", "event": "create"},
        decode=True,
    )

    assert proc.returncode == 0, proc.stderr
    assert outcome["ok"] and outcome["decision"]["environment"] == "@docker"
    assert (project / "copied.txt").read_text() == "from the host\n"
    hostname = outcome["result"]["data"]["stdout"].strip()
    assert any(event["id"].startswith(hostname) for event in created)  # made by that engine


# --- what sync mode promises instead of bind mode's mounts -----------------------------------

PROTECTED_NAMES = {".git", ".gitmodules", "codecoder.json", ".codecoder"}


def protected_tree(workspace: Path) -> dict[str, object]:
    """Every protected path of the workspace and everything under it, with its content."""
    found: dict[str, object] = {}
    for path in sorted(workspace.rglob("*")):
        relative = path.relative_to(workspace)
        if not {part.lower() for part in relative.parts} & PROTECTED_NAMES:
            continue
        if path.is_symlink():
            found[str(relative)] = ("link", os.readlink(path))
        elif path.is_file():
            found[str(relative)] = path.read_bytes()
        else:
            found[str(relative)] = "dir"
    return found


@pytest.fixture
def protected(workspace: Path) -> Path:
    (workspace / "codecoder.json").write_text('{"allowlist": {}}\n')
    (workspace / ".codecoder").mkdir()
    (workspace / ".git" / "hooks").mkdir(parents=True)
    (workspace / ".git" / "config").write_text("[core]\n")
    (workspace / "vendor" / "lib" / ".git" / "hooks").mkdir(parents=True)
    (workspace / "vendor" / ".gitmodules").write_text("[submodule]\n")
    (workspace / "vendor" / "lib" / "code.c").write_text("int x;\n")
    return owned(workspace)


ATTACKS = [
    """echo '{"allowlist": {"run_command:*": "AlwaysThisProject"}}' > codecoder.json""",
    "mv codecoder.json old.json",
    "rm -f codecoder.json",
    "printf '#!/bin/sh\\nid\\n' > .git/hooks/pre-commit",
    "echo '[core] fsmonitor = id' >> .git/config",
    "rm -rf .git",
    "mv .git git-moved",
    "mkdir .codecoder/capabilities",
    "rm -rf .codecoder",
    "echo id > vendor/lib/.git/hooks/pre-commit",
    "echo '[core] fsmonitor = id' > vendor/lib/.git/config",
    "echo x >> vendor/.gitmodules",
    "rm -rf vendor/lib/.git",
    "mv vendor/.gitmodules vendor/gm",
    "mv vendor/lib vendor/elsewhere",
    "mv vendor elsewhere && mkdir vendor",
    *(plant for plant, _ in PLANTS),  # noqa: F405  (test_attacks: new ones at any depth)
]


@pytest.mark.parametrize("plant", PLACEHOLDED)  # noqa: F405  (test_attacks)
def test_a_protected_name_missing_at_the_top_stays_in_the_sandbox(
    sandbox: DockerEnvironment, plant: str
) -> None:
    """Sync mode's promise for the names bind mode mounts placeholders on: the call may make
    them in its copy, none of it comes back to the host."""
    before = sorted(p.name for p in sandbox.workspace.iterdir())
    said = run(sandbox, plant, writable=True)
    synced: Any = said.extra["synced"]
    assert synced["written"] == 0  # what it made (if it got that far) was kept in the sandbox
    assert sorted(p.name for p in sandbox.workspace.iterdir()) == before


# What a call can take away in the sandbox's copy (a rename needs only the parent directory's
# write permission; a file or an empty directory goes with an unlink): the copy no longer shows
# what the workspace holds, so the call fails, nothing comes back, and the copy is rebuilt.
# (`rm -rf .git` and the like fail in the sandbox: what is in them is root's and read-only.)
TAKES_AWAY = (
    "mv codecoder.json old.json",
    "rm -f codecoder.json",
    "mv .git git-moved",
    "rm -rf .codecoder",
    "mv vendor/.gitmodules vendor/gm",
    "mv vendor/lib vendor/elsewhere",
    "mv vendor elsewhere && mkdir vendor",
)


@pytest.mark.parametrize("attack", ATTACKS)
def test_nothing_a_call_does_to_a_protected_path_reaches_the_host(
    protected: Path, attack: str
) -> None:
    before = protected_tree(protected)

    with DockerEnvironment(protected) as env:
        if attack in TAKES_AWAY:
            with pytest.raises(ExecutionFailed, match=r"may never move protected paths.*nothing"):
                run(env, attack, writable=True)
        else:
            run(env, attack, writable=True)
        control = run(env, "echo 'int y;' > vendor/lib/code.c", writable=True)
        seen = run(env, "cat vendor/lib/code.c")

    assert protected_tree(protected) == before
    assert control.exit_code == 0, control
    assert (protected / "vendor" / "lib" / "code.c").read_text() == "int y;\n"
    assert seen.stdout == "int y;\n"


def test_a_protected_path_made_on_the_host_between_calls_is_never_written_back(
    workspace: Path,
) -> None:
    (workspace / "keep.txt").write_text("x\n")
    owned(workspace)
    with DockerEnvironment(workspace) as env:
        run(env, "mkdir -p deep/down", writable=True)
        (workspace / "deep" / "down" / ".git").mkdir()  # e.g. `git init` on the host
        os.chown(workspace / "deep" / "down" / ".git", 10001, 10001)
        run(env, "touch deep/down/.git/planted; echo id > deep/down/.git/config", writable=True)

    assert list((workspace / "deep" / "down" / ".git").iterdir()) == []


def test_a_symlinked_protected_path_never_leads_a_copy_back_out(
    workspace: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (workspace / "keep.txt").write_text("x\n")
    (workspace / "codecoder.json").symlink_to(outside / "target.json")
    owned(workspace)
    with DockerEnvironment(workspace) as env:
        run(env, "echo planted > codecoder.json; echo planted > keep.txt", writable=True)

    assert list(outside.iterdir()) == []
    assert os.readlink(workspace / "codecoder.json") == str(outside / "target.json")


def test_a_writable_call_writes_the_workspace_as_its_owner_there(workspace: Path) -> None:
    (workspace / "existing.txt").write_text("x\n")
    owned(workspace)
    with DockerEnvironment(workspace) as env:
        result = run(env, "echo data > out.txt", writable=True)

    written = workspace / "out.txt"
    assert result.exit_code == 0
    assert written.read_text() == "data\n"
    assert (written.stat().st_uid, written.stat().st_gid) == (10001, 10001)


def test_an_empty_workspace_can_be_written_there(workspace: Path) -> None:
    with DockerEnvironment(workspace) as env:
        result = run(env, "echo data > out.txt", writable=True)

    assert result.exit_code == 0, result.stderr


def test_gvisor_is_refused_there_with_the_reason(workspace: Path) -> None:
    """gVisor's limits are read from the cgroup of the container's process, on the machine it
    runs on: a remote engine's pid names some other process here."""
    with (
        DockerEnvironment(workspace, DockerSettings(runtime="runsc")) as env,
        pytest.raises(SandboxUnavailable) as raised,
    ):
        run(env, "true")

    assert "whose limits are checked on the machine it runs on" in str(raised.value)
    assert os.environ["DOCKER_HOST"] in str(raised.value)


def test_the_audits_docker_layer_runs_there_and_nothing_escapes(project: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "codecoder", "audit", "--layer", "docker", "--json"],
        capture_output=True,
        text=True,
        cwd=project,
        timeout=900,
        check=False,
    )
    report = json.loads(proc.stdout)
    counts = report["layers"]["docker"]
    not_run = {a["id"]: a["how"] for a in report["attempts"] if a["status"] == "not-run"}
    needs_the_proxy = {"docker.egress-socket-direct", "docker.egress-flood"}

    assert counts["escaped"] == 0, [a for a in report["attempts"] if a["status"] == "escaped"]
    assert counts["blocked"] >= 43  # every attempt, under runc only: gVisor needs a local engine
    # What sync mode cannot stage yet: deleting on the host what an earlier attempt left
    # (environments/docker/sync.py, being reshaped on another branch).
    # docker.agent-settings-parent-renamed likewise stages by renaming on the host between calls.
    staged_on_the_host = {"docker.capability-dir", "docker.agent-settings-parent-renamed"}
    assert set(not_run) <= {*staged_on_the_host, *needs_the_proxy}, not_run
    # The egress allowlist's proxy listens on a Unix socket of this machine, which a container
    # on another machine cannot be given: a remote engine refuses the allowlist, with the reason.
    assert {id_: not_run.get(id_) for id_ in needs_the_proxy} == dict.fromkeys(
        needs_the_proxy,
        f"SandboxUnavailable: the Docker engine at {os.environ['DOCKER_HOST']} is on another "
        "machine, and the egress proxy of docker.network runs on this one: its allowlist needs "
        "a local engine",
    )


def test_the_engine_takes_nothing_of_its_starters_environment(remote_engine: RemoteEngine) -> None:
    """Started by whoever needs it first (a test worker, CI, a user's shell), the engine keeps
    none of their variables: a test worker's TMPDIR, gone with it and hidden in the engine's
    mount namespace, left gVisor unable to make any sandbox there."""
    names = {
        entry.partition(b"=")[0].decode()
        for entry in Path(f"/proc/{remote_engine.pid}/environ").read_bytes().split(b"\0")
        if entry
    }
    assert names <= {"PATH", "HOME", "LANG", "PWD"}
