"""The workspace volume in sync mode: listing it, writing what a call changed, removing paths.

In a container whose workspace is a volume the host keeps in step (a remote engine), a writable
call's changes go back to the host through the outbox (a second volume, root's only): before the
call the workspace is listed, after it (once every process of the call is gone) it is listed
again, and what changed is written there as a tar (`changes.tar`) with a summary
(`changes.json`: deleted paths, unreadable ones, whether the disk budget was exceeded), for the
host to fetch (or, when both are small, sent inline in the answer, without touching the outbox).

The agent holds no capability to read what the command uid keeps private, so it lists the
workspace and reads the changed files itself only where the permissions let others do so (no
command runs then, and nothing is followed, and nothing but a regular file opened); when one
directory or file does not, the listing, or the writing of the changes, is done in a child that
is the command uid. So a call that changed nothing, or only what others may read, costs no
child at all.

`write_changes` and `delete_paths` run as the command user (command_user.as_user); the agent
itself opens the outbox's files and decides what goes back inline (calls.Agent.collect_changes).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import stat
import tarfile
from typing import Any

from channel import Message
from image import WORKSPACE

# A writable call's changes go back inline in its answer when they are this small; larger ones
# are fetched from the outbox (the host's line cap leaves 1 MiB for the rest).
INLINE_TAR = 256 * 1024
INLINE_SUMMARY = 64 * 1024


class Unlistable(Exception):
    """A directory this process may not list (the agent then lists as the command user)."""


def listing(root: str, strict: bool = False) -> dict[str, list[Any]]:
    """Every entry beneath `root`: relative path -> [kind, mode, size, mtime_ns, ctime_ns,
    inode, link target]. kind: d(irectory), f(ile), l(ink), o(ther); a directory that cannot
    be listed is kind u (with `strict`, it raises Unlistable instead). No symlink is followed.
    A ctime cannot be set back by anyone but the clock, so an entry whose listing is unchanged
    was not written."""
    found: dict[str, list[Any]] = {}
    pending = [""]
    while pending:
        relative = pending.pop()
        try:
            with os.scandir(f"{root}/{relative}" if relative else root) as entries:
                items = list(entries)
        except OSError as exc:
            if strict:
                raise Unlistable(relative) from exc
            if relative:
                found[relative][0] = "u"
            continue
        for entry in items:
            path = f"{relative}/{entry.name}" if relative else entry.name
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            mode = st.st_mode
            kind = (
                "d"
                if stat.S_ISDIR(mode)
                else "f"
                if stat.S_ISREG(mode)
                else "l"
                if stat.S_ISLNK(mode)
                else "o"
            )
            link = os.readlink(entry.path) if kind == "l" else None
            found[path] = [
                kind,
                stat.S_IMODE(mode),
                st.st_size,
                st.st_mtime_ns,
                st.st_ctime_ns,
                st.st_ino,
                link,
            ]
            if kind == "d":
                pending.append(path)
    return found


def _changed(old: list[Any] | None, new: list[Any]) -> bool:
    if old is None or old[0] != new[0]:
        return True
    if new[0] == "d":
        return bool(old[1] != new[1])  # what changes inside a directory is listed on its own
    return old != new


def differences(
    before: dict[str, list[Any]], after: dict[str, list[Any]]
) -> tuple[list[str], list[str], list[str]]:
    """What changed from `before` to `after`: the paths changed, deleted, and the directories
    that can no longer be listed (what lies in them is unknown, not deleted)."""
    changed = sorted(p for p, entry in after.items() if _changed(before.get(p), entry))
    hidden = tuple(f"{p}/" for p, entry in after.items() if entry[0] == "u")
    deleted = sorted(p for p in before if p not in after and not p.startswith(hidden))
    return changed, deleted, [p.rstrip("/") for p in hidden]


class NotReadable(Exception):
    """A changed file this process may not read (the agent then writes the changes as the
    command user)."""


class _Spill:
    """A file-like sink that keeps what is written in memory up to `limit` bytes, and past it
    writes everything to `fd` (the outbox's changes.tar)."""

    def __init__(self, fd: int, limit: int) -> None:
        self.fd, self.limit = fd, limit
        self.memory = bytearray()
        self.spilled = False

    def write(self, data: bytes) -> int:
        if not self.spilled and len(self.memory) + len(data) <= self.limit:
            self.memory += data
            return len(data)
        if not self.spilled:
            self.spill()
        _write_all(self.fd, data)
        return len(data)

    def spill(self) -> None:
        _write_all(self.fd, bytes(self.memory))
        self.memory = bytearray()
        self.spilled = True


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def write_changes(
    before: dict[str, list[Any]],
    after: dict[str, list[Any]],
    tar_fd: int,
    summary_fd: int,
    budget: int | None,
    strict: bool = False,
) -> Message:
    """What changed in the workspace from `before` to `after`, as a tar (regular files,
    directories, symlinks) and a summary; stops adding files once they exceed `budget` bytes.
    Returns the counts, and the tar and summary themselves (`inline`) when both are small;
    otherwise they are written to `tar_fd` and `summary_fd`. With `strict`, a file that may not
    be read raises NotReadable (the agent tries as itself first) instead of being listed as
    unreadable. No file is opened but a regular one, never through a symlink."""
    changed, deleted, unreadable = differences(before, after)
    skipped: list[str] = []
    total = files = entries = 0
    over = False
    sink = _Spill(tar_fd, INLINE_TAR)
    device = os.stat(WORKSPACE).st_dev
    with tarfile.open(fileobj=sink, mode="w|", format=tarfile.PAX_FORMAT) as tar:  # type: ignore[call-overload]
        for path in changed:
            kind, mode, size, mtime_ns = after[path][:4]
            info = tarfile.TarInfo(path)
            info.mode, info.mtime = mode, mtime_ns // 1_000_000_000
            if kind in ("d", "u"):
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
                entries += 1
            elif kind == "l":
                info.type, info.linkname = tarfile.SYMTYPE, after[path][6]
                tar.addfile(info)
                entries += 1
            elif kind == "f":
                if budget is not None and total + size > budget:
                    over = True
                    break
                flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
                try:
                    fd = os.open(f"{WORKSPACE}/{path}", flags)
                except PermissionError:
                    if strict:
                        raise NotReadable(path) from None
                    unreadable.append(path)
                    continue
                except OSError:
                    unreadable.append(path)
                    continue
                with os.fdopen(fd, "rb") as source:
                    st = os.fstat(fd)
                    if (st.st_dev, st.st_ino) != (device, after[path][5]):
                        unreadable.append(path)  # not the entry listed: read nothing else
                        continue
                    if not stat.S_ISREG(st.st_mode):
                        skipped.append(path)
                        continue
                    info.size = st.st_size
                    tar.addfile(info, source)
                total += info.size
                files += 1
                entries += 1
            else:
                skipped.append(path)  # FIFOs, sockets, devices never leave the sandbox
    summary = {"deleted": deleted, "unreadable": unreadable, "skipped": skipped, "over": over}
    data = json.dumps(summary).encode()
    counts: Message = {
        "entries": entries,
        "files": files,
        "bytes": total,
        "deleted": len(deleted),
        "over_budget": over,
    }
    if not sink.spilled and len(data) <= INLINE_SUMMARY:
        # Small change sets (most calls) ride on the answer: fetching the outbox through the
        # engine's archive API costs tens of milliseconds. The host checks them the same way.
        counts["inline"] = {
            "tar": base64.b64encode(bytes(sink.memory)).decode(),
            "summary": data.decode(),
        }
        return counts
    if not sink.spilled:
        sink.spill()
    _write_all(summary_fd, data)
    return counts


def delete_paths(paths: list[str]) -> int:
    """Remove these workspace paths (what the host deleted since its last sync)."""
    removed = 0
    for relative in paths:
        parts = relative.split("/")
        if not relative or relative.startswith("/") or ".." in parts or "" in parts:
            continue
        path = f"{WORKSPACE}/{relative}"
        try:
            if stat.S_ISDIR(os.lstat(path).st_mode):
                shutil.rmtree(path)
            else:
                os.unlink(path)
            removed += 1
        except FileNotFoundError:
            pass
    return removed
