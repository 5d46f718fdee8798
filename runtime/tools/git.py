"""The git read tools: `git_status`, `git_diff`, `git_log`.

They read the workspace's repository with dulwich, a pure-Python git, and never start a
process: a hostile `.git/config` (core.fsmonitor, core.pager, diff.external, textconv and
filter drivers, hooks) that real git would run cannot run anything here. Using dulwich is not
enough on its own: its porcelain `status` runs `filter.<driver>.clean` commands named in the
config, and refreshes the index on disk. So these tools assemble status and diffs from the
object store, the index and the work tree themselves, compare the work tree's raw bytes
(git's view after filters is not computed: a file under a filter may show as modified), write
nothing, and pin the work tree to the workspace whatever `core.worktree` says.

The repository is the one whose `.git` is at the workspace root (`runtime.tools.gitrepo`), read
within fixed bounds of memory and time whatever a sandbox wrote into it (`runtime.tools.
gitread`): a file or object too large to show is said to be, a history too long to walk is cut
with a note. Paths in arguments and results are relative to it, in POSIX form.
"""

from __future__ import annotations

import contextlib
import datetime
import io
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Final

from dulwich.diff_tree import tree_changes
from dulwich.objects import Commit, ObjectID
from dulwich.patch import gen_diff_header, is_binary, patch_filename, unified_diff
from dulwich.walk import Walker
from pydantic import Field, ValidationInfo, field_validator

from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.display import spelled
from codecoder.permissions.keys import Permission
from codecoder.tools.base import Category, P, Parameters, Tool, ToolContext, ToolResult
from codecoder.tools.files.paths import normalise_path, standing_of
from codecoder.tools.gitread import ObjectTooLarge, OverBudget, bounded_entries
from codecoder.tools.gitrepo import GitRepository, git_errors, text

__all__ = ["GIT_TOOLS", "GitDiff", "GitLog", "GitStatus"]

# A file larger than this is not shown in a diff (it is said to differ, and how large it is).
MAX_DIFF_FILE_BYTES: Final = 16 * 1024 * 1024


def _shown(path: str) -> str:
    """A path as printed: quoted like git's core.quotePath when it holds control characters,
    so a file name cannot rewrite the terminal it is shown on."""
    if any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in path):
        return json.dumps(spelled(path))
    return spelled(path)  # a name that is not UTF-8 as `n\\xe9e.txt`, which reads back


@contextlib.contextmanager
def _opened(ctx: ToolContext, what: str) -> Iterator[GitRepository]:
    with git_errors(what):
        repository = GitRepository(ctx.workspace)
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


