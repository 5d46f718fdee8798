"""Single files and directories on @landlock, opened by the runtime itself with
openat2(RESOLVE_BENEATH) from a descriptor of their root: `BeneathFiles`."""

from __future__ import annotations

import builtins
import contextlib
import errno
import os
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import MappingProxyType

from codecoder.foundation.errors import ExecutionFailed
from codecoder.foundation.openbeneath import open_beneath, open_root
from codecoder.tools.files import limits
from codecoder.tools.files.backend import Entry, FileContent
from codecoder.tools.files.paths import _as_checked, _join, normalise_path


def _outside(exc: OSError) -> bool:
    return exc.errno in (errno.EXDEV, errno.ELOOP)


class BeneathFiles:
    """Single files and directories of the workspace and the read roots, opened by the runtime
    itself: the read tools' file access on @landlock, apart from searches (`LandlockFiles`).

    A single file or directory is opened with openat2(RESOLVE_BENEATH) from a descriptor of its
    root, so the kernel refuses any path, `..` or symlink that leads out (EXDEV), and never
    follows /proc magic links; descriptors are fstat'ed before they are read, so FIFOs and
    devices are refused, never read from.
    """

    def __init__(
        self,
        workspace: Path,
        extra_read_roots: Mapping[str, Path] = MappingProxyType({}),
    ) -> None:
        # The runtime resolved the workspace once (`Runtime.project_dir`); the kernel follows
        # what is there when a call opens it, as resolving it again would (45 µs a call).
        self._workspace = Path(os.path.abspath(workspace))
        self._roots = {name: Path(os.path.abspath(root)) for name, root in extra_read_roots.items()}

    def _locate(self, path: str) -> tuple[Path, str, str]:
        """The root directory of `path`, `path` relative to it, and the prefix to show."""
        head, _, rest = path.partition("/")
        try:
            if head.startswith("@") and head[1:] in self._roots:
                root = _as_checked(head[1:], self._roots[head[1:]])
                return root, normalise_path(rest, allow_root=True), head
            return self._workspace, normalise_path(path, allow_root=True), ""
        except ValueError as exc:
            raise ExecutionFailed(str(exc)) from exc

    @contextlib.contextmanager
    def _open(self, op: str, path: str, *, directory: bool = False) -> Iterator[int]:
        root, rel, _ = self._locate(path)
        try:
            root_fd = open_root(root)
        except OSError as exc:
            raise ExecutionFailed(
                f"{op} {path}: the root {root} cannot be opened ({exc.strerror})"
            ) from exc
        try:
            flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | (os.O_DIRECTORY if directory else 0)
            fd = open_beneath(root_fd, rel, flags, symlinks=True)
        except OSError as exc:
            raise ExecutionFailed(f"{op} {path}: {_describe_os_error(exc)}") from exc
        finally:
            os.close(root_fd)
        try:
            yield fd
        finally:
            os.close(fd)

    def read(
        self, path: str, *, offset: int = 0, limit: int = limits.MAX_READ_BYTES
    ) -> FileContent:
        with self._open("read", path) as fd:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise ExecutionFailed(
                    f"read {path}: it is {_kind_of(info.st_mode)}, not a regular file"
                )
            chunks: list[bytes] = []
            position, wanted = offset, limit
            while wanted > 0:
                chunk = os.pread(fd, min(wanted, 1 << 24), position)
                if not chunk:
                    break
                chunks.append(chunk)
                position += len(chunk)
                wanted -= len(chunk)
        return FileContent(data=b"".join(chunks), size=info.st_size, offset=offset)

    def list(self, path: str) -> builtins.list[Entry]:
        entries: builtins.list[Entry] = []
        with self._open("list", path, directory=True) as fd, os.scandir(fd) as listing:
            for item in listing:
                try:
                    info = item.stat(follow_symlinks=False)
                except OSError:
                    continue  # gone since it was listed
                name = os.fsdecode(item.name)
                if stat.S_ISLNK(info.st_mode):
                    entries.append(
                        Entry(name, "symlink", -1, self._link_target(path, item.name, fd))
                    )
                elif stat.S_ISDIR(info.st_mode):
                    entries.append(Entry(name, "dir", -1))
                elif stat.S_ISREG(info.st_mode):
                    entries.append(Entry(name, "file", info.st_size))
                else:
                    entries.append(Entry(name, "other", -1))
        return sorted(entries, key=lambda e: e.path)

    def _link_target(self, directory: str, name: str, dir_fd: int) -> str | None:
        """A link's text, if it resolves inside the workspace (or to nothing there)."""
        try:
            text = os.readlink(name, dir_fd=dir_fd)
        except OSError:
            return None
        try:
            self.lookup(_join(directory, name))
        except ExecutionFailed:
            return None  # it leads out: its text is not shown either
        return text

    def lookup(self, path: str) -> Entry | None:
        try:
            with self._open("stat", path) as fd:
                info = os.fstat(fd)
        except ExecutionFailed as exc:
            cause = exc.__cause__
            if isinstance(cause, OSError) and cause.errno == errno.ENOENT:
                return None
            raise
        if stat.S_ISDIR(info.st_mode):
            return Entry(path, "dir", -1)
        if stat.S_ISREG(info.st_mode):
            return Entry(path, "file", info.st_size)
        return Entry(path, "other", -1)


def _describe_os_error(exc: OSError) -> str:
    if _outside(exc):
        return "not permitted: it is outside the workspace, or reached through a link leading out"
    if exc.errno == errno.ENOENT:
        return "no such file or directory"
    if exc.errno == errno.ENOTDIR:
        return "not a directory"
    return exc.strerror or str(exc)


def _kind_of(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a special file"
