"""The confined half of @landlock: a worker process that restricts itself with Landlock, then
runs ripgrep for the host.

The host (environments/landlock.py) starts this file with `python -I -S` and one end of a
socketpair; it needs nothing beyond the standard library, and everything it imports is imported
before it restricts itself (Landlock would refuse to read a module afterwards). At start it is
told what to allow, and then, for the rest of its life, the kernel lets it and every process it
starts (rulesets are inherited across fork and exec, and cannot be lifted):

* read files and list directories beneath the workspace and the project's read roots;
* execute (and read) the one ripgrep binary, which is statically linked: no loader, no
  libraries;
* nothing else on any file system: no writes, creations, renames, links or truncations
  anywhere, no device ioctls, no reading of anything outside those trees, whatever path,
  `..`, symlink or `/proc/self/root` leads there;
* where the kernel's Landlock ABI knows them: no TCP bind or connect (ABI 4), no connecting to
  abstract unix sockets or signalling processes outside its own domain (ABI 6).

Protocol: frames of a 4-byte big-endian length and a JSON object, on the socket.

    host -> worker, once:  {"read": [dir, ...], "ripgrep": path}
    worker -> host, once:  {"ready": abi}  or  {"error": str}
    host -> worker:        {"args": [str, ...], "cwd": dir}     run ripgrep with these arguments
    worker -> host:        {"pid": int}, carrying the read end of ripgrep's stdout (SCM_RIGHTS),
                           so its output reaches the host without being copied here
                           or {"error": str} when it could not be started
    host -> worker:        {"cancel": true}, at any time while it runs: kill it
    worker -> host:        {"exit": int, "stderr": str}  once it has ended

ripgrep's stdin is /dev/null (opened before the restriction), its environment is empty (no
config file, no global gitignore), and it runs in its own process group, killed whole on cancel.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
from typing import Any

# Landlock, from <linux/landlock.h>. The syscall numbers are the same on every architecture.
SYS_CREATE_RULESET, SYS_ADD_RULE, SYS_RESTRICT_SELF = 444, 445, 446
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH = 1
PR_SET_NO_NEW_PRIVS, PR_SET_PDEATHSIG = 38, 1

EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
# REMOVE_DIR .. MAKE_SYM are bits 4-12 (ABI 1), REFER 13 (ABI 2), TRUNCATE 14 (ABI 3),
# IOCTL_DEV 15 (ABI 5). Every right the kernel knows is handled, so every one not granted
# below is denied.
_FS_RIGHTS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 5: (1 << 16) - 1}
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1

MAX_STDERR = 64 * 1024

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class _RulesetAttr(ctypes.Structure):
    _fields_ = (
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    )


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 when it has none (too old, or disabled at boot)."""
    version = _libc.syscall(
        SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(CREATE_RULESET_VERSION)
    )
    return max(int(version), 0)


def fs_rights(abi: int) -> int:
    """Every file-system access right of Landlock ABI `abi`."""
    return _FS_RIGHTS_BY_ABI[max(v for v in _FS_RIGHTS_BY_ABI if v <= abi)]


def _check(result: int, what: str) -> int:
    if result < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")
    return result


def restrict_self(read: list[str], execute: list[str]) -> int:
    """Allow only reading beneath `read` and running the files `execute`, for good; the ABI.

    Raises OSError when the kernel has no Landlock or refuses a rule: the caller must then not
    go on unconfined.
    """
    abi = landlock_abi()
    if abi < 1:
        raise OSError("this kernel has no Landlock")
    handled = fs_rights(abi)
    attr = _RulesetAttr(handled, 0, 0)
    size = 8
    if abi >= 4:
        attr.handled_access_net = NET_BIND_TCP | NET_CONNECT_TCP
        size = 16
    if abi >= 6:
        attr.scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
        size = 24
    ruleset = _check(
        _libc.syscall(
            SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0)
        ),
        "landlock_create_ruleset",
    )
    try:
        rules = [(path, READ_FILE | READ_DIR) for path in read]
        rules += [(path, EXECUTE | READ_FILE) for path in execute]
        for path, access in rules:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            try:
                # A rule binds to what was opened: it must be the path the host checked, not
                # wherever a symlink swapped in since leads (the roots are resolved paths).
                opened = os.readlink(f"/proc/self/fd/{fd}")
                if opened != os.path.normpath(path):
                    raise OSError(f"{path} leads to {opened} now, not to the directory checked")
                rule = _PathBeneathAttr(access & handled, fd)
                _check(
                    _libc.syscall(
                        SYS_ADD_RULE,
                        ctypes.c_int(ruleset),
                        ctypes.c_int(RULE_PATH_BENEATH),
                        ctypes.byref(rule),
                        ctypes.c_uint32(0),
                    ),
                    f"landlock_add_rule {path}",
                )
            finally:
                os.close(fd)
        # Required by landlock_restrict_self, and what keeps a set-uid binary from shedding it.
        _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")
        _check(
            _libc.syscall(SYS_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)),
            "landlock_restrict_self",
        )
    finally:
        os.close(ruleset)
    return abi