def _relative_path(value: str, standing: str = ".") -> str:
    """A workspace-relative POSIX path ("" for the workspace itself), read from where the
    caller stands (`tools.files.paths`), or ValueError naming what is wrong with it."""
    if not value or "\x00" in value:
        raise ValueError("must be a non-empty path")
    if value.startswith("/") or "\\" in value:
        raise ValueError(f"must be relative to the workspace, in POSIX form: {value!r}")
    try:
        path = normalise_path(value, allow_root=True, standing=standing)
    except ValueError:
        raise ValueError(f"must stay inside the workspace (no ..): {value!r}") from None
    return "" if path == "." else path


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
    def _relative(cls, value: list[str], info: ValidationInfo) -> list[str]:
        return [_relative_path(path, standing_of(info)) for path in value]

    def covers(self, path: bytes) -> bool:
        if not self.paths:
            return True
        shown = text(path)
        return any(p == "" or shown == p or shown.startswith(p + "/") for p in self.paths)


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
                gone = not repository.exists(path)
                codes.setdefault(path, [" ", " "])[1] = "D" if gone else "M"
            for path in repository.conflicted():
                codes[path] = ["U", "U"]
            untracked, cut = repository.untracked(args.max_untracked)
        changes = [
            {"path": text(path), "staged": code[0].strip(), "unstaged": code[1].strip()}
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
    """One side of a file's diff; `data` None when it is too large to show (`size` bytes)."""

    mode: int
    sha: bytes
    data: bytes | None
    size: int


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
        diff = out.getvalue().decode("utf-8", "replace")
        truncated = len(diff) > args.max_chars
        if truncated:
            diff = (
                diff[: args.max_chars]
                + f"\n[diff cut: {len(diff) - args.max_chars} more characters; "
                "narrow it with `paths`]\n"
            )
        return ToolResult(
            output=diff or "(no differences)",
            data={"files": files, "truncated": truncated},
        )

    def _pairs(
        self, repository: GitRepository, args: GitDiffParameters
    ) -> Iterable[tuple[bytes, _Version | None, _Version | None]]:
        stored = _stored(repository)
        if args.base is not None and args.target is not None:
            old_tree = repository.commit(args.base).tree
            new_tree = repository.commit(args.target).tree
            store: Any = repository.objects  # what tree_changes reads of a store: store[sha]
            changes = tree_changes(store, old_tree, new_tree)
            for change in bounded_entries(changes, "the difference between the two trees"):
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


def _stored(
    repository: GitRepository,
) -> Callable[[int | None, ObjectID | None], _Version | None]:
    """Versions read from the object store (tree and index entries); one larger than a diff
    shows is not read."""

    def version(mode: int | None, sha: ObjectID | None) -> _Version | None:
        if mode is None or sha is None:
            return None
        size = repository.blob_size(mode, sha)
        if size > MAX_DIFF_FILE_BYTES:
            return _Version(mode, sha, None, size)
        try:
            return _Version(mode, sha, repository.content(mode, sha), size)
        except ObjectTooLarge as exc:
            return _Version(mode, sha, None, exc.size)

    return version


def _worktree(repository: GitRepository, path: bytes) -> _Version | None:
    found = repository.worktree_file(path, MAX_DIFF_FILE_BYTES)
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
    status = "added" if old is None else "deleted" if new is None else "modified"
    summary: dict[str, Any] = {"path": text(path), "status": status, "binary": False}
    if (old is not None and old.data is None) or (new is not None and new.data is None):
        sizes = " and ".join(f"{v.size:,} bytes" for v in (old, new) if v is not None)
        out.write(
            f"Large file ({sizes}) differs; not shown (a diff shows files of up to "
            f"{MAX_DIFF_FILE_BYTES:,} bytes)\n".encode()
        )
        summary["too_large"] = True
        return summary
    old_data = old.data or b"" if old else b""
    new_data = new.data or b"" if new else b""
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
            store: Any = repository.objects  # what the walker reads of a store: store[sha]
            walker = Walker(
                store,
                include,
                exclude=exclude,
                max_entries=args.max_count,
                paths=[path.encode() for path in args.paths] or None,
                get_parents=lambda commit: repository.repo.get_parents(commit.id, commit),
            )
            commits: list[dict[str, Any]] = []
            cut: str | None = None
            try:
                for entry in walker:
                    commits.append(_commit_summary(entry.commit))
            except OverBudget as exc:
                cut = str(exc)
        lines: list[str] = []
        for commit in commits:
            when, who = commit["date"][:10], commit["author_name"]
            lines.append(f"{commit['id'][:10]} {when} {who}: {commit['subject']}")
            body = commit["message"].partition("\n")[2].strip("\n") if args.full else ""
            if body:
                lines += ["    " + line if line else "" for line in body.split("\n")]
        if cut is not None:
            lines.append(f"[the log was cut: {cut}]")
        return ToolResult(
            output="\n".join(lines) or "no commits", data={"commits": commits, "cut": cut}
        )


def _commit_summary(commit: Commit) -> dict[str, Any]:
    encoding = commit.encoding.decode("ascii", "replace") if commit.encoding else "utf-8"

    def shown(value: bytes) -> str:
        try:
            decoded = value.decode(encoding, "replace")
        except LookupError:
            decoded = value.decode("utf-8", "replace")
        # Control characters made visible, except the newlines and tabs of a message.
        return "".join(
            c if c in "\n\t" or (ord(c) >= 0x20 and ord(c) != 0x7F) else f"\\x{ord(c):02x}"
            for c in decoded
        )

    author = shown(commit.author)
    name = author.split(" <", 1)[0]
    zone = datetime.timezone(datetime.timedelta(seconds=commit.author_timezone))
    date = datetime.datetime.fromtimestamp(commit.author_time, zone)
    message = shown(commit.message).strip("\n")
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
