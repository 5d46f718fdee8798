"""Applying a change set beneath a directory whole or not at all, whatever the descriptor limit.

The copy-back of sync mode (`environments.docker.copyback`) writes what a sandbox changed into
the workspace. It must never follow a symlink (a directory of the path swapped for a link would
lead the write out), must not depend on how many descriptors the process may hold (a build can
create thousands of directories), and must leave the workspace as it was when anything fails
half way (a full disk, a directory the host cannot write). So:

* **Directories** are opened one component at a time with O_NOFOLLOW from the root's own
  descriptor (`Directories`), and at most `OPEN_DIRECTORIES` of them are held at once (the most
  recently used; a path is walked again when its descriptor was closed).
* **Staging first**: every file and symlink of the change set is written into a private
  directory at the workspace's root (`.codecoder-sync-<token>`, same filesystem), under a
  number, before anything of the workspace is touched. A failure here (the disk is full) leaves
  the workspace untouched.
* **Then the swap**, with an undo log: what is replaced or deleted is renamed into the staging
  directory (never removed yet), what is new is renamed in, directories are made and modes set,
  each step recorded. A failure undoes every recorded step, newest first, and the error says
  what failed. Only once every step succeeded is the staging directory (with what was
  replaced) removed, by a walk that holds one descriptor per level it is in, up to a bound,
  reopening from the top beyond it.

Renames cannot cross filesystems: a change beneath a mount point inside the workspace fails (and
is undone) rather than being copied.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import io
import logging
import os
import secrets
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Final

from codecoder.foundation.errors import ExecutionFailed

__all__ = ["OPEN_DIRECTORIES", "STAGE_PREFIX", "Directories", "StagedSwap", "remove_tree"]

log = logging.getLogger(__name__)

# How many directory descriptors the copy-back holds at most (a cache; paths are walked again).
OPEN_DIRECTORIES: Final = 32
STAGE_PREFIX: Final = ".codecoder-sync-"
COPY_CHUNK: Final = 1024 * 1024
# Holes are kept at this granularity: a block of zeros is skipped, not written.
HOLE_BLOCK: Final = 64 * 1024
_ZEROS: Final = bytes(HOLE_BLOCK)
_DIRECTORY_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Directories:
    """Descriptors of real directories beneath `root_fd`, opened one component at a time without
    following a symlink, at most `limit` held at once (least recently used closed first)."""

    def __init__(self, root_fd: int, limit: int = OPEN_DIRECTORIES) -> None:
        self.root = root_fd
        self._limit = limit
        self._open: collections.OrderedDict[str, int] = collections.OrderedDict()

    def close(self) -> None:
        for fd in self._open.values():
            os.close(fd)
        self._open.clear()

    def forget(self, path: str) -> None:
        """Close what is held of `path` and beneath it (it was moved or removed)."""
        for known in [p for p in self._open if p == path or p.startswith(path + "/")]:
            os.close(self._open.pop(known))

    def get(self, path: str, make: Callable[[int, str, str], None] | None = None) -> int:
        """The descriptor of the directory at `path` ("" is the root). A component that is
        missing is made by `make(parent_fd, name, its path)` when given (else
        FileNotFoundError); one that is not a real directory raises the OSError of opening it
        (ELOOP, ENOTDIR)."""
        if not path:
            return self.root
        found = self._open.get(path)
        if found is not None:
            self._open.move_to_end(path)
            return found
        # Up to the nearest directory held (or the root), then down one component at a time.
        parts = path.split("/")
        start = len(parts) - 1
        while start > 0 and "/".join(parts[:start]) not in self._open:
            start -= 1
        fd = self._open["/".join(parts[:start])] if start else self.root
        for level in range(start, len(parts)):
            walked = "/".join(parts[: level + 1])
            try:
                child = os.open(parts[level], _DIRECTORY_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if make is None:
                    raise
                make(fd, parts[level], walked)
                child = os.open(parts[level], _DIRECTORY_FLAGS, dir_fd=fd)
            self._open[walked] = fd = child
            while len(self._open) > self._limit:
                # Never the one just opened, which the next component is opened from.
                _, oldest = self._open.popitem(last=False)
                os.close(oldest)
        return fd


def remove_tree(directory: int, name: str, depth_limit: int = OPEN_DIRECTORIES) -> None:
    """Remove `name` beneath `directory` (a file, a symlink or a whole tree), never following a
    symlink and holding at most `depth_limit` (+1) descriptors however deep the tree is: the
    deepest levels walked are held, and a level above them is opened again from the top."""
    try:
        info = os.stat(name, dir_fd=directory, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(info.st_mode):
        os.unlink(name, dir_fd=directory)
        return
    # Each level walked into: its name and the subdirectories still to remove (None: not
    # listed yet). `held` maps a depth (1 = `name`) to the descriptor of that level.
    stack: list[tuple[str, list[str] | None]] = [(name, None)]
    held: dict[int, int] = {}

    def level(depth: int) -> int:
        if depth == 0:
            return directory
        if depth in held:
            return held[depth]
        start = max((d for d in held if d < depth), default=0)
        fd = held[start] if start else directory
        for d in range(start + 1, depth + 1):
            fd = held[d] = os.open(stack[d - 1][0], _DIRECTORY_FLAGS, dir_fd=fd)
            while len(held) > depth_limit:
                os.close(held.pop(min(held)))
        return fd

    try:
        while stack:
            top, pending = stack[-1]
            if pending is None:
                pending = _empty_but_directories(level(len(stack)))
                stack[-1] = (top, pending)
            if pending:
                stack.append((pending.pop(), None))
                continue
            depth = len(stack)
            if depth in held:
                os.close(held.pop(depth))
            stack.pop()
            os.rmdir(top, dir_fd=level(depth - 1))
    finally:
        for fd in held.values():
            os.close(fd)


def _empty_but_directories(fd: int) -> list[str]:
    """Remove every entry of the directory `fd` that is not a directory; the directories."""
    directories = []
    with os.scandir(fd) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                directories.append(entry.name)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.name, dir_fd=fd)
    return directories


@dataclass(slots=True)
class _Step:
    """One recorded change of the swap, and how to undo it."""

    undo: Callable[[], None]
    what: str


class StagedSwap:
    """A change set applied beneath `root`: staged first, then swapped in with an undo log.

    Use: `stage_file`/`stage_symlink` for every new entry (nothing of the workspace changes),
    then `begin_swap()`, then `delete`, `directory`, `put` in order; `commit()` when all went
    well, `rollback()` otherwise. `close()` always. `owner` is who new entries belong to (None:
    this process)."""

    def __init__(self, root: Path, owner: tuple[int, int] | None) -> None:
        self._owner = owner
        self._root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self.dirs = Directories(self._root_fd)
        self.stage = f"{STAGE_PREFIX}{secrets.token_hex(8)}"
        try:
            os.mkdir(self.stage, 0o700, dir_fd=self._root_fd)
            self._stage_fd = os.open(self.stage, _DIRECTORY_FLAGS, dir_fd=self._root_fd)
        except BaseException:
            os.close(self._root_fd)
            raise
        self._numbers = iter(range(1 << 62))
        self._steps: list[_Step] = []
        self._swapping = False

    def close(self) -> None:
        self.dirs.close()
        with contextlib.suppress(OSError):
            os.close(self._stage_fd)
        os.close(self._root_fd)

    # -- staging: nothing of the workspace changes ------------------------------------------------

    def stage_file(self, source: IO[bytes], size: int, mode: int) -> str:
        """Write `size` bytes of `source` into the staging directory (blocks of zeros left as
        holes); the staged name."""
        name = f"n{next(self._numbers)}"
        fd = os.open(
            name,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
            dir_fd=self._stage_fd,
        )
        try:
            write_keeping_holes(fd, source, size)
            os.fchmod(fd, mode & 0o777)
            if self._owner is not None:
                os.fchown(fd, *self._owner)
        finally:
            os.close(fd)
        return name

    def stage_symlink(self, target: str) -> str:
        name = f"n{next(self._numbers)}"
        os.symlink(target, name, dir_fd=self._stage_fd)
        if self._owner is not None:
            os.chown(name, *self._owner, dir_fd=self._stage_fd, follow_symlinks=False)
        return name

    # -- the swap: every step recorded -----------------------------------------------------------

    def _record(self, what: str, undo: Callable[[], None]) -> None:
        self._steps.append(_Step(undo, what))

    def _make_directory(self, parent_fd: int, name: str, path: str) -> None:
        """Make a missing directory of a path (recorded)."""
        os.mkdir(name, 0o755, dir_fd=parent_fd)
        self._chown_at(parent_fd, name)
        self._record(f"made {path}", lambda: self._undo_mkdir(path))

    def _chown_at(self, directory: int, name: str) -> None:
        if self._owner is not None:
            os.chown(name, *self._owner, dir_fd=directory, follow_symlinks=False)

    def _undo_mkdir(self, path: str) -> None:
        self.dirs.forget(path)
        parent, _, name = path.rpartition("/")
        os.rmdir(name, dir_fd=self.dirs.get(parent))

    def _move_aside(self, directory: int, name: str, path: str) -> bool:
        """Rename what is at `path` into the staging directory (recorded); False if nothing was
        there."""
        try:
            os.stat(name, dir_fd=directory, follow_symlinks=False)
        except FileNotFoundError:
            return False
        aside = f"t{next(self._numbers)}"
        self.dirs.forget(path)
        os.rename(name, aside, src_dir_fd=directory, dst_dir_fd=self._stage_fd)

        def undo() -> None:
            parent_fd = self.dirs.get(path.rpartition("/")[0])
            os.rename(aside, name, src_dir_fd=self._stage_fd, dst_dir_fd=parent_fd)

        self._record(f"moved {path} aside", undo)
        return True

    def delete(self, path: str) -> bool:
        """Take `path` out of the workspace (into the staging directory); False if it was not
        there, or lies behind something that is not a real directory."""
        try:
            directory, name = self._lookup_parent(path)
        except (FileNotFoundError, NotADirectoryError):
            return False
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                return False  # behind a symlink: not in the workspace's tree
            raise
        return self._move_aside(directory, name, path)

    def _lookup_parent(self, path: str) -> tuple[int, str]:
        parent, _, name = path.rpartition("/")
        return self.dirs.get(parent), name

    def directory(self, path: str, mode: int) -> None:
        """A real directory at `path` with `mode` (made, or what was there of another kind
        moved aside first, or its mode set)."""
        directory, name = self._parent_replacing(path)
        try:
            info = os.stat(name, dir_fd=directory, follow_symlinks=False)
        except FileNotFoundError:
            info = None
        if info is not None and not stat.S_ISDIR(info.st_mode):
            self._move_aside(directory, name, path)
            info = None
        if info is None:
            os.mkdir(name, 0o700, dir_fd=directory)
            self._record(f"made {path}", lambda: self._undo_mkdir(path))
            fd = self.dirs.get(path)
            os.fchmod(fd, mode & 0o777)
            if self._owner is not None:
                os.fchown(fd, *self._owner)
            return
        old = stat.S_IMODE(info.st_mode)
        if old != mode & 0o777:
            fd = self.dirs.get(path)
            os.fchmod(fd, mode & 0o777)
            self._record(f"set the mode of {path}", lambda: os.fchmod(self.dirs.get(path), old))

    def put(self, path: str, staged: str) -> None:
        """Rename the staged entry `staged` to `path`, what was there moved aside first."""
        directory, name = self._parent_replacing(path)
        self._move_aside(directory, name, path)
        os.rename(staged, name, src_dir_fd=self._stage_fd, dst_dir_fd=directory)

        def undo() -> None:
            parent_fd = self.dirs.get(path.rpartition("/")[0])
            os.rename(name, staged, src_dir_fd=parent_fd, dst_dir_fd=self._stage_fd)

        self._record(f"wrote {path}", undo)

    def _parent_replacing(self, path: str) -> tuple[int, str]:
        """The directory `path` goes in: made where missing, and where a component is a file or
        a symlink, that moved aside and a directory made in its place."""
        parent, _, name = path.rpartition("/")
        walked = ""
        for part in parent.split("/") if parent else ():
            above = walked
            walked = f"{walked}/{part}" if walked else part
            try:
                self.dirs.get(walked, self._make_directory)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                above_fd = self.dirs.get(above)
                self._move_aside(above_fd, part, walked)
                self.dirs.get(walked, self._make_directory)
        return self.dirs.get(parent), name

    def commit(self) -> None:
        """Keep what was swapped in; remove the staging directory with what was replaced."""
        self._steps.clear()
        self.dirs.forget(self.stage)
        try:
            remove_tree(self._root_fd, self.stage)
        except OSError as exc:
            log.warning(
                "the copy-back succeeded, but its staging directory %s (with what it replaced) "
                "could not be removed: %s",
                self.stage,
                exc,
            )

    def rollback(self) -> list[str]:
        """Undo every recorded step, newest first; remove the staging directory when that
        worked. Returns what could not be undone (and then the staging directory, which holds
        it, stays)."""
        failed: list[str] = []
        for step in reversed(self._steps):
            try:
                step.undo()
            except OSError as exc:
                failed.append(f"{step.what} ({exc.strerror or exc})")
        self._steps.clear()
        if not failed:
            with contextlib.suppress(OSError):
                remove_tree(self._root_fd, self.stage)
        return failed


def write_keeping_holes(fd: int, source: IO[bytes], size: int) -> None:
    """Copy `size` bytes of `source` to `fd`, seeking over blocks of zeros so that they stay
    holes: a sparse file sent back stays sparse on the host."""
    written = 0
    with io.FileIO(fd, "wb", closefd=False) as sink:
        while written < size:
            chunk = source.read(min(COPY_CHUNK, size - written))
            if not chunk:
                raise ExecutionFailed("the sandbox's changes ended before one of their files did")
            view = memoryview(chunk)
            for start in range(0, len(view), HOLE_BLOCK):
                block = view[start : start + HOLE_BLOCK]
                if block == _ZEROS[: len(block)]:
                    sink.seek(len(block), os.SEEK_CUR)
                else:
                    sink.write(block)
            written += len(chunk)
        sink.truncate(size)
