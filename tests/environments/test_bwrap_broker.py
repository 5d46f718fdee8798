# ruff: noqa: E501
"""The credential broker (`environments.broker`) with real bubblewrap and a real HTTPS git server
on loopback: a contained `git push` gets the user's credential, the sandbox never does."""

from __future__ import annotations

import base64
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from codecoder.environments.base import CommandRequest, CommandResult, Connection
from codecoder.environments.broker import CredentialRoute
from codecoder.environments.bwrap.environment import BwrapEnvironment
from codecoder.environments.egress import Egress
from tests.environments.bwrap_support import git, need_bwrap, repo  # noqa: F401
from tests.environments.gitserver import HOST, TOKEN, USER, GitServer, git_server, user_home  # noqa: F401

EXPECTED = "Basic " + base64.b64encode(f"{USER}:{TOKEN}".encode()).decode()


@dataclass
class Gate:
    admitted: list[tuple[str, int]] = field(default_factory=list)
    recorded: list[Connection] = field(default_factory=list)

    def admit(self, host: str, port: int) -> str | None:
        self.admitted.append((host, port))
        return None

    def record(self, connection: Connection) -> None:
        self.recorded.append(connection)


@dataclass
class Routed:
    env: BwrapEnvironment
    server: GitServer
    home: Path
    workspace: Path

    def run(self, script: str, *, writable: bool = True, gate: Gate | None = None) -> CommandResult:
        return self.env.run(
            CommandRequest(
                cwd=self.workspace,
                script=script,
                writable=writable,
                network=gate or Gate(),
                timeout=60,
            )
        )


@pytest.fixture
def routed(repo: Path, git_server: GitServer, tmp_path: Path) -> Iterator[Routed]:  # noqa: F811
    need_bwrap()
    home = user_home(tmp_path, git_server)
    git_server.bare("project.git")
    git(repo, "remote", "add", "origin", git_server.url("project.git"))
    environ = {"HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C"}
    env = BwrapEnvironment(
        repo,
        egress=Egress((HOST,)),
        environ=environ,
        resolver=git_server.resolver,
        credentials=(CredentialRoute.parse(HOST),),
        upstream_ca=git_server.ca,
        upstream_address=("127.0.0.1", git_server.port),
    )
    yield Routed(env, git_server, home, repo)
    env.close()


