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
  `changes.json`, see sandboxes/image/agent/sync.py); `pull()` fetches both with `get_archive`
  (or the agent sent them inline) and `environments.docker.copyback` checks the change set as a
  whole against the workspace, then applies it whole or not at all: never a protected path, nor
  the deletion or replacement of a directory that holds one, nor a symlink that resolves out of
  the workspace through the links beside it; never through a symlink; staged, then swapped in
  with an undo log; at most the disk budget in apparent file sizes.

What the engine's archive extraction cannot copy faithfully is not sent in: a file with holes
(a sparse file) would be written out as zeros in the volume, costing its whole apparent size on
the engine's disk, so one whose holes exceed `HOLE_SLACK` stays out of the sandbox and the call
says so (`not_in_sandbox`); names of one file (hard links) go as links, not as copies.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import errno
import io
import json
import os
import stat
import tarfile
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any, Final

from docker.types import Mount

from codecoder.environments.docker.copyback import SyncReport, apply_changes
from codecoder.environments.docker.settings import WORKSPACE_MOUNT
from codecoder.environments.docker.swap import STAGE_PREFIX
from codecoder.foundation.errors import ExecutionFailed
from codecoder.foundation.protected import is_protected_entry, is_protected_path

__all__ = ["OUTBOX", "SyncReport", "WorkspaceVolume"]

OUTBOX: Final = "/opt/codecoder/outbox"
# What the outbox may hold beyond the changed files' bytes: tar headers and the summary.
OUTBOX_SLACK: Final = 64 * 1024 * 1024
SPOOL_BYTES: Final = 32 * 1024 * 1024
# A file whose holes add up to more than this is not copied into the volume (see above).
HOLE_SLACK: Final = 1024 * 1024

# Archives are extracted at the helper's root, into the volume mounted here.
_INSIDE: Final = WORKSPACE_MOUNT.lstrip("/")
# (kind, mode, size, mtime_ns, (device, inode), link target, links, allocated bytes); kind is
# d, f or l.
Entry = tuple[str, int, int, int, tuple[int, int], str | None, int, int]


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
        # Files of the workspace left out of the volume (with holes: see HOLE_SLACK).
        self.not_sent: set[str] = set()
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
                mounts=[Mount(WORKSPACE_MOUNT, self.volume, type="volume", no_copy=True)],
                network_mode="none",
            ),
        )
        self.helper = helper["Id"]

    def mounts(self, writable: bool) -> list[Mount]:
        # no_copy: an empty volume must not be filled with the image's own /workspace (Docker's
        # copy-up), which would take the root's ownership and come back as the call's changes.
        mounts = [
            Mount(WORKSPACE_MOUNT, self.volume, type="volume", read_only=not writable, no_copy=True)
        ]
        if writable:
            mounts.append(Mount(OUTBOX, self.outbox, type="volume", no_copy=True))
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
        changed = sorted(
            path for path, entry in current.items() if _differs(self._manifest.get(path), entry)
        )
        deleted = []
        for path in self._manifest:
            parent = path.rpartition("/")[0]
            # Only the topmost of what went: removing a directory removes what it held.
            if path not in current and (not parent or parent in current):
                deleted.append(path)
        self.not_sent.difference_update([p for p in self.not_sent if p not in current])
        if changed or deleted or self._first:
            self.generation += 1
        if changed or self._first:
            linked = _first_names(current)
            added: set[str] = set()
            with tempfile.SpooledTemporaryFile(SPOOL_BYTES) as archive:
                with tarfile.open(fileobj=archive, mode="w", format=tarfile.PAX_FORMAT) as tar:
                    if self._first:
                        tar.addfile(self._info(".", ("d", 0o755, 0, 0, (0, 0), None, 1, 0)))
                    for path in changed:
                        entry = current[path]
                        first = linked.get(entry[4]) if entry[0] == "f" else None
                        if first is not None and first != path and self._in_volume(first, added):
                            tar.addfile(self._hard_link(path, entry, first))
                            added.add(path)
                        elif self._add(tar, path, entry, current):
                            added.add(path)
                archive.seek(0)
                self.client.api.put_archive(self.helper, "/", archive)
        self._first = False
        self._manifest = current
        return sorted(deleted)

    def _in_volume(self, path: str, added: set[str]) -> bool:
        """Whether `path` holds in the volume what it holds in the workspace (sent now or
        before, not left out)."""
        return path in added or (path in self._manifest and path not in self.not_sent)

    def _info(self, path: str, entry: Entry) -> tarfile.TarInfo:
        kind, mode, size, mtime_ns, _, link, _, _ = entry
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

    def _hard_link(self, path: str, entry: Entry, first: str) -> tarfile.TarInfo:
        info = self._info(path, entry)
        info.type, info.size, info.linkname = tarfile.LNKTYPE, 0, f"{_INSIDE}/{first}"
        return info

    def _add(
        self, tar: tarfile.TarFile, path: str, entry: Entry, current: dict[str, Entry]
    ) -> bool:
        """Add `path` to the archive; False when it was left out (unreadable, or with holes)."""
        info = self._info(path, entry)
        if not info.isfile():
            tar.addfile(info)
            return True
        self.not_sent.discard(path)
        try:
            with open(self.workspace / path, "rb", opener=_no_follow) as source:
                st = os.fstat(source.fileno())
                if not stat.S_ISREG(st.st_mode):
                    raise OSError(errno.EINVAL, "no longer a regular file")
                if _holes(source.fileno(), st) > HOLE_SLACK:
                    # The engine would write the holes out: the volume would pay the file's
                    # whole apparent size. It stays out of the sandbox.
                    self.not_sent.add(path)
                    return False
                info.size = st.st_size
                tar.addfile(info, _Exactly(source, st.st_size))
        except OSError:
            current.pop(path, None)  # unreadable now: tried again next time
            return False
        return True

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
        deleted = [str(path) for path in summary.get("deleted") or []]
        for path in deleted:
            if _in_protected_entry(path):
                # Moved or removed in the sandbox's copy (a rename of `.codecoder/`, or of the
                # directory holding a nested `.git`): sandboxed tools may never move a
                # protected path, and the copy no longer shows what the workspace holds.
                raise ExecutionFailed(_moved_protected(path, set(deleted), tar))
        host_links = {
            path: entry[5] or "" for path, entry in self._manifest.items() if entry[0] == "l"
        }
        report = apply_changes(
            self.workspace, tar, summary, budget, self.owner_on_host(), host_links
        )
        for path in report.deleted:
            for known in [p for p in self._manifest if p == path or p.startswith(path + "/")]:
                del self._manifest[known]
                self.not_sent.discard(known)
        for path in report.written:
            self.not_sent.discard(path)
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


