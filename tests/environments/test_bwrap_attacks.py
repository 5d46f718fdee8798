"""@bwrap attacked from inside, with real bubblewrap: the host's network and sockets, its processes,
the kernel's shared state (mounts, namespaces, keyrings, sysctls), privileges, the terminal,
and the user's secrets. Each attack prints TOKEN only when a step worked; each must fail, in
several spellings, and the host must show nothing of it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from codecoder.environments.base import CommandRequest
from codecoder.environments.bwrap.environment import BwrapEnvironment
from tests.environments.bwrap_support import bwrap, need_bwrap, repo, run

__all__ = ["bwrap", "repo"]  # fixtures

TOKEN = "ESCAPED-7f3a"
PY = "/usr/bin/python3"


def attack(env: BwrapEnvironment, python: str, *, writable: bool = True) -> str:
    """Run `python` (a Python program) in the sandbox; its stdout and stderr."""
    done = run(env, f"{PY} - <<'EOF'\n{python}\nEOF", writable=writable)
    return done.stdout + done.stderr


@contextlib.contextmanager
def tcp_listener(host: str) -> Iterator[tuple[int, list[str]]]:
    """A TCP service on the host that answers TOKEN and records every peer."""
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((host, 0))
    server.listen(8)
    server.settimeout(0.2)
    peers: list[str] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, peer = server.accept()
            except OSError:
                continue
            peers.append(str(peer))
            with conn:
                conn.sendall(TOKEN.encode())

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1], peers
    finally:
        stop.set()
        thread.join()
        server.close()


@pytest.mark.parametrize("bound", ["127.0.0.1", "0.0.0.0"])
def test_a_loopback_listener_on_the_host_is_unreachable(
    bwrap: BwrapEnvironment, bound: str
) -> None:
    addresses = ["127.0.0.1", "localhost", "::1"]
    with contextlib.suppress(OSError):
        addresses += [socket.gethostbyname(socket.gethostname())]
    with tcp_listener(bound) as (port, peers):
        said = attack(
            bwrap,
            f"""
import socket
for host in {addresses!r}:
    try:
        with socket.create_connection((host, {port}), timeout=1) as s:
            print("reached", host, s.recv(100).decode())
    except OSError as exc:
        print(host, "unreachable:", exc)
""",
        )
    assert TOKEN not in said
    assert peers == []
    assert "127.0.0.1 unreachable" in said


def test_the_only_network_interface_is_a_loopback_of_its_own(bwrap: BwrapEnvironment) -> None:
    result = run(bwrap, "ls /sys/class/net >/dev/null; cat /proc/net/dev | awk 'NR>2{print $1}'")
    assert result.stdout.split() == ["lo:"]


@pytest.fixture
def unix_listener(tmp_path: Path) -> Iterator[tuple[Path, list[int]]]:
    """A Unix socket on the host, in the workspace's parent, that counts connections."""
    path = tmp_path / "ws" / "host.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen(4)
    server.settimeout(0.2)
    accepted: list[int] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            accepted.append(1)
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    yield path, accepted
    stop.set()
    server.close()


def test_a_unix_socket_in_the_workspace_cannot_be_connected(
    bwrap: BwrapEnvironment, unix_listener: tuple[Path, list[int]]
) -> None:
    path, accepted = unix_listener
    said = attack(
        bwrap,
        f"""
import socket
for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM, socket.SOCK_SEQPACKET):
    try:
        s = socket.socket(socket.AF_UNIX, kind)
        s.connect("{path}")
        print("{TOKEN} connected", kind)
    except OSError as exc:
        print("refused:", exc)
""",
    )
    assert TOKEN not in said
    assert accepted == []
    assert said.count("refused: [Errno 1] Operation not permitted") == 3


