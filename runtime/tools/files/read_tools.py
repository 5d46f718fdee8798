"""The read tools: read_file, list_dir, glob, grep and diff.

They run in @landlock (or @wasm where the kernel has no Landlock; see `ReadBackend`), need no
permission (Permission.none) and are in category READ: each reads through a backend confined to
the workspace and the read roots, so no path or symlink it is given reaches anything else.
Logic that needs no file access (glob matching, regular expressions, diffs) runs here, in
Python, on what the backend returns.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any

from pydantic import Field, field_validator, model_validator

from codecoder.environments.landlock import LandlockEnvironment
from codecoder.environments.wasm.environment import WasmEnvironment
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.display import spelled
from codecoder.foundation.errors import ExecutionFailed, SandboxUnavailable
from codecoder.permissions.keys import Permission
from codecoder.tools.base import Category, Parameters, Tool, ToolContext, ToolResult
from codecoder.tools.files import limits
from codecoder.tools.files.backend import (
    GrepFound,
    GrepQuery,
    ReadBackend,
    SearchOptions,
    _Progress,
)
from codecoder.tools.files.fileops import ConfinedFiles
from codecoder.tools.files.globs import _literal_prefix
from codecoder.tools.files.landlock import LandlockFiles
from codecoder.tools.files.paths import (
    DirPath,
    FilePath,
    _join,
    _under_git,
    normalise_path,
)
from codecoder.tools.files.text import _cap, _clip, _is_binary, _lines, _read_text


def _reader(ctx: ToolContext) -> ReadBackend:
    env = ctx.environment
    roots = ctx.extra.get("read_roots", {})
    if isinstance(env, LandlockEnvironment):
        return LandlockFiles(env, ctx.workspace, roots, timeout=ctx.limits.timeout)
    if isinstance(env, WasmEnvironment):
        return ConfinedFiles(env, ctx.workspace, roots, timeout=ctx.limits.timeout)
    raise SandboxUnavailable(
        f"the read tools run in @landlock or @wasm, but this call was given {type(env).__name__}"
    )


class _ReadTool:
    """What the read tools share: @landlock (or @wasm where the kernel has no Landlock),
    Permission.none, category READ."""

    category = Category.READ
    environment = EnvironmentTag.LANDLOCK
    bindable = frozenset({EnvironmentTag.LANDLOCK, EnvironmentTag.WASM})
    asks = False


class ReadFileParameters(Parameters):
    path: FilePath = Field(description="The file to read, relative to the workspace.")
    offset: int = Field(
        default=1, ge=1, description="The first line to show (1-based). Default: the first."
    )
    limit: int = Field(
        default=2000, ge=1, le=100_000, description="How many lines to show at most."
    )


class ReadFile(_ReadTool, Tool[ReadFileParameters]):
    name = "read_file"
    description = (
        "Read a text file from the workspace. Lines are numbered like `cat -n`; use offset and "
        "limit (in lines) to page through long files. Binary files are detected and not shown."
    )
    parameters = ReadFileParameters

    def permission(self, args: ReadFileParameters) -> Permission:
        return Permission.none()

    def execute(self, args: ReadFileParameters, ctx: ToolContext) -> ToolResult:
        content = _reader(ctx).read(args.path)
        data: dict[str, Any] = {"path": args.path, "size": content.size, "binary": False}
        if _is_binary(content.data):
            data["binary"] = True
            return ToolResult(
                f"{args.path} is a binary file ({content.size} bytes); not shown", data=data
            )
        lines = _lines(content.data.decode("utf-8", errors="replace"))
        if not content.complete and lines:
            lines.pop()  # the last line read may be cut short
        total = len(lines) if content.complete else None
        start = args.offset - 1
        if content.size == 0:
            return ToolResult(f"{args.path} is empty", data={**data, "lines": 0})
        if start >= len(lines):
            where = (
                f"it has {total} lines" if total is not None else "that is past what can be read"
            )
            raise ExecutionFailed(f"{args.path}: offset {args.offset} is out of range ({where})")
        text, end = _numbered(lines, start, args.limit, ctx.limits.max_output)
        if end < len(lines) or total is None:
            of = f"of {total}" if total is not None else f"(file is {content.size} bytes)"
            text += f"[lines {start + 1}-{end} {of}; continue with offset={end + 1}]\n"
        data.update(lines=total, start=start + 1, end=end)
        return ToolResult(text, data=data)


def _numbered(lines: list[str], start: int, limit: int, budget: int) -> tuple[str, int]:
    """Lines `start` to `start + limit` numbered like `cat -n`, as many as fit in `budget`
    characters (at least one); the text and the index after the last line shown."""
    chunk = lines[start : start + limit]
    if max(map(len, chunk), default=0) <= limits.MAX_LINE_CHARS:
        # The common case, a page that fits whole with no line to clip, in one pass.
        text = "".join([f"{number:>6}\t{line}\n" for number, line in enumerate(chunk, start + 1)])
        if len(text) <= budget:
            return text, start + len(chunk)
    shown: list[str] = []
    end = start
    for number in range(start, start + len(chunk)):
        row = f"{number + 1:>6}\t{_clip(lines[number])}\n"
        budget -= len(row)
        if budget < 0 and shown:
            break
        shown.append(row)
        end = number + 1
    return "".join(shown), end


class ListDirParameters(Parameters):
    path: DirPath = Field(
        default=".",
        validate_default=True,  # "." is where the caller stands (tools.files.paths)
        description="The directory to list, relative to the workspace.",
    )


class ListDir(_ReadTool, Tool[ListDirParameters]):
    name = "list_dir"
    description = (
        "List one directory of the workspace: subdirectories end with `/`, files show their "
        "size, symbolic links show their target (links are not followed)."
    )
    parameters = ListDirParameters

    def permission(self, args: ListDirParameters) -> Permission:
        return Permission.none()

    def execute(self, args: ListDirParameters, ctx: ToolContext) -> ToolResult:
        entries = _reader(ctx).list(args.path)
        rows = []
        for e in entries:
            name = spelled(e.path)  # a name that is not UTF-8 as `n\\xe9e.txt`, which reads back
            if e.type == "dir":
                rows.append(f"{name}/")
            elif e.type == "symlink":
                target = spelled(e.target) if e.target else "(a target outside the workspace)"
                rows.append(f"{name} -> {target}")
            elif e.type == "file":
                rows.append(f"{name}  ({e.size} bytes)")
            else:
                rows.append(f"{name}  (special file)")
        text, truncated = _cap("".join(f"{row}\n" for row in rows), ctx.limits.max_output)
        data = {
            "path": args.path,
            "entries": [{"name": spelled(e.path), "type": e.type, "size": e.size} for e in entries],
            "truncated": truncated,
        }
        return ToolResult(text or f"{args.path} is empty\n", data=data)


_IGNORED_DESCRIPTION = (
    "Also look at files that .gitignore, .ignore or .rgignore exclude (skipped by default)."
)
_HIDDEN_DESCRIPTION = (
    "Also look at hidden files and directories (names starting with `.`; skipped by default "
    "unless the path names them). `.git` is never searched."
)


class GlobParameters(Parameters):
    pattern: str = Field(
        description=(
            "A glob relative to `path`: `*`, `?` and `[abc]` match within one path segment, "
            "`**` matches any number of directories (`**/*.py`, `src/**/test_*.py`)."
        ),
        min_length=1,
    )
    path: DirPath = Field(
        default=".",
        validate_default=True,  # "." is where the caller stands (tools.files.paths)
        description="The directory to search from.",
    )
    max_results: int = Field(default=1000, ge=1, le=100_000, description="Stop after this many.")
    include_ignored: bool = Field(default=False, description=_IGNORED_DESCRIPTION)
    hidden: bool = Field(default=False, description=_HIDDEN_DESCRIPTION)

    @field_validator("pattern")
    @classmethod
    def _relative_pattern(cls, value: str) -> str:
        normalise_path(value)  # the same rules as a path: relative, no `..`
        return value


def _listing_text(paths: list[str], limit: int) -> tuple[str, bool]:
    """`_cap` of one path a line, made of the paths that reach the cap only: the same text
    and flag, without joining 100,000 paths to keep the first few thousand."""
    size = count = 0
    for path in paths:
        size += len(path) + 1
        count += 1
        if size > limit:
            break
    return _cap("".join(f"{path}\n" for path in paths[:count]), limit)


def _searchable(tool: str, path: str) -> None:
    if _under_git(path.partition("/")[2] if path.startswith("@") else path):
        raise ExecutionFailed(f"{tool} {path}: .git is never searched (read_file reads its files)")


class Glob(_ReadTool, Tool[GlobParameters]):
    name = "glob"
    description = (
        "Find files in the workspace whose path matches a glob pattern (`**/*.py`). Results "
        "are workspace-relative paths, sorted. Files ignored by .gitignore/.ignore and hidden "
        "files are skipped unless asked for; symbolic links are not followed."
    )
    parameters = GlobParameters

    def permission(self, args: GlobParameters) -> Permission:
        return Permission.none()

    def execute(self, args: GlobParameters, ctx: ToolContext) -> ToolResult:
        prefix, rest = _literal_prefix(args.pattern)
        base = _join(args.path, prefix) if prefix != "." else args.path
        _searchable(self.name, base)
        # A pattern that names a hidden segment (`**/.eslintrc*`) asks for hidden files.
        names_hidden = any(s.startswith(".") and s not in (".", "..") for s in rest.split("/"))
        options = SearchOptions(
            hidden=args.hidden or names_hidden, include_ignored=args.include_ignored
        )
        found = _reader(ctx).glob(base, rest, options, _Progress(ctx.progress, self.name))
        shown = found.paths[: args.max_results]
        text, truncated = _listing_text(shown, ctx.limits.max_output)
        more = len(found.paths) - len(shown)
        if more:
            text += f"[{more} more {_plural(more, 'path')} not shown"
            text += f" (max_results {args.max_results})]\n"
        if found.partial:
            text += "[the listing was stopped at its size limit: there may be more]\n"
        data = {
            "matches": shown,
            "total": len(found.paths),
            "truncated": truncated,
            "partial": found.partial,
        }
        return ToolResult(text or f"no files match {args.pattern}\n", data=data)


class GrepParameters(Parameters):
    pattern: str = Field(
        description=(
            "A regular expression searched in each line (Python/PCRE syntax: lookaround and "
            "backreferences work)."
        )
    )
    path: DirPath = Field(
        default=".",
        validate_default=True,  # "." is where the caller stands (tools.files.paths)
        description="A file, or a directory searched recursively (not `.git`).",
    )
    glob: str | None = Field(
        default=None,
        description=(
            "Only search files matching this glob: without a `/` it is matched against the "
            "file name (`*.py`), otherwise against the path relative to `path` (`src/**/*.py`)."
        ),
    )
    case_insensitive: bool = Field(default=False, description="Ignore case.")
    context_before: int = Field(default=0, ge=0, le=100, description="Lines shown before each.")
    context_after: int = Field(default=0, ge=0, le=100, description="Lines shown after each.")
    max_results: int = Field(
        default=200, ge=1, le=100_000, description="Stop after this many matching lines."
    )
    files_with_matches: bool = Field(
        default=False, description="List only the files that match, not the lines."
    )
    include_ignored: bool = Field(default=False, description=_IGNORED_DESCRIPTION)
    hidden: bool = Field(default=False, description=_HIDDEN_DESCRIPTION)

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression: {exc}") from exc
        return value

    @field_validator("glob")
    @classmethod
    def _relative_glob(cls, value: str | None) -> str | None:
        if value is not None:
            normalise_path(value)
        return value


class Grep(_ReadTool, Tool[GrepParameters]):
    name = "grep"
    description = (
        "Search file contents in the workspace with a regular expression. Prints "
        "`path:line:text` for matching lines and `path-line-text` for context lines, files in "
        "path order. Files ignored by .gitignore/.ignore, hidden files, binary files and files "
        "over 4 MiB are skipped."
    )
    parameters = GrepParameters

    def permission(self, args: GrepParameters) -> Permission:
        return Permission.none()

    def execute(self, args: GrepParameters, ctx: ToolContext) -> ToolResult:
        _searchable(self.name, args.path)
        query = GrepQuery(
            root=args.path,
            pattern=args.pattern,
            case_insensitive=args.case_insensitive,
            glob=args.glob,
            before=args.context_before,
            after=args.context_after,
            files_only=args.files_with_matches,
            options=SearchOptions(hidden=args.hidden, include_ignored=args.include_ignored),
        )
        found = _reader(ctx).grep(query, _Progress(ctx.progress, self.name))
        shown = _GrepShown.of(found, args.max_results, before=query.before, after=query.after)
        text, truncated = _cap(shown.text, ctx.limits.max_output)
        notes = []
        more = shown.total - shown.count
        if more:
            unit = "file" if query.files_only else "matching line"
            notes.append(
                f"{more} more {_plural(more, unit)} not shown (max_results {args.max_results})"
            )
        if found.partial:
            notes.append("the search was stopped at its output limit: there may be more")
        if found.skipped_binary:
            notes.append(f"{found.skipped_binary} binary files skipped")
        if found.skipped_large:
            notes.append(
                f"{found.skipped_large} files over {limits.GREP_MAX_FILE_BYTES} bytes skipped"
            )
        if found.unreadable:
            notes.append(
                f"{len(found.unreadable)} {_plural(len(found.unreadable), 'path')} unreadable"
            )
        if notes:
            text += f"[{'; '.join(notes)}]\n"
        data = {
            "matches": shown.matches,
            "files": shown.files,
            "searched": found.searched,
            "total": shown.total,
            "stopped": bool(more) or found.partial,
            "truncated": truncated,
        }
        return ToolResult(text or "no matches\n", data=data)


def _plural(count: int, noun: str) -> str:
    return noun if count == 1 else noun + "s"


@dataclass(slots=True)
class _GrepShown:
    """The part of a search's findings that is shown: the first `max_results` matching lines
    (or files), with their context, in grep's format; `total` counts them all."""

    text: str
    matches: list[dict[str, Any]]
    files: list[str]
    count: int
    total: int

    @classmethod
    def of(cls, found: GrepFound, max_results: int, *, before: int, after: int) -> _GrepShown:
        context = bool(before or after)
        rows: list[str] = []
        matches: list[dict[str, Any]] = []
        files: list[str] = []
        count = total = 0
        for path, lines in found.files:
            hits = sum(1 for line in lines if line.match) or 1  # files_only: one per file
            total += hits
            room = max_results - count
            if room <= 0:
                continue
            files.append(path)
            if not lines:
                rows.append(f"{path}\n")
                count += 1
                continue
            previous: int | None = -2 if rows else None  # -2: a group came before
            taken = 0
            last_match = 0
            for line in lines:
                if line.match:
                    if taken == room:
                        break
                    taken += 1
                    last_match = line.number
                elif taken == room and line.number > last_match + after:
                    break  # context of a match that is not shown
                # `--` separates groups of lines that are not contiguous, as grep does.
                if context and previous is not None and line.number > previous + 1:
                    rows.append("--\n")
                mark = ":" if line.match else "-"
                rows.append(f"{path}{mark}{line.number}{mark}{_clip(line.text, 500)}\n")
                if line.match:
                    matches.append({"path": path, "line": line.number, "text": line.text})
                previous = line.number
            count += taken
        return cls("".join(rows), matches, files, count, total)


