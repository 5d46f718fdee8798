"""Noticing that the code a long-lived process runs has changed on disk (an upgrade, an edit).

The decision server (`interfaces.forkserver.server`) must run what a fresh process would: once
the code it imported is no longer what is installed, it refuses and exits, and the next client
starts a new one. `CodeWatch` watches, with inotify, every directory holding a module the
process loaded and every directory of codecoder's own packages (modules a command imports
later included): any file of code created, written, touched, moved or deleted there, or the
directory itself removed or moved, counts as a change. Asking costs one poll, not a stat of
every module (about 2 ms for the ~700 modules the server holds). Where inotify is not
available, it compares the modification time and size of every loaded module's file instead.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Final

from codecoder.foundation import inotify
from codecoder.foundation.loadedcode import loaded_code

__all__ = ["CodeWatch"]

# What happens to a file in a watched directory, or to the directory itself.
_MASK: Final = (
    inotify.IN_MODIFY
    | inotify.IN_ATTRIB
    | inotify.IN_CLOSE_WRITE
    | inotify.IN_MOVED_FROM
    | inotify.IN_MOVED_TO
    | inotify.IN_CREATE
    | inotify.IN_DELETE
    | inotify.IN_DELETE_SELF
    | inotify.IN_MOVE_SELF
    | inotify.IN_ONLYDIR
)
# What a process runs: Python sources and extension modules, import hooks, and the data files
# codecoder loads (the WASI modules, the Landlock worker's ruleset, the escape corpus).
_CODE_SUFFIXES: Final = (".py", ".so", ".pth", ".wasm", ".json")


class CodeWatch:
    """Whether the code of this process (the modules loaded now, and the packages under
    `roots`) has changed since the watch was made."""

    def __init__(self, roots: Iterable[str] = ()) -> None:
        self._snapshot = loaded_code()
        self._changed = False
        self._watch: inotify.Inotify | None = None
        directories = {os.path.dirname(path) for path in self._snapshot}
        for root in roots:
            for folder, subfolders, _ in os.walk(root):
                subfolders[:] = [name for name in subfolders if name != "__pycache__"]
                directories.add(folder)
        try:
            self._watch = _watch(sorted(directories))
        except OSError:
            self._watch = None  # no inotify here: compare the files on every question

    @property
    def fd(self) -> int | None:
        """The descriptor that becomes readable when something may have changed (to poll)."""
        return self._watch.fd if self._watch is not None else None

    def changed(self) -> bool:
        if self._changed:
            return True
        if self._watch is None:
            self._changed = loaded_code() != self._snapshot
            return self._changed
        self._changed = any(_touches_code(event) for event in self._watch.read())
        return self._changed

    def close(self) -> None:
        if self._watch is not None:
            self._watch.close()
            self._watch = None


def _watch(directories: list[str]) -> inotify.Inotify:
    watch = inotify.Inotify()
    try:
        for directory in directories:
            watch.add_watch(directory, _MASK)
    except BaseException:
        watch.close()
        raise
    return watch


def _touches_code(event: inotify.Event) -> bool:
    """Whether an event says a file of code (or a watched directory itself) changed; events
    about other files (a cache, a log) do not count."""
    if event.mask & (inotify.IN_Q_OVERFLOW | inotify.IN_DELETE_SELF | inotify.IN_MOVE_SELF):
        return True  # events were lost, or a whole directory went
    return not event.name or event.name.decode("utf-8", "surrogateescape").endswith(_CODE_SUFFIXES)