def test_the_host_sockets_are_hidden_docker_dbus_and_the_decision_server(
    bwrap: BwrapEnvironment,
) -> None:
    state = os.environ["XDG_STATE_HOME"]
    said = run(
        bwrap,
        f"""
for s in /run/docker.sock /var/run/docker.sock /run/containerd/containerd.sock \\
         /run/dbus/system_bus_socket /var/run/dbus/system_bus_socket {state}/codecoder/daemon; do
    [ -e "$s" ] && echo "{TOKEN} $s"
done
find / -xdev -type s 2>/dev/null | sed 's/^/socket /'
echo looked
""",
    ).stdout
    assert TOKEN not in said
    assert said.endswith("looked\n")


def test_an_abstract_unix_socket_of_the_host_is_unreachable(bwrap: BwrapEnvironment) -> None:
    name = f"\0codecoder-test-{os.getpid()}"
    server = socket.socket(socket.AF_UNIX)
    server.bind(name)
    server.listen(1)
    server.settimeout(0.5)
    try:
        said = attack(
            bwrap,
            f"""
import socket
try:
    s = socket.socket(socket.AF_UNIX)
    s.connect({name!r})
    print("{TOKEN} connected")
except OSError as exc:
    print("refused:", exc)
""",
        )
        with pytest.raises(TimeoutError):
            server.accept()
    finally:
        server.close()
    assert TOKEN not in said


@pytest.fixture
def host_process() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(["sleep", "300"])
    yield proc
    proc.kill()
    proc.wait()


def test_a_host_process_cannot_be_signalled(
    bwrap: BwrapEnvironment, host_process: subprocess.Popen[bytes]
) -> None:
    pid = host_process.pid
    said = run(
        bwrap,
        f"""
kill -0 {pid} 2>/dev/null && echo "{TOKEN} sees"
kill -TERM {pid} 2>/dev/null && echo "{TOKEN} signalled"
kill -KILL -1 2>/dev/null
ls /proc | grep -qx {pid} && echo "{TOKEN} listed"
echo done
""",
    ).stdout
    assert TOKEN not in said
    assert host_process.poll() is None


def test_a_host_process_cannot_be_traced_or_read(
    bwrap: BwrapEnvironment, host_process: subprocess.Popen[bytes]
) -> None:
    pid = host_process.pid
    said = attack(
        bwrap,
        f"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
# The host's process, and bubblewrap's init (the command's own processes are its own to trace:
# test_a_command_traces_its_own_processes_and_nothing_else).
for target in ({pid}, 1):
    if libc.ptrace(16, target, 0, 0) == 0:  # PTRACE_ATTACH
        print("{TOKEN} attached", target)
    else:
        print("ptrace", target, os.strerror(ctypes.get_errno()))
for path in ("/proc/{pid}/environ", "/proc/{pid}/mem"):
    try:
        open(path, "rb").read(1)
        print("{TOKEN} read", path)
    except OSError as exc:
        print(path, exc.strerror)
""",
    )
    assert TOKEN not in said
    assert host_process.poll() is None


def test_a_command_traces_its_own_processes_and_nothing_else(bwrap: BwrapEnvironment) -> None:
    """A debugger or LeakSanitizer traces its own (issue 34): ptrace of a child works; of
    bubblewrap's init (PID 1, outside the command's Landlock domain) it is refused, and so are
    reading its memory and process_vm_readv on it; the host's processes are not even there."""
    said = attack(
        bwrap,
        f"""
import ctypes, os, signal, time
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.restype = ctypes.c_long
child = os.fork()
if child == 0:
    time.sleep(5)
    os._exit(0)
if libc.ptrace(16, child, 0, 0) == 0:  # PTRACE_ATTACH
    os.waitpid(child, 0)
    print("traced its own child")
    libc.ptrace(17, child, 0, 0)  # PTRACE_DETACH
else:
    print("own child refused", os.strerror(ctypes.get_errno()))
os.kill(child, signal.SIGKILL)
for target in (1,):
    if libc.ptrace(16, target, 0, 0) == 0:
        print("{TOKEN} attached", target)
    else:
        print("ptrace", target, os.strerror(ctypes.get_errno()))
    local = ctypes.create_string_buffer(8)
    iov = (ctypes.c_void_p * 2)(ctypes.addressof(local), 8)
    remote = (ctypes.c_void_p * 2)(0x400000, 8)
    if libc.syscall(310, target, iov, 1, remote, 1, 0) >= 0:
        print("{TOKEN} process_vm_readv", target)
    try:
        open(f"/proc/{{target}}/mem", "rb").read(1)
        print("{TOKEN} read mem", target)
    except OSError as exc:
        print("mem", target, exc.strerror)
""",
    )
    assert "traced its own child" in said, said
    assert TOKEN not in said
    assert said.count("ptrace 1 Operation not permitted") == 1, said


