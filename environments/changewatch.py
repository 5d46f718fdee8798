"""Which files of a directory tree changed, told by the kernel (inotify) instead of a walk.

A writable @docker call in bind mode writes the host's workspace directly; its disk budget must
count the apparent size of what it wrote (`environments.apparent`), which takes knowing what it
changed. Walking a large workspace after every call costs a fraction of a second; a watch on
every directory of it, set up once when the writable container starts (beside the protected-path
scan, which walks the tree then anyway), costs nothing per call: the kernel queues an event for
each file created, written, truncated, linked or renamed in, and `changed()` reads them.

Whenever the watch cannot vouch for what changed, `changed()` returns None and the caller walks
instead: the kernel's limits (watches, instances, the event queue) were reached, or a directory
was renamed within the tree (its watch would keep reporting the old name; the watches are set up
again afterwards). A directory created during the call is watched from then on, and everything
already in it counts as changed.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Final

from codecoder.foundation import inotify

__all__ = ["ChangeWatch"]

_MASK: Final = (
    inotify.IN_MODIFY
    | inotify.IN_ATTRIB
    | inotify.IN_CLOSE_WRITE
    | inotify.IN_MOVED_FROM
    | inotify.IN_MOVED_TO
    | inotify.IN_CREATE
    | inotify.IN_DELETE_SELF
    | inotify.IN_MOVE_SELF
    | inotify.IN_ONLYDIR
    | inotify.IN_DONTFOLLOW
    | inotify.IN_EXCL_UNLINK
)
_FILE_EVENTS: Final = (
    inotify.IN_MODIFY
    | inotify.IN_ATTRIB
    | inotify.IN_CLOSE_WRITE
    | inotify.IN_CREATE
    | inotify.IN_MOVED_TO
)


class ChangeWatch:
    """The regular files changed beneath `root` since the last `reset()`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._watch: inotify.Inotify | None = None
        self._dirs: dict[int, str] = {}
        self._complete = False
        self._start()

    def _start(self) -> None:
        self.close()
        self._dirs = {}
        try:
            self._watch = inotify.Inotify()
        except OSError:
            self._complete = False  # no instance left: every call walks
            return
        self._complete = True
        self._watch_tree("")

    def close(self) -> None:
        """Stop watching. Closing an instance that holds watches waits for the kernel to retire
        them, which a session's end need not wait for: it is closed by a thread of its own."""
        if self._watch is not None:
            watch, self._watch = self._watch, None
            watch.close(in_background=True)

    def _watch_tree(self, relative: str) -> set[str]:
        """Watch the directory `relative` and every one beneath it; the regular files in them."""
        files: set[str] = set()
        pending = [relative]
        while pending and self._complete and self._watch is not None:
            current = pending.pop()
            path = self.root / current if current else self.root
            try:
                wd = self._watch.add_watch(path, _MASK)
            except OSError as exc:
                if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.EACCES):
                    continue  # gone or replaced meanwhile, or not ours to read: not watched
                self._complete = False  # ENOSPC: the watch limit
                return files
            self._dirs[wd] = current
            try:
                with os.scandir(path) as entries:
                    for entry in entries:
                        child = f"{current}/{entry.name}" if current else entry.name
                        if entry.is_dir(follow_symlinks=False):
                            pending.append(child)
                        elif entry.is_file(follow_symlinks=False):
                            files.add(child)
            except OSError:
                continue
        return files

    def reset(self) -> None:
        """Forget what changed until now (what the host itself did between calls)."""
        self.changed()

    def changed(self) -> set[str] | None:
        """The workspace-relative paths of files created, written, truncated, linked or renamed
        in since the last look (what is at them now may be anything: look beneath the root
        without following links); None when the watch cannot tell (then the caller walks, and
        the watches are set up again)."""
        if not self._complete or self._watch is None:
            self._start()
            return None
        found: set[str] = set()
        rebuild = False
        for event in self._watch.read():
            mask = event.mask
            if mask & inotify.IN_Q_OVERFLOW:
                rebuild = True
                continue
            if mask & inotify.IN_IGNORED:
                self._dirs.pop(event.wd, None)
                continue
            directory = self._dirs.get(event.wd)
            if directory is None:
                continue
            if mask & (inotify.IN_MOVE_SELF | inotify.IN_DELETE_SELF) and not event.name:
                rebuild = rebuild or bool(mask & inotify.IN_MOVE_SELF)
                continue
            child = os.fsdecode(event.name)
            path = f"{directory}/{child}" if directory else child
            if mask & inotify.IN_ISDIR:
                if mask & (inotify.IN_MOVED_FROM | inotify.IN_MOVED_TO):
                    rebuild = True  # a renamed directory's watch keeps its old name
                elif mask & inotify.IN_CREATE:
                    found |= self._watch_tree(path)
            elif mask & _FILE_EVENTS:
                found.add(path)
        if rebuild or not self._complete:
            self._start()
            return None
        return found
