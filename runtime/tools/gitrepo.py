"""The workspace's repository as the git read tools see it: HEAD, the index, the work tree.

Read with dulwich, a pure-Python git, and never by starting a process (`runtime.tools.git` says
why). Everything is read as a sandbox may have left it: beneath the workspace without following
a symlink out (`foundation.openbeneath.Beneath`), only the repository's own objects, and within
the bounds of `runtime.tools.gitread` (object sizes checked before they are inflated, work-tree
files hashed in chunks and only when their stat does not settle it, a budget per call, a cap on
entries, walks without recursion).
"""

from __future__ import annotations

import contextlib
import io
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

from dulwich.errors import NotGitRepository, RefFormatError
from dulwich.ignore import IgnoreFilter, read_ignore_patterns
from dulwich.index import ConflictedIndexEntry, Index, IndexEntry, cleanup_mode
from dulwich.object_store import iter_tree_contents
from dulwich.objects import S_ISGITLINK, Blob, Commit, ObjectID, ShaFile, Tag, sha_to_hex
from dulwich.objectspec import parse_commit, parse_object
from dulwich.refs import Ref
from dulwich.repo import Repo

from codecoder.foundation.errors import CodecoderError, ExecutionFailed
from codecoder.foundation.openbeneath import Beneath
from codecoder.tools.gitread import (
    MAX_HASH_BYTES,
    BoundedStore,
    ReadBudget,
    blob_id,
    bounded_entries,
    check_index,
)

__all__ = ["Entry", "Files", "GitRepository", "git_errors", "text"]

# path → (mode, object id), the shape of a tree, an index and the work tree alike.
Files = dict[bytes, tuple[int, ObjectID]]
Entry = tuple[int, ObjectID]

MAX_IGNORE_FILE: Final = 4 * 1024 * 1024
MAX_REF_BYTES: Final = 4096
MAX_PACKED_REFS_BYTES: Final = 64 * 1024 * 1024
# Where the untracked walk stops (and says the list is cut): entries looked at, levels of
# directories, bytes of ignore files read.
WALK_MAX_ENTRIES: Final = 500_000
WALK_MAX_DEPTH: Final = 256
IGNORE_BUDGET_BYTES: Final = 16 * 1024 * 1024


@contextlib.contextmanager
def git_errors(what: str) -> Iterator[None]:
    """dulwich's exceptions (and the OS's) become ExecutionFailed at this boundary."""
    try:
        yield
    except CodecoderError:
        raise
    except NotGitRepository as exc:
        raise ExecutionFailed(f"{what}: not a git repository: {exc}") from None
    except RecursionError:
        raise ExecutionFailed(f"{what}: the repository nests deeper than it reads") from None
    except (KeyError, ValueError, AssertionError, NotImplementedError, OSError) as exc:
        raise ExecutionFailed(f"{what}: {type(exc).__name__}: {exc}") from None
    except Exception as exc:  # dulwich's own tree (ObjectFormatException, ...) has no common root
        if type(exc).__module__.startswith("dulwich"):
            raise ExecutionFailed(f"{what}: {type(exc).__name__}: {exc}") from None
        raise


def text(path: bytes) -> str:
    return path.decode("utf-8", "surrogateescape")


class _BoundedRepo:
    """What dulwich's revision parsing needs of a repository (`repo[name]`, its refs and object
    store), with every object read through the bounded store."""

    def __init__(self, repo: Repo, objects: BoundedStore) -> None:
        self._repo = repo
        self.object_store = objects
        self.refs = repo.refs
        self.object_format = repo.object_format

    def __getattr__(self, name: str) -> Any:
        return getattr(self._repo, name)

    def __getitem__(self, name: bytes) -> ShaFile:
        if name == b"HEAD" or name.startswith(b"refs/"):
            with contextlib.suppress(RefFormatError, KeyError):
                return self.object_store[self.refs[Ref(name)]]
        if len(name) in (20, 40):
            with contextlib.suppress(KeyError, ValueError):
                return self.object_store[name]
        raise KeyError(name)


