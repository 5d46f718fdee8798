"""The workspace as a per-session volume (sync mode), for an engine that cannot see this machine.

A remote engine (`DOCKER_HOST=ssh://…` or `tcp://…`) has no access to the workspace, so a bind
mount would show the sandbox nothing (or, worse, the remote machine's own directory of that
name: a bind mount is refused there). In sync mode the workspace lives in a volume of its own
(`codecoder-<session>-workspace`), at /workspace in both containers (read-only in the read-only
one), and the host keeps the two in step:

* **In**, before every call: the workspace is listed (lstat, no symlink followed) and what
  changed since the last sync goes to the volume in one archive, through `put_archive` into a
  helper container that holds the volume and never runs. Entries belong to the command user,
  except protected paths, which belong to root without write permission (the bind mount shows
  them read-only). What was deleted is returned, for the writable container's agent to remove
  (`put_archive` cannot delete).
* **Back**, after a writable call: the agent has written what the call changed into the outbox
  (another volume, only in the writable container, only root's: `changes.tar` and
  `changes.json`, see sandboxes/image/agent/sync.py); `pull()` fetches both with `get_archive` and
  applies them:
  - never a protected path (`runtime.kernel.protected.is_protected_path`: at every depth, in every
    spelling), nor a symlink whose target leaves the workspace (absolute, or climbing above
    it with `..`); these stay in the volume, and the result says so (`kept_in_sandbox`);
  - never through a symlink: each directory is opened one component at a time with O_NOFOLLOW
    from the workspace's own descriptor, and files are written under a temporary name in their
    directory and renamed over the old entry;
  - only regular files, directories and symlinks, without setuid, setgid or sticky bits;
  - at most the disk budget in file bytes: a larger archive is refused as a whole before
    anything is written (the agent stops adding files at the budget too).

Every check that can refuse the archive (names, kinds, the budget) runs before the first write,
so a refused archive changes nothing on the host. What is then applied is applied entry by
entry: only a host error midway (its disk full) leaves part of it written.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import errno
import io
import json
import os
import secrets
import shutil
import stat
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Any, Final

from docker.types import Mount

from codecoder.environments.docker.settings import WORKSPACE_MOUNT
from codecoder.runtime.kernel.errors import ExecutionFailed
from codecoder.runtime.kernel.protected import is_protected_entry, is_protected_path

__all__ = ["OUTBOX", "SyncReport", "WorkspaceVolume"]

OUTBOX: Final = "/opt/codecoder/outbox"
# What the outbox may hold beyond the changed files' bytes: tar headers and the summary.
OUTBOX_SLACK: Final = 64 * 1024 * 1024
SPOOL_BYTES: Final = 32 * 1024 * 1024
COPY_CHUNK: Final = 1024 * 1024

# Archives are extracted at the helper's root, into the volume mounted here.
_INSIDE: Final = WORKSPACE_MOUNT.lstrip("/")
# (kind, mode, size, mtime_ns, inode, link target); kind is d, f or l.
Entry = tuple[str, int, int, int, int, str | None]


@dataclass(slots=True)
class SyncReport:
    """What came back from the sandbox after a writable call."""

    written: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)  # protected paths left in the volume
    unreadable: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "written": len(self.written),
            "deleted": len(self.deleted),
            "kept_in_sandbox": self.kept,
            "unreadable": self.unreadable,
        }


class WorkspaceVolume:
    """One session's workspace volume, its outbox and the helper that writes into it."""

    def __init__(
        self,
        client: Any,
        workspace: Path,
        name: str,
        image: str,
        labels: dict[str, str],
        owner: tuple[int, int],
    ) -> None:
        self.client = client
        self.workspace = workspace
        self.volume = f"{name}-workspace"
        self.outbox = f"{name}-outbox"
        self.owner = owner  # the command user's uid and gid: who owns the volume's files
        self._manifest: dict[str, Entry] = {}
        self._first = True
        # Counts what went into the volume other than through the writable container's own
        # calls (a push, a deletion): a container that listed it at this generation may trust
        # that listing (`DockerEnvironment._message`, "unchanged").
        self.generation = 0
        client.api.create_volume(self.volume, labels=labels)
        client.api.create_volume(self.outbox, labels=labels)
        helper = client.api.create_container(
            image,
            name=f"{name}-sync",
            labels=labels,
            entrypoint=["/nonexistent"],  # never started: put_archive writes through its mount
            network_disabled=True,
            # A writable root: the archive is extracted at /, so that its `workspace/` entry
            # gives the volume's root its owner (an entry for the destination itself is not).
            host_config=client.api.create_host_config(
                mounts=[Mount(WORKSPACE_MOUNT, self.volume, type="volume")],
                network_mode="none",
            ),
        )
        self.helper = helper["Id"]

    def mounts(self, writable: bool) -> list[Mount]:
        mounts = [Mount(WORKSPACE_MOUNT, self.volume, type="volume", read_only=not writable)]
        if writable:
            mounts.append(Mount(OUTBOX, self.outbox, type="volume"))
        return mounts

    def remove(self) -> None:
        """Remove the helper and both volumes (containers using them must be gone)."""
        with contextlib.suppress(Exception):
            self.client.api.remove_container(self.helper, force=True)
        for volume in (self.volume, self.outbox):
            with contextlib.suppress(Exception):
                self.client.api.remove_volume(volume, force=True)

    # -- in -----------------------------------------------------------------------------------

    def push(self) -> list[str]:
        """Send what changed in the workspace since the last push; the paths deleted since."""
        current = _listing(self.workspace)
        changed = [
            path for path, entry in current.items() if _differs(self._manifest.get(path), entry)
        ]
        deleted = []
        for path in self._manifest:
            parent = path.rpartition("/")[0]
            # Only the topmost of what went: removing a directory removes what it held.
            if path not in current and (not parent or parent in current):
                deleted.append(path)
        if changed or deleted or self._first:
            self.generation += 1
        if changed or self._first:
            with tempfile.SpooledTemporaryFile(SPOOL_BYTES) as archive:
                with tarfile.open(fileobj=archive, mode="w", format=tarfile.PAX_FORMAT) as tar:
                    if self._first:
                        tar.addfile(self._info(".", ("d", 0o755, 0, 0, 0, None)))
                    for path in sorted(changed):
                        self._add(tar, path, current[path])
                archive.seek(0)
                self.client.api.put_archive(self.helper, "/", archive)
        self._first = False
        self._manifest = current
        return sorted(deleted)

    def _info(self, path: str, entry: Entry) -> tarfile.TarInfo:
        kind, mode, size, mtime_ns, _, link = entry
        info = tarfile.TarInfo(_INSIDE if path == "." else f"{_INSIDE}/{path}")
        info.mtime = mtime_ns // 1_000_000_000
        info.uid, info.gid = self.owner
        info.mode = mode & 0o777
        if path != "." and is_protected_path(path):
            info.uid = info.gid = 0
            info.mode &= ~0o222  # as the bind mount shows them: read-only
        if kind == "d":
            info.type = tarfile.DIRTYPE
        elif kind == "l":
            info.type, info.linkname = tarfile.SYMTYPE, link or ""
        else:
            info.size = size
        return info

    def _add(self, tar: tarfile.TarFile, path: str, entry: Entry) -> None:
        info = self._info(path, entry)
        if not info.isfile():
            tar.addfile(info)
            return
        try:
            with open(self.workspace / path, "rb", opener=_no_follow) as source:
                info.size = os.fstat(source.fileno()).st_size
                tar.addfile(info, source)
        except OSError:
            self._manifest.pop(path, None)  # unreadable now: tried again next time

    # -- back ---------------------------------------------------------------------------------

    def apply_inline(self, inline: object, budget: int) -> SyncReport:
        """Apply the changes the agent sent in its answer (small ones: see the agent's INLINE_TAR),
        checked exactly as those fetched from the outbox are."""
        if not isinstance(inline, dict):
            raise ExecutionFailed("the sandbox's inline changes are not an object")
        try:
            data = base64.b64decode(inline["tar"], validate=True)
            text = inline["summary"]
        except (KeyError, TypeError, ValueError, binascii.Error) as exc:
            raise ExecutionFailed(f"the sandbox's inline changes are malformed: {exc!r}") from None
        if not isinstance(text, str) or len(data) > budget + OUTBOX_SLACK:
            raise ExecutionFailed("the sandbox's inline changes are malformed or too large")
        summary = _json_summary(text.encode())
        try:
            with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
                return self._apply(tar, summary, budget)
        except tarfile.TarError as exc:
            raise ExecutionFailed(f"the sandbox's changes are not a tar archive: {exc}") from None

    def pull(self, container: str, budget: int) -> SyncReport:
        """Fetch what the writable call changed from `container`'s outbox and apply it."""
        with tempfile.TemporaryFile() as outer:
            try:
                stream, _ = self.client.api.get_archive(container, OUTBOX + "/")
                received = 0
                for chunk in stream:
                    received += len(chunk)
                    if received > budget + OUTBOX_SLACK:
                        raise ExecutionFailed(
                            "the sandbox's changes are larger than its disk budget allows; "
                            "nothing was copied back"
                        )
                    outer.write(chunk)
            except ExecutionFailed:
                raise
            except Exception as exc:
                raise ExecutionFailed(f"the sandbox's changes could not be fetched: {exc}") from exc
            outer.seek(0)
            try:
                with tarfile.open(fileobj=outer, mode="r:") as bundle:
                    found = {
                        PurePosixPath(m.name).name: m for m in bundle.getmembers() if m.isfile()
                    }
                    summary = _json_member(bundle, found.get("changes.json"))
                    changes = found.get("changes.tar")
                    if changes is None:
                        raise ExecutionFailed("the sandbox wrote no changes.tar to its outbox")
                    data = bundle.extractfile(changes)
                    assert data is not None
                    with tarfile.open(fileobj=data, mode="r:") as tar:
                        return self._apply(tar, summary, budget)
            except tarfile.TarError as exc:
                raise ExecutionFailed(
                    f"the sandbox's changes are not a tar archive: {exc}"
                ) from None

    def _apply(self, tar: tarfile.TarFile, summary: dict[str, Any], budget: int) -> SyncReport:
        members = tar.getmembers()
        total = 0
        for member in members:
            _check_name(member.name)
            if not (member.isfile() or member.isdir() or member.issym()):
                raise ExecutionFailed(
                    f"the sandbox's changes hold {member.name!r} of a kind never copied back"
                )
            total += member.size if member.isfile() else 0
        if total > budget:
            raise ExecutionFailed(
                f"the call wrote {total:,} bytes of files, more than its disk budget of "
                f"{budget:,}; nothing was copied back"
            )
        deleted = [str(path) for path in summary.get("deleted") or []]
        for path in deleted:
            _check_name(path)
            if _in_protected_entry(path):
                # Moved or removed in the sandbox's copy (a rename of `.codecoder/`): sandboxed
                # tools may never move a protected path, and the copy no longer shows what
                # the workspace holds.
                raise ExecutionFailed(
                    f"the call moved or removed {path}, a protected path, in the sandbox's copy "
                    "of the workspace; sandboxed tools may never move protected paths. Nothing "
                    "was copied back"
                )
        report = SyncReport(unreadable=list(summary.get("unreadable") or []))
        with _Tree(self.workspace, self.owner_on_host()) as tree:
            for path in deleted:
                if is_protected_path(path):
                    report.kept.append(path)
                elif tree.delete(path):
                    report.deleted.append(path)
            for member in members:
                path = PurePosixPath(member.name).as_posix()
                if is_protected_path(path) or (
                    member.issym() and _points_out(path, member.linkname)
                ):
                    report.kept.append(path)
                    continue
                if member.isdir():
                    tree.directory(path, member.mode)
                elif member.issym():
                    tree.symlink(path, member.linkname)
                else:
                    source = tar.extractfile(member)
                    assert source is not None
                    tree.file(path, member.mode, source)
                report.written.append(path)
        for path in report.deleted:
            for known in [p for p in self._manifest if p == path or p.startswith(path + "/")]:
                del self._manifest[known]
        for path in report.written:
            entry = _entry_of(self.workspace / path)
            if entry is not None:
                self._manifest[path] = entry
        return report

    def owner_on_host(self) -> tuple[int, int] | None:
        """Who files brought back should belong to: the workspace's owner, when this process
        may give them away (it is root); else None, and they are this process's."""
        if os.geteuid() != 0:
            return None
        info = self.workspace.stat()
        return info.st_uid, info.st_gid


