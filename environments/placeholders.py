"""Placeholders: inert stand-ins for the protected names a workspace does not hold yet, so that a
sandbox can keep them read-only before they exist.

A mount needs something to mount on, and bubblewrap makes a missing mount point on the host's
disk itself; a sandbox that may write the workspace could otherwise create `.mcp.json` or
`.claude/settings.json` there, and an agent started (or reloading its settings) during the call
would obey it before the check after the call takes it away. So before a writable call the
runtime makes each missing name of `PLACEHOLDERS` itself, inert (an empty directory; an empty
`.git` is one git does not take for a repository), and the sandbox gets
it read-only like any protected path: the name cannot appear with a sandbox's content on the
host, even during the call.

Placeholders outlive one call (a warm sandbox is built on them), not the environments that use
them: a record in the project's state directory (`placeholders.json`, under a file lock) says
which entries the runtime made (device and inode) and which processes use them; the last one to
let go removes each entry that is still the inert one it made (an entry the human changed or
filled since is theirs, and stays). A record left by a process that died is taken over by the
next one, so nothing is left behind for long.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from codecoder.foundation.atomicfile import replace_atomically
from codecoder.foundation.errors import ExecutionFailed
from codecoder.foundation.state import project_state_directory

__all__ = ["PLACEHOLDERS", "Placeholders", "is_placeholder"]

# The names made when missing, and what each is made as: a file's content, or None for an
# empty directory. Every one is a directory, `.mcp.json` included: git shows no empty
# directory, so a placeholder is never in `git status` nor committed by a `git add -A` (a `{}`
# file would be), and an agent reading a directory as its `.mcp.json` reads no server.
# `codecoder.json` and `.gitmodules` are not among them: what a sandbox could put there can
# only narrow the rules (an untrusted codecoder.json) or is read by no git command but the
# submodule ones, so the check after the call is enough.
PLACEHOLDERS: Final[dict[str, bytes | None]] = {
    ".git": None,
    ".codecoder": None,
    ".claude": None,
    ".gemini": None,
    ".codex": None,
    ".vscode": None,
    ".mcp.json": None,
}
RECORD: Final = "placeholders.json"
_Identity = tuple[int, int]


def _identity(path: Path) -> _Identity | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _still_inert(path: Path, content: bytes | None) -> bool:
    """Whether the entry is still what a placeholder is made as: an empty directory, or a
    regular file holding exactly `content`."""
    try:
        st = os.lstat(path)
        if content is None:
            return stat.S_ISDIR(st.st_mode) and not os.listdir(path)
        if not stat.S_ISREG(st.st_mode) or st.st_size != len(content):
            return False
        with open(path, "rb") as file:
            return file.read(len(content) + 1) == content
    except OSError:
        return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Placeholders:
    """The placeholders of one workspace, held by one environment of this process."""

    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace
        self._holding = False

    @property
    def record(self) -> Path:
        return project_state_directory(self.workspace) / RECORD

    @contextlib.contextmanager
    def _locked(self) -> Iterator[dict[str, object]]:
        """The record, read under its lock and written back when the block ends."""
        self.record.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        lock = os.open(self.record.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                data = json.loads(self.record.read_bytes())
                if not isinstance(data, dict):
                    data = {}
            except (OSError, ValueError):
                data = {}
            before = json.dumps(data, sort_keys=True)
            yield data
            if json.dumps(data, sort_keys=True) != before:
                document = (json.dumps(data, indent=1, sort_keys=True) + "\n").encode()
                replace_atomically(self.record, document, 0o600)
        finally:
            os.close(lock)

    def hold(self) -> list[Path]:
        """Make the missing names of `PLACEHOLDERS` and say this process uses them; the
        placeholders of the workspace (those made now and those already there).
        ExecutionFailed when the record cannot be kept (nothing may run then)."""
        try:
            return self._hold()
        except OSError as exc:
            raise ExecutionFailed(
                f"cannot keep the record of the workspace's placeholders ({self.record}): "
                f"{exc.strerror or exc}"
            ) from exc

    def _hold(self) -> list[Path]:
        with self._locked() as data:
            made = _made(data)
            holders = [p for p in _holders(data) if _alive(p) and p != os.getpid()]
            for name, content in PLACEHOLDERS.items():
                path = self.workspace / name
                if os.path.lexists(path):
                    continue
                try:
                    if content is None:
                        os.mkdir(path, 0o755)
                    else:
                        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
                        fd = os.open(path, flags, 0o644)
                        with os.fdopen(fd, "wb") as file:
                            file.write(content)
                except OSError:
                    continue  # made meanwhile, or the workspace refuses it (so would it a sandbox)
                identity = _identity(path)
                if identity is not None:
                    made[name] = list(identity)
            data["made"] = made
            data["holders"] = [*holders, os.getpid()]
            self._holding = True
            return [
                self.workspace / name
                for name, identity in made.items()
                if _identity(self.workspace / name) == tuple(identity)
            ]

    def release(self, *, remove: bool = True) -> None:
        """This process no longer uses them: the last user removes each that is still inert.
        `remove=False` leaves them to a user that has yet to say so (the warm pool's server
        that a session's first claim starts: it holds them as it keeps the template, and its
        release removes them)."""
        if not self._holding:
            return
        self._holding = False
        with self._locked() as data:
            holders = [p for p in _holders(data) if _alive(p) and p != os.getpid()]
            data["holders"] = holders
            if holders or not remove:
                return
            made = _made(data)
            for name, identity in list(made.items()):
                path = self.workspace / name
                content = PLACEHOLDERS.get(name)
                if _identity(path) == tuple(identity) and _still_inert(path, content):
                    with contextlib.suppress(OSError):
                        if content is None:
                            os.rmdir(path)
                        else:
                            os.unlink(path)
                del made[name]
            data["made"] = made


def is_placeholder(workspace: Path, relative: str) -> bool:
    """Whether the entry at `relative` is a placeholder the runtime made (for the host's checks:
    it is no plant)."""
    if relative not in PLACEHOLDERS:
        return False
    try:
        data = json.loads((project_state_directory(workspace) / RECORD).read_bytes())
        identity = data["made"][relative]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return _identity(workspace / relative) == tuple(identity)


def _made(data: dict[str, object]) -> dict[str, list[int]]:
    made = data.get("made")
    if not isinstance(made, dict):
        return {}
    return {
        str(k): [int(x) for x in v]
        for k, v in made.items()
        if isinstance(v, list) and len(v) == 2 and k in PLACEHOLDERS
    }


def _holders(data: dict[str, object]) -> list[int]:
    holders = data.get("holders")
    if not isinstance(holders, list):
        return []
    return [int(p) for p in holders if isinstance(p, int)]