def _bound_refs(refs: Any) -> None:
    """Refuse to read a loose ref file larger than a ref can be (dulwich reads its first line,
    which in a file without newlines is all of it)."""
    read = getattr(refs, "_read_loose_ref_file", None)
    if read is None:
        return

    def bounded(name: Ref) -> bytes | None:
        with contextlib.suppress(OSError):
            size = os.stat(refs.refpath(name)).st_size
            if size > MAX_REF_BYTES:
                raise ExecutionFailed(
                    f"the ref {text(name)} is a file of {size:,} bytes, not a ref; the git "
                    "tools do not read it"
                )
        result: bytes | None = read(name)
        return result

    refs._read_loose_ref_file = bounded


# What dulwich reads of `.git` besides the objects: none may lead out of it through a link.
_READ_IN_GIT = ("objects", "objects/pack", "objects/info", "index", "packed-refs", "HEAD", "refs")


def _confine_objects(workspace: Path, repo: Repo) -> None:
    """Keep every read of the repository inside the workspace's own `.git`.

    `objects/info/alternates` (and GIT_ALTERNATE_OBJECT_DIRECTORIES) name object stores
    anywhere on the machine: they are never consulted, so an object only they hold is not
    found. A link among what dulwich reads (`objects`, a pack, a loose object, the index) would
    lead to another repository's files: refused, the whole read when it is a directory or the
    index, the one object when it is a loose object.
    """
    git_dir = os.path.realpath(workspace / ".git")
    for name in _READ_IN_GIT:
        path = workspace / ".git" / name
        if os.path.islink(path):
            raise ExecutionFailed(
                f".git/{name} is a symbolic link: the git tools read only what is inside the "
                "workspace's .git; use run_command to run git here"
            )
    store = repo.object_store
    if not os.path.realpath(getattr(store, "path", git_dir)).startswith(git_dir + os.sep):
        raise ExecutionFailed("the repository's objects are outside its .git directory")
    store._alternates = []
    pack_dir = getattr(store, "pack_dir", None)
    if pack_dir is not None and os.path.isdir(pack_dir):
        for entry in os.scandir(pack_dir):
            if entry.is_symlink():
                raise ExecutionFailed(
                    f".git/objects/pack/{entry.name} is a symbolic link: the git tools read only "
                    "objects inside the workspace's .git; use run_command to run git here"
                )
    loose = store._get_loose_object
    shafile_path = store._get_shafile_path

    def confined_loose(sha: Any) -> Any:
        raw_length = store.object_format.oid_length
        hex_sha = sha_to_hex(sha) if len(sha) == raw_length else sha
        if os.path.islink(shafile_path(hex_sha)):
            raise ExecutionFailed(
                "a loose object of the repository is a symbolic link: the git tools read only "
                "objects inside the workspace's .git; use run_command to run git here"
            )
        return loose(sha)

    store._get_loose_object = confined_loose  # type: ignore[method-assign]