# -- framing --------------------------------------------------------------------------------


def send(sock: socket.socket, message: dict[str, Any], fds: list[int] | None = None) -> None:
    body = json.dumps(message).encode()
    frame = struct.pack(">I", len(body)) + body
    if fds:
        socket.send_fds(sock, [frame], fds)
    else:
        sock.sendall(frame)


def receive(sock: socket.socket) -> dict[str, Any] | None:
    """The next frame, or None at end of stream."""
    head = _exactly(sock, 4)
    if head is None:
        return None
    body = _exactly(sock, struct.unpack(">I", head)[0])
    if body is None:
        return None
    message = json.loads(body)
    if not isinstance(message, dict):
        raise ValueError("a frame is not a JSON object")
    return message


def _exactly(sock: socket.socket, size: int) -> bytes | None:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(size - len(chunks))
        if not chunk:
            return None
        chunks += chunk
    return bytes(chunks)


# -- serving --------------------------------------------------------------------------------


def _run(sock: socket.socket, ripgrep: str, devnull: int, request: dict[str, Any]) -> None:
    args = request.get("args")
    cwd = request.get("cwd")
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        send(sock, {"error": "args must be a list of strings"})
        return
    read_end, write_end = os.pipe2(os.O_CLOEXEC)
    try:
        proc = subprocess.Popen(
            [ripgrep, *args],
            cwd=cwd if isinstance(cwd, str) else None,
            stdin=devnull,
            stdout=write_end,
            stderr=subprocess.PIPE,
            env={},
            process_group=0,
        )
    except OSError as exc:
        os.close(read_end)
        os.close(write_end)
        send(sock, {"error": f"{exc.strerror or exc}: {exc.filename or cwd}"})
        return
    os.close(write_end)
    try:
        send(sock, {"pid": proc.pid}, [read_end])
    finally:
        os.close(read_end)
    assert proc.stderr is not None
    stderr = bytearray()
    pidfd = os.pidfd_open(proc.pid)
    with selectors.DefaultSelector() as selector:
        selector.register(sock, selectors.EVENT_READ)
        selector.register(proc.stderr, selectors.EVENT_READ)
        selector.register(pidfd, selectors.EVENT_READ)
        exited = False
        stderr_open = True
        while not exited or stderr_open:
            for key, _ in selector.select():
                if key.fileobj is sock:
                    message = receive(sock)
                    if message is None or message.get("cancel"):
                        _kill(proc)
                    if message is None:
                        selector.unregister(sock)
                elif key.fileobj is proc.stderr:
                    chunk = os.read(proc.stderr.fileno(), 65536)
                    if chunk:
                        stderr += chunk[: max(0, MAX_STDERR - len(stderr))]
                    else:
                        selector.unregister(proc.stderr)
                        stderr_open = False
                else:
                    selector.unregister(pidfd)
                    exited = True
    os.close(pidfd)
    proc.stderr.close()
    code = proc.wait()
    _kill(proc)  # anything its process group left behind
    send(sock, {"exit": code, "stderr": stderr.decode("utf-8", "backslashreplace")})


def _kill(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def main(argv: list[str]) -> int:
    sock = socket.socket(fileno=int(argv[1]))
    # Die with the runtime that started it, rather than live on as an orphan.
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    config = receive(sock)
    if config is None:
        return 1
    try:
        ripgrep = str(config["ripgrep"])
        read = [str(path) for path in config["read"]]
        devnull = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        abi = restrict_self(read, [ripgrep])
    except (OSError, KeyError, TypeError) as exc:
        send(sock, {"error": f"cannot confine the worker: {exc}"})
        return 1
    send(sock, {"ready": abi})
    while True:
        request = receive(sock)
        if request is None:
            return 0
        if not request.get("cancel"):  # a cancel that arrived after its search ended
            _run(sock, ripgrep, devnull, request)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
