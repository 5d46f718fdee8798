"""What a writable call wrote that the filesystem's used space does not show.

Disk budgets measure what a call wrote: never how much its file system grew, which others share
(another process writing 2 GB is not the call's doing). A copy of what it wrote costs more than
the space it takes wherever apparent and allocated sizes differ: a sparse file
(`truncate -s 1T`, a write past the end) allocates nothing for its holes, a second name of a
file (a hard link) allocates nothing, a filesystem that compresses or shares extents
allocates less than the bytes a reader gets. The sync of a workspace into a volume, a backup or
a None-level reader pays the apparent size. So a budget counts, on top of the space what the
call changed takes (`Hidden.occupied`), the bytes `hidden_bytes` finds in it:

* for each file changed since the call started (its ctime, which only the clock sets), its
  apparent size less what it occupies;
* for a changed file with several names (hard links), its whole size (what a copy of each name
  costs).

A file the call did not touch is not counted, whatever it holds: a budget is about the call.
Ctimes are stamped from a clock that moves in ticks of a few milliseconds, so a file changed in
the same tick just before the call began counts too (the strict side).
"""

from __future__ import annotations

import os
import stat
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from codecoder.foundation.openbeneath import open_beneath

__all__ = ["Hidden", "call_start", "hidden_bytes", "hidden_in"]


# Linux's coarse realtime clock, which ctimes are stamped from (Python names it from 3.13).
_CLOCK_REALTIME_COARSE: Final = 5
# Elsewhere, how far before now a file changed a moment later may be stamped.
_SLACK_NS: Final = 10_000_000


def call_start() -> int:
    """Now, by the clock the kernel stamps ctimes with (Linux: the coarse realtime clock): a
    file changed from now on has a ctime at least this."""
    if sys.platform == "linux":
        return time.clock_gettime_ns(_CLOCK_REALTIME_COARSE)
    return time.time_ns() - _SLACK_NS


@dataclass(slots=True)
class Hidden:
    """Bytes a copy of what changed would cost beyond the space it occupies, and the files
    that hold most of them (largest first, for a message)."""

    bytes: int = 0
    files: list[tuple[str, int]] = field(default_factory=list)
    occupied: int = 0  # the space the changed files take (what their writes allocated)

    def count(self, path: str, info: os.stat_result) -> None:
        """Count one changed regular file: what its holes (or compression, or shared extents)
        hide, and for a file with several names, all of it (a copy of each name costs that)."""
        several = info.st_nlink > 1
        self.occupied += 0 if several else info.st_blocks * 512
        extra = info.st_size if several else max(0, info.st_size - info.st_blocks * 512)
        if extra > 0:
            self.bytes += extra
            self.files.append((path, extra))

    def describe(self, most: int = 3) -> str:
        shown = sorted(self.files, key=lambda item: -item[1])[:most]
        return ", ".join(f"{path} ({size:,} bytes)" for path, size in shown)


def hidden_bytes(roots: Iterable[Path], since_ns: int) -> Hidden:
    """What the regular files beneath `roots` changed since `since_ns` (from `call_start`) hide
    from used space (see the module docstring): a walk of every entry. Symlinks are never
    followed; what cannot be read is skipped."""
    found = Hidden()
    for root in roots:
        pending = [root]
        while pending:
            directory = pending.pop()
            try:
                with os.scandir(directory) as entries:
                    items = list(entries)
            except OSError:
                continue
            for entry in items:
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISDIR(info.st_mode):
                    pending.append(Path(entry.path))
                elif stat.S_ISREG(info.st_mode) and info.st_ctime_ns >= since_ns:
                    found.count(os.path.relpath(entry.path, root), info)
    return found


def hidden_in(root: Path, paths: Iterable[str]) -> Hidden:
    """What the regular files at `paths` (relative to `root`, known to have changed) hide from
    used space; each looked up beneath `root` without following a symlink."""
    found = Hidden()
    root_fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for path in sorted(paths):
            try:
                fd = open_beneath(root_fd, path, os.O_PATH | os.O_NOFOLLOW)
            except OSError:
                continue
            try:
                info = os.fstat(fd)
            finally:
                os.close(fd)
            if stat.S_ISREG(info.st_mode):
                found.count(path, info)
    finally:
        os.close(root_fd)
    return found
