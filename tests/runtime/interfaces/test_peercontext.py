"""A served command runs with its client's confinement, never the server's
(`interfaces.forkserver.peercontext`): clients in another namespace, cgroup, with other limits,
niceness, CPU set, capabilities, groups or no_new_privs get a server of their own context or
run the command themselves; a client that speaks to a server of another context, hands its
connection to another process, or has a seccomp filter is not run tools for. A command
contained in @bwrap (the default) keeps what the client's confinement carries into the sandbox
whoever serves it; its namespaces are bubblewrap's own.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from codecoder.interfaces.forkserver import peercontext, protocol
from tests.runtime.interfaces.served import Machine, wait_until

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to confine a process")

# How the client is confined, and what that confinement changes in /proc/$P.
CONFINEMENTS = {
    "network namespace": (("unshare", "--net"), "readlink /proc/$P/ns/net"),
    "mount namespace": (("unshare", "--mount"), "readlink /proc/$P/ns/mnt"),
    "IPC and UTS namespaces": (("unshare", "--ipc", "--uts"), "readlink /proc/$P/ns/ipc"),
    "open-file limit": (("prlimit", "--nofile=300:300"), "grep 'open files' /proc/$P/limits"),
    "core-size limit": (("prlimit", "--core=0:0"), "grep 'core file' /proc/$P/limits"),
    "niceness": (("nice", "-n", "7"), "cut -d' ' -f19 /proc/$P/stat"),
    "no_new_privs": (("setpriv", "--no-new-privs"), "grep NoNewPrivs /proc/$P/status"),
    "capability bounding set": (("setpriv", "--bounding-set=-all"), "grep CapBnd /proc/$P/status"),
    "supplementary groups": (("setpriv", "--groups=4242"), "grep Groups /proc/$P/status"),
    "CPU affinity": (("taskset", "-c", "0"), "grep Cpus_allowed_list /proc/$P/status"),
    "scheduling policy": (("chrt", "--batch", "0"), "cut -d' ' -f41 /proc/$P/stat"),
    "OOM score": (("choom", "-n", "500", "--"), "cat /proc/$P/oom_score_adj"),
    "cgroup": ((), "grep :pids: /proc/$P/cgroup"),  # the client is moved by `preexec` below
}


def on_the_host(machine: Machine) -> None:
    """The user binds run_command to @shell: a command is a process of the host, in the
    namespaces of the process that ran the call and showing its /proc (contained in @bwrap it
    would be in bubblewrap's own)."""
    config = Path(machine.env["XDG_CONFIG_HOME"]) / "codecoder" / "config.json"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(json.dumps({"environments": {"run_command": "@shell"}}))


@contextlib.contextmanager
def own_cgroup(machine: Machine) -> Iterator[Path]:
    """A cgroup of the test's own in the v1 `pids` hierarchy, removed at the end, once the
    machine's servers (one of them started in it) have ended."""
    hierarchy = Path("/sys/fs/cgroup/pids")
    if not (hierarchy / "cgroup.procs").exists():
        pytest.skip("no cgroup v1 pids hierarchy to make a cgroup in")
    group = hierarchy / f"codecoder-test-{uuid.uuid4().hex[:8]}"
    group.mkdir()
    try:
        yield group
    finally:
        machine.stop()
        with contextlib.suppress(OSError):
            wait_until(lambda: not (group / "cgroup.procs").read_text().strip())
            group.rmdir()


def probe(
    machine: Machine,
    confinement: str,
    *,
    daemon: bool,
    group: Path | None = None,
    confined: bool = True,
) -> tuple[str, str, bool]:
    """For a client confined by `confinement`: what its probe shows of the command that ran,
    what it shows of the client, and whether the client ran the command itself (False: a
    server's child did)."""
    prefix, shell = CONFINEMENTS[confinement]
    prefix = prefix if confined else ()
    command = json.dumps({"command": f"P=self; {shell}; P=$CLIENT; {shell}; echo by $PPID"})

    def enter_group() -> None:
        if group is not None:
            (group / "cgroup.procs").write_text(str(os.getpid()))

    # sh names its own pid, then becomes the confined client (every prefix execs its command).
    exporting = ("sh", "-c", 'export CLIENT=$$; exec "$@"', "sh", *prefix)
    proc = subprocess.Popen(
        machine.command("call", "run_command", command, "--answer", "once", prefix=exporting),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=machine.environment(daemon),
        cwd=machine.project,
        preexec_fn=enter_group,
    )
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    lines = out.splitlines()
    assert len(lines) == 4 and lines[2].startswith("by ") and lines[3] == "[exit code 0]", out
    return lines[0], lines[1], int(lines[2].removeprefix("by ")) == proc.pid


@needs_root
@pytest.mark.parametrize("confinement", CONFINEMENTS)
def test_a_command_runs_with_its_clients_confinement_whoever_serves_it(
    machine: Machine, confinement: str
) -> None:
    on_the_host(machine)
    # A server of the plain context runs, and what the probe shows there.
    plain, _, _ = probe(machine, confinement, daemon=True, confined=False)
    assert machine.server_pids()
    with own_cgroup(machine) if confinement == "cgroup" else contextlib.nullcontext() as group:
        ran, client, in_process = probe(machine, confinement, daemon=False, group=group)
        assert in_process and ran == client != plain  # the confinement bites
        ran, client, by_itself = probe(machine, confinement, daemon=True, group=group)
        assert len(machine.server_pids()) == 2
    assert not by_itself  # served, by a server of the client's own context
    assert ran == client != plain


# Bubblewrap makes namespaces of its own, and sets no_new_privs and an empty bounding set
# whatever the client's; the rest of a client's confinement carries into the sandbox.
BWRAP_OWN = ("network namespace", "mount namespace", "IPC and UTS namespaces")


@needs_root
@pytest.mark.parametrize("confinement", CONFINEMENTS)
def test_a_contained_command_keeps_its_clients_confinement_whoever_serves_it(
    machine: Machine, confinement: str
) -> None:
    """Seen from the host, the process of a command contained in @bwrap: under a confined
    client, in its own process or served by a server of the client's context, it has the
    client's limits, niceness, groups, CPU set, policy, OOM score and cgroup; namespaces of
    bubblewrap's own, neither the client's nor the plain context's."""
    prefix, shell = CONFINEMENTS[confinement]
    plain_client = _own(shell, ())
    contained(machine, confinement, daemon=True, confined=False)  # a server of the plain context
    with own_cgroup(machine) if confinement == "cgroup" else contextlib.nullcontext() as group:
        client = _own(shell, prefix, group)
        if confinement not in ("no_new_privs", "capability bounding set"):
            assert client != plain_client  # the confinement bites
        for daemon in (False, True):
            served, ran, alive, ancestors = contained(
                machine, confinement, daemon=daemon, group=group
            )
            assert served == daemon, ancestors
            if confinement in BWRAP_OWN:
                # Compared only with namespaces alive at the time: the kernel reuses the
                # number of a namespace that has ended.
                assert ran not in (plain_client, *alive), alive
            else:
                assert ran == client
        assert len(machine.server_pids()) == 2


def _own(shell: str, prefix: tuple[str, ...], group: Path | None = None) -> str:
    """What the probe shows of a process confined by `prefix` (and put in `group`)."""

    def enter_group() -> None:
        if group is not None:
            (group / "cgroup.procs").write_text(str(os.getpid()))

    own = shell.replace("$P", "self")
    return subprocess.run(
        [*prefix, "sh", "-c", own], capture_output=True, text=True, check=True,
        preexec_fn=enter_group,
    ).stdout.strip()  # fmt: skip


def contained(
    machine: Machine,
    confinement: str,
    *,
    daemon: bool,
    group: Path | None = None,
    confined: bool = True,
) -> tuple[bool, str, list[str], list[int]]:
    """For a client confined by `confinement`, a command contained in @bwrap that sleeps: whether
    a server ran it (its process descends from a server, not the client), what the probe
    run on the host shows of its process, what it shows of the client and of every server
    while that process lives, and that process's ancestors."""
    prefix, shell = CONFINEMENTS[confinement]
    seconds = f"{60 + random.random():.6f}"
    command = json.dumps({"command": f"sleep {seconds}"})

    def enter_group() -> None:
        if group is not None:
            (group / "cgroup.procs").write_text(str(os.getpid()))

    proc = subprocess.Popen(
        machine.command("call", "run_command", command, "--answer", "once",
                        prefix=prefix if confined else ()),
        stdout=subprocess.DEVNULL,
        env=machine.environment(daemon),
        cwd=machine.project,
        preexec_fn=enter_group,
    )  # fmt: skip
    try:
        found: list[int] = []
        wait_until(lambda: found.extend(_sleeping(seconds)) or found, timeout=60)
        (pid,) = found
        seen, *alive = (
            subprocess.run(
                ["sh", "-c", shell], capture_output=True, text=True, check=True, env={"P": str(p)}
            ).stdout.strip()
            for p in (pid, proc.pid, *machine.server_pids())
        )
        ancestors = _ancestors(pid)
        os.kill(pid, signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    # The nearest of the client and the servers (a server the client started is its child).
    servers = machine.server_pids()
    nearest = next(pid for pid in ancestors if pid == proc.pid or pid in servers)
    return nearest in servers, seen, alive, ancestors


def _sleeping(seconds: str) -> list[int]:
    """The processes of `sleep SECONDS` (`/usr/bin/sleep` where bubblewrap cannot run and
    Landlock confines the command instead)."""
    found = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if argv[1:] == [seconds.encode(), b""] and os.path.basename(argv[0]) == b"sleep":
                found.append(int(entry.name))
    return found


def _ancestors(pid: int) -> list[int]:
    found = []
    while pid > 1:
        pid = int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
        found.append(pid)
    return found


def _speak(machine: Machine, prefix: tuple[str, ...], script: str) -> list[dict[str, object]]:
    """Run `script` in a client confined by `prefix`, with the plain context's server name
    and identity; the server's first message to each request it sends."""
    ident = protocol.identity()
    name = protocol.socket_name(ident)
    preamble = f"""
import json, os, socket, sys, time
directory = os.open({str(machine.directory)!r}, os.O_RDONLY | os.O_DIRECTORY)
where = f"/proc/self/fd/{{directory}}/{name}.sock"
header = {{"identity": {ident!r}, "env": {machine.env!r}, "umask": 18}}
def send(sock, argv):
    fds = [0, 1, 2, os.open({str(machine.project)!r}, os.O_RDONLY | os.O_DIRECTORY)]
    socket.send_fds(sock, [json.dumps({{**header, "argv": argv}}).encode()], fds)
    data, received, _, _ = socket.recv_fds(sock, 65536, 1)
    print(data.decode())
"""
    proc = subprocess.run(
        [*prefix, sys.executable, "-c", preamble + script],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


@needs_root
@pytest.mark.parametrize(
    "prefix",
    [
        ("unshare", "--net"),
        ("prlimit", "--nofile=300:300"),
        ("nice", "-n", "3"),
        ("setpriv", "--no-new-privs"),
        ("taskset", "-c", "1"),
    ],
    ids=" ".join,
)
def test_a_client_in_another_context_is_refused_by_a_server_of_this_one(
    machine: Machine, tmp_path: Path, prefix: tuple[str, ...]
) -> None:
    """It addresses the plain context's server directly, with that server's identity: the
    server sees the difference and runs nothing for it."""
    machine.run("decide", "read_file", "{}")
    marker = tmp_path / "ran"
    command = json.dumps({"command": f"touch {marker}"})
    script = f"""
for argv in (["call", "run_command", {command!r}, "--answer", "once"], ["decide", "x"]):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    sock.connect(where)
    send(sock, argv)
"""
    replies = _speak(machine, prefix, script)
    assert len(replies) == 2
    for reply in replies:
        assert "another context" in str(reply["refused"])
    assert not marker.exists()


@needs_root
def test_the_same_context_is_served(machine: Machine) -> None:
    """The helper above does reach the server: without confinement it is served."""
    machine.run("decide", "read_file", "{}")
    replies = _speak(machine, (), 'sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)\n'
                     'sock.connect(where)\nsend(sock, ["decide", "x"])\n')  # fmt: skip
    assert replies == [{"started": True}]


def test_a_connection_handed_on_by_a_process_that_exited_runs_nothing(
    machine: Machine, tmp_path: Path
) -> None:
    """The process that connected is gone; the one sending the request inherited its socket.
    The server cannot tell what the connecting one was allowed, so it runs nothing."""
    machine.run("decide", "read_file", "{}")
    marker = tmp_path / "ran"
    command = json.dumps({"command": f"touch {marker}"})
    script = f"""
sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
sock.connect(where)
parent = os.getpid()
if os.fork() != 0:
    os._exit(0)  # the connecting process ends at once
while os.getppid() == parent:
    time.sleep(0.01)
send(sock, ["call", "run_command", {command!r}, "--answer", "once"])
"""
    (reply,) = _speak(machine, (), script)
    assert "another context" in str(reply["refused"])
    assert not marker.exists()


@pytest.mark.parametrize(
    "confine",
    [
        "resource.setrlimit(resource.RLIMIT_NOFILE, (200, 200))",
        "os.setpriority(os.PRIO_PROCESS, 0, 9)",
        "os.sched_setaffinity(0, {0})",
        "ctypes.CDLL(None).unshare(0x40000000)",  # CLONE_NEWNET
    ],
)
def test_a_connection_handed_to_a_process_that_confined_itself_runs_nothing(
    machine: Machine, tmp_path: Path, confine: str
) -> None:
    """The process that connected stays alive and unconfined; its child confines itself after
    inheriting the connection, then sends the request: the sender is what counts."""
    machine.run("decide", "read_file", "{}")
    marker = tmp_path / "ran"
    command = json.dumps({"command": f"touch {marker}"})
    script = f"""
import ctypes, resource
sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
sock.connect(where)
child = os.fork()
if child == 0:
    {confine}
    send(sock, ["call", "run_command", {command!r}, "--answer", "once"])
    os._exit(0)
os.waitpid(child, 0)
"""
    (reply,) = _speak(machine, (), script)
    assert "another context" in str(reply["refused"])
    assert not marker.exists()


SECCOMP_ALLOW_ALL = """
import ctypes, os, sys
class Filter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte),
                ("k", ctypes.c_uint)]
class Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Filter))]
allow = Filter(0x06, 0, 0, 0x7FFF0000)  # BPF_RET|BPF_K, SECCOMP_RET_ALLOW
program = Program(1, ctypes.pointer(allow))
libc = ctypes.CDLL(None, use_errno=True)
assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS
assert libc.prctl(22, 2, ctypes.byref(program), 0, 0) == 0  # PR_SET_SECCOMP, MODE_FILTER
os.execv(sys.executable, [sys.executable, "-m", "codecoder", *sys.argv[1:]])
"""


def test_a_client_under_a_seccomp_filter_runs_tools_itself(machine: Machine) -> None:
    """Two seccomp filters of the same depth cannot be told apart from outside, so a filtered
    client runs its tools in its own process; what runs nothing is still served. Contained in
    @bwrap, the command has the client's filter under bubblewrap's own."""
    on_the_host(machine)
    command = json.dumps({"command": "grep Seccomp: /proc/self/status; echo by $PPID"})
    proc = subprocess.Popen(
        [sys.executable, "-c", SECCOMP_ALLOW_ALL, "call", "run_command", command, "--answer",
         "once"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=machine.environment(),
        cwd=machine.project,
    )  # fmt: skip
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    seccomp, _, by = out.partition("by ")
    assert seccomp == "Seccomp:\t2\n"
    assert int(by.split()[0]) == proc.pid  # in its own process
    decided = subprocess.run(
        [sys.executable, "-c", SECCOMP_ALLOW_ALL, "decide", "run_command", command],
        capture_output=True,
        text=True,
        env=machine.environment(),
        cwd=machine.project,
        timeout=120,
        check=False,
    )
    assert decided.returncode == 4
    assert len(machine.server_pids()) == 1  # the filtered context's own server answered it

    (Path(machine.env["XDG_CONFIG_HOME"]) / "codecoder" / "config.json").unlink()
    filters = json.dumps({"command": "grep Seccomp_filters: /proc/self/status"})
    counts = []
    for prefix in ([sys.executable, "-c", SECCOMP_ALLOW_ALL], machine.command()):
        ran = subprocess.run(
            [*prefix, "call", "run_command", filters, "--answer", "once"],
            capture_output=True,
            text=True,
            env=machine.environment(),
            cwd=machine.project,
            timeout=120,
            check=False,
        )
        assert ran.returncode == 0, ran.stderr
        line, exit_line = ran.stdout.splitlines()
        assert exit_line == "[exit code 0]"
        counts.append(int(line.removeprefix("Seccomp_filters:")))
    filtered, plain = counts
    assert filtered == plain + 1 and plain >= 1


def test_a_fingerprint_is_what_proc_says_of_the_process() -> None:
    own = peercontext.fingerprint()
    assert own == peercontext.fingerprint(os.getpid())
    uid = next(line for line in own.splitlines() if line.startswith("Uid:"))
    assert uid.split(":")[1].split()[:2] == [str(os.getuid()), str(os.geteuid())]
    assert f"ns/net:{os.readlink('/proc/self/ns/net')}" in own.splitlines()
    with pytest.raises(OSError):
        peercontext.fingerprint(2**22 + 12345)
