"""A served command runs with its client's confinement, never the server's
(`runtime.interfaces.peercontext`): clients in another namespace, cgroup, with other limits,
niceness, CPU set, capabilities, groups or no_new_privs get a server of their own context or
run the command themselves; a client that speaks to a server of another context, hands its
connection to another process, or has a seccomp filter is not run tools for.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from codecoder.runtime.interfaces import decisiond, peercontext
from tests.runtime.interfaces.served import Machine

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


@contextlib.contextmanager
def own_cgroup() -> Iterator[Path]:
    """A cgroup of the test's own in the v1 `pids` hierarchy, removed at the end."""
    hierarchy = Path("/sys/fs/cgroup/pids")
    if not (hierarchy / "cgroup.procs").exists():
        pytest.skip("no cgroup v1 pids hierarchy to make a cgroup in")
    group = hierarchy / f"codecoder-test-{uuid.uuid4().hex[:8]}"
    group.mkdir()
    try:
        yield group
    finally:
        with contextlib.suppress(OSError):
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
    # A server of the plain context runs, and what the probe shows there.
    plain, _, _ = probe(machine, confinement, daemon=True, confined=False)
    assert machine.server_pids()
    with own_cgroup() if confinement == "cgroup" else contextlib.nullcontext() as group:
        ran, client, in_process = probe(machine, confinement, daemon=False, group=group)
        assert in_process and ran == client != plain  # the confinement bites
        ran, client, by_itself = probe(machine, confinement, daemon=True, group=group)
    assert not by_itself  # served, by a server of the client's own context
    assert ran == client != plain
    assert len(machine.server_pids()) == 2


def _speak(machine: Machine, prefix: tuple[str, ...], script: str) -> list[dict[str, object]]:
    """Run `script` in a client confined by `prefix`, with the plain context's server name
    and identity; the server's first message to each request it sends."""
    ident = decisiond.identity()
    name = decisiond.socket_name(ident)
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
os.execv(sys.executable, [sys.executable, "-m", "codecoder.runtime", *sys.argv[1:]])
"""


def test_a_client_under_a_seccomp_filter_runs_tools_itself(machine: Machine) -> None:
    """Two seccomp filters of the same depth cannot be told apart from outside, so a filtered
    client runs its tools in its own process; what runs nothing is still served."""
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


def test_a_fingerprint_is_what_proc_says_of_the_process() -> None:
    own = peercontext.fingerprint()
    assert own == peercontext.fingerprint(os.getpid())
    uid = next(line for line in own.splitlines() if line.startswith("Uid:"))
    assert uid.split(":")[1].split()[:2] == [str(os.getuid()), str(os.geteuid())]
    assert f"ns/net:{os.readlink('/proc/self/ns/net')}" in own.splitlines()
    with pytest.raises(OSError):
        peercontext.fingerprint(2**22 + 12345)
