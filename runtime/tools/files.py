"""The file tools, and the confined file layer they stand on.

Every byte these tools read or write goes through `sandboxes/fileops/fileops.wasm`, a small WASI
program run in @wasm with only the directory the call needs preopened: the workspace read-only
for the read tools (read_file, list_dir, glob, grep, diff; Permission.none), read-write for the
write tools (write_file, edit_file, move_file, delete_file; Ask, keyed by the workspace-relative
path). So a read tool cannot reach `~/.ssh/id_rsa`, whatever path or symlink it is given: the
WASI preopen does not contain it. Logic that needs no file access (glob matching, regular
expressions, diffs, edits) runs here, in Python, on what the module returns.

Two rules close what WASI alone leaves open inside the workspace:

* Changes never follow symlinks (fileops walks each path component with O_NOFOLLOW), and never
  write through a file with several hard links. So the workspace-relative path in a key is the
  file that changes, and a grant for `write_file:src/**` cannot reach `.git/hooks/` through a
  link planted in `src/`.
* Protected paths (`codecoder.json`, `.codecoder/`, `.git/`, and any `.git` directory deeper
  down) mark their keys `protected`, which the engine never grants beyond Once; `run_wasm`
  modules never get them writable at all, at any depth (see `run_wasm_preopens`).

Paths in tool arguments are workspace-relative POSIX paths; absolute paths and `..` are refused
when the arguments are validated, naming the field. Extra read roots (from the project file,
passed in `ToolContext.extra["read_roots"]` as a mapping of name to directory) are read as
`@name/relative/path`, read-only.
"""

from __future__ import annotations

import difflib
import functools
import importlib.resources
import json
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from environments.wasm import Preopen, WasmEnvironment, WasmRequest, WasmResult
from environments.workspaceguard import ProtectedScan
from runtime.ceiling import EnvironmentTag
from runtime.errors import ExecutionFailed, SandboxUnavailable
from runtime.patterns import MOVE_SEPARATOR
from runtime.protected import is_protected_path
from runtime.tool import (
    Category,
    GrantLevel,
    KeyStyle,
    Parameters,
    Permission,
    PermissionKey,
    Tool,
    ToolContext,
    ToolResult,
    escape_literal,
)

__all__ = [
    "FILE_TOOLS",
    "ConfinedFiles",
    "DeleteFile",
    "Diff",
    "EditFile",
    "Entry",
    "FileContent",
    "Glob",
    "Grep",
    "ListDir",
    "MoveFile",
    "ReadFile",
    "RunWasm",
    "Walk",
    "WriteFile",
    "glob_regex",
    "is_protected_path",
    "module_result",
    "normalise_path",
]

WORKSPACE_GUEST = "/workspace"
EXTRA_ROOT_GUEST = "/root"
MAX_READ_BYTES = 16 * 1024 * 1024  # read_file, diff and edit_file read at most this much
MAX_MODULE_BYTES = 64 * 1024 * 1024
GREP_MAX_FILE_BYTES = 4 * 1024 * 1024  # grep skips bigger files, and says so
CAT_BATCH_BYTES = 32 * 1024 * 1024  # bytes of file content per fileops call in grep
WALK_MAX_ENTRIES = 500_000
LISTING_MAX_OUTPUT = 256 * 1024 * 1024
BINARY_SNIFF_BYTES = 8000  # git's heuristic: a NUL in the first 8000 bytes means binary
MAX_LINE_CHARS = 2000


# -- paths --------------------------------------------------------------------------------


