"""The protected paths of a workspace, as a writable @bwrap call sees them, and what a call left.

Mounts keep what exists: every protected path where it begins (`foundation.protected`:
`codecoder.json`, `.codecoder/`, every `.gitmodules`, every `gitdir:` file, the agents' settings
at every depth but beneath node_modules) is bound read-only over the writable workspace.

A `.git` directory cannot be bound read-only whole, since git's own writes (index, objects,
refs, logs, the lock files it renames into place) must work. It is bound onto itself instead
(`CallProtection.pinned`): a mount point cannot be renamed or replaced (EBUSY), so `mv .git
.git-old` fails and the repository stays where the host's git and this check look for it; then
inside every git directory (each `.git` at any depth, the target of a `gitdir:` file, and, for
a linked worktree, the parts of the main repository it writes) the entries from which git reads
configuration or runs programs are bound read-only (`GIT_SENSITIVE`: `config`,
`config.worktree`, `commondir`, `gitdir`, `hooks/`, `info/`, `modules/`, `worktrees/`).
(`objects/` stays writable, `objects/info/alternates` included: it can only add places to read
objects from, and a call could write those objects itself.)

What does not exist cannot be a mount point without making it on the host. At the top of the
workspace the runtime makes each missing agent setting, `.codecoder/` and `.git` as an inert
placeholder first (`environments.placeholders`), bound read-only like the rest, so none can
appear on the host with a sandbox's content even while the call runs. Deeper, and for the
names without a placeholder, creating one is caught after the call instead
(`Protection.planted`), and fails it: a protected entry created or moved at any depth
(`environments.workspaceguard.ProtectedScan`), a protected path that appeared or was replaced
where one was before, and in a git directory any new entry at its top whose name is not one
git itself leaves there (`GIT_WRITES`: `HEAD`, `index`, `ORIG_HEAD`, `logs/`, `refs/`,
`*.lock` ...). That last is an allow-list on purpose: a new `hooks/`, `config`, `commondir` or
anything git might learn to read tomorrow fails closed.
"""

from __future__ import annotations

import fnmatch
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from codecoder.environments.placeholders import Placeholders
from codecoder.environments.workspaceguard import ProtectedChanges, ProtectedScan
from codecoder.foundation.protected import AGENT_SETTINGS, PROTECTED_NAMES, is_git_name
from codecoder.foundation.regularfile import read_regular_file

# A `.git` file names its git directory on one line: more is not a gitdir file.
_GITDIR_FILE_LIMIT: Final = 64 * 1024

__all__ = ["GIT_SENSITIVE", "GIT_WRITES", "CallProtection", "Protection"]

GIT_SENSITIVE: Final = (
    "config",
    "config.worktree",
    "commondir",
    "gitdir",
    "hooks",
    "info",
    "modules",
    "worktrees",
)
# Names git itself leaves at the top of a git directory (globs); anything else that appears
# there during a call was planted.
GIT_WRITES: Final = (
    "HEAD",
    "ORIG_HEAD",
    "FETCH_HEAD",
    "MERGE_HEAD",
    "MERGE_MSG",
    "MERGE_MODE",
    "MERGE_RR",
    "AUTO_MERGE",
    "CHERRY_PICK_HEAD",
    "REVERT_HEAD",
    "REBASE_HEAD",
    "BISECT_*",
    "COMMIT_EDITMSG",
    "TAG_EDITMSG",
    "SQUASH_MSG",
    "NOTES_*",
    "EDIT_DESCRIPTION",
    "BRANCH_DESCRIPTION",
    "index",
    "index.stash.*",
    "next-index-*",
    "sharedindex.*",
    "packed-refs",
    "shallow",
    "description",
    "logs",
    "refs",
    "objects",
    "rebase-merge",
    "rebase-apply",
    "sequencer",
    "rr-cache",
    "lost-found",
    "gitk.cache",
    "gc.pid",
    "gc.log",
    "lfs",
    "*.lock",
)
_TOP_NAMES: Final = (*PROTECTED_NAMES, *AGENT_SETTINGS)
_Identity = tuple[int, int, int]  # device, inode, file type


def _identity(path: Path) -> _Identity | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, stat.S_IFMT(st.st_mode))


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _gitdir_of(entry: Path) -> Path | None:
    """The git directory a `.git` entry leads to: itself, a `gitdir:` file's target, or where
    a symlink leads; None when it leads to no directory."""
    try:
        st = os.lstat(entry)
    except OSError:
        return None
    if stat.S_ISDIR(st.st_mode):
        return entry
    if stat.S_ISREG(st.st_mode):
        try:
            head = read_regular_file(entry, limit=_GITDIR_FILE_LIMIT)
            first = head.decode(errors="replace").splitlines()[0]
        except (OSError, IndexError):
            return None
        if not first.startswith("gitdir:"):
            return None
        target = Path(first[len("gitdir:") :].strip())
        target = target if target.is_absolute() else entry.parent / target
        real = Path(os.path.realpath(target))
        return real if real.is_dir() else None
    real = Path(os.path.realpath(entry))
    return real if real.is_dir() else None


def _common_dir(gitdir: Path) -> Path | None:
    try:
        written = os.fsdecode(read_regular_file(gitdir / "commondir", limit=4096)).strip()
    except OSError:
        return None
    common = Path(written) if os.path.isabs(written) else gitdir / written
    real = Path(os.path.realpath(common))
    return real if real.is_dir() and real != gitdir else None


