"""The decision server (`interfaces.forkserver.protocol`), as real processes: `codecoder decide` and
`codecoder hook` answered by a warm fork server give exactly what a fresh process gives,
whatever changed between calls; nobody else can use it, it runs only the commands it serves,
and when it cannot answer the call is evaluated in-process or blocked, never let through.
(The commands that run tools, served: test_forkserver_calls.py; clients in other contexts:
test_peercontext.py.)
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from codecoder.interfaces.forkserver import protocol
from tests.runtime.config.test_capabilities import echo_capability
from tests.runtime.interfaces.served import (
    Machine,
    address,
    alive,
    children,
    request,
    wait_until,
)

REPO = Path(__file__).resolve().parents[3]


def hook_event(event: str, tool: str, tool_input: dict[str, Any], call: str, cwd: str = "/") -> str:
    return json.dumps(
        {
            "session_id": "s1",
            "cwd": cwd,
            "hook_event_name": event,
            "tool_name": tool,
            "tool_input": tool_input,
            "tool_use_id": call,
        }
    )


def test_answers_are_those_of_a_fresh_process_whatever_changed_between_calls(
    machine: Machine, tmp_path: Path
) -> None:
    """The same sequence of calls and changes, once with the server and once without: every
    exit code, stdout and stderr is the same, and the server answered all of them."""
    project = machine.project
    planted = project / "bin"
    planted.mkdir()
    (planted / "git").write_text("#!/bin/sh\necho planted\n")
    (planted / "git").chmod(0o755)
    user_file = Path(machine.env["XDG_CONFIG_HOME"]) / "codecoder" / "config.json"
    git_status = ("decide", "run_command", '{"command": "git status"}', "--json")
    write_src = ("decide", "write_file", '{"path": "src/a.py", "content": "x"}')
    bash = {"command": "git log"}
    make = '{"command": "make"}'
    here = str(project)  # the directory the host sends, from which the project is found

    def scenario(daemon: bool) -> list[tuple[int, str, str]]:
        for path in (project / "codecoder.json", user_file):
            path.unlink(missing_ok=True)
        for directory in (project / ".codecoder",):
            subprocess.run(["rm", "-rf", str(directory)], check=True)
        seen = []

        def step(*args: str, stdin: str = "", **env: str) -> None:
            seen.append(machine.run(*args, stdin=stdin, daemon=daemon, **env))

        # On the host a program is found on PATH (contained, `git status` is read-only and
        # allowed, whichever git it is): the user binds run_command to @shell until the user
        # file is rewritten below, and the rest of the scenario runs contained.
        user_file.parent.mkdir(parents=True, exist_ok=True)
        user_file.write_text(json.dumps({"environments": {"run_command": "@shell"}}))
        step(*git_status)
        step(*git_status, PATH=f"{planted}:{os.environ['PATH']}")  # keyed by its path now
        step(*write_src)
        (project / "codecoder.json").write_text(
            json.dumps({"allowlist": {"write_file:src/**": "AlwaysThisProject"}})
        )
        step(*write_src)  # untrusted: the grant is ignored
        step("trust", "--yes")
        step(*write_src)  # trusted now
        (project / "codecoder.json").write_text(
            json.dumps(
                {
                    "allowlist": {"write_file:src/**": "AlwaysThisProject"},
                    "deny": ["run_command:git:push"],
                }
            )
        )
        step("decide", "run_command", '{"command": "git push"}')  # a deny rule narrows at once
        step(*write_src)  # changed bytes: untrusted again
        user_file.write_text(json.dumps({"deny": ["write_file:src/*.py"]}))
        step(*write_src)
        step("decide", "run_capability", '{"name": "echo", "arguments": {}}')
        echo_capability(project)
        step("decide", "echo", '{"who": "x"}')
        step("decide", "-", "--json", "--allow", "run_command:make", stdin="{}")
        step("decide", "run_command", "-", "--allow", "run_command:make", stdin=make)
        step("decide", "run_command", make, "--allow", "run_command:m[*]")
        step("decide", "run_command", "{not json", "--json")
        step("decide", "nonexistent", "{}")
        step("hook", "claude-code", stdin=hook_event("PreToolUse", "Bash", bash, "c1", here))
        step("hook", "claude-code", stdin=hook_event("PreToolUse", "Bash", bash, "c1", here))
        step("hook", "claude-code", stdin=hook_event("PostToolUse", "Bash", bash, "c1", here))
        step("hook", "claude-code", stdin=hook_event("PreToolUse", "Bash", bash, "c2", here))
        step("hook", "claude-code", stdin=hook_event("SessionEnd", "Bash", bash, "c2", here))
        step("hook", "claude-code", stdin=hook_event("PreToolUse", "Bash", bash, "c3", here))
        step("hook", "gemini", stdin="not json")
        step(
            "hook",
            "claude-code",
            "--project",
            str(tmp_path),
            stdin=hook_event("PreToolUse", "Read", {"file_path": str(project / "src")}, "c4"),
        )
        # A broken file fails closed in the server's child as in a fresh process, and the
        # project is found from the directory the host sends.
        (project / "codecoder.json").write_text('{"deny": ["run_command:git:push"],}\n')
        step("decide", "run_command", '{"command": "git push"}', "--allow", "run_command:git")
        push = {"command": "git push"}
        sub = str(project / "src")
        step("hook", "claude-code", stdin=hook_event("PreToolUse", "Bash", push, "c5", sub))
        return seen

    without = scenario(daemon=False)
    assert machine.server_pid() is None
    state = Path(machine.env["XDG_STATE_HOME"])
    subprocess.run(["rm", "-rf", str(state / "codecoder" / "projects")], check=True)
    with_server = scenario(daemon=True)
    assert machine.server_pid() is not None
    for number, (expected, got) in enumerate(zip(without, with_server, strict=True)):
        assert got == expected, f"step {number}"
    codes = [code for code, _, _ in without]
    assert codes[:3] == [4, 4, 4] and codes[5] == 0 and codes[6] == 3  # the scenario bites
    assert '"key": "run_command:./bin/git:status"' in without[1][1]
    assert codes[-2] == 3 and "codecoder.json:1:35" in without[-2][2]
    assert '"permissionDecision": "deny"' in without[-1][1]
    assert "codecoder.json:1:35: error: [syntax]" in without[-1][1]


@pytest.mark.parametrize(
    ("argv", "code", "output"),
    [
        (("decide", "run_command", '{"command": "make"}'), 4, "ask  run_command:make"),
        (("call", "read_file", '{"path": "a.txt"}'), 0, "     1\tread me"),
        (("key", "git status"), 0, "run_command:git:status"),
        (("tools", "--json"), 0, "["),
        (("replay", "-"), 0, "--- line 1: read_file"),
        (("exec", "--", "ls"), 3, ""),
    ],
)
def test_a_served_command_imports_nothing_of_the_runtime(
    machine: Machine, argv: tuple[str, ...], code: int, output: str
) -> None:
    (machine.project / "a.txt").write_text("read me\n")
    replayed = '{"tool": "read_file", "args": {"path": "a.txt"}}\n'
    machine.run("decide", "run_command", '{"command": "make"}')  # starts the server
    machine.serving()
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "codecoder", *argv],
        input=replayed,
        capture_output=True,
        text=True,
        env=machine.env,
        cwd=machine.project,
        check=False,
        start_new_session=True,  # no terminal: `exec` is denied, not asked
    )
    assert proc.returncode == code
    assert proc.stdout.startswith(output)
    # What the interpreter imports on its own (site, .pth files of the machine) is not ours.
    bare = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "pass"],
        capture_output=True,
        text=True,
        env=machine.env,
        check=True,
    )
    imported = _imported(proc.stderr) - _imported(bare.stderr)
    assert "codecoder.interfaces.forkserver.protocol" in imported
    # Only the standard library and the client's own modules: `import codecoder` (its public
    # names are loaded when used) and its __main__ add nothing else; the local server's
    # address and framing are foundation's (shared with the warm pool's server).
    assert {name for name in imported if name.split(".")[0] not in sys.stdlib_module_names} == {
        "codecoder",
        "codecoder.foundation",
        "codecoder.foundation.localserver",
        "codecoder.interfaces",
        "codecoder.interfaces.forkserver",
        "codecoder.interfaces.forkserver.protocol",
        "codecoder.interfaces.forkserver.peercontext",
    }
    assert not imported & {
        "codecoder.interfaces.cli",
        "codecoder.session",
        "pydantic",
        "bashlex",
        "typing",
        "dataclasses",
        "docker",
    }


def _imported(importtime: str) -> set[str]:
    return {
        line.rsplit("|", 1)[-1].strip()
        for line in importtime.splitlines()
        if line.startswith("import time:")  # not what the command printed on stderr
    }


def test_parallel_hooks_are_each_answered(machine: Machine) -> None:
    machine.run("decide", "run_command", '{"command": "make"}')
    results: list[tuple[int, str, str]] = []

    def one(n: int) -> None:
        command = {"command": f"touch made{n}"}  # writes: asked (echo would run contained)
        event = hook_event("PreToolUse", "Bash", command, f"p{n}", str(machine.project))
        results.append(machine.run("hook", "claude-code", stdin=event))

    threads = [threading.Thread(target=one, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 8
    for code, out, err in results:
        assert (code, err) == (0, "")
        assert json.loads(out)["hookSpecificOutput"]["permissionDecision"] == "ask"


def test_the_server_runs_only_the_commands_it_serves(machine: Machine, tmp_path: Path) -> None:
    machine.run("decide", "run_command", '{"command": "make"}')
    marker = tmp_path / "ran"
    command = json.dumps({"command": f"touch {marker}"})
    for argv in (
        ["session"],
        ["serve"],
        ["audit"],
        ["trust", "--yes"],
        ["image", "build", "--from", "x"],
        ["--version"],
        ["-h"],
        ["CALL", "run_command", command, "--answer", "once"],
        [" call", "run_command", command, "--answer", "once"],
        [],
    ):
        assert "refused" in request(machine, argv)[0], argv
    assert not marker.exists()
    assert request(machine, ["decide", "run_command", command])[-1] == {"exit": 4}
    assert not marker.exists()


def test_a_malformed_request_is_refused(machine: Machine) -> None:
    machine.run("decide", "run_command", '{"command": "make"}')
    name = protocol.socket_name(protocol.identity())
    for payload in (b"not json", b"[]", json.dumps({"identity": "else", "argv": ["decide"]})):
        with (
            socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as sock,
            address(machine.directory / f"{name}.sock") as where,
        ):
            sock.connect(where)
            sock.send(payload if isinstance(payload, bytes) else payload.encode())
            assert "refused" in json.loads(sock.recv(65536))
    assert machine.server_pid() is not None  # and it still serves


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")
def test_another_user_is_not_served_even_past_the_file_permissions(machine: Machine) -> None:
    """A process of another uid that can get past the socket's 0600 (here: root's capabilities
    kept across seteuid) is still not served: the server checks SO_PEERCRED."""
    machine.run("decide", "run_command", '{"command": "make"}')
    name = protocol.socket_name(protocol.identity())
    script = f"""