def _in_protected_entry(path: str) -> bool:
    """Whether `path` is, or lies in, what no sandbox may create or move
    (`runtime.kernel.protected.is_protected_entry`)."""
    parts = path.split("/")
    return any(is_protected_entry("/".join(parts[: k + 1])) for k in range(len(parts)))


# --- the host side of the workspace ------------------------------------------------------------


def _no_follow(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_NOFOLLOW)


def _entry_of(path: Path) -> Entry | None:
    try:
        info = os.lstat(path)
    except OSError:
        return None
    mode = info.st_mode
    if stat.S_ISDIR(mode):
        kind = "d"
    elif stat.S_ISREG(mode):
        kind = "f"
    elif stat.S_ISLNK(mode):
        kind = "l"
    else:
        return None  # FIFOs, sockets, devices are not sent
    link = os.readlink(path) if kind == "l" else None
    return kind, stat.S_IMODE(mode), info.st_size, info.st_mtime_ns, info.st_ino, link


def _listing(root: Path) -> dict[str, Entry]:
    found: dict[str, Entry] = {}
    pending = [""]
    while pending:
        relative = pending.pop()
        try:
            with os.scandir(root / relative if relative else root) as entries:
                names = [entry.name for entry in entries]
        except OSError:
            continue  # unreadable here: its contents are not sent
        for name in names:
            path = f"{relative}/{name}" if relative else name
            entry = _entry_of(root / path)
            if entry is None:
                continue
            found[path] = entry
            if entry[0] == "d":
                pending.append(path)
    return found