@dataclass(slots=True)
class CallProtection:
    """The mounts of one writable call and what to compare after it."""

    read_only: list[Path] = field(default_factory=list)  # bound read-only, in this order
    writable: list[Path] = field(default_factory=list)  # git directories outside the workspace
    pinned: list[Path] = field(default_factory=list)  # git directories inside, bound onto
    # themselves (writable, but no longer an entry that can be renamed or replaced)
    identities: dict[str, _Identity | None] = field(default_factory=dict)  # relative path ->
    gitdirs: dict[Path, frozenset[str]] = field(default_factory=dict)  # name -> entries before


class Protection:
    """The protected paths of one workspace; one writable call at a time (the caller's lock)."""

    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace
        self._scan: ProtectedScan | None = None
        self.placeholders = Placeholders(workspace)

    @property
    def scan(self) -> ProtectedScan:
        if self._scan is None:
            self._scan = ProtectedScan(self.workspace)
        return self._scan

    def before(self) -> CallProtection:
        """The mounts for a writable call now, and the state to compare after it."""
        inert = set(self.placeholders.hold())
        scan = self.scan
        scan.changes()  # what the host changed since the last call is the host's business
        call = CallProtection()
        ws = self.workspace
        for relative in (*_TOP_NAMES, *sorted(scan.entries)):
            call.identities[relative] = _identity(ws / relative)
        gitdirs: list[tuple[Path, bool]] = []  # (git directory, whole: its top is written)
        for relative in sorted(scan.entries):
            entry = ws / relative
            if entry in inert:
                self._read_only(call, entry)  # a placeholder (an empty `.git` among them)
                continue
            if os.path.islink(entry):
                # A mount would land where it leads; the link itself is compared afterwards.
                gitdir = _gitdir_of(entry) if _names_repository(entry.name) else None
            elif _names_repository(entry.name) and os.path.isdir(entry):
                gitdir = entry
            else:
                self._read_only(call, entry)  # codecoder.json, .codecoder/, a `gitdir:` file
                gitdir = _gitdir_of(entry) if _names_repository(entry.name) else None
            if gitdir is None:
                continue
            gitdirs.append((gitdir, True))
            common = _common_dir(gitdir)
            if common is not None:
                gitdirs.append((common, False))
        for name in AGENT_SETTINGS:
            if call.identities[name] is not None and not os.path.islink(ws / name):
                self._read_only(call, ws / name)
        for gitdir, whole in gitdirs:
            if not _inside(gitdir, ws):
                if whole:
                    call.writable.append(gitdir)
                else:
                    # The main repository of a linked worktree: what a commit writes there.
                    call.writable += [gitdir / d for d in ("objects", "refs", "logs")]
            elif whole and gitdir != ws and gitdir not in call.pinned:
                call.pinned.append(gitdir)
            for sensitive in GIT_SENSITIVE:
                path = gitdir / sensitive
                call.identities[self._shown(path)] = _identity(path)
                if os.path.lexists(path):
                    self._read_only(call, path)
            if whole:
                call.gitdirs[gitdir] = _entries(gitdir)
        return call

    def _read_only(self, call: CallProtection, path: Path) -> None:
        real = Path(os.path.realpath(path))
        if os.path.exists(real) and real not in call.read_only:
            call.read_only.append(real)

    def _shown(self, path: Path) -> str:
        """Workspace-relative inside the workspace, absolute outside."""
        if _inside(path, self.workspace):
            return os.path.relpath(path, self.workspace)
        return str(path)

    def planted(self, call: CallProtection) -> tuple[list[str], str | None]:
        """After a writable call: the paths it planted (workspace-relative, or absolute outside
        the workspace), and what it did in words; ([], None) when it left nothing."""
        changes = self.scan.changes()
        planted = list(changes.appeared + changes.unreadable)
        said: list[str] = [changes.describe()] if changes else []
        replaced: list[str] = []
        for name, identity in call.identities.items():
            now = _identity(self.workspace / name)  # an absolute name stays itself
            if now != identity and name not in planted and not _reported(changes, name):
                if now is not None:
                    planted.append(name)
                replaced.append(name)
        if replaced:
            said.append("created, replaced or removed " + ", ".join(replaced))
        stray: list[str] = []
        for gitdir, entries in call.gitdirs.items():
            for name in sorted(_entries(gitdir) - entries):
                if not any(fnmatch.fnmatchcase(name, allowed) for allowed in GIT_WRITES):
                    shown = self._shown(gitdir / name)
                    if shown not in planted:
                        stray.append(shown)
        if stray:
            said.append(
                "created in a git directory " + ", ".join(stray) + " (git writes no such entry)"
            )
            planted += stray
        return planted, "; ".join(said) if said else None


def _names_repository(name: str) -> bool:
    """Whether an entry's name is git's `.git` (in any spelling), not `.gitmodules`."""
    return is_git_name(name) and "gitmod" not in name.casefold()


def _reported(changes: ProtectedChanges, name: str) -> bool:
    return name in changes.appeared or name in changes.vanished or name in changes.unreadable


def _entries(directory: Path) -> frozenset[str]:
    try:
        return frozenset(os.listdir(directory))
    except OSError:
        return frozenset()
