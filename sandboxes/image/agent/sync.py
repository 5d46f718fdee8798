"""The workspace volume in sync mode: listing it, writing what a call changed, removing paths.

In a container whose workspace is a volume the host keeps in step (a remote engine), a writable
call's changes go back to the host through the outbox (a second volume, root's only): before the
call the workspace is listed, after it (once every process of the call is gone) it is listed
again, and what changed is written there as a tar (`changes.tar`) with a summary
(`changes.json`: deleted paths, unreadable ones, whether the disk budget was exceeded), for the
host to fetch (or, when both are small, sent inline in the answer). Listing and reading happen
in a child that is the command uid, since the agent holds no capability to read what that uid
keeps private.

These functions run as the command user (command_user.as_user); the agent itself opens the
outbox's files and decides what goes back inline (calls.Agent.collect_changes).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tarfile
from typing import Any

from channel import Message
from image import WORKSPACE


def listing(root: str) -> dict[str, list[Any]]:
    """Every entry beneath `root`: relative path -> [kind, mode, size, mtime_ns, ctime_ns,
    inode, link target]. kind: d(irectory), f(ile), l(ink), o(ther); a directory that cannot
    be listed is kind u. No symlink is followed. A ctime cannot be set back by anyone but the
    clock, so an entry whose listing is unchanged was not written."""
    found: dict[str, list[Any]] = {}
    pending = [""]
    while pending:
        relative = pending.pop()
        try:
            with os.scandir(f"{root}/{relative}" if relative else root) as entries:
                items = list(entries)
        except OSError:
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


def write_changes(
    before: dict[str, list[Any]], tar_fd: int, summary_fd: int, budget: int | None
) -> Message:
    """What changed in the workspace since `before`, as a tar (regular files, directories,
    symlinks) and a summary; stops adding files once they exceed `budget` bytes. Returns the
    counts and the listing it compared with (the next call's `before`, while nothing else
    changes the volume)."""
    after = listing(WORKSPACE)
    changed = sorted(p for p, entry in after.items() if _changed(before.get(p), entry))
    # What lies in a directory that can no longer be listed is unknown, not deleted.
    hidden = tuple(f"{p}/" for p, entry in after.items() if entry[0] == "u")
    deleted = sorted(p for p in before if p not in after and not p.startswith(hidden))
    unreadable, skipped = [p.rstrip("/") for p in hidden], []
    total = files = entries = 0
    over = False
    with (
        os.fdopen(tar_fd, "wb", closefd=False) as out,
        tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar,
    ):
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
                try:
                    with open(f"{WORKSPACE}/{path}", "rb") as source:
                        info.size = os.fstat(source.fileno()).st_size
                        tar.addfile(info, source)
                except OSError:
                    unreadable.append(path)
                    continue
                total += info.size
                files += 1
                entries += 1
            else:
                skipped.append(path)  # FIFOs, sockets, devices never leave the sandbox
    summary = {"deleted": deleted, "unreadable": unreadable, "skipped": skipped, "over": over}
    data = json.dumps(summary).encode()
    while data:
        data = data[os.write(summary_fd, data) :]
    return {
        "summary": {
            "entries": entries,
            "files": files,
            "bytes": total,
            "deleted": len(deleted),
            "over_budget": over,
        },
        "after": after,
    }


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