def _differs(old: Entry | None, new: Entry) -> bool:
    if old is None or old[0] != new[0]:
        return True
    if new[0] == "d":
        return old[1] != new[1]
    return old != new


def _check_name(name: str) -> None:
    pure = PurePosixPath(name)
    if not name or pure.is_absolute() or ".." in pure.parts or pure.as_posix() in ("", "."):
        raise ExecutionFailed(f"the sandbox's changes name {name!r}, which is not beneath it")


def _points_out(path: str, target: str) -> bool:
    """Whether the symlink at `path` (relative to the workspace) names something outside it:
    an absolute target, or one that climbs above the workspace. Judged on the names alone, as
    whoever follows it on the host would (the workspace's own symlinks are the host's)."""
    pure = PurePosixPath(target)
    if not target or pure.is_absolute():
        return True
    depth = len(PurePosixPath(path).parts) - 1  # the link's directory, below the workspace
    for part in pure.parts:
        if part == "..":
            depth -= 1
            if depth < 0:
                return True
        elif part != ".":
            depth += 1
    return False


def _json_member(tar: tarfile.TarFile, member: tarfile.TarInfo | None) -> dict[str, Any]:
    if member is None:
        raise ExecutionFailed("the sandbox wrote no changes.json to its outbox")
    data = tar.extractfile(member)
    assert data is not None
    return _json_summary(data.read(OUTBOX_SLACK))


