"""No set-id bit from a call: a seccomp filter the agent installs on itself, and every command
inherits, before anything runs.

A command may write the workspace, which is the host's directory (bind mode): a set-uid or
set-gid file it leaves there runs, on the host, with its owner's ids for whoever starts it
(no-new-privileges and the sandbox's mounts protect only the inside). So the filter refuses,
with EPERM, every call that sets a mode holding S_ISUID or S_ISGID: chmod, fchmod, fchmodat,
fchmodat2, mknod, mknodat, creat, and open or openat when their flags create (O_CREAT,
O_TMPFILE); openat2, whose mode lies in a structure a filter cannot read, answers ENOSYS (the C
library falls back to openat); io_uring, whose operations bypass seccomp, is refused. `mkdir`
ignores those bits by itself, and file capabilities need CAP_SETFCAP, which a command never
holds. The rule and its numbers are those of @bwrap's confine helper (sandboxes/bwrap/confine.c).

Filters stack: this one comes on top of whatever the engine applies (Docker's default profile
under runc), and it holds where the engine applies none (gVisor's runsc runs without
--oci-seccomp). A system call of another architecture (the 32-bit ABIs, whose numbers differ)
kills the process; the x32 ABI's numbers answer ENOSYS.

`refuse_set_id()` installs it and proves it is in force (a set-uid mode on a memory file of the
agent's own is refused): the agent does not start without it.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct

PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
SECCOMP_RET_KILL_PROCESS = 0x80000000
SECCOMP_RET_ERRNO = 0x00050000
SECCOMP_RET_ALLOW = 0x7FFF0000
BPF_LD_W_ABS, BPF_JEQ_K, BPF_JGE_K, BPF_JSET_K, BPF_RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
DATA_NR, DATA_ARCH = 0, 4
# S_ISUID | S_ISGID, and O_CREAT | __O_TMPFILE (the same bits on x86_64 and aarch64).
SET_ID_BITS = 0o6000
OPEN_CREATES = 0o20000100

# Per machine: its audit architecture, the calls whose argument `mode` (by index) is refused set-id
# bits, and the open calls (flags index, mode index). The legacy calls exist on x86_64 only.
MACHINES = {
    "x86_64": (
        0xC000003E,
        {"fchmod": (91, 1), "fchmodat": (268, 2), "mknodat": (259, 2), "chmod": (90, 1),
         "creat": (85, 1), "mknod": (133, 1)},
        {"openat": (257, 2, 3), "open": (2, 1, 2)},
    ),
    "aarch64": (
        0xC00000B7,
        {"fchmod": (52, 1), "fchmodat": (53, 2), "mknodat": (33, 2)},
        {"openat": (56, 2, 3)},
    ),
}  # fmt: skip
# Numbered in common on every architecture.
FCHMODAT2, OPENAT2 = 452, 437
IO_URING = (425, 426, 427)

_libc = ctypes.CDLL(None, use_errno=True)


class _Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _arg_low(index: int) -> int:
    """Where the low 32 bits of argument `index` lie in seccomp's data (little-endian)."""
    return 16 + 8 * index


def filter_program(machine: str) -> list[tuple[int, int, int, int]]:
    """The filter's instructions (code, jump if true, jump if false, k) for `machine`."""
    arch, modes, opens = MACHINES[machine]
    program: list[tuple[int, int, int, int]] = [
        (BPF_LD_W_ABS, 0, 0, DATA_ARCH),
        (BPF_JEQ_K, 1, 0, arch),
        (BPF_RET_K, 0, 0, SECCOMP_RET_KILL_PROCESS),
        (BPF_LD_W_ABS, 0, 0, DATA_NR),
    ]
    if machine == "x86_64":
        program += [
            (BPF_JGE_K, 0, 1, 0x40000000),  # the x32 ABI, and numbers no system call has
            (BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | errno.ENOSYS),
        ]
    for number in IO_URING:
        program += [(BPF_JEQ_K, 0, 1, number), (BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | errno.EPERM)]
    program += [(BPF_JEQ_K, 0, 1, OPENAT2), (BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | errno.ENOSYS)]
    # Each block ends in a return, so nothing after it needs the number again.
    for number, mode in (*modes.values(), (FCHMODAT2, 2)):
        program += [
            (BPF_JEQ_K, 0, 4, number),
            (BPF_LD_W_ABS, 0, 0, _arg_low(mode)),
            (BPF_JSET_K, 0, 1, SET_ID_BITS),
            (BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | errno.EPERM),
            (BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),
        ]
    for number, flags, mode in opens.values():
        program += [
            (BPF_JEQ_K, 0, 6, number),
            (BPF_LD_W_ABS, 0, 0, _arg_low(flags)),
            (BPF_JSET_K, 0, 3, OPEN_CREATES),
            (BPF_LD_W_ABS, 0, 0, _arg_low(mode)),
            (BPF_JSET_K, 0, 1, SET_ID_BITS),
            (BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | errno.EPERM),
            (BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),
        ]
    program.append((BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW))
    return program


def refuse_set_id() -> str | None:
    """Install the filter on this process (its children inherit it) and check that it holds;
    why not, or None. Needs no-new-privileges, which the agent has checked."""
    machine = platform.machine()
    if machine not in MACHINES:
        return f"no set-id filter for {machine} (only x86_64 and aarch64)"
    code = b"".join(struct.pack("=HBBI", *op) for op in filter_program(machine))
    buffer = ctypes.create_string_buffer(code, len(code))
    program = _Program(len(code) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    if _libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(program), 0, 0) != 0:
        reason = os.strerror(ctypes.get_errno())
        return f"cannot install the seccomp filter that refuses set-id bits ({reason})"
    return set_id_refused()


def set_id_refused() -> str | None:
    """Whether a set-uid mode is refused here: tried on a memory file (no trace anywhere)."""
    try:
        fd = os.memfd_create("codecoder-set-id-check", os.MFD_CLOEXEC)
    except OSError as exc:
        return f"cannot check that set-id bits are refused (memfd_create: {exc.strerror})"
    try:
        os.fchmod(fd, 0o4755)
    except PermissionError:
        return None
    except OSError as exc:  # another answer proves nothing: the agent does not start
        return f"cannot check that set-id bits are refused (fchmod: {exc.strerror})"
    finally:
        os.close(fd)
    return "a set-uid mode was not refused: the seccomp filter is not in force"
