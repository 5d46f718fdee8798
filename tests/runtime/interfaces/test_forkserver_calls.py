"""Commands that run tools (`call`, `exec`, `replay`), and `key`, `tools`, `check`, run by the
decision server (`interfaces.forkserver.protocol`) as real processes: each gives exactly what
the command gives in its own process, asks on the client's terminal, and Ctrl-C, SIGTERM,
Ctrl-Z and the client's own end reach the call as they would there.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pexpect
import pytest

from codecoder.interfaces.forkserver import protocol
from tests.runtime.interfaces.served import Machine, address, alive, children, wait_until

TIMES = re.compile(r'("(?:duration|waited)_ms":) [0-9.e-]+')  # how long a call took differs


def on_the_host(machine: Machine) -> None:
    """The user binds run_command to @shell: a command is a process of the host, whose parent
    is the process that ran the call (contained in @bwrap, its parent would be bubblewrap's
    init, pid 1 in its own namespace)."""
    config = Path(machine.env["XDG_CONFIG_HOME"]) / "codecoder" / "config.json"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(json.dumps({"environments": {"run_command": "@shell"}}))


def served_pid(machine: Machine, *args: str, **options: Any) -> tuple[int, int]:
    """(the pid of the process that ran `echo $PPID` for a `codecoder call`, the client's pid):
    equal when the client ran the call itself, different when the server's child did."""
    command = json.dumps({"command": "echo $PPID"})
    proc = machine.popen(
        "call", "run_command", command, "--answer", "once", *args, stdout=subprocess.PIPE, **options
    )
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    return int(out.split()[0]), proc.pid


def test_a_call_is_run_by_the_server_and_in_process_without_it(machine: Machine) -> None:
    on_the_host(machine)
    ran_by, client = served_pid(machine)
    assert ran_by != client
    assert ran_by not in (os.getpid(), *machine.server_pids())  # a child of the server
    ran_by, client = served_pid(machine, daemon=False)
    assert ran_by == client


def test_every_served_command_gives_what_its_own_process_gives(
    machine: Machine, tmp_path: Path
) -> None:
    """The same sequence of commands, once served and once in their own processes: every exit
    code, stdout, stderr and every file they leave is the same."""
    project = machine.project
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"path": "src/from-stdin.txt", "content": "piped\n"}))
    replayed = "\n".join(
        [
            json.dumps({"tool": "read_file", "args": {"path": "a.txt"}}),
            json.dumps({"tool": "write_file", "args": {"path": "r.txt", "content": "r"}}),
            json.dumps(
                {"tool": "write_file", "args": {"path": "r.txt", "content": "r"}, "answer": "once"}
            ),
            "not json",
            json.dumps({"tool": "run_command", "args": {"command": "exit 4"}, "answer": "once"}),
        ]
    )

    def scenario(daemon: bool) -> list[object]:
        subprocess.run(["git", "-C", str(project), "clean", "-qfdx"], check=True)
        (project / "a.txt").write_text("line one\nline two\n")
        (project / "sub").mkdir()
        seen: list[object] = []

        def step(*args: str, stdin: str = "", umask: int | None = None, **env: str) -> None:
            preexec = (lambda: os.umask(umask)) if umask is not None else None
            code, out, err = machine.run(*args, stdin=stdin, daemon=daemon, preexec=preexec, **env)
            seen.append((code, TIMES.sub(r"\1 0", out), TIMES.sub(r"\1 0", err)))

        step("call", "read_file", '{"path": "a.txt", "offset": 2}')
        step("call", "read_file", '{"path": "a.txt"}', "--json")
        step("call", "read_file", '{"path": "missing.txt"}')
        step("call", "read_file", '{"nope": 1}', "--json")
        step("call", "read_file", '{"path": broken}')
        step("call", "no_such_tool", "{}")
        step("call", "read_file", '{"path": "../a.txt"}', "--project", "sub")
        step("call", "write_file", "-", "--answer", "once", stdin=args_file.read_text())
        step("call", "write_file", f"@{args_file}", "--answer", "deny")
        step("call", "write_file", '{"path": "src/m.txt", "content": "x"}', "--answer", "once",
             umask=0o077)  # fmt: skip
        step("call", "run_command", '{"command": "stat -c %a src/m.txt"}', "--answer", "once")
        step("call", "run_command", '{"command": "echo \\"$FOO\\"; pwd; exit 3"}', "--answer",
             "once", FOO="from the client")  # fmt: skip
        step("call", "run_command", '{"command": "touch denied"}', "--non-interactive")
        step("call", "run_command", '{"command": "ls"}', "--allow", "run_command:ls", "--json")
        step("exec", "--", "touch in-sandbox", CI="true")
        step("replay", "-", stdin=replayed)
        step("replay", "-", "--json", stdin=replayed)
        step("key", "git push --force", "--json")
        step("key", "--tool", "write_file", '{"path": "src/x.py", "content": ""}', "--json")
        step("tools", "--json")
        step("check", "--json")
        files = sorted(
            (str(p.relative_to(project)), p.read_bytes(), oct(p.stat().st_mode))
            for p in project.rglob("*")
            if ".git" not in p.parts and p.is_file()
        )
        seen.append(files)
        return seen

    alone = scenario(daemon=False)
    assert machine.server_pid() is None
    served = scenario(daemon=True)
    assert machine.server_pid() is not None
    for number, (expected, got) in enumerate(zip(alone, served, strict=True)):
        assert got == expected, f"step {number}"
    codes = [step[0] for step in alone[:-1]]  # type: ignore[index]
    assert codes[:12] == [0, 0, 1, 2, 2, 2, 2, 0, 3, 0, 0, 1]  # the scenario bites
    assert "0600" in str(alone[-1])  # the client's umask made that file


