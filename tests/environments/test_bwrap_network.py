"""The egress proxy in @bwrap with the real clients (issue 34): curl, git, pip, npm and cargo
each reach a host through the proxy (the call's gate is asked for it: the client used the
proxy settings the sandbox gives it), a refused host is answered at once with its key and the
client stops (no silent drop to retry against), and a warm sandbox serves its egress too.

No test here reaches beyond this machine: the gate refuses every host before its name is
resolved, or admits 127.0.0.1 only. The test that really reaches PyPI and npm is
tests/integrations/test_contained_registries.py.
"""

from __future__ import annotations

import json
import shutil
import socket
import threading
import time
from pathlib import Path

import pytest

from codecoder.environments.base import CommandRequest, Connection
from codecoder.environments.bwrap.environment import BwrapEnvironment
from codecoder.environments.egress import Egress
from tests.environments.bwrap_support import need_bwrap, repo

__all__ = ["repo"]  # fixtures

HOST = "registry.example.test"


class RefusingGate:
    """Refuses every host, naming its key as the runtime's gate does; keeps what it was asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, int]] = []
        self.recorded: list[Connection] = []

    def admit(self, host: str, port: int) -> str | None:
        self.asked.append((host, port))
        return (
            f"network:{host} was not allowed (test); to allow it, run with --allow network:{host}"
        )

    def record(self, connection: Connection) -> None:
        self.recorded.append(connection)


CLIENTS = {
    "curl": f"curl -sS https://{HOST}/simple/ -o /dev/null",
    "git": f"GIT_TERMINAL_PROMPT=0 git ls-remote https://{HOST}/team/app.git",
    "pip": f"python3 -m pip download --no-deps -d /tmp/d --index-url https://{HOST}/simple six",
    "npm": f"npm view --registry https://{HOST}/ is-number version",
    "cargo": f"cargo search --index sparse+https://{HOST}/index/ serde",
    "wget": f"wget -q -O /dev/null https://{HOST}/x",
}


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_each_client_goes_through_the_proxy_and_a_refused_host_stops_it_at_once(
    repo: Path,
    client: str,
) -> None:
    need_bwrap()
    if shutil.which(client) is None:
        pytest.skip(f"{client} is not installed")
    gate = RefusingGate()
    env = BwrapEnvironment(repo)
    started = time.monotonic()
    try:
        result = env.run(
            CommandRequest(
                cwd=repo, script=CLIENTS[client], network=gate, writable=True, timeout=120
            )
        )
    finally:
        env.close()
    took = time.monotonic() - started
    print(f"{client}: exit {result.exit_code} after {took:.1f} s")  # the report reads these
    assert result.exit_code != 0
    assert set(gate.asked) == {(HOST, 443)}, (gate.asked, result.stderr)
    # Every connection was answered (403, the key named), none silently dropped.
    assert gate.recorded and all(not c.allowed for c in gate.recorded)
    assert all(c.reason.startswith(f"network:{HOST} was not allowed") for c in gate.recorded)
    assert "A complete log of this run can be found in" not in result.stdout + result.stderr


def test_a_curl_client_is_told_the_refusal_and_its_key(repo: Path) -> None:
    need_bwrap()
    gate = RefusingGate()
    env = BwrapEnvironment(repo)
    try:
        result = env.run(
            CommandRequest(
                cwd=repo,
                script=f"curl -sS -x '' -p https://{HOST}/ 2>&1; "
                f"printf 'CONNECT {HOST}:443 HTTP/1.1\\r\\n\\r\\n' | "
                "python3 -c \"import socket,sys; s=socket.create_connection(('127.0.0.1',3128)); "
                's.sendall(sys.stdin.buffer.read()); print(s.recv(600).decode())"',
                network=gate,
                writable=True,
            )
        )
    finally:
        env.close()
    assert "HTTP/1.1 403 Refused" in result.stdout
    assert f"codecoder egress: network:{HOST} was not allowed (test)" in result.stdout


def test_a_warm_sandbox_serves_its_egress_through_the_claiming_calls_gate(
    repo: Path,
) -> None:
    need_bwrap()
    upstream = socket.socket()
    upstream.bind(("127.0.0.1", 0))
    upstream.listen(8)
    port = upstream.getsockname()[1]

    def answer() -> None:
        while True:
            try:
                conn, _ = upstream.accept()
            except OSError:
                return
            with conn:
                conn.sendall(b"hello\n")

    threading.Thread(target=answer, daemon=True).start()

    class Gate(RefusingGate):
        def admit(self, host: str, port: int) -> str | None:
            self.asked.append((host, port))
            return None

    client = (
        "import socket; s = socket.create_connection(('127.0.0.1', 3128), timeout=5); "
        f"s.sendall(b'CONNECT 127.0.0.1:{port} HTTP/1.1\\r\\n\\r\\n'); "
        "print(b''.join(iter(lambda: s.recv(100), b'')).decode().splitlines()[-1])"
    )
    env = BwrapEnvironment(repo, egress=Egress((f"127.0.0.1:{port}",)))
    gates: list[Gate] = []
    results = []
    try:
        # The first call runs cold and leaves a warm sandbox; the next takes it. A host change
        # between build and claim (a parallel test's plant in /var/lib) makes a call cold
        # again: calls go on until one was warm, at most four.
        while env.warm_sandboxes.claimed == 0 and len(gates) < 4:
            if gates:
                deadline = time.monotonic() + 30
                while not env.warm_sandboxes.held() and time.monotonic() < deadline:
                    time.sleep(0.01)
            gates.append(Gate())
            results.append(
                env.run(
                    CommandRequest(
                        cwd=repo,
                        argv=("python3", "-c", client),
                        network=gates[-1],
                        session="s",
                        writable=True,
                    )
                )
            )
        claimed = env.warm_sandboxes.claimed
    finally:
        env.close()
        upstream.close()
    assert [r.stdout for r in results] == ["hello\n"] * len(gates), [r.stderr for r in results]
    assert claimed == 1
    assert [g.asked for g in gates] == [[("127.0.0.1", port)]] * len(gates)


def test_a_host_granted_for_the_project_during_a_writable_call_is_written_after_it(
    repo: Path,
) -> None:
    """The grant is written when the call ends: a codecoder.json changed under a running
    writable sandbox is what its guard quarantines."""
    from codecoder.foundation.decision import Answer
    from codecoder.session import Runtime
    from tests.conftest import RecordingAsker, write_config

    need_bwrap()
    upstream = socket.socket()
    upstream.bind(("127.0.0.1", 0))
    upstream.listen(4)
    port = upstream.getsockname()[1]

    def answer() -> None:
        conn, _ = upstream.accept()
        with conn:
            conn.sendall(b"hello\n")

    threading.Thread(target=answer, daemon=True).start()
    write_config(
        repo,
        {
            "docker": {"network": {"allow": [f"127.0.0.1:{port}"]}},
            "allowlist": {"run_command:**": "AlwaysThisProject"},
        },
    )
    client = (
        "import socket; s = socket.create_connection(('127.0.0.1', 3128), timeout=5); "
        f"s.sendall(b'CONNECT 127.0.0.1:{port} HTTP/1.1\\r\\n\\r\\n'); "
        "print(b''.join(iter(lambda: s.recv(100), b'')).decode().splitlines()[-1])"
    )
    asker = RecordingAsker(Answer.PROJECT)
    try:
        with Runtime(repo, asker=asker) as runtime:
            outcome = runtime.session().call(
                "run_command", {"command": f'touch made && python3 -c "{client}"'}
            )
    finally:
        upstream.close()
    assert outcome.error is None, outcome.to_json()
    assert outcome.unwrap().data["stdout"] == "hello\n"
    assert [r.key for r in asker.requests] == ["network:127.0.0.1"]
    allowlist = json.loads((repo / "codecoder.json").read_text())["allowlist"]
    assert allowlist["network:127.0.0.1"] == "AlwaysThisProject"
    assert (repo / "made").exists()


def test_a_read_only_call_has_no_way_out_at_all(repo: Path) -> None:
    """A read-only command ran with no question (SPEC §5): not even the proxy is there, so a
    wrong entry of the read-only table could not reach a host granted to other commands."""
    need_bwrap()
    gate = RefusingGate()
    env = BwrapEnvironment(repo)
    client = (
        "import socket\n"
        "try:\n"
        "    socket.create_connection(('127.0.0.1', 3128), timeout=5)\n"
        "    print('connected')\n"
        "except OSError as exc:\n"
        "    print('refused:', exc.strerror)\n"
    )
    try:
        result = env.run(
            CommandRequest(cwd=repo, argv=("python3", "-c", client), network=gate, writable=False)
        )
    finally:
        env.close()
    assert result.stdout == "refused: Connection refused\n", result.stderr
    assert not gate.asked