def test_a_leak_sanitizer_build_reports_its_leak(bwrap: BwrapEnvironment, repo: Path) -> None:
    """LeakSanitizer stops the program's threads with ptrace before it scans: refused, it died
    with "LeakSanitizer has encountered a fatal error" instead of reporting the leak."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    (repo / "leak.c").write_text(
        "#include <stdlib.h>\nint main(void) { char *p = malloc(64); p[0] = 1; p = 0; return 0; }\n"
    )
    result = bwrap.run(
        CommandRequest(
            cwd=repo,
            script="gcc -fsanitize=address -g leak.c -o leak && ./leak",
            writable=True,
            timeout=120,
        )
    )
    assert "LeakSanitizer has encountered a fatal error" not in result.stderr
    assert "ERROR: LeakSanitizer: detected memory leaks" in result.stderr, result.stderr


def test_proc_1_root_is_the_sandboxes_own_root(bwrap: BwrapEnvironment, tmp_path: Path) -> None:
    secret = Path(os.environ["XDG_STATE_HOME"]) / "codecoder" / "secret-of-the-runtime"
    secret.parent.mkdir(parents=True, exist_ok=True)
    secret.write_text(TOKEN)
    said = run(
        bwrap,
        f"""
for root in /proc/1/root /proc/self/root /proc/$$/root /proc/1/cwd/..; do
    cat "$root{secret}" 2>/dev/null
done
ls /proc/1/root/root 2>&1 | head -3
echo done
""",
    ).stdout
    assert TOKEN not in said


@pytest.mark.parametrize(
    "script",
    [
        "mount -t tmpfs none /mnt && echo {T}",
        "mount --bind / /mnt && echo {T}",
        "umount /proc && echo {T}",
        "unshare -U true && echo {T}",
        "unshare -m true && echo {T}",
        "unshare -n true && echo {T}",
        "unshare -r true && echo {T}",
        "chroot / true && echo {T}",
        "hostname pwned && echo {T}",
        "nsenter -t 1 -m true && echo {T}",
    ],
)
def test_mount_and_namespace_tools_fail(bwrap: BwrapEnvironment, script: str) -> None:
    said = run(bwrap, script.format(T=TOKEN) + " 2>/dev/null; echo done").stdout
    assert said == "done\n"


def test_the_kernel_interfaces_seccomp_refuses_are_refused(bwrap: BwrapEnvironment) -> None:
    said = attack(
        bwrap,
        f"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
calls = {{
    "keyctl get session keyring": (250, 0, -3, 1),
    "add_key": (248, b"user", b"codecoder", b"x", 1, -3),
    "unshare(CLONE_NEWUSER)": (272, 0x10000000),
    "unshare(CLONE_NEWNS)": (272, 0x20000),
    "clone(CLONE_NEWUSER)": (56, 0x10000000 | 17, 0, 0, 0, 0),
    "setns": (308, 0, 0),
    "mount": (165, b"none", b"/mnt", b"tmpfs", 0, 0),
    "io_uring_setup": (425, 8, ctypes.create_string_buffer(120)),
    "bpf": (321, 0, 0, 0),
    "perf_event_open": (298, 0, 0, -1, -1, 0),
    "userfaultfd": (323, 0),
    "open_tree": (428, -100, b"/", 1),
    "fsopen": (430, b"tmpfs", 0),
    "pidfd_getfd": (438, 0, 0, 0),
}}
for name, args in calls.items():
    result = libc.syscall(*args)
    print(("{TOKEN} " if result >= 0 else "") + name, result, os.strerror(ctypes.get_errno()))
""",
    )
    assert TOKEN not in said
    assert said.count("Operation not permitted") == 14, said