# --- a terminal --------------------------------------------------------------------------------


def spawn(machine: Machine, *args: str, daemon: bool = True) -> pexpect.spawn:
    return pexpect.spawn(
        sys.executable,
        ["-m", "codecoder", *args],
        cwd=str(machine.project),
        env=machine.environment(daemon),
        encoding="utf-8",
        timeout=60,
        dimensions=(40, 200),
    )


def test_a_question_is_asked_and_answered_on_the_clients_terminal(machine: Machine) -> None:
    on_the_host(machine)
    child = spawn(machine, "call", "run_command", json.dumps({"command": "echo ran by $PPID"}))
    child.expect("permission required")
    child.expect(r"choice \[o/d\]: ")  # a one-shot call: no session choice
    assert "environment  @shell (host processes, not sandboxed)" in child.before
    child.sendline("x")
    child.expect("please answer one of o/d")
    child.sendline("o")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    ran_by = int(child.before.split("ran by ")[1].split()[0])
    assert ran_by != child.pid and machine.server_pid() is not None  # served


def test_with_arguments_on_stdin_the_question_goes_to_the_clients_controlling_terminal(
    machine: Machine, tmp_path: Path
) -> None:
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"path": "src/asked.txt", "content": "answered\n"}))
    machine.run("decide", "read_file", "{}")  # the server is running
    child = pexpect.spawn(
        "bash",
        ["-c", f"exec {sys.executable} -m codecoder call write_file - < {args}"],
        cwd=str(machine.project),
        env=machine.environment(),
        encoding="utf-8",
        timeout=60,
    )
    child.expect(r"choice \[o/p/w/c/g/d\]: ")
    assert "key          write_file:src/asked.txt" in child.before
    child.sendline("o")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert (machine.project / "src" / "asked.txt").read_text() == "answered\n"


def test_without_a_terminal_nobody_is_asked(machine: Machine) -> None:
    code, out, err = machine.run(
        "call", "run_command", '{"command": "touch asked"}', preexec=os.setsid
    )
    assert (code, out) == (3, "")
    assert "not allowed" in err or "denied" in err
    assert not (machine.project / "asked").exists()


# --- signals -----------------------------------------------------------------------------------


def sleeping(machine: Machine, then: str = "") -> tuple[str, Callable[[], list[int]]]:
    """A command that says it started (a file), then sleeps for a time no other process
    sleeps; and a function finding its processes."""
    seconds = f"{60 + random.random():.6f}"
    command = f"touch started; sleep {seconds}{then}"

    def processes() -> list[int]:
        found = []
        for entry in Path("/proc").iterdir():
            try:
                if (entry / "cmdline").read_bytes() == f"sleep\0{seconds}\0".encode():
                    found.append(int(entry.name))
            except (OSError, ValueError):
                continue
        return found

    return json.dumps({"command": command}), processes


