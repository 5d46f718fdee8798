"""The git read tools: `git_status`, `git_diff`, `git_log`.

They read the workspace's repository with dulwich, a pure-Python git, and never start a
process: a hostile `.git/config` (core.fsmonitor, core.pager, diff.external, textconv and
filter drivers, hooks) that real git would run cannot run anything here. Using dulwich is not
enough on its own: its porcelain `status` runs `filter.<driver>.clean` commands named in the
config, and refreshes the index on disk. So these tools assemble status and diffs from the
object store, the index and the work tree themselves, compare the work tree's raw bytes
(git's view after filters is not computed: a file under a filter may show as modified), write
nothing, and pin the work tree to the workspace whatever `core.worktree` says.

The repository is the one whose `.git` is at the workspace root. Paths in arguments and
results are relative to it, in POSIX form.
"""

from __future__ import annotations

import contextlib
import datetime
import io
import json
import os
import stat
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dulwich.diff_tree import tree_changes
from dulwich.errors import NotGitRepository
from dulwich.ignore import IgnoreFilter, IgnoreFilterManager, read_ignore_patterns
from dulwich.index import ConflictedIndexEntry, Index, IndexEntry, cleanup_mode
from dulwich.object_store import iter_tree_contents
from dulwich.objects import S_ISGITLINK, Blob, Commit, ObjectID, Tag, sha_to_hex
from dulwich.objectspec import parse_commit, parse_object
from dulwich.patch import gen_diff_header, is_binary, patch_filename, unified_diff
from dulwich.refs import Ref
from dulwich.repo import Repo
from pydantic import Field, ValidationInfo, field_validator

from codecoder.runtime.kernel.ceiling import EnvironmentTag
from codecoder.runtime.kernel.confined import Beneath
from codecoder.runtime.kernel.display import spelled
from codecoder.runtime.kernel.errors import CodecoderError, ExecutionFailed
from codecoder.runtime.permissions.keys import Permission
from codecoder.runtime.tools.base import Category, P, Parameters, Tool, ToolContext, ToolResult

__all__ = ["GIT_TOOLS", "GitDiff", "GitLog", "GitStatus"]

# path → (mode, object id), the shape of a tree, an index and the work tree alike.
_Files = dict[bytes, tuple[int, ObjectID]]
_Entry = tuple[int, ObjectID]


@contextlib.contextmanager
def _git_errors(what: str) -> Iterator[None]:
    """dulwich's exceptions (and the OS's) become ExecutionFailed at this boundary."""
    try:
        yield
    except CodecoderError:
        raise
    except NotGitRepository as exc:
        raise ExecutionFailed(f"{what}: not a git repository: {exc}") from None
    except (KeyError, ValueError, AssertionError, NotImplementedError, OSError) as exc:
        raise ExecutionFailed(f"{what}: {type(exc).__name__}: {exc}") from None
    except Exception as exc:  # dulwich's own tree (ObjectFormatException, ...) has no common root
        if type(exc).__module__.startswith("dulwich"):
            raise ExecutionFailed(f"{what}: {type(exc).__name__}: {exc}") from None
        raise


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