def test_nothing_can_be_typed_into_a_terminal(bwrap: BwrapEnvironment) -> None:
    said = attack(
        bwrap,
        f"""
import ctypes, fcntl, os, termios
for path in ("/dev/tty",):
    try:
        os.open(path, os.O_RDWR)
        print("{TOKEN} opened", path)
    except OSError as exc:
        print(path, exc.strerror)
master, slave = os.openpty()
for fd in (0, 1, 2, master, slave):
    for request, name in ((termios.TIOCSTI, "TIOCSTI"), (0x541C, "TIOCLINUX")):
        try:
            fcntl.ioctl(fd, request, b"x")
            print("{TOKEN}", name, fd)
        except OSError as exc:
            print(name, fd, exc.strerror)
""",
    )
    assert TOKEN not in said
    assert said.count("TIOCSTI") == 5


def test_no_privilege_is_left_and_set_uid_binaries_grant_none(
    bwrap: BwrapEnvironment, repo: Path
) -> None:
    setuid = repo / "setuid-id"
    setuid.write_bytes(Path("/usr/bin/id").read_bytes())
    os.chown(setuid, 65534, 65534)
    setuid.chmod(0o4755)
    said = run(
        bwrap,
        """
grep -E '^(CapEff|CapPrm|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status
./setuid-id -u
echo "uid before: $(id -u)"
""",
    ).stdout.split("\n")
    status = dict(line.split(":\t") for line in said if ":\t" in line)
    assert status == {
        "CapPrm": "0000000000000000",
        "CapEff": "0000000000000000",
        "CapBnd": "0000000000000000",
        "CapAmb": "0000000000000000",
        "NoNewPrivs": "1",
        "Seccomp": "2",
    }
    own = str(os.getuid())
    assert said[-3:-1] == [own, f"uid before: {own}"]


@pytest.mark.parametrize(
    "path",
    [
        "/proc/sys/kernel/core_pattern",
        "/proc/sys/kernel/hostname",
        "/proc/sys/vm/drop_caches",
        "/proc/sysrq-trigger",
        "/sys/kernel/uevent_helper",
        "/sys/fs/cgroup/cgroup.procs",
        "/proc/self/oom_score_adj",
    ],
)
def test_kernel_settings_cannot_be_opened_for_writing(bwrap: BwrapEnvironment, path: str) -> None:
    # Opening is the attack: nothing is written even where it would succeed.
    said = attack(
        bwrap,
        f"""
import os
try:
    fd = os.open("{path}", os.O_WRONLY)
    os.close(fd)
    print("{TOKEN} opened")
except OSError as exc:
    print("refused:", exc.strerror)
""",
    )
    assert TOKEN not in said


def test_devices_cannot_be_made_or_reached(bwrap: BwrapEnvironment) -> None:
    said = run(
        bwrap,
        f"""
mknod /tmp/sda b 8 0 2>/dev/null && echo "{TOKEN} mknod"
mknod ./sda b 8 0 2>/dev/null && echo "{TOKEN} mknod in workspace"
ls /dev | tr '\\n' ' '
""",
    ).stdout
    assert TOKEN not in said
    assert set(said.split()) <= {
        "core", "fd", "full", "mqueue", "null", "ptmx", "pts", "random", "shm", "stderr",
        "stdin", "stdout", "tty", "urandom", "zero",
    }  # fmt: skip