def _moved_protected(path: str, deleted: set[str], tar: tarfile.TarFile) -> str:
    """Why a change set that takes `path`, a protected path, away is refused, naming what the
    call did: the directory it moved, removed or replaced when `path` went with it."""
    parts = path.split("/")
    for holder in ("/".join(parts[:k]) for k in range(1, len(parts))):  # the outermost first
        if holder in deleted:
            did = f"moved or removed {holder}, which holds {path},"
        else:
            try:
                member = tar.getmember(holder)
            except KeyError:
                continue
            if member.isdir():
                continue
            did = f"replaced {holder}, which holds {path}, with a file or a symlink"
        return (
            f"the call {did} in the sandbox's copy of the workspace: sandboxed tools may never "
            "move protected paths, nor take them away with their directory; nothing was "
            "copied back, and the sandbox's copy of the workspace is reset"
        )
    return (
        f"the call moved or removed {path}, a protected path, in the sandbox's copy of the "
        "workspace: sandboxed tools may never move protected paths; nothing was copied back, "
        "and the sandbox's copy of the workspace is reset"
    )


def _in_protected_entry(path: str) -> bool:
    """Whether `path` is, or lies in, what no sandbox may create or move
    (`foundation.protected.is_protected_entry`)."""
    parts = path.split("/")
    return any(is_protected_entry("/".join(parts[: k + 1])) for k in range(len(parts)))


# --- the host side of the workspace ------------------------------------------------------------


def _no_follow(path: str, flags: int) -> int:
    # O_NONBLOCK: a FIFO swapped in for a file must not hang the push.
    return os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK)


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
    return (
        kind,
        stat.S_IMODE(mode),
        info.st_size,
        info.st_mtime_ns,
        (info.st_dev, info.st_ino),
        link,
        info.st_nlink,
        info.st_blocks * 512,
    )


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
            if not relative and name.startswith(STAGE_PREFIX):
                continue  # the copy-back's own staging directory
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
    return old[:7] != new[:7]  # what it occupies may change later (delayed allocation)


def _first_names(current: dict[str, Entry]) -> dict[tuple[int, int], str]:
    """For each file with several names (hard links), the first of its names that is not
    protected: the others go into the volume as links to it, not as copies."""
    first: dict[tuple[int, int], str] = {}
    for path in sorted(current):
        entry = current[path]
        if entry[0] == "f" and entry[6] > 1 and not is_protected_path(path):
            first.setdefault(entry[4], path)
    return first


# At most this many data extents are walked to count a file's holes.
_MAX_EXTENTS: Final = 100_000


def _holes(fd: int, st: os.stat_result) -> int:
    """How many bytes of the file are holes (SEEK_DATA/SEEK_HOLE; an estimate from its blocks
    where those are not offered). Only a file that occupies less than its size is looked at."""
    size = st.st_size
    if st.st_blocks * 512 + HOLE_SLACK >= size:
        return 0
    data = offset = 0
    try:
        for _ in range(_MAX_EXTENTS):
            if offset >= size:
                break
            try:
                start = os.lseek(fd, offset, os.SEEK_DATA)
            except OSError as exc:
                if exc.errno == errno.ENXIO:
                    break  # nothing but a hole to the end
                raise
            if start >= size:
                break
            end = min(os.lseek(fd, start, os.SEEK_HOLE), size)
            data += end - start
            offset = end
        else:
            return size - st.st_blocks * 512
    except OSError:
        return size - st.st_blocks * 512
    finally:
        os.lseek(fd, 0, os.SEEK_SET)
    return size - data


class _Exactly(io.RawIOBase):
    """`size` bytes of a file being read, padded with zeros if it shrank meanwhile: the archive
    must hold what its header says (a changed file is sent again next time anyway)."""

    def __init__(self, source: Any, size: int) -> None:
        self._source = source
        self._left = size

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        wanted = self._left if size < 0 else min(size, self._left)
        chunks = []
        got = 0
        while got < wanted:
            chunk = self._source.read(wanted - got)
            if not chunk:
                chunks.append(bytes(wanted - got))
                got = wanted
                break
            chunks.append(chunk)
            got += len(chunk)
        self._left -= got
        return b"".join(chunks)


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