def last_audit(machine: Machine) -> dict[str, Any]:
    state = Path(machine.env["XDG_STATE_HOME"])
    (log,) = state.glob("codecoder/projects/*/audit.jsonl")
    record = json.loads(log.read_text().splitlines()[-1])
    assert isinstance(record, dict)
    return record


@pytest.mark.parametrize("daemon", [True, False], ids=["served", "own process"])
def test_ctrl_c_interrupts_the_call_kills_its_command_and_is_audited(
    machine: Machine, daemon: bool
) -> None:
    command, processes = sleeping(machine)
    child = spawn(machine, "call", "run_command", command, "--answer", "once", daemon=daemon)
    wait_until(lambda: (machine.project / "started").exists(), timeout=60)
    wait_until(processes)
    child.sendintr()
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 130
    assert "codecoder: interrupted" in child.before
    assert last_audit(machine)["outcome"] == "interrupted"
    wait_until(lambda: not processes())


@pytest.mark.parametrize("daemon", [True, False], ids=["served", "own process"])
def test_sigterm_ends_the_call_with_143_and_is_audited(machine: Machine, daemon: bool) -> None:
    command, processes = sleeping(machine)
    proc = machine.popen(
        "call",
        "run_command",
        command,
        "--answer",
        "once",
        daemon=daemon,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    wait_until(lambda: (machine.project / "started").exists(), timeout=60)
    wait_until(processes)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert (proc.returncode, out, err) == (143, "", "codecoder: terminated\n")
    assert last_audit(machine)["outcome"] == "interrupted"
    wait_until(lambda: not processes())


@pytest.mark.parametrize("daemon", [True, False], ids=["served", "own process"])
def test_a_signal_that_kills_the_call_kills_the_client_too(machine: Machine, daemon: bool) -> None:
    """SIGHUP (the terminal went away) ends codecoder without a word, as any process; served,
    the client ends by the same signal once its command did."""
    command, processes = sleeping(machine)
    proc = machine.popen(
        "call", "run_command", command, "--answer", "once", daemon=daemon, stderr=subprocess.PIPE
    )
    try:
        wait_until(lambda: (machine.project / "started").exists(), timeout=60)
        if daemon:
            child = running_call(machine)
        proc.send_signal(signal.SIGHUP)
        _, err = proc.communicate(timeout=60)
        assert (proc.returncode, err) == (-signal.SIGHUP, "")
        if daemon:
            wait_until(lambda: not alive(child))
    finally:
        for pid in processes():
            os.kill(pid, signal.SIGKILL)  # its own session: nothing else ends it


@pytest.mark.parametrize("daemon", [True, False], ids=["served", "own process"])
def test_an_ignored_signal_stays_ignored(machine: Machine, daemon: bool) -> None:
    """A command started with SIGINT ignored (a background job of a script) cannot be
    interrupted by it, in its own process or served."""
    command = json.dumps({"command": "touch started; sleep 1; echo finished"})
    proc = machine.popen(
        "call",
        "run_command",
        command,
        "--answer",
        "once",
        daemon=daemon,
        stdout=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    wait_until(lambda: (machine.project / "started").exists(), timeout=60)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert (proc.returncode, out) == (0, "finished\n[exit code 0]\n")


def test_a_client_that_disappears_takes_its_call_with_it(machine: Machine) -> None:
    command, processes = sleeping(machine)
    proc = machine.popen("call", "run_command", command, "--answer", "once")
    try:
        wait_until(lambda: (machine.project / "started").exists(), timeout=60)
        server = machine.server_pid()
        assert server is not None
        child = running_call(machine)
        proc.kill()
        proc.wait()
        wait_until(lambda: not alive(child))
        assert [pid for pid in children(server) if children(pid)] == []
        assert machine.run("call", "read_file", '{"path": "started"}')[0] == 0  # still serving
    finally:
        for pid in processes():
            os.kill(pid, signal.SIGKILL)


def test_ctrl_z_stops_the_call_and_fg_continues_it(machine: Machine) -> None:
    # Long enough that a loaded machine still stops it before it ends.
    command = json.dumps({"command": "touch started; sleep 8; echo finished"})
    # A process group of its own whose parent (this test) is in another group of the session, as
    # a shell's job is: the kernel discards a stop signal sent to an orphaned process group,
    # which pytest's own group is when it was started in the background.
    proc = machine.popen(
        "call", "run_command", command, "--answer", "once", stdout=subprocess.PIPE, process_group=0
    )
    wait_until(lambda: (machine.project / "started").exists(), timeout=60)
    child = running_call(machine)
    proc.send_signal(signal.SIGTSTP)
    wait_until(lambda: state(proc.pid) == "T" and state(child) == "T", timeout=60)
    os.kill(proc.pid, signal.SIGCONT)
    wait_until(lambda: state(child) != "T", timeout=60)
    out, _ = proc.communicate(timeout=60)
    assert (proc.returncode, out) == (0, "finished\n[exit code 0]\n")


def test_a_ctrl_z_before_the_call_started_stops_it_once_it_has(machine: Machine) -> None:
    """Ctrl-Z between the request and the server's word that the call started (a busy machine)
    waits for it: the client does not stop alone, leaving the call running. The server here is
    a socket the test answers, and the call a `sleep` the test started."""
    machine.directory.mkdir(parents=True, mode=0o700)
    name = protocol.socket_name(protocol.identity())
    call = subprocess.Popen(["sleep", "60"])
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as listener:
        with address(machine.directory / f"{name}.sock") as where:
            listener.bind(where)
        listener.listen(1)
        listener.settimeout(60)
        # A process group of its own, not orphaned (see the test above).
        client = machine.popen("call", "run_command", '{"command": "sleep 60"}', process_group=0)
        try:
            conn, _ = listener.accept()
            with conn:
                _, fds, _, _ = socket.recv_fds(conn, 1 << 20, 8)  # the request: it waits now
                for fd in fds:
                    os.close(fd)
                client.send_signal(signal.SIGTSTP)
                wait_until(lambda: not pending(client.pid, signal.SIGTSTP), timeout=60)
                pidfd = os.pidfd_open(call.pid)
                socket.send_fds(conn, [b'{"started": true}'], [pidfd])
                os.close(pidfd)
                wait_until(lambda: state(client.pid) == "T" and state(call.pid) == "T", timeout=60)
                client.send_signal(signal.SIGCONT)
                wait_until(lambda: state(call.pid) != "T", timeout=60)
                conn.send(b'{"exit": 0}')
            assert client.wait(timeout=60) == 0
        finally:
            client.kill()
            client.wait()
            call.kill()
            call.wait()


def pending(pid: int, sig: int) -> bool:
    """Whether `sig` waits to be delivered to `pid`."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("SigPnd:", "ShdPnd:")) and int(line.split()[1], 16) >> (sig - 1) & 1:
            return True
    return False


def running_call(machine: Machine) -> int:
    """The server's child running the call: the one with a command of its own (the other is
    the spare, forked ahead of the next request)."""
    (child,) = [pid for pid in children(machine.server_pid() or 0) if children(pid)]
    return child


def state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]


def test_a_call_ends_with_its_client_even_after_the_server_died(machine: Machine) -> None:
    # The server used to be the only one watching the client: killed first, nobody was, and
    # the call (and its sandbox) ran on for as long as its command did.
    command, processes = sleeping(machine)
    proc = machine.popen("call", "run_command", command, "--answer", "once")
    try:
        wait_until(lambda: (machine.project / "started").exists(), timeout=60)
        server = machine.server_pid()
        assert server is not None
        child = running_call(machine)
        assert processes()
        os.kill(server, signal.SIGKILL)
        wait_until(lambda: not alive(server))
        proc.kill()
        proc.wait()
        wait_until(lambda: not alive(child))
        wait_until(lambda: processes() == [])
    finally:
        for pid in processes():
            os.kill(pid, signal.SIGKILL)