import ctypes, json, os, socket
libc = ctypes.CDLL(None, use_errno=True)
assert libc.prctl(28, 1 << 2, 0, 0, 0) == 0  # PR_SET_SECUREBITS, SECBIT_NO_SETUID_FIXUP
os.seteuid(65534)
directory = os.open({str(machine.directory)!r}, os.O_RDONLY | os.O_DIRECTORY)
sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
sock.connect(f"/proc/self/fd/{{directory}}/{name}.sock")
header = {{"identity": {protocol.identity()!r}, "argv": ["decide", "run_command", "{{}}"],
          "env": {{}}, "umask": 18}}
try:  # the server may close before the request is sent, or before it is read
    socket.send_fds(sock, [json.dumps(header).encode()], [0, 1, 2, os.open("/", os.O_RDONLY)])
    print(repr(sock.recv(65536)))
except (BrokenPipeError, ConnectionResetError):
    print("b''")
"""
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=30, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "b''"  # closed without an answer


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")
def test_a_server_of_another_user_is_not_believed(machine: Machine, tmp_path: Path) -> None:
    """A socket at the client's own address, served by another uid, that would allow
    everything: the client checks the server's uid and evaluates the call itself."""
    state = tmp_path / "nobody-state"
    env = {**machine.env, "XDG_STATE_HOME": str(state), "HOME": str(tmp_path)}
    directory = Path(protocol.socket_directory(env))
    directory.mkdir(parents=True, mode=0o700)
    for path in (state, state / "codecoder", directory):
        os.chown(path, 65534, 65534)
    as_nobody = (
        "import ctypes, os, sys\n"
        "assert ctypes.CDLL(None).prctl(28, 1 << 2, 0, 0, 0) == 0\n"
        "os.seteuid(65534)\n"
        "from codecoder.interfaces.forkserver import protocol\n"
    )
    name = subprocess.run(
        [sys.executable, "-c", as_nobody + "print(protocol.socket_name(protocol.identity()))"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout.strip()
    served: list[bytes] = []
    with _fake_server(directory / f"{name}.sock", {"exit": 0}, served):
        script = as_nobody + (
            "from codecoder.__main__ import main\n"
            "sys.argv = ['codecoder', 'decide', 'run_command', '{\"command\": \"make\"}']\n"
            "sys.exit(main())\n"
        )
        proc = subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            cwd=machine.project,
            check=False,
        )
    assert proc.returncode == 4, proc.stderr
    assert proc.stdout.startswith("ask  run_command:make")
    assert served == []


@contextlib.contextmanager
def _fake_server(path: Path, reply: dict[str, Any] | None, served: list[bytes]) -> Iterator[None]:
    """A socket at `path` that answers every request with `reply` (None: closes at once)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with address(path) as where:
        listener.bind(where)
    listener.listen(8)
    listener.settimeout(0.2)
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                data, fds, _, _ = socket.recv_fds(conn, 1 << 20, 8)
                for fd in fds:
                    os.close(fd)
                if not data:
                    continue  # connected, looked at us, sent nothing
                served.append(data)
                if reply is not None:
                    conn.send(json.dumps(reply).encode())

    thread = threading.Thread(target=loop)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        listener.close()


@pytest.mark.parametrize("reply", [None, {"nonsense": True}])
def test_an_accepted_request_without_an_answer_blocks(
    machine: Machine, reply: dict[str, Any] | None
) -> None:
    """Fail closed: once a server took the call, no answer is a refusal (exit 2), not a pass."""
    machine.directory.mkdir(parents=True, mode=0o700)
    name = protocol.socket_name(protocol.identity())
    served: list[bytes] = []
    with _fake_server(machine.directory / f"{name}.sock", reply, served):
        event = hook_event("PreToolUse", "Bash", {"command": "ls"}, "x")
        code, out, err = machine.run("hook", "claude-code", stdin=event)
    assert len(served) == 1
    assert (code, out) == (2, "")
    assert "ended without an answer; the call is not allowed" in err


def test_a_refusal_is_evaluated_in_process(machine: Machine) -> None:
    machine.directory.mkdir(parents=True, mode=0o700)
    name = protocol.socket_name(protocol.identity())
    served: list[bytes] = []
    with _fake_server(machine.directory / f"{name}.sock", {"refused": "no"}, served):
        code, out, _ = machine.run("decide", "run_command", '{"command": "make"}')
    assert len(served) == 1
    assert (code, out.splitlines()[0]) == (4, "ask  run_command:make  @bwrap")


@pytest.mark.parametrize("mode", [0o770, 0o707, 0o755])
def test_a_directory_others_can_enter_is_never_used(machine: Machine, mode: int) -> None:
    machine.directory.mkdir(parents=True)
    machine.directory.chmod(mode)
    name = protocol.socket_name(protocol.identity())
    served: list[bytes] = []
    with _fake_server(machine.directory / f"{name}.sock", {"exit": 0}, served):
        code, out, _ = machine.run("decide", "run_command", '{"command": "make"}')
    assert served == []
    assert code == 4 and out.startswith("ask")
    assert machine.server_pid() is None


# Touching installed code ends every decision server watching it, other tests' included (one
# of those then found another server serving, or none): this test runs alone, once for all.
@pytest.mark.serial(reason="changes the installed code every running decision server watches")
def test_a_server_whose_code_changed_refuses_and_exits(machine: Machine) -> None:
    for module in (
        "codecoder.interfaces.forkserver.protocol",
        "codecoder.interfaces.forkserver.child",
        "codecoder.environments.docker.environment",  # imported by the server for `exec`
        "codecoder.tools.files.landlock",
        "codecoder.tools.capability",
        "pydantic.main",
    ):
        machine.run("decide", "run_command", '{"command": "make"}')
        pid = machine.server_pid()
        assert pid is not None, module
        source = Path(importlib.import_module(module).__file__ or "")
        before = source.stat()
        try:
            os.utime(source, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))
            code, out, err = machine.run("decide", "run_command", '{"command": "make"}')
        finally:
            os.utime(source, ns=(before.st_atime_ns, before.st_mtime_ns))
        # Evaluated in-process instead.
        assert code == 4 and out.startswith("ask"), (module, code, out, err)
        wait_until(lambda pid=pid: not alive(pid))  # type: ignore[misc]
        machine.stop()  # the one the restored time may have started meanwhile


def test_the_server_exits_when_idle_or_when_its_socket_is_removed(machine: Machine) -> None:
    for ending in ("idle", "removed"):
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "codecoder.interfaces.forkserver.server",
                "1.5" if ending == "idle" else "60",
            ],
            cwd=REPO,
            env=machine.env,
            stdout=subprocess.PIPE,
        )
        assert server.stdout is not None
        assert server.stdout.readline() == b"ready\n"
        if ending == "removed":
            (sock,) = machine.directory.glob("*.sock")
            sock.unlink()
        assert server.wait(timeout=20) == 0
        server.stdout.close()
        assert not list(machine.directory.glob("*.sock"))


def test_a_long_state_path_is_reached_through_the_directory_descriptor(
    machine: Machine, tmp_path: Path
) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    machine.env["XDG_STATE_HOME"] = str(deep)
    machine.directory = Path(protocol.socket_directory(machine.env))
    assert len(str(machine.directory)) > 110
    first = machine.run("decide", "run_command", '{"command": "make"}')
    assert machine.server_pid() is not None
    assert machine.run("decide", "run_command", '{"command": "make"}') == first
    assert first[0] == 4


def test_the_socket_and_its_directory_are_private(machine: Machine) -> None:
    machine.run("decide", "run_command", '{"command": "make"}')
    assert machine.directory.stat().st_mode & 0o777 == 0o700
    (sock,) = machine.directory.glob("*.sock")
    assert sock.stat().st_mode & 0o777 == 0o600


def test_socket_directory_is_in_the_state_directory(tmp_path: Path) -> None:
    from codecoder.foundation.state import state_directory

    for env in ({"XDG_STATE_HOME": str(tmp_path)}, {"XDG_STATE_HOME": "relative"}, {}):
        assert Path(protocol.socket_directory(env)) == state_directory(env) / "daemon"


@pytest.mark.parametrize("ending", ["SIGTERM", "SIGKILL"])
def test_the_child_forked_ahead_ends_with_the_server(machine: Machine, ending: str) -> None:
    machine.run("decide", "run_command", '{"command": "make"}')
    server = machine.server_pid()
    assert server is not None
    wait_until(lambda: len(children(server)) == 1)  # the call's child is gone, the spare is not
    (spare,) = children(server)

    os.kill(server, getattr(signal, ending))

    wait_until(lambda: not alive(spare))
    assert machine.run("decide", "run_command", '{"command": "make"}')[0] == 4  # a new one