class DiffParameters(Parameters):
    path: FilePath = Field(description="The original file, relative to the workspace.")
    other_path: FilePath | None = Field(
        default=None, description="The file to compare it with (or give `content`)."
    )
    content: str | None = Field(
        default=None, description="Proposed new content to compare the file with."
    )
    context_lines: int = Field(default=3, ge=0, le=1000, description="Unchanged lines shown.")

    @model_validator(mode="after")
    def _one_other_side(self) -> DiffParameters:
        if (self.other_path is None) == (self.content is None):
            raise ValueError("give exactly one of other_path and content")
        return self


def unified_diff(old: str, new: str, old_name: str, new_name: str, context: int = 3) -> str:
    """A unified diff like git's, including its `\\ No newline at end of file` markers."""
    rows = difflib.unified_diff(
        old.splitlines(keepends=True),
        new.splitlines(keepends=True),
        fromfile=old_name,
        tofile=new_name,
        n=context,
    )
    out = []
    for row in rows:
        out.append(row if row.endswith("\n") else row + "\n\\ No newline at end of file\n")
    return "".join(out)


class Diff(_ReadTool, Tool[DiffParameters]):
    name = "diff"
    description = (
        "Show a unified diff between two workspace files, or between a file and proposed "
        "content (to preview an edit before making it)."
    )
    parameters = DiffParameters

    def permission(self, args: DiffParameters) -> Permission:
        return Permission.none()

    def execute(self, args: DiffParameters, ctx: ToolContext) -> ToolResult:
        files = _reader(ctx)
        old = _read_text(files, args.path)
        if args.other_path is not None:
            new, new_name = _read_text(files, args.other_path), f"b/{args.other_path}"
        else:
            new, new_name = args.content or "", f"b/{args.path}"
        diff = unified_diff(old, new, f"a/{args.path}", new_name, args.context_lines)
        text, truncated = _cap(diff, ctx.limits.max_output)
        data = {"identical": not diff, "truncated": truncated}
        return ToolResult(text or "no differences\n", data=data)