def _json_summary(data: bytes) -> dict[str, Any]:
    try:
        summary = json.loads(data)
    except ValueError as exc:
        raise ExecutionFailed(f"the sandbox's changes.json is not JSON: {exc}") from None
    if not isinstance(summary, dict):
        raise ExecutionFailed("the sandbox's changes.json is not a JSON object")
    return summary


class _Tree:
    """Writes beneath the workspace through directory descriptors, never following a symlink."""

    def __init__(self, root: Path, owner: tuple[int, int] | None) -> None:
        self._root = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self._owner = owner
        self._open: dict[str, int] = {"": self._root}

    def __enter__(self) -> _Tree:
        return self

    def __exit__(self, *exc: object) -> None:
        for fd in self._open.values():
            os.close(fd)

    def _parent(self, path: str, create: bool) -> tuple[int, str] | None:
        """The descriptor of `path`'s directory (made when `create`) and its last name."""
        parent, _, name = path.rpartition("/")
        if parent in self._open:
            return self._open[parent], name
        fd = self._root
        walked = ""
        for part in parent.split("/"):
            walked = f"{walked}/{part}" if walked else part
            known = self._open.get(walked)
            if known is not None:
                fd = known
                continue
            try:
                child = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    return None
                os.mkdir(part, 0o755, dir_fd=fd)
                child = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                self._chown(child)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    # A symlink (or a file) where a directory of the path should be: replaced.
                    if not create:
                        return None
                    self._remove(fd, part)
                    os.mkdir(part, 0o755, dir_fd=fd)
                    child = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                    self._chown(child)
                else:
                    raise
            self._open[walked] = child
            fd = child
        return fd, name

    def _chown(self, fd: int) -> None:
        if self._owner is not None:
            os.fchown(fd, *self._owner)

    def _remove(self, directory: int, name: str) -> None:
        try:
            info = os.lstat(name, dir_fd=directory)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(info.st_mode):
            shutil.rmtree(name, dir_fd=directory)
        else:
            os.unlink(name, dir_fd=directory)

    def _forget(self, path: str) -> None:
        for known in [p for p in self._open if p == path or p.startswith(path + "/")]:
            os.close(self._open.pop(known))

    def delete(self, path: str) -> bool:
        found = self._parent(path, create=False)
        if found is None:
            return False
        directory, name = found
        try:
            os.lstat(name, dir_fd=directory)
        except FileNotFoundError:
            return False
        self._forget(path)
        self._remove(directory, name)
        return True

    def directory(self, path: str, mode: int) -> None:
        found = self._parent(path, create=True)
        assert found is not None
        directory, name = found
        try:
            fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=directory)
        except OSError:
            self._forget(path)
            self._remove(directory, name)
            os.mkdir(name, 0o700, dir_fd=directory)
            fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=directory)
        try:
            os.fchmod(fd, mode & 0o777)
            self._chown(fd)
        finally:
            os.close(fd)

    def _replace(self, directory: int, temporary: str, name: str, path: str) -> None:
        try:
            os.replace(temporary, name, src_dir_fd=directory, dst_dir_fd=directory)
        except IsADirectoryError:
            self._forget(path)
            shutil.rmtree(name, dir_fd=directory)
            os.replace(temporary, name, src_dir_fd=directory, dst_dir_fd=directory)

    def file(self, path: str, mode: int, source: IO[bytes]) -> None:
        found = self._parent(path, create=True)
        assert found is not None
        directory, name = found
        temporary = f".codecoder-sync-{secrets.token_hex(6)}"
        fd = os.open(
            temporary,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
            dir_fd=directory,
        )
        try:
            with io.FileIO(fd, "wb", closefd=False) as sink:
                while chunk := source.read(COPY_CHUNK):
                    sink.write(chunk)
            os.fchmod(fd, mode & 0o777)
            self._chown(fd)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(temporary, dir_fd=directory)
            raise
        os.close(fd)
        self._replace(directory, temporary, name, path)

    def symlink(self, path: str, target: str) -> None:
        found = self._parent(path, create=True)
        assert found is not None
        directory, name = found
        temporary = f".codecoder-sync-{secrets.token_hex(6)}"
        os.symlink(target, temporary, dir_fd=directory)
        if self._owner is not None:
            os.chown(temporary, *self._owner, dir_fd=directory, follow_symlinks=False)
        self._replace(directory, temporary, name, path)
