"""What one grant's calls could leave for another's, and emptying it.

Every place the command uid can write besides the workspace (the tmpfs mounts found in
/proc/self/mountinfo, POSIX message queues, System V IPC) is found at start; before a call made
under another grant than the one before (`"fresh"`) it is emptied and checked empty, so nothing
planted by one grant's calls runs under another's.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import stat

from image import SNAPSHOT_DIR, WORKSPACE
from procfs import read_text

SYSV_IPC = ("/proc/sysvipc/shm", "/proc/sysvipc/sem", "/proc/sysvipc/msg")
IPC_RMID = 0

_libc = ctypes.CDLL(None, use_errno=True)


def mounts() -> list[tuple[str, str, str]]:
    """(mount point, options, filesystem type) of every mount this container sees."""
    found = []
    for line in (read_text("/proc/self/mountinfo") or "").splitlines():
        before, _, after = line.partition(" - ")
        fields = before.split()
        point = fields[4].encode().decode("unicode_escape")  # \040 and friends
        found.append((point, fields[5], after.split()[0]))
    return found


def writable_by(path: str, uid: int, gid: int) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if not stat.S_ISDIR(st.st_mode):
        return False
    if st.st_uid == uid:
        return bool(st.st_mode & stat.S_IWUSR)
    if st.st_gid == gid:
        return bool(st.st_mode & stat.S_IWGRP)
    return bool(st.st_mode & stat.S_IWOTH)


def state_directories(uid: int, gid: int) -> tuple[list[str], bool]:
    """Every directory outside the workspace the command uid can write, and whether that list
    is complete (it is not when the root filesystem is writable: any image directory could be).

    Walks each writable mount: they are small at start (empty tmpfs, /dev).
    """
    found: list[str] = []
    complete = True
    for point, options, fstype in mounts():
        if "rw" not in options.split(","):
            continue
        if point == "/":
            complete = False
            continue
        if point == WORKSPACE or point.startswith(WORKSPACE + "/") or fstype in ("proc", "sysfs"):
            continue
        if point == SNAPSHOT_DIR:
            continue
        for directory, subdirs, _ in os.walk(point):
            if writable_by(directory, uid, gid):
                found.append(directory)
                subdirs.clear()  # wiped as a whole
    return sorted(set(found)), complete


def sysv_ids() -> list[tuple[str, int]]:
    ids = []
    for path in SYSV_IPC:
        for line in (read_text(path) or "").splitlines()[1:]:
            fields = line.split()
            if len(fields) > 1 and fields[1].isdigit():
                ids.append((path.rsplit("/", 1)[1], int(fields[1])))
    return ids


def leftovers(state_dirs: list[str]) -> list[str]:
    found = []
    for directory in state_dirs:
        with contextlib.suppress(OSError):
            found += [f"{directory}/{name}" for name in os.listdir(directory)]
    found += [f"System V {kind} {ident}" for kind, ident in sysv_ids()]
    return found


def _remove(path: str) -> None:
    st = os.lstat(path)
    if stat.S_ISDIR(st.st_mode):
        os.chmod(path, 0o700)
        for name in os.listdir(path):
            _remove(f"{path}/{name}")
        os.rmdir(path)
    else:
        os.unlink(path)


def _wipe_as(uid: int, gid: int, state_dirs: list[str]) -> None:
    """In a child: become the command uid (the owner of everything there) and remove it all."""
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getresuid() != (uid, uid, uid):
        os._exit(3)
    for directory in state_dirs:
        for name in os.listdir(directory):
            with contextlib.suppress(OSError):
                _remove(f"{directory}/{name}")
    for kind, ident in sysv_ids():
        if kind == "sem":
            _libc.semctl(ident, 0, IPC_RMID)
        elif kind == "shm":
            _libc.shmctl(ident, IPC_RMID, None)
        else:
            _libc.msgctl(ident, IPC_RMID, None)


def wipe(uid: int, gid: int, state_dirs: list[str]) -> str | None:
    """Empty every state directory and the IPC namespace; what is still there, or None."""
    if not leftovers(state_dirs):
        return None
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            _wipe_as(uid, gid, state_dirs)
            code = 0
        finally:
            os._exit(code)
    os.waitpid(pid, 0)
    left = leftovers(state_dirs)
    return ", ".join(left[:5]) if left else None