class _Repository:
    """A read-only view of the workspace's repository: HEAD, index, work tree."""

    def __init__(self, workspace: Path) -> None:
        try:
            info = os.lstat(workspace / ".git")
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
        # worktree= pins the work tree: core.worktree in a hostile config could point it at
        # any directory on the machine.
        self.repo = Repo(str(workspace), worktree=str(workspace))
        _confine_objects(workspace, self.repo)
        self.root = workspace
        # Every read of the work tree goes through this: nothing behind a symlink, nothing
        # outside the workspace, whatever a sandbox planted (see runtime.kernel.confined).
        self.tree = Beneath(workspace)
        index_path = self.repo.index_path()
        self.index: Index | None = Index(index_path) if os.path.exists(index_path) else None

    def close(self) -> None:
        self.tree.close()
        self.repo.close()

    # --- commits and trees --------------------------------------------------------------------

    def head(self) -> Commit | None:
        try:
            commit = self.repo[self.repo.head()]
        except KeyError:  # an unborn branch: no commit yet
            return None
        return commit if isinstance(commit, Commit) else None

    def branch(self) -> str | None:
        """The checked-out branch, None when HEAD is detached."""
        target = self.repo.refs.read_ref(Ref(b"HEAD"))
        if target is None or not target.startswith(b"ref: "):
            return None
        return _text(target[5:].strip().removeprefix(b"refs/heads/"))

    def commit(self, revision: str) -> Commit:
        spec = revision.encode()
        with contextlib.suppress(KeyError, ValueError, AssertionError):
            return parse_commit(self.repo, spec)  # names, ids and short ids
        if b"~" in spec or b"^" in spec:  # ancestry (HEAD~2, main^), which parse_commit lacks
            with contextlib.suppress(KeyError, ValueError, AssertionError, IndexError):
                found = parse_object(self.repo, spec)
                while isinstance(found, Tag):
                    found = self.repo[found.object[1]]
                if isinstance(found, Commit):
                    return found
        raise ExecutionFailed(f"unknown revision {revision!r}")

    def tree_files(self, tree: ObjectID | None) -> _Files:
        if tree is None:
            return {}
        return {
            entry.path: (entry.mode, entry.sha)
            for entry in iter_tree_contents(self.repo.object_store, tree)
            if entry.path is not None and entry.mode is not None and entry.sha is not None
        }

    def content(self, mode: int, sha: ObjectID) -> bytes:
        if S_ISGITLINK(mode):
            return b"Subproject commit " + sha + b"\n"
        blob = self.repo.object_store[sha]
        return blob.as_raw_string()

    # --- the index and the work tree ----------------------------------------------------------

    def index_files(self) -> _Files:
        files: _Files = {}
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
    ) -> Iterator[tuple[bytes, _Entry | None, _Entry | None]]:
        """(path, in tree, in index) for each path where the two differ."""
        if self.index is None:
            for path, version in self.tree_files(tree).items():
                yield path, version, None
            return
        changes = self.index.changes_from_tree(self.repo.object_store, tree)
        for (old_path, new_path), (old_mode, new_mode), (old_sha, new_sha) in changes:
            either = old_path or new_path
            assert either is not None
            yield either, _entry(old_mode, old_sha), _entry(new_mode, new_sha)

    def unstaged_paths(self) -> list[bytes]:
        """Tracked paths whose work-tree file differs from the index, by raw bytes.

        Like git: a file whose stat matches its index entry is not read; a path behind a
        symlinked directory is gone. No filter runs (the config's clean filters are exactly what
        must not run) and the index is not refreshed on disk (a read tool writes nothing).
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
        found = self.worktree_file(path)
        return found is None or found[1] != entry.sha

    def worktree_file(self, path: bytes) -> tuple[int, ObjectID, bytes] | None:
        """(mode, object id, content) of the file at `path` now; None if it is gone, or is
        anything but a regular file or a symlink (whose target text is its content)."""
        st = self.tree.lstat(path)
        if st is None:
            return None
        try:
            if stat.S_ISLNK(st.st_mode):
                data = self.tree.readlink(path)
            elif stat.S_ISREG(st.st_mode):
                data = self.tree.read(path)
            else:
                return None
        except (FileNotFoundError, NotADirectoryError):
            return None
        blob = Blob.from_string(data)
        return cleanup_mode(st.st_mode), blob.id, data

    def untracked(self, limit: int) -> tuple[list[str], bool]:
        """Untracked, unignored paths, a wholly untracked directory as `dir/` (like git)."""
        tracked = {_text(path) for path in self.index_files()}
        tracked_dirs = {
            "/".join(p.split("/")[:i]) for p in tracked for i in range(1, p.count("/") + 1)
        }
        # Only the repository's own ignore files: core.excludesFile could name any file.
        exclude = _ignore_filter(self.tree, ".git/info/exclude")
        ignores = _ConfinedIgnores(self.tree, [exclude] if exclude else [])
        found: list[str] = []
        tree = self.tree

        def ignored(relative: str) -> bool:
            return ignores.is_ignored(relative) is True

        def holds_untracked(relative: str) -> bool:
            if tree.lstat(relative + ".git") is not None:
                return True  # a nested repository, shown as one untracked directory
            for name, info in tree.scandir(relative):
                child = f"{relative}{name}"
                if stat.S_ISDIR(info.st_mode):
                    if not ignored(child + "/") and holds_untracked(child + "/"):
                        return True
                elif not ignored(child):
                    return True
            return False

        def walk(relative: str) -> bool:
            for name, info in tree.scandir(relative):
                if len(found) >= limit:
                    return False
                if name == ".git":
                    continue
                child = f"{relative}{name}"
                if child in tracked:
                    continue
                if stat.S_ISDIR(info.st_mode):
                    if ignored(child + "/"):
                        continue
                    if child in tracked_dirs:
                        if not walk(child + "/"):
                            return False
                    elif holds_untracked(child + "/"):
                        found.append(child + "/")
                elif not ignored(child):
                    found.append(child)
            return True

        complete = walk("")
        return found, not complete


def _entry(mode: int | None, sha: bytes | None) -> _Entry | None:
    return None if mode is None or sha is None else (mode, ObjectID(sha))


class _ConfinedIgnores(IgnoreFilterManager):
    """dulwich's ignore rules, with each `.gitignore` read beneath the workspace: one that is a
    symlink, or lies behind one, is not read (git does not follow them either)."""

    def __init__(self, tree: Beneath, global_filters: list[IgnoreFilter]) -> None:
        super().__init__(str(tree.root), global_filters, False)
        self._tree = tree

    def _load_path(self, path: str) -> IgnoreFilter | None:
        if path not in self._path_filters:
            name = f"{path}/.gitignore" if path else ".gitignore"
            self._path_filters[path] = _ignore_filter(self._tree, name)
        return self._path_filters[path]


def _ignore_filter(tree: Beneath, path: str) -> IgnoreFilter | None:
    try:
        data = tree.read(path, limit=_MAX_IGNORE_FILE)
    except OSError:
        return None
    return IgnoreFilter(read_ignore_patterns(io.BytesIO(data)), False, path=path)


_MAX_IGNORE_FILE = 4 * 1024 * 1024


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


def _text(path: bytes) -> str:
    return path.decode("utf-8", "surrogateescape")


def _shown(path: str) -> str:
    """A path as printed: quoted like git's core.quotePath when it holds control characters,
    so a file name cannot rewrite the terminal it is shown on."""
    if any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in path):
        return json.dumps(spelled(path))
    return spelled(path)  # a name that is not UTF-8 as `n\\xe9e.txt`, which reads back


@contextlib.contextmanager
def _opened(ctx: ToolContext, what: str) -> Iterator[_Repository]:
    with _git_errors(what):
        repository = _Repository(ctx.workspace)
        try:
            yield repository
        finally:
            repository.close()


class _GitTool(Tool[P]):
    category = Category.GIT
    environment = EnvironmentTag.RUNTIME
    asks = False

    def permission(self, args: P) -> Permission:
        return Permission.none()


def _relative_path(value: str) -> str:
    """A workspace-relative POSIX path, or ValueError naming what is wrong with it."""
    if not value or "\x00" in value:
        raise ValueError("must be a non-empty path")
    if value.startswith("/") or "\\" in value:
        raise ValueError(f"must be relative to the workspace, in POSIX form: {value!r}")
    parts = [part for part in value.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise ValueError(f"must stay inside the workspace (no ..): {value!r}")
    return "/".join(parts)


def _revision(value: str) -> str:
    # No ":": that syntax names files (HEAD:path, :path in the index), not commits.
    if not value.strip() or any(ord(c) < 0x20 or c == ":" for c in value) or value.startswith("-"):
        raise ValueError(f"is not a revision: {value!r}")
    return value.strip()


class _Paths(Parameters):
    paths: list[str] = Field(
        default_factory=list,
        max_length=100,
        description="Limit to these files or directories (workspace-relative). Empty: all.",
    )

    @field_validator("paths")
    @classmethod
    def _relative(cls, value: list[str]) -> list[str]:
        return [_relative_path(path) for path in value]

    def covers(self, path: bytes) -> bool:
        if not self.paths:
            return True
        text = _text(path)
        return any(p == "" or text == p or text.startswith(p + "/") for p in self.paths)


# --- git_status ------------------------------------------------------------------------------


class GitStatusParameters(_Paths):
    max_untracked: int = Field(
        default=500, ge=0, le=10_000, description="The most untracked paths to list."
    )


class GitStatus(_GitTool[GitStatusParameters]):
    name = "git_status"
    description = (
        "Show the repository's state: the branch, and each changed path with a two-letter code "
        "like `git status --short` (first letter: staged, second: not staged; M modified, "
        "A added, D deleted, U conflicted, ?? untracked). Read-only."
    )
    parameters = GitStatusParameters

    def execute(self, args: GitStatusParameters, ctx: ToolContext) -> ToolResult:
        result: ToolResult = ctx.environment.run(lambda: self._status(args, ctx))
        return result

    def _status(self, args: GitStatusParameters, ctx: ToolContext) -> ToolResult:
        with _opened(ctx, "git_status") as repository:
            head = repository.head()
            branch = repository.branch()
            codes: dict[bytes, list[str]] = {}
            for path, old, new in repository.staged_changes(head.tree if head else None):
                codes.setdefault(path, [" ", " "])[0] = (
                    "A" if old is None else "D" if new is None else "M"
                )
            for path in repository.unstaged_paths():
                gone = repository.worktree_file(path) is None
                codes.setdefault(path, [" ", " "])[1] = "D" if gone else "M"
            for path in repository.conflicted():
                codes[path] = ["U", "U"]
            untracked, cut = repository.untracked(args.max_untracked)
        changes = [
            {"path": _text(path), "staged": code[0].strip(), "unstaged": code[1].strip()}
            for path, code in sorted(codes.items())
            if args.covers(path)
        ]
        untracked = [
            p for p in untracked if args.covers(p.rstrip("/").encode("utf-8", "surrogateescape"))
        ]
        if branch is None:
            heading = f"## HEAD (detached at {head.id.decode()[:10]})" if head else "## HEAD"
        elif head is None:
            heading = f"## No commits yet on {_shown(branch)}"
        else:
            heading = f"## {_shown(branch)}"
        lines = [heading]
        lines += [
            f"{c['staged'] or ' '}{c['unstaged'] or ' '} {_shown(c['path'])}" for c in changes
        ]
        lines += [f"?? {_shown(path)}" for path in untracked]
        if cut:
            lines.append(f"[more untracked paths not listed: the limit is {args.max_untracked}]")
        if not changes and not untracked:
            lines.append("nothing to commit, working tree clean")
        data = {
            "branch": branch,
            "head": head.id.decode() if head else None,
            "changes": changes,
            "untracked": untracked,
            "untracked_truncated": cut,
        }
        return ToolResult(output="\n".join(lines), data=data)


# --- git_diff --------------------------------------------------------------------------------


class GitDiffParameters(_Paths):
    staged: bool = Field(
        default=False,
        description="Show what is staged (the index against HEAD, or against `base`), like "
        "`git diff --cached`. Default: the work tree against the index, like `git diff`.",
    )
    base: str | None = Field(
        default=None,
        max_length=256,
        description="A revision to compare against (branch, tag, commit id, HEAD~2). Alone: "
        "that revision against the work tree.",
    )
    target: str | None = Field(
        default=None,
        max_length=256,
        description="With `base`: a second revision; shows the changes from base to target.",
    )
    context_lines: int = Field(
        default=3, ge=0, le=1000, description="Unchanged lines shown around each change."
    )
    max_chars: int = Field(
        default=50_000, ge=1000, le=1_000_000, description="The most characters of diff to return."
    )

    @field_validator("base", "target")
    @classmethod
    def _revision(cls, value: str | None) -> str | None:
        return None if value is None else _revision(value)

    @field_validator("target")
    @classmethod
    def _needs_base(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and info.data.get("base") is None:
            raise ValueError("needs `base`: the diff goes from base to target")
        return value


@dataclass(frozen=True, slots=True)
class _Version:
    mode: int
    sha: bytes
    data: bytes


class GitDiff(_GitTool[GitDiffParameters]):
    name = "git_diff"
    description = (
        "Show changes as a unified diff: the work tree against the index (default), what is "
        "staged (`staged`), or between revisions (`base`, `target`). Read-only."
    )
    parameters = GitDiffParameters

    def execute(self, args: GitDiffParameters, ctx: ToolContext) -> ToolResult:
        result: ToolResult = ctx.environment.run(lambda: self._diff(args, ctx))
        return result

    def _diff(self, args: GitDiffParameters, ctx: ToolContext) -> ToolResult:
        with _opened(ctx, "git_diff") as repository:
            pairs = [
                (path, old, new)
                for path, old, new in self._pairs(repository, args)
                if args.covers(path) and old != new
            ]
            out = io.BytesIO()
            files = [
                _write_file_diff(out, path, old, new, args.context_lines)
                for path, old, new in sorted(pairs, key=lambda pair: pair[0])
            ]
        text = out.getvalue().decode("utf-8", "replace")
        truncated = len(text) > args.max_chars
        if truncated:
            text = (
                text[: args.max_chars]
                + f"\n[diff cut: {len(text) - args.max_chars} more characters; "
                "narrow it with `paths`]\n"
            )
        return ToolResult(
            output=text or "(no differences)",
            data={"files": files, "truncated": truncated},
        )

    def _pairs(
        self, repository: _Repository, args: GitDiffParameters
    ) -> Iterable[tuple[bytes, _Version | None, _Version | None]]:
        stored = _stored(repository)
        if args.base is not None and args.target is not None:
            old_tree = repository.commit(args.base).tree
            new_tree = repository.commit(args.target).tree
            for change in tree_changes(repository.repo.object_store, old_tree, new_tree):
                before, after = change.old, change.new
                path = (after.path if after is not None else None) or (
                    before.path if before is not None else None
                )
                assert path is not None
                yield (
                    path,
                    stored(before.mode, before.sha) if before is not None else None,
                    stored(after.mode, after.sha) if after is not None else None,
                )
            return
        head = repository.head()
        if args.base is not None:
            tree: ObjectID | None = repository.commit(args.base).tree
        else:
            tree = head.tree if head else None
        if args.staged:
            for path, old, new in repository.staged_changes(tree):
                yield path, stored(*old) if old else None, stored(*new) if new else None
            return
        index = repository.index_files()
        if args.base is None:
            for path in repository.unstaged_paths():
                if path in index:
                    yield path, stored(*index[path]), _worktree(repository, path)
            return
        # A revision against the work tree: only paths that differ between the revision and
        # the index, or between the index and the work tree, can differ between the two ends.
        in_tree = repository.tree_files(tree)
        candidates = {path for path, _, _ in repository.staged_changes(tree)}
        candidates.update(repository.unstaged_paths())
        for path in candidates:
            then = stored(*in_tree[path]) if path in in_tree else None
            yield path, then, _worktree(repository, path) if path in index else None


def _stored(repository: _Repository) -> Callable[[int | None, ObjectID | None], _Version | None]:
    """Versions read from the object store (tree and index entries)."""

    def version(mode: int | None, sha: ObjectID | None) -> _Version | None:
        if mode is None or sha is None:
            return None
        return _Version(mode, sha, repository.content(mode, sha))

    return version


def _worktree(repository: _Repository, path: bytes) -> _Version | None:
    found = repository.worktree_file(path)
    return _Version(*found) if found is not None else None


def _write_file_diff(
    out: io.BytesIO, path: bytes, old: _Version | None, new: _Version | None, context: int
) -> dict[str, Any]:
    """One file's diff in git's format; returns its summary."""
    out.writelines(
        gen_diff_header(
            (path if old else None, path if new else None),
            (old.mode if old else None, new.mode if new else None),
            (old.sha if old else None, new.sha if new else None),
        )
    )
    old_data = old.data if old else b""
    new_data = new.data if new else b""
    status = "added" if old is None else "deleted" if new is None else "modified"
    summary: dict[str, Any] = {"path": _text(path), "status": status, "binary": False}
    if is_binary(old_data) or is_binary(new_data):
        a = patch_filename(path if old else None, b"a")
        b = patch_filename(path if new else None, b"b")
        out.write(b"Binary files " + a + b" and " + b + b" differ\n")
        summary["binary"] = True
        return summary
    added = removed = 0
    for line in unified_diff(
        old_data.splitlines(keepends=True),
        new_data.splitlines(keepends=True),
        patch_filename(path if old else None, b"a"),
        patch_filename(path if new else None, b"b"),
        n=context,
    ):
        if line.startswith(b"+") and not line.startswith(b"+++ "):
            added += 1
        elif line.startswith(b"-") and not line.startswith(b"--- "):
            removed += 1
        out.write(line)
    summary.update(additions=added, deletions=removed)
    return summary


# --- git_log ---------------------------------------------------------------------------------


class GitLogParameters(_Paths):
    revision: str = Field(
        default="HEAD",
        max_length=512,
        description="Where to start: a branch, tag or commit (default HEAD), or a range "
        "`A..B` for the commits in B that are not in A.",
    )
    max_count: int = Field(default=20, ge=1, le=1000, description="The most commits to list.")
    full: bool = Field(
        default=False,
        description="Include each commit's whole message, not just its first line.",
    )

    @field_validator("revision")
    @classmethod
    def _a_revision(cls, value: str) -> str:
        return _revision(value)


class GitLog(_GitTool[GitLogParameters]):
    name = "git_log"
    description = (
        "List commits, newest first: id, date, author and subject (the whole message with "
        "`full`), optionally only those touching `paths`. Read-only."
    )
    parameters = GitLogParameters

    def execute(self, args: GitLogParameters, ctx: ToolContext) -> ToolResult:
        result: ToolResult = ctx.environment.run(lambda: self._log(args, ctx))
        return result

    def _log(self, args: GitLogParameters, ctx: ToolContext) -> ToolResult:
        with _opened(ctx, "git_log") as repository:
            if repository.head() is None and args.revision == "HEAD":
                return ToolResult(output="no commits yet", data={"commits": []})
            exclude: list[ObjectID] = []
            start, dots, end = args.revision.partition("..")
            if dots:
                exclude = [repository.commit(start or "HEAD").id]
                include = [repository.commit(end or "HEAD").id]
            else:
                include = [repository.commit(args.revision).id]
            walker = repository.repo.get_walker(
                include=include,
                exclude=exclude,
                max_entries=args.max_count,
                paths=[path.encode() for path in args.paths] or None,
            )
            commits = [_commit_summary(entry.commit) for entry in walker]
        lines: list[str] = []
        for commit in commits:
            when, who = commit["date"][:10], commit["author_name"]
            lines.append(f"{commit['id'][:10]} {when} {who}: {commit['subject']}")
            body = commit["message"].partition("\n")[2].strip("\n") if args.full else ""
            if body:
                lines += ["    " + line if line else "" for line in body.split("\n")]
        return ToolResult(output="\n".join(lines) or "no commits", data={"commits": commits})


def _commit_summary(commit: Commit) -> dict[str, Any]:
    encoding = commit.encoding.decode("ascii", "replace") if commit.encoding else "utf-8"

    def text(value: bytes) -> str:
        try:
            decoded = value.decode(encoding, "replace")
        except LookupError:
            decoded = value.decode("utf-8", "replace")
        # Control characters made visible, except the newlines and tabs of a message.
        return "".join(
            c if c in "\n\t" or (ord(c) >= 0x20 and ord(c) != 0x7F) else f"\\x{ord(c):02x}"
            for c in decoded
        )

    author = text(commit.author)
    name = author.split(" <", 1)[0]
    zone = datetime.timezone(datetime.timedelta(seconds=commit.author_timezone))
    date = datetime.datetime.fromtimestamp(commit.author_time, zone)
    message = text(commit.message).strip("\n")
    return {
        "id": commit.id.decode("ascii"),
        "author": author,
        "author_name": name,
        "date": date.isoformat(),
        "subject": message.split("\n", 1)[0],
        "message": message,
        "parents": [parent.decode("ascii") for parent in commit.parents],
    }


GIT_TOOLS: tuple[GitStatus, GitDiff, GitLog] = (GitStatus(), GitDiff(), GitLog())