def test_a_contained_git_push_to_a_routed_host_succeeds_with_the_users_credential(
    routed: Routed,
) -> None:
    gate = Gate()
    result = routed.run("git push -q origin main 2>&1", gate=gate)
    assert result.exit_code == 0, result.stdout + result.stderr
    head = git(routed.workspace, "rev-parse", "HEAD").strip()
    pushed = subprocess.run(
        ["git", "--git-dir", str(routed.server.root / "project.git"), "rev-parse", "main"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert pushed == head
    assert ("POST", "/project.git/git-receive-pack", EXPECTED) in routed.server.seen
    assert gate.admitted and all(c.allowed for c in gate.recorded)


def _token_spellings() -> list[str]:
    return [TOKEN, base64.b64encode(f"{USER}:{TOKEN}".encode()).decode(), TOKEN[4:20]]


def test_inside_the_sandbox_the_token_is_nowhere_not_even_in_the_pushs_own_trace(
    routed: Routed,
) -> None:
    # Where a token could be written, every file is read (the home, every temporary directory,
    # /run with the broker's bundle); the rest of the file system is only walked: what the
    # sandbox can read there beyond what every account may read (environments.privatefiles:
    # none of it) is searched for private keys. A grep through every file of the machine took
    # longer than the call's 60 s under load.
    script = """
GIT_TRACE_CURL=1 GIT_TRACE_CURL_NO_DATA=1 git push -q origin main 2>&1
echo '--- env'; env
echo '--- files'; grep -rla . "$HOME" /tmp /var/tmp /run /dev/shm 2>/dev/null
for f in $(grep -rl . "$HOME" /tmp /var/tmp /run /dev/shm 2>/dev/null); do cat "$f"; done
echo '--- beyond what every account reads'
find / \\( -path /proc -o -path /sys -o -path /dev -o -path "$PWD" -o -path "$HOME" \
  -o -path /tmp -o -path /var/tmp -o -path /run \\) -prune \
  -o -type f -readable ! -perm -o=r -print0 2>/dev/null > /tmp/beyond
tr '\\0' '\\n' < /tmp/beyond | sed 's/^/beyond: /' | head -20
xargs -0 -r grep -l 'PRIVATE KEY' < /tmp/beyond | sed 's/^/private key: /'
cat /var/lib/codecoder-remote-engine/*/*key.pem 2>&1 | head -3
echo '--- end'
ls -la /run/codecoder
"""
    result = routed.run(script)
    output = result.stdout + result.stderr
    assert "Authorization" not in output  # git in the sandbox never had one to send
    for spelling in _token_spellings():
        assert spelling not in output
    assert "=> Send header" in output  # the trace ran: git's own headers were shown
    assert "ca-bundle.pem" in output
    assert ("POST", "/project.git/git-receive-pack", EXPECTED) in routed.server.seen
    assert "GIT_SSL_CAINFO=/run/codecoder/ca-bundle.pem" in output
    assert "--- end" in output  # the walk of the file system ended within the call
    beyond = output.split("--- beyond what every account reads")[1].split("--- end")[0]
    assert "private key:" not in beyond and "PRIVATE KEY" not in beyond
    if Path("/var/lib/codecoder-remote-engine").is_dir() and os.geteuid() == 0:
        # The control: the host reads the TLS remote engine's private keys.
        keys = Path("/var/lib/codecoder-remote-engine").glob("*/*key.pem")
        assert any("PRIVATE KEY" in key.read_text() for key in keys)


@pytest.mark.parametrize(
    "request_line",
    [
        "/user",
        "/anything",
        "/",
        "/project.git/info/refs",
        "/project.git/info/refs?service=git-upload-pack&x=1",
        "/project.git/info/refs?service=other",
        "/project.git/../user/info/refs?service=git-upload-pack",
        "/%2e%2e/user/info/refs?service=git-upload-pack",
        "/user%2finfo/refs?service=git-upload-pack",
        "//evil/x/info/refs?service=git-upload-pack",
        "/api;x/info/refs?service=git-upload-pack",
        "-X POST /graphql",
        "-X PUT /project.git/git-receive-pack",
        "-X DELETE /project.git/git-receive-pack",
        "/project.git/git-receive-pack",
        "-X POST /project.git/git-receive-pack?x=1",
    ],
)
def test_a_request_to_the_routed_host_that_is_not_git_smart_http_gets_403_and_no_credential(
    routed: Routed, request_line: str
) -> None:
    method, _, path = request_line.rpartition(" ")
    gate = Gate()
    result = routed.run(
        f"curl -s --path-as-is {method} -o /dev/stderr -w '%{{http_code}}' 'https://{HOST}{path}'",
        gate=gate,
    )
    assert result.stdout == "403", result.stdout + result.stderr
    assert "is not a git smart-HTTP request" in result.stderr
    assert routed.server.seen == []  # never forwarded
    refused = [c for c in gate.recorded if not c.allowed]
    assert len(refused) == 1 and "not a git smart-HTTP request" in refused[0].reason


def test_a_request_the_broker_cannot_parse_ends_the_connection_and_reaches_nobody(
    routed: Routed,
) -> None:
    script = f"""
import socket, ssl
for head in [b"GET /x/info/refs?service=git-upload-pack HTTP/1.1\\r\\nHost: a\\r\\nX: " + b"y" * 20000 + b"\\r\\n\\r\\n",
             b"NOT HTTP AT ALL\\r\\n\\r\\n",
             b"GET /x/info/refs?service=git-upload-pack HTTP/1.1\\r\\nTransfer-Encoding: gzip, chunked\\r\\n\\r\\n"]:
    s = socket.create_connection(("127.0.0.1", 3128))
    s.sendall(b"CONNECT {HOST}:443 HTTP/1.1\\r\\n\\r\\n")
    s.recv(100)
    t = ssl.create_default_context(cafile="/run/codecoder/ca-bundle.pem").wrap_socket(s, server_hostname="{HOST}")
    t.sendall(head)
    answer = b""
    while chunk := t.recv(4096):
        answer += chunk
    print(answer.split(b"\\r\\n")[0].decode(), flush=True)
"""
    (routed.workspace / "client.py").write_text(script)
    result = routed.run("timeout 10 python3 client.py")
    assert result.stdout.splitlines() == [
        "HTTP/1.1 431 Refused",
        "HTTP/1.1 400 Refused",
        "HTTP/1.1 501 Refused",
    ], result.stdout + result.stderr
    assert routed.server.seen == []


def test_an_unrouted_host_is_tunnelled_as_before_and_gets_no_credential(
    repo: Path,  # noqa: F811
    git_server: GitServer,  # noqa: F811
    tmp_path: Path,
) -> None:
    need_bwrap()
    home = user_home(tmp_path, git_server)
    git_server.bare("project.git")
    (repo / "server.pem").write_bytes(git_server.ca.read_bytes())
    direct = f"127.0.0.1:{git_server.port}"
    env = BwrapEnvironment(
        repo,
        egress=Egress((HOST, direct)),
        environ={"HOME": str(home), "PATH": os.environ["PATH"]},
        resolver=git_server.resolver,
        credentials=(CredentialRoute.parse(HOST),),
        upstream_ca=git_server.ca,
        upstream_address=("127.0.0.1", git_server.port),
    )
    client = f"""
import socket, ssl
s = socket.create_connection(("127.0.0.1", 3128))
s.sendall(b"CONNECT {direct} HTTP/1.1\\r\\n\\r\\n")
print(s.recv(100).split(b"\\r\\n")[0].decode())
t = ssl.create_default_context(cafile="server.pem").wrap_socket(s, server_hostname="127.0.0.1")
t.sendall(b"GET /project.git/info/refs?service=git-upload-pack HTTP/1.1\\r\\nHost: {HOST}\\r\\n\\r\\n")
print(t.recv(100).split(b"\\r\\n")[0].decode())
"""
    try:
        result = env.run(
            # Writable: a read-only call has no proxy at all.
            CommandRequest(cwd=repo, argv=("python3", "-c", client), network=Gate(), writable=True)
        )
    finally:
        env.close()
    assert result.stdout.splitlines() == [
        "HTTP/1.1 200 Connection established",
        "HTTP/1.0 401 Unauthorized",
    ], result.stdout + result.stderr
    assert git_server.seen == [("GET", "/project.git/info/refs?service=git-upload-pack", None)]


def test_the_repositorys_own_credential_helper_and_insteadof_change_nothing(
    routed: Routed, tmp_path: Path
) -> None:
    marker = tmp_path / "helper-ran"
    evil = f"!f() {{ touch {marker}; echo username=evil; echo password=stolen; }}; f"
    config = routed.workspace / ".git" / "config"
    with config.open("a") as out:
        out.write(
            f'[credential]\n\thelper = "{evil}"\n'
            f'[credential "https://{HOST}"]\n\thelper = "{evil}"\n\tusername = evil\n'
            f'[url "https://{HOST}/elsewhere"]\n\tinsteadOf = https://{HOST}/project\n'
            "[include]\n\tpath = /nonexistent\n"
        )
    # The sandbox's git follows insteadOf (its own business: the path is still a git path on
    # the routed host); the credential is the user's, and the repository's helper never ran.
    routed.server.bare("elsewhere.git")
    result = routed.run("git push -q origin main 2>&1")
    assert result.exit_code == 0, result.stdout
    assert ("POST", "/elsewhere.git/git-receive-pack", EXPECTED) in routed.server.seen
    assert not marker.exists()
    assert all(auth in (EXPECTED, None) for _, _, auth in routed.server.seen)


def test_a_rejected_credential_is_reported_to_the_users_helper(routed: Routed) -> None:
    (routed.home / ".git-credentials").write_text(f"https://{USER}:wrong@{HOST}\n")
    result = routed.run("GIT_TERMINAL_PROMPT=0 git push -q origin main 2>&1")
    assert result.exit_code != 0
    assert (routed.home / ".git-credentials").read_text() == ""  # git credential reject
    assert all(auth != EXPECTED for _, _, auth in routed.server.seen)


def test_without_a_route_nothing_changes_no_bundle_and_no_credential(
    repo: Path,  # noqa: F811
    git_server: GitServer,  # noqa: F811
    tmp_path: Path,
) -> None:
    need_bwrap()
    home = user_home(tmp_path, git_server)
    env = BwrapEnvironment(
        repo,
        egress=Egress((HOST,)),
        environ={"HOME": str(home), "PATH": os.environ["PATH"]},
        resolver=git_server.resolver,
    )
    try:
        assert env.broker is None
        result = env.run(
            CommandRequest(
                cwd=repo, script="ls /run/codecoder; env | grep -c CAINFO", network=Gate()
            )
        )
    finally:
        env.close()
    assert result.stdout.strip() == "0"