def normalise_path(value: str, *, allow_root: bool = False) -> str:
    """The canonical workspace-relative POSIX form of `value` ("." for the workspace itself).

    Raises ValueError for absolute paths, `~`, `..` components and NUL bytes: paths are
    checked before anything runs, and the key of a write is this canonical form.
    """
    if "\0" in value:
        raise ValueError("the path contains a NUL byte")
    if value.startswith("/"):
        raise ValueError(f"{value!r} is absolute; paths are relative to the workspace")
    if value.startswith("~"):
        raise ValueError(f"{value!r}: `~` is not expanded; paths are relative to the workspace")
    parts = [part for part in value.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise ValueError(f"{value!r} leaves the workspace (`..` is not allowed)")
    if not parts:
        if allow_root:
            return "."
        raise ValueError("the path names the workspace itself, not a file in it")
    return "/".join(parts)


def _file_path(value: str) -> str:
    return normalise_path(value)


def _dir_path(value: str) -> str:
    return normalise_path(value, allow_root=True)


def _write_path(value: str) -> str:
    path = normalise_path(value)
    if path.startswith("@"):
        raise ValueError(
            f"{value!r}: paths starting with `@` name the project's read roots, which are "
            "read-only; write tools write only the workspace"
        )
    return path


FilePath = Annotated[str, AfterValidator(_file_path)]
DirPath = Annotated[str, AfterValidator(_dir_path)]
WritePath = Annotated[str, AfterValidator(_write_path)]


def _segment_regex(segment: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(segment):
        ch = segment[i]
        if ch == "*":
            out.append("[^/]*")
        elif ch == "?":
            out.append("[^/]")
        elif ch == "[":
            end = segment.find("]", i + 2 if segment[i + 1 : i + 2] in ("!", "]") else i + 1)
            if end < 0:
                out.append(re.escape(ch))
            else:
                body = segment[i + 1 : end]
                negate = body.startswith("!")
                body = body[1:] if negate else body
                body = body.replace("\\", "\\\\").replace("^", "\\^")
                out.append(f"[{'^/' if negate else ''}{body}]" if body else "(?!)")
                i = end
        else:
            out.append(re.escape(ch))
        i += 1
    return "".join(out)


@functools.lru_cache(maxsize=256)
def glob_regex(pattern: str) -> re.Pattern[str]:
    """A regex for a `/`-separated glob: `*`, `?` and `[...]` stay within one segment; a `**`
    segment spans any number of them (zero included). `*` matches names starting with `.`."""
    segments = [s for s in pattern.split("/") if s not in ("", ".")]
    out: list[str] = []
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        if segment == "**":
            out.append(".*" if last else "(?:[^/]+/)*")
        else:
            out.append(_segment_regex(segment) + ("" if last else "/"))
    return re.compile("".join(out) + r"\Z", re.DOTALL)


def _literal_prefix(pattern: str) -> tuple[str, str]:
    """Split a glob into the directory its literal leading segments name, and the rest."""
    segments = [s for s in pattern.split("/") if s not in ("", ".")]
    literal: list[str] = []
    for segment in segments[:-1]:
        if any(ch in segment for ch in "*?["):
            break
        literal.append(segment)
    return "/".join(literal) or ".", "/".join(segments[len(literal) :])


def _join(base: str, rel: str) -> str:
    return rel if base == "." else f"{base}/{rel}"


# -- the confined file layer ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Entry:
    """One directory entry, as fileops saw it (symlinks are reported, never followed)."""

    path: str  # relative to the listed or walked directory
    type: Literal["file", "dir", "symlink", "other"]
    size: int
    target: str | None = None  # a symlink's text, when WASI lets us read it
    error: str | None = None  # a subdirectory the walk could not enter


@dataclass(frozen=True, slots=True)
class FileContent:
    data: bytes
    size: int  # of the whole file
    offset: int = 0

    @property
    def complete(self) -> bool:
        return self.offset == 0 and len(self.data) >= self.size


@dataclass(frozen=True, slots=True)
class Walk:
    entries: tuple[Entry, ...]
    truncated: bool


@functools.cache
def _fileops_module() -> Path | bytes:
    resource = importlib.resources.files("sandboxes").joinpath("fileops/fileops.wasm")
    if isinstance(resource, Path):
        return resource  # the environment caches it by file identity: no rereading
    return resource.read_bytes()  # e.g. installed in a zip


def _field(obj: Mapping[str, Any], key: str) -> str:
    """A string field of fileops output; names that are not UTF-8 come hex-encoded."""
    value = obj.get(key)
    if isinstance(value, str):
        return value
    raw = obj.get(key + "_hex")
    if isinstance(raw, str):
        return bytes.fromhex(raw).decode("utf-8", errors="backslashreplace")
    return ""


def _entry(obj: Mapping[str, Any], name_key: str) -> Entry:
    kind = obj.get("type")
    return Entry(
        path=_field(obj, name_key),
        type=kind if kind in ("file", "dir", "symlink") else "other",
        size=int(obj.get("size", -1)),
        target=_field(obj, "target") or None,
        error=obj.get("error"),
    )


class ConfinedFiles:
    """File operations run by fileops.wasm with only the preopens each call needs.

    Paths are canonical workspace-relative paths (see `normalise_path`), or `@name/...` for an
    extra read root. Reads preopen their root read-only; changes preopen the workspace
    read-write and cannot address extra roots.
    """

    def __init__(
        self,
        env: WasmEnvironment,
        workspace: Path,
        extra_read_roots: Mapping[str, Path] | Iterable[Path] = (),
        *,
        timeout: float = 30.0,
    ) -> None:
        self._env = env
        self._workspace = Path(workspace).resolve()
        roots = (
            dict(extra_read_roots)
            if isinstance(extra_read_roots, Mapping)
            else {Path(root).name: Path(root) for root in extra_read_roots}
        )
        self._roots = {name: Path(root).resolve() for name, root in roots.items()}
        self._timeout = timeout

    @property
    def workspace(self) -> Path:
        return self._workspace

    def _locate(self, path: str, *, write: bool) -> tuple[Preopen, str]:
        """The one directory to preopen for `path`, and the guest path to give fileops."""
        head, _, rest = path.partition("/")
        try:
            if not write and head.startswith("@") and head[1:] in self._roots:
                host, guest = self._roots[head[1:]], EXTRA_ROOT_GUEST
                rel = normalise_path(rest, allow_root=True)
            else:
                host, guest = self._workspace, WORKSPACE_GUEST
                rel = normalise_path(path, allow_root=not write)
        except ValueError as exc:  # the tools validate first; other callers may not
            raise ExecutionFailed(str(exc)) from exc
        return Preopen(host, guest, writable=write), guest if rel == "." else f"{guest}/{rel}"

    def _call(
        self,
        op: str,
        preopen: Preopen,
        argv: Sequence[str],
        *,
        stdin: bytes = b"",
        max_output: int = 64 * 1024,
    ) -> WasmResult:
        return self._env.run(
            WasmRequest(
                module=_fileops_module(),
                argv=("fileops", op, *argv),
                stdin=stdin,
                preopens=(preopen,),
                timeout=self._timeout,
                max_output=max_output,
            )
        )

    def _run(
        self,
        op: str,
        path: str,
        preopen: Preopen,
        argv: Sequence[str],
        *,
        stdin: bytes = b"",
        max_output: int = 64 * 1024,
    ) -> bytes:
        result = self._call(op, preopen, argv, stdin=stdin, max_output=max_output)
        if result.exit_code != 0:
            raise _failure(op, path, result)
        if result.stdout_truncated:
            raise ExecutionFailed(f"{op} {path}: the result is too large")
        return result.stdout

    def read(self, path: str, *, offset: int = 0, limit: int = MAX_READ_BYTES) -> FileContent:
        preopen, guest = self._locate(path, write=False)
        out = self._run(
            "read", path, preopen, [guest, str(offset), str(limit)], max_output=limit + 4096
        )
        header, _, data = out.partition(b"\n")
        meta = json.loads(header)
        return FileContent(data=data, size=int(meta["size"]), offset=int(meta["offset"]))

    def read_many(
        self, root: str, paths: Sequence[str], *, limit: int
    ) -> Iterator[tuple[str, FileContent | str]]:
        """The contents of `paths` (relative to `root`), in order, or an error message for
        each. A file larger than `limit` comes back empty, with its size. Few fileops calls:
        each sends files until about CAT_BATCH_BYTES, then the rest is asked for again."""
        preopen, guest = self._locate(root, write=False)
        pending = list(paths)
        while pending:
            names = [p.encode("utf-8", errors="surrogateescape") for p in pending]
            headers = sum(2 * len(name) + 160 for name in names)  # names may come hex-encoded
            out = self._run(
                "cat",
                root,
                preopen,
                [guest, str(limit), str(CAT_BATCH_BYTES)],
                stdin=b"\0".join(names),
                max_output=CAT_BATCH_BYTES + limit + headers,
            )
            done = 0
            for item in _parse_cat(out):
                done += 1
                yield item
            pending = pending[done:]

    def write(self, path: str, data: bytes) -> bool:
        """Write `data` to `path`, creating missing directories; True if the file is new."""
        preopen, guest = self._locate(path, write=True)
        out = self._run("write", path, preopen, [guest, "--parents"], stdin=data)
        return bool(json.loads(out).get("created"))

    def list(self, path: str) -> list[Entry]:
        preopen, guest = self._locate(path, write=False)
        out = self._run("list", path, preopen, [guest], max_output=LISTING_MAX_OUTPUT)
        return sorted(
            (_entry(json.loads(line), "name") for line in out.splitlines()),
            key=lambda e: e.path,
        )

    def walk(self, path: str, *, max_entries: int = WALK_MAX_ENTRIES, sizes: bool = True) -> Walk:
        """Every entry under `path`, recursively, sorted. Without `sizes` (each entry's size is
        then -1) no entry is stat'ed, which makes the walk about twice as fast."""
        preopen, guest = self._locate(path, write=False)
        argv = [guest, str(max_entries), *([] if sizes else ["--no-size"])]
        out = self._run("walk", path, preopen, argv, max_output=LISTING_MAX_OUTPUT)
        entries: list[Entry] = []
        truncated = False
        for line in out.splitlines():
            obj = json.loads(line)
            if obj.get("truncated"):
                truncated = True
            else:
                entries.append(_entry(obj, "path"))
        entries.sort(key=lambda e: e.path)
        return Walk(tuple(entries), truncated)

    def stat(self, path: str) -> Entry:
        entry = self.lookup(path)
        if entry is None:
            raise ExecutionFailed(f"stat {path}: no such file or directory")
        return entry

    def lookup(self, path: str) -> Entry | None:
        """Like `stat`, but None when nothing is there."""
        preopen, guest = self._locate(path, write=False)
        result = self._call("stat", preopen, [guest])
        if result.exit_code != 0:
            if _errno(result) == "ENOENT":
                return None
            raise _failure("stat", path, result)
        return _entry({**json.loads(result.stdout), "path": path}, "path")

    def move(self, source: str, destination: str, *, overwrite: bool = False) -> None:
        preopen, guest_source = self._locate(source, write=True)
        _, guest_destination = self._locate(destination, write=True)
        flags = ["--parents", *(["--overwrite"] if overwrite else [])]
        self._run("move", source, preopen, [guest_source, guest_destination, *flags])

    def delete(self, path: str) -> None:
        preopen, guest = self._locate(path, write=True)
        self._run("delete", path, preopen, [guest])


def _parse_cat(out: bytes) -> Iterator[tuple[str, FileContent | str]]:
    position = 0
    while position < len(out):
        end = out.index(b"\n", position)
        obj = json.loads(out[position:end])
        position = end + 1
        path = _field(obj, "path")
        if "error" in obj:
            yield path, _describe_error(str(obj.get("errno", "")), str(obj["error"]))
            continue
        if obj.get("skipped"):
            yield path, FileContent(data=b"", size=int(obj["size"]))
            continue
        length = int(obj["length"])
        yield path, FileContent(data=out[position : position + length], size=int(obj["size"]))
        position += length


def _describe_error(code: str, text: str) -> str:
    if code in ("EPERM", "ENOTCAPABLE"):
        return "not permitted: it is outside the workspace, or reached through a link leading out"
    return text


def _error_line(result: WasmResult) -> dict[str, Any]:
    try:
        obj = json.loads(result.stderr.splitlines()[0])
    except (ValueError, IndexError):
        return {}
    return obj if isinstance(obj, dict) else {}


def _errno(result: WasmResult) -> str:
    return str(_error_line(result).get("errno", ""))


def _failure(op: str, path: str, result: WasmResult) -> ExecutionFailed:
    obj = _error_line(result)
    if obj:
        message = _describe_error(str(obj.get("errno", "")), str(obj.get("error", "")))
    else:
        text = result.stderr_text().strip()
        message = text or f"fileops exited with code {result.exit_code}"
    return ExecutionFailed(f"{op} {path}: {message}")


# -- shared tool plumbing -------------------------------------------------------------------


def _files(ctx: ToolContext) -> ConfinedFiles:
    env = ctx.environment
    if not isinstance(env, WasmEnvironment):
        raise SandboxUnavailable(
            f"the file tools run in @wasm, but this call was given {type(env).__name__}"
        )
    roots = ctx.extra.get("read_roots", {})
    return ConfinedFiles(env, ctx.workspace, roots, timeout=ctx.limits.timeout)


def _is_binary(data: bytes) -> bool:
    return b"\0" in data[:BINARY_SNIFF_BYTES]


def _lines(text: str) -> list[str]:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def _clip(line: str, limit: int = MAX_LINE_CHARS) -> str:
    return line if len(line) <= limit else line[:limit] + f"… [{len(line) - limit} more chars]"


def _cap(text: str, limit: int) -> tuple[str, bool]:
    if len(text) <= limit:
        return text, False
    cut = text.rfind("\n", 0, limit)
    cut = cut + 1 if cut > 0 else limit
    return text[:cut] + f"[... output truncated at {limit} characters]\n", True


def _read_text(files: ConfinedFiles, path: str) -> str:
    """A whole text file, for tools that must see all of it (diff, edit_file)."""
    content = files.read(path)
    if not content.complete:
        raise ExecutionFailed(f"{path} is larger than {MAX_READ_BYTES} bytes")
    if _is_binary(content.data):
        raise ExecutionFailed(f"{path} is a binary file")
    try:
        return content.data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ExecutionFailed(f"{path} is not UTF-8 text ({exc.reason} at {exc.start})") from exc


def _path_key(tool: str, path: str, *, subject: str | None = None) -> Permission:
    """A path key whose recorded grant is the path itself, escaped: a file named `**` or
    `a*b` is granted as that file only."""
    return Permission.ask(
        PermissionKey.named(
            tool,
            path,
            style=KeyStyle.PATH,
            subject=subject or path,
            protected=is_protected_path(path),
            levels=(GrantLevel(f"{tool}:{escape_literal(path)}", f"only {path}"),),
        )
    )


def _move_key(tool: str, source: str, destination: str) -> Permission:
    """A move is keyed by both paths: a grant must cover the source and the destination, and
    a deny rule for either refuses it (`move_file:secrets/**` stops moving a secret out)."""
    pair = f"{source}{MOVE_SEPARATOR}{destination}"
    literal = MOVE_SEPARATOR.join(
        escape_literal(path).replace(MOVE_SEPARATOR, " -[>] ") for path in (source, destination)
    )
    return Permission.ask(
        PermissionKey.named(
            tool,
            pair,
            style=KeyStyle.PATH,
            subject=pair,
            protected=is_protected_path(source) or is_protected_path(destination),
            levels=(GrantLevel(f"{tool}:{literal}", f"only moving {source} to {destination}"),),
            paths=(source, destination),
        )
    )


class _ReadTool:
    """What the read tools share: @wasm, Permission.none, category READ."""

    category = Category.READ
    environment = EnvironmentTag.WASM
    bindable = frozenset({EnvironmentTag.WASM})
    asks = False


class _WriteTool:
    """What the write tools share: @wasm, Ask keyed by a workspace path, category WRITE."""

    category = Category.WRITE
    environment = EnvironmentTag.WASM
    bindable = frozenset({EnvironmentTag.WASM})
    key_style = KeyStyle.PATH


# -- read tools -----------------------------------------------------------------------------


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
        content = _files(ctx).read(args.path)
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
        shown: list[str] = []
        budget = ctx.limits.max_output
        end = start
        for number in range(start, min(start + args.limit, len(lines))):
            row = f"{number + 1:>6}\t{_clip(lines[number])}\n"
            budget -= len(row)
            if budget < 0 and shown:
                break
            shown.append(row)
            end = number + 1
        text = "".join(shown)
        if end < len(lines) or total is None:
            of = f"of {total}" if total is not None else f"(file is {content.size} bytes)"
            text += f"[lines {start + 1}-{end} {of}; continue with offset={end + 1}]\n"
        data.update(lines=total, start=start + 1, end=end)
        return ToolResult(text, data=data)


class ListDirParameters(Parameters):
    path: DirPath = Field(
        default=".", description="The directory to list, relative to the workspace."
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
        entries = _files(ctx).list(args.path)
        rows = []
        for e in entries:
            if e.type == "dir":
                rows.append(f"{e.path}/")
            elif e.type == "symlink":
                rows.append(f"{e.path} -> {e.target or '(a target outside the workspace)'}")
            elif e.type == "file":
                rows.append(f"{e.path}  ({e.size} bytes)")
            else:
                rows.append(f"{e.path}  (special file)")
        text, truncated = _cap("".join(f"{row}\n" for row in rows), ctx.limits.max_output)
        data = {
            "path": args.path,
            "entries": [{"name": e.path, "type": e.type, "size": e.size} for e in entries],
            "truncated": truncated,
        }
        return ToolResult(text or f"{args.path} is empty\n", data=data)


class GlobParameters(Parameters):
    pattern: str = Field(
        description=(
            "A glob relative to `path`: `*`, `?` and `[abc]` match within one path segment, "
            "`**` matches any number of directories (`**/*.py`, `src/**/test_*.py`). `*` also "
            "matches names starting with a dot. `.git` directories are never searched."
        ),
        min_length=1,
    )
    path: DirPath = Field(default=".", description="The directory to search from.")
    max_results: int = Field(default=1000, ge=1, le=100_000, description="Stop after this many.")

    @field_validator("pattern")
    @classmethod
    def _relative_pattern(cls, value: str) -> str:
        normalise_path(value)  # the same rules as a path: relative, no `..`
        return value


def _under_git(rel: str) -> bool:
    return ".git" in rel.casefold().split("/")


class Glob(_ReadTool, Tool[GlobParameters]):
    name = "glob"
    description = (
        "Find files and directories in the workspace whose path matches a glob pattern "
        "(`**/*.py`). Results are workspace-relative paths, sorted; directories end with `/`."
    )
    parameters = GlobParameters

    def permission(self, args: GlobParameters) -> Permission:
        return Permission.none()

    def execute(self, args: GlobParameters, ctx: ToolContext) -> ToolResult:
        files = _files(ctx)
        prefix, rest = _literal_prefix(args.pattern)
        base = _join(args.path, prefix) if prefix != "." else args.path
        matches = glob_paths(files, base, rest)
        shown = matches[: args.max_results]
        rows = [f"{path}/" if kind == "dir" else path for path, kind in shown]
        text, truncated = _cap("".join(f"{row}\n" for row in rows), ctx.limits.max_output)
        if len(matches) > len(shown):
            text += f"[{len(matches) - len(shown)} more matches not shown]\n"
        data = {"matches": [p for p, _ in shown], "total": len(matches), "truncated": truncated}
        return ToolResult(text or f"no paths match {args.pattern}\n", data=data)


def glob_paths(files: ConfinedFiles, base: str, pattern: str) -> list[tuple[str, str]]:
    """(workspace path, type) of the entries under `base` matching `pattern`, sorted."""
    if base != ".":
        top = files.lookup(base)
        if top is None or top.type not in ("dir", "symlink"):
            return []  # nothing there to search, so nothing matches
    walk = files.walk(base, sizes=False)
    regex = glob_regex(pattern)
    return [
        (_join(base, e.path), e.type)
        for e in walk.entries
        if not _under_git(e.path) and regex.match(e.path)
    ]


class GrepParameters(Parameters):
    pattern: str = Field(description="A Python regular expression, searched in each line.")
    path: DirPath = Field(
        default=".", description="A file, or a directory searched recursively (not `.git`)."
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


@dataclass(frozen=True, slots=True)
class GrepMatch:
    path: str
    line: int
    text: str


class Grep(_ReadTool, Tool[GrepParameters]):
    name = "grep"
    description = (
        "Search file contents in the workspace with a Python regular expression. Prints "
        "`path:line:text` for matching lines and `path-line-text` for context lines, files in "
        "path order. Binary files and files over 4 MiB are skipped and counted."
    )
    parameters = GrepParameters

    def permission(self, args: GrepParameters) -> Permission:
        return Permission.none()

    def execute(self, args: GrepParameters, ctx: ToolContext) -> ToolResult:
        files = _files(ctx)
        search = grep_files(
            files,
            args.path,
            re.compile(args.pattern, re.IGNORECASE if args.case_insensitive else 0),
            glob=args.glob,
            max_results=args.max_results,
            before=args.context_before,
            after=args.context_after,
            files_only=args.files_with_matches,
        )
        text, truncated = _cap(search.text, ctx.limits.max_output)
        notes = []
        if search.stopped:
            notes.append(f"stopped after {args.max_results} results")
        if search.skipped_binary:
            notes.append(f"{search.skipped_binary} binary files skipped")
        if search.skipped_large:
            notes.append(f"{search.skipped_large} files over {GREP_MAX_FILE_BYTES} bytes skipped")
        if search.unreadable:
            notes.append(f"{len(search.unreadable)} files unreadable")
        if notes:
            text += f"[{'; '.join(notes)}]\n"
        data = {
            "matches": [{"path": m.path, "line": m.line, "text": m.text} for m in search.matches],
            "files": search.files,
            "searched": search.searched,
            "stopped": search.stopped,
            "truncated": truncated,
        }
        return ToolResult(text or "no matches\n", data=data)


@dataclass(slots=True)
class GrepSearch:
    """What grep_files found; `text` is the rendered output."""

    text: str = ""
    matches: list[GrepMatch] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)
    searched: int = 0
    stopped: bool = False
    skipped_binary: int = 0
    skipped_large: int = 0


def _line_filter(regex: re.Pattern[str]) -> re.Pattern[str] | None:
    """A whole-file pre-check that never rejects a file with a matching line, or None.

    With MULTILINE, `^`/`$` match at line boundaries, so a file none of whose lines match fails
    the whole-text search too; `\\A`, `\\Z` and lookbehinds would differ, so they get no filter.
    """
    if any(token in regex.pattern for token in ("\\A", "\\Z", "\\z", "(?<")):
        return None
    return re.compile(regex.pattern, regex.flags | re.MULTILINE)


def grep_files(
    files: ConfinedFiles,
    root: str,
    regex: re.Pattern[str],
    *,
    glob: str | None = None,
    max_results: int = 200,
    before: int = 0,
    after: int = 0,
    files_only: bool = False,
) -> GrepSearch:
    """Search regular files under `root` (or `root` itself if it is a file), in path order."""
    found = GrepSearch()
    top = files.stat(root) if root != "." else None
    if top is not None and top.type != "dir":
        base, _, name = root.rpartition("/")
        base = base or "."
        wanted = [name]
    else:
        base = root
        walk = files.walk(root, sizes=False)
        name_filter = None
        if glob is not None:
            name_filter = glob_regex(glob if "/" in glob else "**/" + glob)
        wanted = [
            e.path
            for e in walk.entries
            if e.type == "file"
            and not _under_git(e.path)
            and (name_filter is None or name_filter.match(e.path))
        ]
    prefilter = _line_filter(regex)
    out: list[str] = []
    results = 0
    for rel, content in files.read_many(base, wanted, limit=GREP_MAX_FILE_BYTES):
        path = _join(base, rel)
        if isinstance(content, str):
            found.unreadable.append(f"{path}: {content}")
            continue
        if content.size > GREP_MAX_FILE_BYTES:
            found.skipped_large += 1
            continue
        found.searched += 1
        if _is_binary(content.data):
            found.skipped_binary += 1
            continue
        text = content.data.decode("utf-8", errors="replace")
        if prefilter is not None and not prefilter.search(text):
            continue
        lines = _lines(text)
        hits = [n for n, line in enumerate(lines) if regex.search(line)]
        if not hits:
            continue
        if files_only:
            found.files.append(path)
            out.append(f"{path}\n")
            results += 1
        else:
            if len(hits) > max_results - results:
                hits = hits[: max_results - results]
            found.files.append(path)
            out.append(_render_hits(path, lines, hits, before, after, separator=bool(out)))
            found.matches.extend(GrepMatch(path, n + 1, lines[n]) for n in hits)
            results += len(hits)
        if results >= max_results:
            found.stopped = True
            break
    found.text = "".join(out)
    return found


def _render_hits(
    path: str, lines: list[str], hits: list[int], before: int, after: int, *, separator: bool
) -> str:
    hit_set = set(hits)
    shown: list[int] = []
    for n in hits:
        for k in range(max(0, n - before), min(len(lines), n + after + 1)):
            if not shown or k > shown[-1]:
                shown.append(k)
    rows: list[str] = []
    previous: int | None = -2 if separator else None  # -2: a group came before (another file)
    for k in shown:
        # `--` separates groups of lines that are not contiguous, as grep does with context.
        if (before or after) and previous is not None and k > previous + 1:
            rows.append("--\n")
        mark = ":" if k in hit_set else "-"
        rows.append(f"{path}{mark}{k + 1}{mark}{_clip(lines[k], 500)}\n")
        previous = k
    return "".join(rows)


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
        files = _files(ctx)
        old = _read_text(files, args.path)
        if args.other_path is not None:
            new, new_name = _read_text(files, args.other_path), f"b/{args.other_path}"
        else:
            new, new_name = args.content or "", f"b/{args.path}"
        diff = unified_diff(old, new, f"a/{args.path}", new_name, args.context_lines)
        text, truncated = _cap(diff, ctx.limits.max_output)
        data = {"identical": not diff, "truncated": truncated}
        return ToolResult(text or "no differences\n", data=data)


# -- write tools ----------------------------------------------------------------------------


class WriteFileParameters(Parameters):
    path: WritePath = Field(
        description="The file to write, relative to the workspace; missing directories are made."
    )
    content: str = Field(description="The whole new content of the file (UTF-8).")


class WriteFile(_WriteTool, Tool[WriteFileParameters]):
    name = "write_file"
    description = (
        "Create a file in the workspace, or replace all of its content. Symbolic links are not "
        "followed: write to the file a link points to, not to the link."
    )
    parameters = WriteFileParameters

    def permission(self, args: WriteFileParameters) -> Permission:
        return _path_key(self.name, args.path)

    def execute(self, args: WriteFileParameters, ctx: ToolContext) -> ToolResult:
        data = args.content.encode("utf-8")
        created = _files(ctx).write(args.path, data)
        verb = "created" if created else "replaced"
        return ToolResult(
            f"{verb} {args.path} ({len(data)} bytes)\n",
            data={"path": args.path, "bytes": len(data), "created": created},
        )


class EditFileParameters(Parameters):
    path: WritePath = Field(description="The file to edit, relative to the workspace.")
    old_string: str = Field(
        min_length=1,
        description="The exact text to replace, including whitespace; it must occur exactly "
        "once unless replace_all is set (add surrounding lines to make it unique).",
    )
    new_string: str = Field(description="The text to put in its place.")
    replace_all: bool = Field(default=False, description="Replace every occurrence.")

    @model_validator(mode="after")
    def _changes_something(self) -> EditFileParameters:
        if self.old_string == self.new_string:
            raise ValueError("old_string and new_string are the same: nothing would change")
        return self


class EditFile(_WriteTool, Tool[EditFileParameters]):
    name = "edit_file"
    description = (
        "Replace an exact string in a workspace text file. Fails, changing nothing, when the "
        "string does not occur, or occurs more than once and replace_all is not set."
    )
    parameters = EditFileParameters

    def permission(self, args: EditFileParameters) -> Permission:
        return _path_key(self.name, args.path)

    def execute(self, args: EditFileParameters, ctx: ToolContext) -> ToolResult:
        files = _files(ctx)
        text = _read_text(files, args.path)
        count = text.count(args.old_string)
        if count == 0:
            raise ExecutionFailed(f"edit_file {args.path}: old_string was not found in the file")
        if count > 1 and not args.replace_all:
            raise ExecutionFailed(
                f"edit_file {args.path}: old_string occurs {count} times; include more "
                "surrounding text to make it unique, or set replace_all"
            )
        first_line = text.count("\n", 0, text.index(args.old_string)) + 1
        files.write(args.path, text.replace(args.old_string, args.new_string).encode("utf-8"))
        replaced = count if args.replace_all else 1
        plural = "s" if replaced != 1 else ""
        return ToolResult(
            f"edited {args.path}: {replaced} replacement{plural}, first at line {first_line}\n",
            data={"path": args.path, "replacements": replaced, "first_line": first_line},
        )


class MoveFileParameters(Parameters):
    source: WritePath = Field(description="The file or directory to move.")
    destination: WritePath = Field(
        description="Its new path, relative to the workspace; missing directories are made."
    )
    overwrite: bool = Field(default=False, description="Replace an existing destination.")


class MoveFile(_WriteTool, Tool[MoveFileParameters]):
    name = "move_file"
    description = (
        "Move or rename a file or directory inside the workspace. Refuses to replace an "
        "existing destination unless overwrite is set."
    )
    parameters = MoveFileParameters

    def permission(self, args: MoveFileParameters) -> Permission:
        return _move_key(self.name, args.source, args.destination)

    def execute(self, args: MoveFileParameters, ctx: ToolContext) -> ToolResult:
        _files(ctx).move(args.source, args.destination, overwrite=args.overwrite)
        return ToolResult(
            f"moved {args.source} -> {args.destination}\n",
            data={"source": args.source, "destination": args.destination},
        )


class DeleteFileParameters(Parameters):
    path: WritePath = Field(description="The file, symbolic link or empty directory to delete.")


class DeleteFile(_WriteTool, Tool[DeleteFileParameters]):
    name = "delete_file"
    description = (
        "Delete a file, a symbolic link (not what it points to) or an empty directory from "
        "the workspace."
    )
    parameters = DeleteFileParameters

    def permission(self, args: DeleteFileParameters) -> Permission:
        return _path_key(self.name, args.path)

    def execute(self, args: DeleteFileParameters, ctx: ToolContext) -> ToolResult:
        _files(ctx).delete(args.path)
        return ToolResult(f"deleted {args.path}\n", data={"path": args.path})


# -- run_wasm -------------------------------------------------------------------------------


def _module_path(value: str) -> str:
    path = normalise_path(value)
    if not path.endswith((".wasm", ".wat")):
        raise ValueError(f"{path!r} is not a .wasm or .wat module")
    return path


class RunWasmParameters(Parameters):
    path: Annotated[str, AfterValidator(_module_path)] = Field(
        description="The WASI module to run (`.wasm` or `.wat`), relative to the workspace."
    )
    args: list[str] = Field(
        default_factory=list, description="Its arguments (after the program name)."
    )
    stdin: str = Field(default="", description="Text given to it on standard input.")
    writable: bool = Field(
        default=False,
        description=(
            "Let it change the workspace's directories (not the files at the top level, never "
            "codecoder.json, .codecoder/, or a .git or .gitmodules at any depth); otherwise it "
            "sees the workspace read-only, at /workspace."
        ),
    )
    timeout: float | None = Field(
        default=None, gt=0, le=3600, description="Seconds before it is stopped."
    )

    @field_validator("args")
    @classmethod
    def _no_nul(cls, value: list[str]) -> list[str]:
        if any("\0" in arg for arg in value):
            raise ValueError("arguments must not contain NUL bytes")
        return value


def run_wasm_preopens(workspace: Path, *, writable: bool) -> tuple[Preopen, ...]:
    """The directories a run_wasm module sees.

    The workspace is always preopened read-only at /workspace. A writable run adds, read-write
    at /workspace/PATH, the largest directories below the top level that are real directories
    (not symlinks) and hold no protected path at any depth (`.git`, `.gitmodules`): WASI
    resolves a path by its longest preopened prefix, so writes land only in those directories,
    and neither `..` nor a symlink leads from them to a protected path. Files at the top level,
    and files of a directory with a protected path somewhere below it, stay read-only. The
    environment checks this again before the call and quarantines any protected path the
    module creates (`WasmRequest.workspace`).
    """
    preopens = [Preopen(workspace, WORKSPACE_GUEST, writable=False)]
    if not writable:
        return tuple(preopens)
    scan = ProtectedScan(workspace)
    unreadable = set(scan.unreadable)  # could hold anything: never writable
    # Every directory with a protected path (or one that cannot be looked into) below it.
    holding = {
        "/".join(parts[:i])
        for found in (*scan.entries, *unreadable)
        for parts in [found.split("/")]
        for i in range(1, len(parts))
    }

    def add(relative: str) -> None:
        if relative in unreadable:
            return
        if relative not in holding:
            preopens.append(Preopen(workspace / relative, f"{WORKSPACE_GUEST}/{relative}", True))
            return
        for name in _subdirectories(workspace / relative):
            add(f"{relative}/{name}")

    for name in _subdirectories(workspace):
        add(name)
    return tuple(preopens)


def _subdirectories(directory: Path) -> list[str]:
    """Real, unprotected subdirectories whose names WASI can carry (UTF-8), sorted."""
    names = []
    with os.scandir(directory) as entries:
        for entry in entries:
            if is_protected_path(entry.name):
                continue
            if not entry.is_dir(follow_symlinks=False):
                continue
            try:
                entry.name.encode("utf-8")
            except UnicodeEncodeError:
                continue  # cannot be named in a WASI preopen
            names.append(entry.name)
    return sorted(names)


class RunWasm(Tool[RunWasmParameters]):
    name = "run_wasm"
    description = (
        "Run a WASI command module (`.wasm` or `.wat`) from the workspace with arguments and "
        "standard input. It sees the workspace at /workspace (read-only unless writable is "
        "set), no network and no environment variables, and is stopped at its time, fuel "
        "and memory limits."
    )
    category = Category.EXECUTE
    environment = EnvironmentTag.WASM
    bindable = frozenset({EnvironmentTag.WASM})
    parameters = RunWasmParameters
    key_style = KeyStyle.PATH

    def permission(self, args: RunWasmParameters) -> Permission:
        mode = " (writable)" if args.writable else ""
        subject = " ".join([args.path, *args.args]) + mode
        return _path_key(self.name, args.path, subject=subject)

    def execute(self, args: RunWasmParameters, ctx: ToolContext) -> ToolResult:
        files = _files(ctx)
        # Read through fileops like any other file, so a module path that is a symlink
        # leading out of the workspace fails the same way.
        module = files.read(args.path, limit=MAX_MODULE_BYTES)
        if not module.complete:
            raise ExecutionFailed(f"{args.path} is larger than {MAX_MODULE_BYTES} bytes")
        env = ctx.environment
        assert isinstance(env, WasmEnvironment)  # _files checked it
        result = env.run(
            WasmRequest(
                module=module.data,
                argv=(args.path.rsplit("/", 1)[-1], *args.args),
                stdin=args.stdin.encode("utf-8"),
                preopens=run_wasm_preopens(files.workspace, writable=args.writable),
                timeout=args.timeout or ctx.limits.timeout,
                max_output=ctx.limits.max_output,
                workspace=files.workspace,
            )
        )
        return module_result(result)


def module_result(result: WasmResult) -> ToolResult:
    """How a WASI module's run is told to the agent: its output and exit code."""
    stdout, stderr = result.stdout_text(), result.stderr_text()
    text = stdout + ("\n" if stdout and not stdout.endswith("\n") and stderr else "") + stderr
    if text and not text.endswith("\n"):
        text += "\n"
    text += f"[exit code {result.exit_code}]"
    return ToolResult(
        text,
        is_error=result.exit_code != 0,
        data={
            "exit_code": result.exit_code,
            "stdout": stdout,
            "stderr": stderr,
            "truncated": result.truncated,
            "fuel_consumed": result.fuel_consumed,
            "duration_ms": round(result.duration * 1000, 3),
        },
    )


FILE_TOOLS: tuple[Tool[Any], ...] = (
    ReadFile(),
    ListDir(),
    Glob(),
    Grep(),
    Diff(),
    WriteFile(),
    EditFile(),
    MoveFile(),
    DeleteFile(),
    RunWasm(),
)
