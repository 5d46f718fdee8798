"""What a sandbox may leave in the workspace: never a protected path, at any depth.

A sandbox that writes the workspace could plant what the host obeys later: a `.git` (directory,
`gitdir:` file or symlink) whose hooks and config the host's git runs, a `.gitmodules`, or, at
the top, `codecoder.json` and `.codecoder/` (`foundation.protected.is_protected_entry`). Mounts
and preopens keep the existing ones read-only; this module finds the ones a call created or moved
(`ProtectedScan`) and takes them out of the workspace (`quarantine`).

`ProtectedScan` walks the whole tree once, then looks again only into directories whose ctime
moved: creating, removing or renaming an entry always updates its directory's ctime, and no
unprivileged process can set a ctime back (`touch` sets mtime; ctime follows the clock). A
later check therefore costs one `lstat` per directory, not a listing of every entry. A ctime
only changes in clock ticks, so a directory listed less than `RACY_NS` after its last change is
listed again next time (git's "racily clean" entries, for the same reason).

`quarantine` never copies (a FIFO or a device in a planted tree would make a copy block or
fail): each path is first renamed in place to an inert name (same directory, so it cannot
cross a filesystem, and git no longer sees it), then renamed into the state directory's
quarantine when that is on the same filesystem. A marker in the project's state directory is
written before anything moves and removed only when every path is gone; while it exists, host
tools refuse to run (`unresolved_quarantine`), so a failure half-way is never silent.
"""

from __future__ import annotations

import errno
import functools
import json
import os
import secrets
import stat
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from codecoder.foundation.atomicfile import replace_atomically
from codecoder.foundation.errors import ExecutionFailed
from codecoder.foundation.protected import is_protected_entry, is_protected_root
from codecoder.foundation.state import project_state_directory, state_directory

__all__ = [
    "QUARANTINE_MARKER",
    "ProtectedChanges",
    "ProtectedScan",
    "new_repository_hint",
    "quarantine",
    "quarantine_marker",
    "unresolved_quarantine",
]

RACY_NS: Final = 2_000_000_000
QUARANTINE_MARKER: Final = "quarantine-unresolved.json"
INERT_PREFIX: Final = ".codecoder-quarantined-"


@dataclass(slots=True)
class _Dir:
    ino: int
    ctime_ns: int
    racy: bool
    readable: bool
    subdirs: set[str] = field(default_factory=set)
    protected: set[str] = field(default_factory=set)


@dataclass(frozen=True, slots=True)
class ProtectedChanges:
    """Protected entries that appeared or vanished since the last look, and directories that
    changed but cannot be looked into (which could hide either)."""

    appeared: tuple[str, ...] = ()
    vanished: tuple[str, ...] = ()
    unreadable: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.appeared or self.vanished or self.unreadable)

    def describe(self) -> str:
        parts = []
        if self.appeared:
            parts.append("created " + ", ".join(self.appeared))
        if self.vanished:
            parts.append("moved or removed " + ", ".join(self.vanished))
        if self.unreadable:
            parts.append("changed directories it made unreadable: " + ", ".join(self.unreadable))
        return "; ".join(parts)


def _join(parent: str, name: str) -> str:
    return f"{parent}/{name}" if parent else name