class GitRepository:
    """A read-only, bounded view of the workspace's repository: HEAD, index, work tree."""

    def __init__(self, workspace: Path) -> None:
        git = workspace / ".git"
        try:
            info = os.lstat(git)
        except FileNotFoundError:
            raise ExecutionFailed(
                f"the workspace {workspace} is not a git repository (no .git at its root)"
            ) from None
        if not stat.S_ISDIR(info.st_mode):
            # A `gitdir:` file (a linked worktree, a submodule) or a symlink points at a
            # repository outside the workspace, which a tool that never asks must not read.
            kind = "a symlink" if stat.S_ISLNK(info.st_mode) else "not a directory"
            raise ExecutionFailed(
                f"the workspace's .git is {kind}: the git tools read only a repository whose "
                ".git directory is in the workspace; use run_command to run git here"
            )
        if os.path.lexists(git / "commondir"):
            # A linked worktree's .git names another repository's directory for its objects
            # and refs: one a sandbox could point anywhere.
            raise ExecutionFailed(
                "the workspace's .git has a commondir file, which makes git read another "
                "directory's objects and refs; the git tools read only the workspace's own"
            )
        check_index(str(git / "index"))
        for name in ("packed-refs", "shallow"):
            with contextlib.suppress(FileNotFoundError):
                if os.stat(git / name).st_size > MAX_PACKED_REFS_BYTES:
                    raise ExecutionFailed(
                        f"the repository's {name} is larger than the git tools read "
                        f"({MAX_PACKED_REFS_BYTES:,} bytes); use run_command to run git"
                    )
        # worktree= pins the work tree: core.worktree in a hostile config could point it at
        # any directory on the machine.
        self.repo = Repo(str(workspace), worktree=str(workspace))
        _confine_objects(workspace, self.repo)
        _bound_refs(self.repo.refs)
        self.root = workspace
        self.budget = ReadBudget()
        self.objects = BoundedStore(self.repo.object_store, self.budget)
        self.view = _BoundedRepo(self.repo, self.objects)
        # Every read of the work tree goes through this: nothing behind a symlink, nothing
        # outside the workspace, whatever a sandbox planted (see foundation.openbeneath).
        self.tree = Beneath(workspace)
        index_path = self.repo.index_path()
        self.index: Index | None = Index(index_path) if os.path.exists(index_path) else None

    def close(self) -> None:
        self.tree.close()
        self.repo.close()

    # --- commits and trees --------------------------------------------------------------------

    def head(self) -> Commit | None:
        try:
            sha = self.repo.head()
        except KeyError:  # an unborn branch: no commit yet
            return None
        try:
            commit = self.objects[sha]
        except KeyError:
            raise ExecutionFailed(
                f"HEAD names {text(sha)[:12]}, which the repository itself does not hold"
            ) from None
        return commit if isinstance(commit, Commit) else None

    def branch(self) -> str | None:
        """The checked-out branch, None when HEAD is detached."""
        target = self.repo.refs.read_ref(Ref(b"HEAD"))
        if target is None or not target.startswith(b"ref: "):
            return None
        return text(target[5:].strip().removeprefix(b"refs/heads/"))

    def commit(self, revision: str) -> Commit:
        spec = revision.encode()
        view: Any = self.view
        with contextlib.suppress(KeyError, ValueError, AssertionError):
            return parse_commit(view, spec)  # names, ids and short ids
        if b"~" in spec or b"^" in spec:  # ancestry (HEAD~2, main^), which parse_commit lacks
            with contextlib.suppress(KeyError, ValueError, AssertionError, IndexError):
                found = parse_object(view, spec)
                while isinstance(found, Tag):
                    found = self.objects[found.object[1]]
                if isinstance(found, Commit):
                    return found
        raise ExecutionFailed(f"unknown revision {revision!r}")

    def tree_files(self, tree: ObjectID | None) -> Files:
        if tree is None:
            return {}
        return {
            entry.path: (entry.mode, entry.sha)
            for entry in bounded_entries(iter_tree_contents(self.objects, tree), "the tree")
            if entry.path is not None and entry.mode is not None and entry.sha is not None
        }

    def content(self, mode: int, sha: ObjectID) -> bytes:
        """A blob's content (ObjectTooLarge for one larger than the tools read)."""
        if S_ISGITLINK(mode):
            return b"Subproject commit " + sha + b"\n"
        return self.objects[sha].as_raw_string()

    def blob_size(self, mode: int, sha: ObjectID) -> int:
        return 0 if S_ISGITLINK(mode) else self.objects.size(sha)

    # --- the index and the work tree ----------------------------------------------------------

    def index_files(self) -> Files:
        files: Files = {}
        for path, entry in self.index.items() if self.index is not None else ():
            chosen = (
                entry.this or entry.other or entry.ancestor
                if isinstance(entry, ConflictedIndexEntry)
                else entry
            )
            if chosen is not None:
                files[path] = (chosen.mode, chosen.sha)
        return files

    def conflicted(self) -> set[bytes]:
        if self.index is None:
            return set()
        return {p for p, e in self.index.items() if isinstance(e, ConflictedIndexEntry)}

    def staged_changes(
        self, tree: ObjectID | None
    ) -> Iterator[tuple[bytes, Entry | None, Entry | None]]:
        """(path, in tree, in index) for each path where the two differ."""
        if self.index is None:
            for path, version in self.tree_files(tree).items():
                yield path, version, None
            return
        changes = self.index.changes_from_tree(self.objects, tree)
        for (old_path, new_path), (old_mode, new_mode), (old_sha, new_sha) in bounded_entries(
            changes, "the difference between HEAD and the index"
        ):
            either = old_path or new_path
            assert either is not None
            yield either, _entry(old_mode, old_sha), _entry(new_mode, new_sha)

    def unstaged_paths(self) -> list[bytes]:
        """Tracked paths whose work-tree file differs from the index.

        Like git: a file whose stat matches its index entry is not read, nor one whose size
        differs from it (it differs); a path behind a symlinked directory is gone. No filter
        runs (the config's clean filters are exactly what must not run) and the index is not
        refreshed on disk (a read tool writes nothing).
        """
        if self.index is None:
            return []
        return sorted(
            path
            for path, entry in self.index.items()
            if isinstance(entry, ConflictedIndexEntry)
            or (not entry.skip_worktree and self._differs(path, entry))
        )

    def _differs(self, path: bytes, entry: IndexEntry) -> bool:
        st = self.tree.lstat(path)
        if st is None:
            return True
        if stat.S_ISDIR(st.st_mode):
            return not S_ISGITLINK(entry.mode)  # a nested repository is not looked into
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
            return True
        if _stat_matches(st, entry):
            return False
        # The index keeps a size's low 32 bits (git's own rule): another one has changed.
        if st.st_size & 0xFFFFFFFF != entry.size & 0xFFFFFFFF or st.st_size > MAX_HASH_BYTES:
            return True
        found = self.worktree_id(path)
        return found is None or found[1] != entry.sha

    def exists(self, path: bytes) -> bool:
        st = self.tree.lstat(path)
        return st is not None and (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode))

    def worktree_id(self, path: bytes) -> tuple[int, ObjectID] | None:
        """(mode, object id) of the file at `path` now, hashed in chunks; None if it is gone,
        or is anything but a regular file or a symlink (whose target text is its content)."""
        st = self.tree.lstat(path)
        if st is None:
            return None
        try:
            if stat.S_ISLNK(st.st_mode):
                return cleanup_mode(st.st_mode), Blob.from_string(self.tree.readlink(path)).id
            if not stat.S_ISREG(st.st_mode):
                return None
            with self.tree.open(path) as file:
                size = os.fstat(file.fileno()).st_size
                return cleanup_mode(st.st_mode), ObjectID(blob_id(file.fileno(), size, self.budget))
        except (FileNotFoundError, NotADirectoryError):
            return None

    def worktree_file(
        self, path: bytes, limit: int
    ) -> tuple[int, ObjectID, bytes | None, int] | None:
        """(mode, object id, content, size) of the file at `path` now, the content None when
        the file is larger than `limit` (then it is hashed, not held, and not even hashed past
        MAX_HASH_BYTES: its id is then all zeros); None if it is gone or not a regular file or a
        symlink."""
        st = self.tree.lstat(path)
        if st is None:
            return None
        mode = cleanup_mode(st.st_mode)
        try:
            if stat.S_ISLNK(st.st_mode):
                data = self.tree.readlink(path)
                return mode, Blob.from_string(data).id, data, len(data)
            if not stat.S_ISREG(st.st_mode):
                return None
            with self.tree.open(path) as file:
                size = os.fstat(file.fileno()).st_size
                if size > MAX_HASH_BYTES:
                    return mode, ObjectID(b"0" * 40), None, size
                if size > limit:
                    return mode, ObjectID(blob_id(file.fileno(), size, self.budget)), None, size
                self.budget.spend(size, f"{text(path)} of the work tree")
                data = file.read(limit + 1)[:limit]
        except (FileNotFoundError, NotADirectoryError):
            return None
        return mode, Blob.from_string(data).id, data, len(data)

    def untracked(self, limit: int) -> tuple[list[str], bool]:
        """Untracked, unignored paths, a wholly untracked directory as `dir/` (like git); and
        whether the list was cut (at `limit` paths, or at one of the walk's bounds)."""
        tracked = {text(path) for path in self.index_files()}
        tracked_dirs = {
            "/".join(p.split("/")[:i]) for p in tracked for i in range(1, p.count("/") + 1)
        }
        return _UntrackedWalk(self.tree, tracked, tracked_dirs).run(limit)