def test_the_users_secrets_are_out_of_reach_in_every_spelling(repo: Path, tmp_path: Path) -> None:
    need_bwrap()
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text(TOKEN)
    (home / ".aws").mkdir()
    (home / ".aws" / "credentials").write_text(TOKEN)
    (home / ".git-credentials").write_text(TOKEN)
    (repo / "key-link").symlink_to(home / ".ssh" / "id_rsa")
    (repo / "home-link").symlink_to(home)
    env = BwrapEnvironment(repo, environ={"HOME": str(home), "PATH": "/usr/bin:/bin"})
    try:
        said = run(
            env,
            f"""
cat ~/.ssh/id_rsa {home}/.ssh/id_rsa key-link home-link/.aws/credentials \\
    ~/.git-credentials /proc/self/root{home}/.ssh/id_rsa 2>/dev/null
grep -r {TOKEN} / --include=id_rsa -s -l 2>/dev/null | head -3
echo done
""",
        ).stdout
    finally:
        env.close()
    assert TOKEN not in said


def test_a_granted_cp_cannot_plant_a_hook(repo: Path, tmp_path: Path) -> None:
    """The issue's case: a fixture holding `.git/hooks/pre-commit`, copied over the workspace by
    a command the human granted."""
    need_bwrap()
    from codecoder.foundation.ceiling import EnvironmentTag
    from codecoder.session import Runtime
    from tests.conftest import RecordingAsker

    fixture = repo / "fixture"
    (fixture / ".git" / "hooks").mkdir(parents=True)
    (fixture / ".git" / "hooks" / "pre-commit").write_text("#!/bin/sh\ntouch /tmp/pwned\n")
    (fixture / ".git" / "config").write_text("[core]\n\tfsmonitor = touch /tmp/pwned\n")
    (fixture / ".claude").mkdir()
    (fixture / ".claude" / "settings.json").write_text('{"permissions": {"allow": ["Bash"]}}')
    (fixture / "codecoder.json").write_text('{"allowlist": {"run_command:*": "AlwaysThisProject"}}')
    hook_before = (repo / ".git" / "hooks" / "pre-commit").read_text()
    config_before = (repo / ".git" / "config").read_text()
    with Runtime(repo, asker=RecordingAsker()) as runtime:
        assert runtime.environment_of("run_command") is EnvironmentTag.BWRAP
        with runtime.session() as session:
            session.grant("run_command:cp")
            outcome = session.call("run_command", {"command": "cp -rT fixture ."})
    assert outcome.decision is not None and outcome.decision.source.value == "session"
    assert not outcome.ok
    assert (repo / ".git" / "hooks" / "pre-commit").read_text() == hook_before
    assert (repo / ".git" / "config").read_text() == config_before
    assert (repo / ".claude" / "settings.json").read_text() == "{}\n"
    assert (repo / "codecoder.json").read_text() == "{}\n"


def test_a_granted_command_cannot_read_ssh_or_reach_a_loopback_listener(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    need_bwrap()
    from codecoder.foundation.decision import Answer
    from codecoder.session import Runtime
    from tests.conftest import RecordingAsker

    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text(TOKEN)
    monkeypatch.setenv("HOME", str(home))
    asker = RecordingAsker(Answer.PROJECT, Answer.PROJECT)
    with (
        tcp_listener("127.0.0.1") as (port, peers),
        Runtime(repo, asker=asker) as rt,
        rt.session() as session,
    ):
        connect = f'socket.create_connection(("127.0.0.1", {port}), timeout=2)'
        # `cat` is read-only: it runs without a question, and reads no more than a grant does.
        looked = session.call("run_command", {"command": f"cat {home}/.ssh/id_rsa"})
        opened = f'print(open("{home}/.ssh/id_rsa").read())'
        read = session.call("run_command", {"command": f"{PY} -c '{opened}'"})
        reach = session.call("run_command", {"command": f"{PY} -c 'import socket; {connect}'"})
    assert looked.decision is not None and looked.decision.source.value == "read-only"
    assert looked.result is not None and TOKEN not in looked.result.output
    assert [r.decision.answer for r in (read, reach) if r.decision] == [Answer.PROJECT] * 2
    assert read.result is not None and TOKEN not in read.result.output
    assert read.result.data["exit_code"] != 0 and "Error" in read.result.output  # it tried
    assert reach.result is not None and reach.result.data["exit_code"] != 0
    assert peers == []