class ProtectedScan:
    """The protected paths of a directory tree at every depth, kept up to date cheaply.

    Creating one walks the whole tree (`entries` is then every entry where a protected path
    begins, `foundation.protected.is_protected_root`: what a sandbox keeps read-only);
    `changes()` says which protected entries (`is_protected_entry`: what no sandbox may create)
    appeared or vanished since the previous look. Nothing inside a protected path is looked
    at: it is protected as a whole. Symbolic links are never followed.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self._root = str(root)
        self._dirs: dict[str, _Dir] = {}
        self._list_tree("")

    @property
    def entries(self) -> frozenset[str]:
        return frozenset(
            _join(rel, name) for rel, state in self._dirs.items() for name in state.protected
        )

    @property
    def unreadable(self) -> tuple[str, ...]:
        """Directories that could not be listed (their content is unknown)."""
        return tuple(rel or "." for rel, state in self._dirs.items() if not state.readable)

    def changes(self) -> ProtectedChanges:
        before = self.entries
        unreadable: list[str] = []
        # Parents come before their children in the cache (a directory is recorded before its
        # subdirectories are listed), so a parent is relisted before its children are checked.
        for rel in list(self._dirs):
            state = self._dirs.get(rel)
            if state is None:
                continue  # dropped with its parent during this pass
            try:
                # A string join, not pathlib: this lstat per directory is the whole cost of
                # a look, and Path's parsing was two thirds of it.
                st = os.lstat(f"{self._root}/{rel}" if rel else self._root)
            except OSError:
                st = None
            if st is None or not stat.S_ISDIR(st.st_mode) or st.st_ino != state.ino:
                self._drop(rel)
                if st is not None and stat.S_ISDIR(st.st_mode):
                    self._list_tree(rel)
            elif st.st_ctime_ns != state.ctime_ns or state.racy:
                self._relist(rel)
            else:
                continue
            now = self._dirs.get(rel)
            if now is not None and not now.readable:
                unreadable.append(rel or ".")
        after = self.entries
        return ProtectedChanges(
            appeared=tuple(sorted(e for e in after - before if is_protected_entry(e))),
            vanished=tuple(sorted(e for e in before - after if is_protected_entry(e))),
            unreadable=tuple(unreadable),
        )

    def _list(self, rel: str) -> _Dir | None:
        path = self.root / rel
        listed_at = time.time_ns()
        try:
            st = os.lstat(path)
        except OSError:
            return None
        if not stat.S_ISDIR(st.st_mode):
            return None
        state = _Dir(st.st_ino, st.st_ctime_ns, st.st_ctime_ns >= listed_at - RACY_NS, True)
        try:
            with os.scandir(path) as entries:
                for entry in entries:
                    if is_protected_root(_join(rel, entry.name)):
                        state.protected.add(entry.name)
                    elif entry.is_dir(follow_symlinks=False):
                        state.subdirs.add(entry.name)
        except OSError:
            state = _Dir(st.st_ino, st.st_ctime_ns, state.racy, False)
        self._dirs[rel] = state
        return state

    def _list_tree(self, rel: str) -> None:
        pending = [rel]
        while pending:
            current = pending.pop()
            state = self._list(current)
            if state is not None:
                pending.extend(_join(current, name) for name in state.subdirs)

    def _relist(self, rel: str) -> None:
        old = self._dirs.pop(rel)
        new = self._list(rel)
        if new is None:
            self._drop_children(rel, old.subdirs)
            return
        if not new.readable:
            new.subdirs, new.protected = old.subdirs, old.protected  # unknown: keep what was seen
            self._dirs[rel] = new
            return
        self._drop_children(rel, old.subdirs - new.subdirs)
        for name in new.subdirs - old.subdirs:
            self._list_tree(_join(rel, name))

    def _drop_children(self, rel: str, names: Collection[str]) -> None:
        for name in names:
            self._drop(_join(rel, name))

    def _drop(self, rel: str) -> None:
        state = self._dirs.pop(rel, None)
        if state is not None:
            self._drop_children(rel, state.subdirs)


# --- quarantine ------------------------------------------------------------------------------


def quarantine_marker(workspace: Path) -> Path:
    """The marker that, while it exists, keeps host tools from running in `workspace`."""
    return _marker(workspace, os.environ.get("XDG_STATE_HOME"), os.environ.get("HOME"))


@functools.lru_cache(maxsize=64)
def _marker(workspace: Path, _state_home: str | None, _home: str | None) -> Path:
    # Looked up before every host call: cached on what the state directory depends on.
    return project_state_directory(workspace) / QUARANTINE_MARKER


def unresolved_quarantine(workspace: Path) -> str | None:
    """Why host tools must not run in `workspace` now, or None.

    A quarantine that did not complete leaves planted paths in the workspace that the host's
    git (or a build) would obey; the human must look first.
    """
    marker = quarantine_marker(workspace)
    if not os.path.lexists(marker):
        return None
    return (
        f"a sandbox planted protected paths in {workspace} and moving them out did not "
        f"complete; host tools are refused until you have looked: {marker} lists what was "
        "found and where it is. Delete that file once the workspace is clean"
    )


def new_repository_hint(relpaths: Collection[str]) -> str:
    """What to do instead, when what a contained call planted is a new git repository (a
    `.git` at any depth: `git init`, `git clone`, `git submodule add`); "" otherwise.

    Such a command cannot work in a sandbox at all: the repository it makes is its `.git/config`
    and `.git/hooks`, which the host's git would obey, so no sandbox may create them. It has to
    run where the human can see it run: on the host."""
    if not any(".git" in Path(path).parts for path in relpaths):
        return ""
    return (
        ". A new git repository (`git init`, `git clone`) cannot be made in a sandbox: its "
        ".git/config and .git/hooks are protected paths, which only the host may create. Run "
        'the command on the host: choose an "on the host" answer when its question offers one, '
        'or bind run_command to @shell in codecoder.json ("environments": {"run_command": '
        '"@shell"})'
    )


def quarantine(workspace: Path, relpaths: Collection[str], why: str) -> str:
    """Move each of `relpaths` (workspace-relative) out of the workspace; say where each went.

    Raises ExecutionFailed, naming every step that failed, when any path could not be made
    inert; the marker then stays (see `unresolved_quarantine`). Paths that are already gone
    count as done.
    """
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    token = secrets.token_hex(6)
    marker = quarantine_marker(workspace)
    destination = state_directory() / "quarantine" / f"{stamp}-{token}"
    record: dict[str, object] = {
        "workspace": str(workspace),
        "why": why,
        "when": stamp,
        "quarantine": str(destination),
        "paths": {},
    }
    places: dict[str, str] = {}
    problems: list[str] = []

    def save_marker() -> None:
        record["paths"] = places
        record["problems"] = problems
        try:
            marker.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            replace_atomically(marker, (json.dumps(record, indent=2) + "\n").encode(), 0o600)
        except OSError as exc:
            problems.append(f"cannot write the marker {marker}: {exc.strerror or exc}")

    save_marker()
    try:
        destination.mkdir(parents=True, mode=0o700)
    except OSError as exc:
        destination_problem: str | None = f"cannot create {destination}: {exc.strerror or exc}"
    else:
        destination_problem = None
    for number, rel in enumerate(sorted(relpaths)):
        source = workspace / rel
        if not os.path.lexists(source):
            places[rel] = "already gone"
            continue
        inert = source.with_name(f"{INERT_PREFIX}{stamp}-{token}-{number}")
        try:
            os.rename(source, inert)
        except OSError as exc:
            problems.append(f"{rel}: cannot rename it in place: {exc.strerror or exc}")
            places[rel] = "still in place"
            continue
        places[rel] = str(inert)
        if destination_problem is None:
            target = destination / f"{number}-{source.name}"
            try:
                os.rename(inert, target)
            except OSError as exc:
                if exc.errno != errno.EXDEV:
                    problems.append(f"{rel}: cannot move {inert} to {target}: {exc.strerror}")
            else:
                places[rel] = str(target)
        if os.path.lexists(source):
            problems.append(f"{rel}: it exists again after being moved")
    if problems:
        save_marker()
        raise ExecutionFailed(
            f"{why}; quarantining it failed: {'; '.join(problems)}. "
            + (unresolved_quarantine(workspace) or f"(and the marker {marker} is missing)")
        )
    try:
        if destination_problem is None:
            summary = json.dumps({**record, "paths": places}, indent=2) + "\n"
            (destination / "quarantine.json").write_text(summary)
        marker.unlink()
    except OSError as exc:
        raise ExecutionFailed(
            f"{why}; the paths were moved ({_where(places)}), but the marker {marker} could "
            f"not be cleared ({exc.strerror or exc}); delete it once you have looked"
        ) from exc
    return _where(places)


def _where(places: dict[str, str]) -> str:
    return ", ".join(f"{rel} -> {place}" for rel, place in places.items())
