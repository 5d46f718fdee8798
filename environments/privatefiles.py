"""What the host keeps private stays private in a sandbox: a rule, not a list.

A sandbox shows the host's file system read-only (`--ro-bind / /`), but its processes keep the
caller's kernel uid: bubblewrap's user namespace maps the uid to itself, so a runtime running
as root runs contained commands as root, and the kernel lets the owner read what it owns. A
list of known secrets (`/etc/shadow`, SSH host keys) misses every other one: the TLS keys of a
service in a 0700 directory under `/var/lib`, a key someone left in `/srv`.

**The rule.** Outside what a sandbox shows on purpose (the workspace, the toolchains, the
user's configured home entries) it shows only what any local account could read: an entry is
*public* when its mode lets others read it (a file with o+r, a directory with o+r and o+x);
anything else is *private*, whatever its name, and is hidden in the sandbox when the account
could read it there, through its ownership or its groups (a sandbox holds no capability, so
what the account could read only through a privilege, a file of another owner in a 0700
directory, it cannot read there anyway). A hidden directory is an empty tmpfs, a hidden file
an empty read-only file. A public directory whose entries are all private is hidden whole.

**Finding them** means looking at every entry of the file system the sandbox shows (the
kernel's own interfaces apart: `/proc` and `/dev` are the sandbox's own, and `/sys` is shown
only in the parts commands read, `SHOWN_SYS`): a walk that never enters a private directory
nor a tree every sandbox hides whole anyway (`ALWAYS_HIDDEN`). It costs seconds on a large
machine, so it is done once per machine and kept up to date (`MachinePrivateFiles`):

* the walk records every public directory it listed with its inode and its change time
  (ctime: it moves when an entry is added, removed or renamed in the directory, and when the
  directory's own mode changes), and what private entries it holds;
* before every call, the directories near the top (`LOOK_DEPTH` levels) and every directory
  that holds a private entry are looked at again (a few hundred `stat` calls), and the ones
  that changed are listed again; a new directory is walked whole;
* every `DEEP_INTERVAL` seconds every recorded directory is looked at, in the background; a
  call waits for this look only when the last one is older than `DEEP_MAX_AGE`;
* the result is kept for the next process in the account's own cache directory
  (`~/.cache/codecoder/private-entries.json` of the account's home as the password database
  gives it, whatever XDG_* say: every sandbox hides that home, and the walk is the machine's,
  not a state directory's — a process with a state directory of its own, as each test has,
  still finds it). Where that home cannot be written, the state directory holds it.

What the looks cannot see: a file made private in place (`chmod 600` of an existing file in
a directory that holds no private entry) changes only its own ctime, so it is hidden after
the next full walk (`MachinePrivateFiles.walk`), not at the next call.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pwd
import stat
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from codecoder.foundation.atomicfile import exclusive_lock, replace_atomically
from codecoder.foundation.state import state_directory

__all__ = [
    "ALWAYS_HIDDEN",
    "SHOWN_SYS",
    "Account",
    "MachinePrivateFiles",
    "PrivateEntry",
    "PrivateView",
    "is_public",
    "machine_private_files",
    "procfs_private_files",
    "readable_roots",
]

log = logging.getLogger(__name__)

# Trees every sandbox replaces whole (environments.bwrap.home.hidden_paths, the private /tmp):
# nothing inside them needs looking at.
ALWAYS_HIDDEN: Final = ("/tmp", "/var/tmp", "/run", "/home", "/root")
# The kernel's interfaces: /proc and /dev are the sandbox's own; of /sys only these parts are
# shown (what nproc, the C library, Node, the JVM and Go read: CPUs, NUMA nodes and memory,
# cgroup limits, transparent huge pages), and the rule holds inside them too.
PSEUDO: Final = ("/proc", "/sys", "/dev")
SHOWN_SYS: Final = (
    "/sys/devices/system",
    "/sys/fs/cgroup",
    "/sys/kernel/mm/transparent_hugepage",
)
LOOK_DEPTH: Final = 2  # "/" is depth 0, /etc 1, /var/lib 2
DEEP_INTERVAL: Final = 30.0
DEEP_MAX_AGE: Final = 300.0
# A directory whose change time is this close to when it was looked at may change again within
# the same clock tick unseen: it is looked at again next time (as git treats a racy index).
_RACY_NS: Final = 1_000_000_000
_FORMAT: Final = 1
_CACHE_NAME: Final = "private-entries.json"


def is_public(mode: int) -> bool:
    """Whether any local account may read an entry of this mode: o+r for a file, o+r and o+x
    for a directory (a symbolic link is judged where it leads)."""
    if stat.S_ISLNK(mode):
        return True
    if stat.S_ISDIR(mode):
        return mode & 0o005 == 0o005
    return bool(mode & 0o004)


@dataclass(frozen=True, slots=True)
class Account:
    """Whose sandbox: a uid and its groups (a sandbox holds no capability)."""

    uid: int
    groups: frozenset[int]

    @classmethod
    def current(cls) -> Account:
        return cls(os.getuid(), frozenset({os.getgid(), *os.getgroups()}))


@dataclass(frozen=True, slots=True)
class PrivateEntry:
    """A private entry of the host (see the module docstring), as the walk found it."""

    path: str
    directory: bool
    uid: int
    gid: int
    mode: int
    unlistable: bool = False  # a public directory the walk could not list: hidden, unknown

    def readable_by(self, account: Account) -> bool:
        """Whether `account`, without capabilities, could read it (enter it, for a
        directory): through its ownership or one of its groups, since others may not."""
        if self.unlistable:
            return True
        if self.directory:
            owner, group = 0o100, 0o010  # entering is enough to reach what it holds
        else:
            owner, group = 0o400, 0o040
        if self.uid == account.uid:
            return bool(self.mode & owner)
        return self.gid in account.groups and bool(self.mode & group)


@dataclass(frozen=True, slots=True)
class PrivateView:
    """What one sandbox covers: directories (an empty tmpfs each) and files (an empty
    read-only file each), outermost first."""

    directories: tuple[Path, ...] = ()
    files: tuple[Path, ...] = ()

    def __len__(self) -> int:
        return len(self.directories) + len(self.files)


@dataclass(slots=True)
class _Directory:
    """A public directory the walk listed: its identity, and what it holds."""

    ino: int
    ctime_ns: int  # -1: racy, look again
    private: dict[str, PrivateEntry] = field(default_factory=dict)
    subdirectories: set[str] = field(default_factory=set)
    public_entries: int = 0  # entries that are not private (subdirectories, links, files)


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _depth(path: str) -> int:
    return 0 if path == "/" else path.count("/")


class MachinePrivateFiles:
    """The private entries of this machine's file system (see the module docstring): walked
    once, looked at again before each call, kept in `cache` (None: in memory only).

    `roots` are where the walk starts, `skipped` the trees it never enters (the kernel's
    interfaces and what every sandbox hides whole); tests give their own.
    """

    def __init__(
        self,
        cache: Path | None,
        *,
        roots: Iterable[str] = ("/", *SHOWN_SYS),
        skipped: Iterable[str] = (*PSEUDO, *ALWAYS_HIDDEN),
        deep_interval: float = DEEP_INTERVAL,
        deep_max_age: float = DEEP_MAX_AGE,
    ) -> None:
        self.cache = cache
        self.roots = tuple(r for r in dict.fromkeys(roots) if os.path.isdir(r))
        self.skipped = frozenset(skipped) - set(self.roots)
        self.deep_interval = deep_interval
        self.deep_max_age = deep_max_age
        self._lock = threading.RLock()
        self._directories: dict[str, _Directory] = {}
        self._loaded = False
        self._looked_at: list[str] | None = None
        self._entries: list[PrivateEntry] | None = None
        self._whole: frozenset[str] = frozenset()
        self._views: dict[
            tuple[Account, tuple[str, ...]], tuple[list[PrivateEntry], PrivateView]
        ] = {}
        self._deep_checked = 0.0  # wall clock of the last look at every directory
        self._deep_running = False
        self._complete = False  # every directory in memory, not only those a call looks at
        self.walks = 0  # full walks done by this object (tests and benchmarks read it)

    # -- what a call asks ---------------------------------------------------------------------

    def entries(self) -> list[PrivateEntry]:
        """Every private entry, after the look a call makes (see the module docstring)."""
        with self._lock:
            if not self._loaded:
                self._load_or_walk()
            self._look(self._near_the_top())
            due = time.time() - self._deep_checked
            if due > self.deep_max_age and not self._deep_running:
                self._look_everywhere(background=False)
            elif due > self.deep_interval and not self._deep_running:
                self._deep_running = True
                threading.Thread(
                    target=self._deep_look, name="codecoder-private-files", daemon=True
                ).start()
            if self._entries is None:
                self._entries = [e for d in self._directories.values() for e in d.private.values()]
                self._whole = frozenset(
                    path
                    for path, directory in self._directories.items()
                    if len(directory.private) > 1 and directory.public_entries == 0
                )
            return self._entries

    def view(
        self,
        account: Account,
        *,
        shown: Iterable[Path] = (),
        hidden: Iterable[Path] = (),
    ) -> PrivateView:
        """What a sandbox of `account` must cover: the private entries it could read, but
        those inside a tree it shows on purpose (`shown`: the workspace, toolchains) or hides
        whole anyway (`hidden`); a directory whose entries are all private, whole."""
        covered_roots = tuple(str(p) for p in (*shown, *hidden))
        with self._lock:
            entries = self.entries()
            whole = self._whole
            key = (account, covered_roots)
            known = self._views.get(key)
            if known is not None and known[0] is entries:
                return known[1]
        directories: set[str] = set()
        files: set[str] = set()
        for entry in entries:
            if not entry.readable_by(account):
                continue
            parent = os.path.dirname(entry.path)
            path = parent if parent in whole else entry.path
            if any(_inside(path, root) for root in covered_roots):
                continue
            (directories if path in whole or entry.directory else files).add(path)
        # Keep the outermost: an entry below a covered directory is covered with it (by its
        # ancestors, looked up: linear in the entries, not quadratic).
        directories = {d for d in directories if not _below_any(d, directories)}
        files = {f for f in files if not _below_any(f, directories)}
        view = PrivateView(
            tuple(Path(d) for d in sorted(directories, key=lambda p: (_depth(p), p))),
            tuple(Path(f) for f in sorted(files)),
        )
        with self._lock:
            if len(self._views) > 64:
                self._views.clear()
            self._views[key] = (entries, view)
        return view

    @property
    def looked_at_each_call(self) -> int:
        """How many directories a call looks at now."""
        with self._lock:
            return len(self._near_the_top())

    def look_everywhere(self) -> None:
        """Look at every recorded directory now, as the background look does."""
        with self._lock:
            if not self._loaded:
                self._load_or_walk()
        self._look_everywhere(background=False)

    def walk(self) -> None:
        """Walk the whole file system again (what a look cannot see: see the docstring)."""
        with self._lock:
            self._walk_all()
            self._complete = True
            self._loaded = True
            self._save()

    # -- the walk -----------------------------------------------------------------------------

    def _walk_all(self) -> None:
        self._directories = {}
        for root in self.roots:
            with contextlib.suppress(OSError):
                self._walk(root, os.lstat(root))
        self._deep_checked = time.time()
        self._changed()
        self.walks += 1

    def _walk(self, top: str, top_status: os.stat_result) -> None:
        """Record the public directory `top` and everything public beneath it."""
        pending = [(top, top_status)]
        while pending:
            path, status = pending.pop()
            record = self._list(path, status)
            if record is None:
                continue
            self._directories[path] = record
            for name in record.subdirectories:
                child = os.path.join(path, name)
                with contextlib.suppress(OSError):
                    pending.append((child, os.lstat(child)))

    def _list(self, path: str, status: os.stat_result) -> _Directory | None:
        """List one public directory: its private entries and public subdirectories."""
        now = time.time_ns()
        ctime = status.st_ctime_ns if now - status.st_ctime_ns > _RACY_NS else -1
        record = _Directory(status.st_ino, ctime)
        try:
            listing = os.scandir(path)
        except OSError:
            return None
        with listing:
            for item in listing:
                try:
                    child = item.stat(follow_symlinks=False)
                except OSError:
                    continue
                mode = child.st_mode
                full = item.path
                if stat.S_ISDIR(mode) and (full in self.skipped or full in self.roots):
                    record.public_entries += 1
                    continue
                if is_public(mode):
                    record.public_entries += 1
                    if stat.S_ISDIR(mode):
                        record.subdirectories.add(item.name)
                    continue
                if not mode & (0o550 if stat.S_ISDIR(mode) else 0o440):
                    record.public_entries += 1  # no one reads it without a privilege
                    continue
                record.private[item.name] = PrivateEntry(
                    full, stat.S_ISDIR(mode), child.st_uid, child.st_gid, stat.S_IMODE(mode)
                )
        return record

    # -- the looks ----------------------------------------------------------------------------

    def _near_the_top(self) -> list[str]:
        if self._looked_at is None:
            self._looked_at = [
                path
                for path, record in self._directories.items()
                if _depth(path) <= LOOK_DEPTH or record.private or path in self.roots
            ]
        return self._looked_at

    def _look(self, paths: Iterable[str], *, entries_too: bool = False) -> None:
        """Look at `paths` again and list again those that changed (or, with `entries_too`,
        whose private entries changed: made public again, replaced)."""
        for path in paths:
            record = self._directories.get(path)
            if record is None:
                continue  # gone with a directory above it, in this same look
            try:
                status = os.lstat(path)
            except OSError:
                self._forget(path)
                continue
            same = status.st_ino == record.ino and status.st_ctime_ns == record.ctime_ns
            if same and entries_too:
                same = all(_unchanged(entry) for entry in record.private.values())
            if not same:
                self._relist(path, status)

    def _relist(self, path: str, status: os.stat_result) -> None:
        old = self._directories[path]
        parent = self._directories.get(os.path.dirname(path))
        if not stat.S_ISDIR(status.st_mode) or status.st_ino != old.ino:
            self._forget(path)
            if parent is not None:
                parent.ctime_ns = -1  # what replaced it is its parent's to judge
            return
        if not is_public(status.st_mode) and path not in self.roots:
            self._forget(path)
            if parent is not None:
                name = os.path.basename(path)
                parent.subdirectories.discard(name)
                parent.private[name] = PrivateEntry(
                    path, True, status.st_uid, status.st_gid, stat.S_IMODE(status.st_mode)
                )
            return
        record = self._list(path, status)
        if record is None:
            self._forget(path)
            if parent is not None:
                name = os.path.basename(path)
                parent.private[name] = PrivateEntry(
                    path, True, status.st_uid, status.st_gid, 0, unlistable=True
                )
            return
        for name in old.subdirectories - record.subdirectories:
            self._forget(os.path.join(path, name))
        self._directories[path] = record
        for name in record.subdirectories:
            child = os.path.join(path, name)
            known = self._directories.get(child)
            if known is None and name in old.subdirectories and not self._complete:
                continue  # recorded in the file of every directory, not read yet
            try:
                child_status = os.lstat(child)
            except OSError:
                continue
            if known is None or known.ino != child_status.st_ino:
                self._forget(child)
                self._walk(child, child_status)
        self._changed()

    def _forget(self, path: str) -> None:
        """Drop the record of `path` and of everything beneath it."""
        pending = [path]
        while pending:
            current = pending.pop()
            record = self._directories.pop(current, None)
            if record is not None:
                pending += [os.path.join(current, n) for n in record.subdirectories]
        self._changed()

    def _deep_look(self) -> None:
        try:
            self._look_everywhere(background=True)
        except Exception:  # a background look must never take a call down
            log.exception("looking at the file system's private entries failed")
        finally:
            self._deep_running = False

    def _look_everywhere(self, *, background: bool) -> None:
        """Look at every recorded directory; in the background, the stat calls outside the
        lock (calls go on meanwhile)."""
        with self._lock:
            read = self._complete or self._read_cache(everything=True)
        if not read:
            fresh = MachinePrivateFiles(None, roots=self.roots, skipped=self.skipped)
            fresh._walk_all()  # outside the lock: seconds on a large machine
            with self._lock:
                self._directories = fresh._directories
                self._deep_checked = fresh._deep_checked
                self._complete = True
                self.walks += 1
                self._changed()
                self._save()
            return
        with self._lock:
            recorded = {p: (r.ino, r.ctime_ns) for p, r in self._directories.items()}
        with self._lock if not background else contextlib.nullcontext():
            changed = []
            for path, identity in recorded.items():
                try:
                    status = os.lstat(path)
                except OSError:
                    changed.append(path)
                    continue
                if (status.st_ino, status.st_ctime_ns) != identity:
                    changed.append(path)
        with self._lock:
            self._look(changed)
            self._look(self._near_the_top(), entries_too=True)
            self._deep_checked = time.time()
            self._save()

    def _changed(self) -> None:
        self._looked_at = None
        self._entries = None

    # -- the state directory ------------------------------------------------------------------
    #
    # Two files: `private-entries.json` holds the directories a call looks at (near the top,
    # and those holding a private entry: every private entry is in it), read by a new process
    # before its first call; `private-directories.json` holds every directory, read by the
    # first look at all of them, in the background.

    def _load_or_walk(self) -> None:
        if self.cache is None:
            self._walk_all()
            self._complete = True
            self._loaded = True
            return
        self.cache.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        # One process walks; the others wait for its result instead of walking beside it.
        with exclusive_lock(self.cache.with_name(self.cache.name + ".lock"), 0o600):
            if not self._read_cache(everything=False):
                self._walk_all()
                self._complete = True
                self._save()
            self._loaded = True

    def _everything_file(self) -> Path:
        assert self.cache is not None
        return self.cache.with_name("private-directories.json")

    def _read_cache(self, *, everything: bool) -> bool:
        if self.cache is None:
            return False
        source = self._everything_file() if everything else self.cache
        try:
            data = json.loads(source.read_bytes())
            if data.get("format") != _FORMAT or data.get("roots") != list(self.roots):
                return False
            if data.get("skipped") != sorted(self.skipped):
                return False
            records = [_decode(item) for item in data["directories"]]
            deep_checked = float(data["deep_checked"])
        except (OSError, ValueError, KeyError, TypeError):
            return False  # missing or unreadable: walk again, never trust half of it
        if not everything:
            self._directories = dict(records)
            self._deep_checked = deep_checked
        else:
            # What this process forgot or found since must stay: a record joins only below
            # a directory that still holds it.
            for path, record in sorted(records, key=lambda item: _depth(item[0])):
                if path in self._directories:
                    continue
                parent = self._directories.get(os.path.dirname(path))
                if path in self.roots or (
                    parent is not None and os.path.basename(path) in parent.subdirectories
                ):
                    self._directories[path] = record
            self._complete = True
        self._changed()
        return True

    def _save(self) -> None:
        if self.cache is None or not self._complete:
            return
        near = set(self._near_the_top())
        for path, only_near in ((self._everything_file(), False), (self.cache, True)):
            data = {
                "format": _FORMAT,
                "roots": list(self.roots),
                "skipped": sorted(self.skipped),
                "deep_checked": self._deep_checked,
                "directories": [
                    _encode(p, r)
                    for p, r in self._directories.items()
                    if not only_near or p in near
                ],
            }
            try:
                replace_atomically(path, json.dumps(data).encode(), mode=0o600)
            except OSError as exc:
                log.info("could not keep the private entries in %s: %s", path, exc)


def _unchanged(entry: PrivateEntry) -> bool:
    try:
        status = os.lstat(entry.path)
    except OSError:
        return False
    return stat.S_IMODE(status.st_mode) == entry.mode and (status.st_uid, status.st_gid) == (
        entry.uid,
        entry.gid,
    )


def _encode(path: str, record: _Directory) -> list[object]:
    private = [
        [name, e.directory, e.uid, e.gid, e.mode, e.unlistable]
        for name, e in record.private.items()
    ]
    return [
        path,
        record.ino,
        record.ctime_ns,
        record.public_entries,
        sorted(record.subdirectories),
        private,
    ]


def _decode(item: list[object]) -> tuple[str, _Directory]:
    path, ino, ctime, public, subdirectories, private = item
    assert isinstance(path, str) and isinstance(subdirectories, list) and isinstance(private, list)
    record = _Directory(int(str(ino)), int(str(ctime)), public_entries=int(str(public)))
    record.subdirectories = {str(name) for name in subdirectories}
    for name, directory, uid, gid, mode, unlistable in private:
        record.private[str(name)] = PrivateEntry(
            os.path.join(path, str(name)),
            bool(directory),
            int(uid),
            int(gid),
            int(mode),
            bool(unlistable),
        )
    return path, record


_machine: MachinePrivateFiles | None = None
_machine_lock = threading.Lock()


def machine_private_files(environ: Mapping[str, str] | None = None) -> MachinePrivateFiles:
    """This process's one view of the machine's private entries, kept in the state directory
    of the first caller (the walk is the machine's, whoever asks)."""
    global _machine
    with _machine_lock:
        if _machine is None:
            _machine = MachinePrivateFiles(_cache_directory(environ) / _CACHE_NAME)
        return _machine


def _below_any(path: str, directories: set[str]) -> bool:
    """Whether a proper ancestor of `path` is one of `directories`."""
    parent = os.path.dirname(path)
    while parent != path:
        if parent in directories:
            return True
        path, parent = parent, os.path.dirname(parent)
    return False


def _cache_directory(environ: Mapping[str, str] | None) -> Path:
    """The account's own `~/.cache/codecoder` (by the password database: a sandbox hides that
    home whatever HOME says), else the state directory."""
    try:
        home = Path(pwd.getpwuid(os.getuid()).pw_dir)
    except KeyError:
        return state_directory(environ)
    cache = home / ".cache" / "codecoder"
    try:
        cache.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError:
        return state_directory(environ)
    return cache if os.access(cache, os.W_OK) else state_directory(environ)


def procfs_private_files(account: Account, proc: str = "/proc") -> tuple[Path, ...]:
    """The kernel's files at the top of a procfs that `account` could read only as their owner
    or group (`/proc/slabinfo`, `/proc/timer_list`, `/proc/vmallocinfo` for root); the
    processes' directories are the sandbox's own, and /proc/sys is read-only settings."""
    found: list[Path] = []
    for name in _listing(proc):
        if name.isdigit() or name in ("self", "thread-self"):
            continue
        _note_private_file(os.path.join(proc, name), account, found)
    return tuple(found)


def _listing(directory: str) -> list[str]:
    try:
        return sorted(os.listdir(directory))
    except OSError:
        return []


def _note_private_file(path: str, account: Account, found: list[Path]) -> None:
    try:
        status = os.lstat(path)
    except OSError:
        return
    if not stat.S_ISREG(status.st_mode) or is_public(status.st_mode):
        return
    entry = PrivateEntry(path, False, status.st_uid, status.st_gid, stat.S_IMODE(status.st_mode))
    if entry.readable_by(account):
        found.append(Path(path))


def readable_roots(roots: Iterable[Path], view: PrivateView) -> Iterator[Path]:
    """`roots` split around what `view` covers, for Landlock (which grants a right beneath a
    directory and cannot take it back below): a root holding no covered entry is kept whole;
    one that does is replaced by its entries, those covered left out, recursively. A directory
    on the way to a covered entry can then be passed through, not listed."""
    covered = {str(p) for p in (*view.directories, *view.files)}
    for root in roots:
        yield from _split(str(root), covered)


def _split(root: str, covered: set[str]) -> Iterator[Path]:
    if root in covered:
        return
    if not any(_inside(c, root) for c in covered):
        yield Path(root)
        return
    for name in _listing(root):
        yield from _split(os.path.join(root, name), covered)