class _Cut(Exception):
    """The untracked walk reached one of its bounds."""


class _UntrackedWalk:
    """The walk of the work tree for untracked paths: without recursion, within
    `WALK_MAX_ENTRIES` entries looked at, `WALK_MAX_DEPTH` levels and `IGNORE_BUDGET_BYTES` of
    ignore files read, with each directory's `.gitignore` read once (beneath the workspace:
    one that is a symlink, or lies behind one, is not read, as git does not follow them)."""

    def __init__(self, tree: Beneath, tracked: set[str], tracked_dirs: set[str]) -> None:
        self.tree = tree
        self.tracked, self.tracked_dirs = tracked, tracked_dirs
        self.looked = 0
        self.ignore_bytes = 0
        # Only the repository's own exclude file: core.excludesFile could name any file.
        self.exclude = self._load(".git/info/exclude")
        self.filters: dict[str, IgnoreFilter | None] = {}

    def _load(self, path: str) -> IgnoreFilter | None:
        left = IGNORE_BUDGET_BYTES - self.ignore_bytes
        try:
            data = self.tree.read(path, limit=min(MAX_IGNORE_FILE, left + 1))
        except OSError:
            return None
        self.ignore_bytes += len(data)
        if self.ignore_bytes > IGNORE_BUDGET_BYTES:
            raise _Cut
        return IgnoreFilter(read_ignore_patterns(io.BytesIO(data)), False, path=path)

    def _entries(self, relative: str) -> list[tuple[str, os.stat_result]]:
        if relative.count("/") > WALK_MAX_DEPTH:
            raise _Cut
        found = self.tree.scandir(relative)
        self.looked += len(found)
        if self.looked > WALK_MAX_ENTRIES:
            raise _Cut
        if relative not in self.filters:
            self.filters[relative] = self._load(f"{relative}.gitignore")
        return found

    def _ignored(self, path: str) -> bool:
        """`path` (a directory's with a trailing slash) by the rules of the `.gitignore` files
        above it, the deepest deciding, then the exclude file."""
        end = len(path.rstrip("/"))
        while True:
            end = path.rfind("/", 0, end)
            prefix = path[: end + 1]
            found = self.filters.get(prefix)
            if found is not None:
                decided = found.is_ignored(path[len(prefix) :])
                if decided is not None:
                    return decided
            if end < 0:
                break
        return self.exclude is not None and self.exclude.is_ignored(path) is True

    def _holds_untracked(self, relative: str) -> bool:
        """Whether the directory holds any untracked, unignored path."""
        pending = [relative]
        while pending:
            current = pending.pop()
            if current.count("/") > WALK_MAX_DEPTH:
                return True  # too deep to look into: shown, as what it holds is not tracked
            if self.tree.lstat(current + ".git") is not None:
                return True  # a nested repository, shown as one untracked directory
            for name, info in self._entries(current):
                child = f"{current}{name}"
                if stat.S_ISDIR(info.st_mode):
                    if not self._ignored(child + "/"):
                        pending.append(child + "/")
                elif not self._ignored(child):
                    return True
        return False

    def run(self, limit: int) -> tuple[list[str], bool]:
        found: list[str] = []
        try:
            self._walk(found, limit)
        except _Cut:
            return found, True
        return found, len(found) >= limit and limit > 0 and self._more

    def _walk(self, found: list[str], limit: int) -> None:
        self._more = False
        # A stack of iterators over directories' entries: depth-first, each directory's
        # entries in name order, as git lists them.
        stack = [iter(self._entries(""))]
        prefixes = [""]
        while stack:
            item = next(stack[-1], None)
            if item is None:
                stack.pop()
                prefixes.pop()
                continue
            name, info = item
            child = f"{prefixes[-1]}{name}"
            if name == ".git" or child in self.tracked:
                continue
            if stat.S_ISDIR(info.st_mode):
                if self._ignored(child + "/"):
                    continue
                if child in self.tracked_dirs:
                    stack.append(iter(self._entries(child + "/")))
                    prefixes.append(child + "/")
                    continue
                if not self._holds_untracked(child + "/"):
                    continue
                child += "/"
            elif self._ignored(child):
                continue
            if len(found) >= limit:
                self._more = True
                raise _Cut
            found.append(child)


def _entry(mode: int | None, sha: bytes | None) -> Entry | None:
    return None if mode is None or sha is None else (mode, ObjectID(sha))


def _stat_matches(st: os.stat_result, entry: IndexEntry) -> bool:
    """Whether the file is, by its stat, the one the index recorded (git's shortcut: size,
    modification and change time to the nanosecond)."""

    def nanoseconds(value: int | float | tuple[int, int]) -> int:
        if isinstance(value, tuple):
            return value[0] * 1_000_000_000 + value[1]
        return int(value) * 1_000_000_000

    return (
        st.st_size == entry.size
        and st.st_mtime_ns == nanoseconds(entry.mtime)
        and st.st_ctime_ns == nanoseconds(entry.ctime)
    )
