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

import builtins
import contextlib
import difflib
import errno
import functools
import importlib.resources
import json
import os
import re
import stat
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any, Literal, Protocol

import pathspec
from pydantic import AfterValidator, Field, field_validator, model_validator

from codecoder.environments.landlock import LandlockEnvironment, RipgrepRequest, RipgrepResult
from codecoder.environments.wasm.environment import WasmEnvironment
from codecoder.environments.wasm.request import Preopen, WasmRequest, WasmResult
from codecoder.environments.workspaceguard import ProtectedScan
from codecoder.runtime.kernel.ceiling import EnvironmentTag
from codecoder.runtime.kernel.confined import open_beneath, open_root
from codecoder.runtime.kernel.errors import ExecutionFailed, SandboxUnavailable
from codecoder.runtime.kernel.protected import is_protected_path
from codecoder.runtime.permissions.keys import (
    GrantLevel,
    KeyStyle,
    Permission,
    PermissionKey,
    escape_literal,
)
from codecoder.runtime.permissions.patterns import MOVE_SEPARATOR
from codecoder.runtime.tools.base import Category, Parameters, Tool, ToolContext, ToolResult

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
SEARCH_MAX_OUTPUT = 64 * 1024 * 1024  # bytes of ripgrep output read; past it, a search stops
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


@functools.lru_cache(maxsize=64)
def _listing_regex(prefix: str, pattern: str) -> re.Pattern[str]:
    """`glob_regex(pattern)` for `prefix` + paths in a NUL-separated listing, found in one pass."""
    body = glob_regex(pattern).pattern.removesuffix(r"\Z")
    body = body.replace("[^/", "[^/\\x00").replace(".*", "[^\\x00]*")
    return re.compile(r"(?:(?<=\x00)|^)" + re.escape(prefix) + f"(?:{body})(?=\\x00)")


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
    resource = importlib.resources.files("codecoder.sandboxes").joinpath("fileops/fileops.wasm")
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
        # Resolved once by the runtime (`Runtime.project_dir`), not again on every call.
        self._workspace = Path(os.path.abspath(workspace))
        roots = (
            dict(extra_read_roots)
            if isinstance(extra_read_roots, Mapping)
            else {Path(root).name: Path(root) for root in extra_read_roots}
        )
        # As configured (resolved when the project was loaded), never resolved again here: a
        # root a sandbox has since swapped for a symlink is refused, not followed (`_as_checked`).
        self._roots = {name: Path(os.path.abspath(root)) for name, root in roots.items()}
        self._timeout = timeout

    @property
    def workspace(self) -> Path:
        return self._workspace

    def _locate(self, path: str, *, write: bool) -> tuple[Preopen, str]:
        """The one directory to preopen for `path`, and the guest path to give fileops."""
        head, _, rest = path.partition("/")
        try:
            if not write and head.startswith("@") and head[1:] in self._roots:
                host, guest = _as_checked(head[1:], self._roots[head[1:]]), EXTRA_ROOT_GUEST
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

    # -- the read tools' search, on @wasm (the fallback where the kernel has no Landlock) --

    def glob(
        self, base: str, pattern: str, options: SearchOptions, progress: _Progress
    ) -> GlobFound:
        if base != ".":
            top = self.lookup(base)
            if top is None or top.type not in ("dir", "symlink"):
                return GlobFound([])  # nothing there to search, so nothing matches
        walk = self.walk(base, sizes=False)
        regex = glob_regex(pattern)
        files = _searched_files(self, base, walk.entries, options)
        return GlobFound(
            [_join(base, rel) for rel in files if regex.match(rel)], partial=walk.truncated
        )

    def grep(self, query: GrepQuery, progress: _Progress) -> GrepFound:
        found = GrepFound()
        skipped_binary = skipped_large = 0
        root = query.root
        top = self.stat(root) if root != "." else None
        if top is not None and top.type != "dir":
            base, _, name = root.rpartition("/")
            base = base or "."
            wanted = [name]
        else:
            base = root
            walk = self.walk(root, sizes=False)
            found.partial = walk.truncated
            wanted = _searched_files(self, root, walk.entries, query.options)
            if query.glob is not None:
                glob = query.glob
                name_filter = glob_regex(glob if "/" in glob else "**/" + glob)
                wanted = [rel for rel in wanted if name_filter.match(rel)]
        regex = re.compile(query.pattern, re.IGNORECASE if query.case_insensitive else 0)
        prefilter = _line_filter(regex)
        searched = 0
        for rel, content in self.read_many(base, wanted, limit=GREP_MAX_FILE_BYTES):
            path = _join(base, rel)
            progress(searched, f"{searched:,} files searched so far")
            if isinstance(content, str):
                found.unreadable.append(f"{path}: {content}")
                continue
            if content.size > GREP_MAX_FILE_BYTES:
                skipped_large += 1
                continue
            searched += 1
            if _is_binary(content.data):
                skipped_binary += 1
                continue
            text = content.data.decode("utf-8", errors="replace")
            if prefilter is not None and not prefilter.search(text):
                continue
            lines = _lines(text)
            hits = [n for n, line in enumerate(lines) if regex.search(line)]
            if hits:
                shown = [] if query.files_only else _with_context(lines, hits, query)
                found.files.append((path, shown))
        found.searched = searched
        found.skipped_binary, found.skipped_large = skipped_binary, skipped_large
        return found


def _with_context(lines: list[str], hits: list[int], query: GrepQuery) -> list[GrepLine]:
    hit_set = set(hits)
    shown: list[int] = []
    for n in hits:
        for k in range(max(0, n - query.before), min(len(lines), n + query.after + 1)):
            if not shown or k > shown[-1]:
                shown.append(k)
    return [GrepLine(k + 1, k in hit_set, lines[k]) for k in shown]


IGNORE_FILES = (".rgignore", ".ignore", ".gitignore")  # ripgrep's precedence in one directory


def _searched_files(
    files: ConfinedFiles, base: str, entries: Sequence[Entry], options: SearchOptions
) -> list[str]:
    """The regular files of a walk of `base` that a search looks at (see SearchOptions), as
    paths relative to `base`, in walk order."""
    candidates = [
        e.path
        for e in entries
        if e.type == "file"
        and not _under_git(e.path)
        and (options.hidden or not any(part.startswith(".") for part in e.path.split("/")))
    ]
    if options.include_ignored:
        return candidates
    rules = _IgnoreRules.load(files, base, entries)
    return [rel for rel in candidates if not rules.ignored(rel)]


class _IgnoreRules:
    """`.gitignore`, `.ignore` and `.rgignore` files, applied as ripgrep applies them: the
    deepest file with a matching pattern decides, the last matching pattern in it wins, and
    nothing under an ignored directory comes back. Paths are relative to the walked `base`;
    the ignore files of its parents, up to the root, count too."""

    def __init__(self, specs: dict[str, list[pathspec.GitIgnoreSpec]], base: str) -> None:
        self._specs = specs  # directory relative to the root ("" for the root) -> its files
        self._base = "" if base == "." else base
        self._dirs: dict[str, bool] = {}

    @classmethod
    def load(cls, files: ConfinedFiles, base: str, entries: Sequence[Entry]) -> _IgnoreRules:
        head, _, _ = base.partition("/")
        parts = base.split("/") if base != "." else []
        prefix = [head] if head.startswith("@") else []
        texts: dict[str, dict[str, bytes]] = {}
        # The parents of `base`, up to the workspace (or read root) it is in.
        for depth in range(len(prefix), len(parts)):
            directory = "/".join(parts[:depth]) or "."
            for name, content in files.read_many(directory, list(IGNORE_FILES), limit=1 << 20):
                if isinstance(content, FileContent):
                    texts.setdefault("/".join(parts[:depth]), {})[name] = content.data
        inside = [
            e.path
            for e in entries
            if e.type == "file" and e.path.rsplit("/", 1)[-1] in IGNORE_FILES
        ]
        for rel, content in files.read_many(base, inside, limit=1 << 20):
            if isinstance(content, FileContent):
                directory, _, name = _join("" if base == "." else base, rel).rpartition("/")
                texts.setdefault(directory, {})[name] = content.data
        specs = {
            directory: [
                pathspec.GitIgnoreSpec.from_lines(
                    by_name[name].decode("utf-8", "replace").splitlines()
                )
                for name in IGNORE_FILES
                if name in by_name
            ]
            for directory, by_name in texts.items()
        }
        return cls(specs, base)

    def ignored(self, rel: str) -> bool:
        path = _join(self._base or ".", rel) if self._base else rel
        parts = path.split("/")
        below = len(self._base.split("/")) if self._base else 0
        for depth in range(below + 1, len(parts)):
            directory = "/".join(parts[:depth])
            if directory not in self._dirs:
                self._dirs[directory] = self._match(directory, is_dir=True)
            if self._dirs[directory]:
                return True
        return self._match(path, is_dir=False)

    def _match(self, path: str, *, is_dir: bool) -> bool:
        parts = path.split("/")
        for depth in range(len(parts) - 1, -1, -1):
            directory = "/".join(parts[:depth])
            for spec in self._specs.get(directory, ()):
                rel = "/".join(parts[depth:]) + ("/" if is_dir else "")
                verdict = spec.check_file(rel).include
                if verdict is not None:
                    return verdict
        return False


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


# -- the read tools' two backends --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GrepLine:
    """One line grep shows: a match, or context around one."""

    number: int
    match: bool
    text: str


@dataclass(frozen=True, slots=True)
class SearchOptions:
    """Which files a search looks at: ripgrep's rules, the same in both backends.

    By default, files and directories ignored by `.gitignore`, `.ignore` or `.rgignore` (in the
    searched tree and in its parents up to the workspace root) and hidden ones (a name starting
    with `.` below the searched directory) are skipped; a path named explicitly is always
    searched. `.git` is never searched, whatever the options.
    """

    hidden: bool = False
    include_ignored: bool = False


@dataclass(frozen=True, slots=True)
class GrepQuery:
    root: str  # a canonical path: the file, or the directory searched recursively
    pattern: str
    case_insensitive: bool = False
    glob: str | None = None
    before: int = 0
    after: int = 0
    files_only: bool = False
    options: SearchOptions = SearchOptions()


@dataclass(slots=True)
class GrepFound:
    """What a search found: every matching file in path order, with the lines to show."""

    files: list[tuple[str, list[GrepLine]]] = field(default_factory=list)
    searched: int | None = None  # files searched, when the backend knows
    unreadable: list[str] = field(default_factory=list)
    skipped_binary: int | None = None
    skipped_large: int | None = None
    partial: bool = False  # stopped at the output cap: more may exist


@dataclass(frozen=True, slots=True)
class GlobFound:
    paths: list[str]
    partial: bool = False


class ReadBackend(Protocol):
    """What the read tools need from the environment they run in (@landlock or @wasm)."""

    def read(self, path: str, *, offset: int = 0, limit: int = MAX_READ_BYTES) -> FileContent:
        """Bytes of a regular file (up to `limit` from `offset`) and its whole size."""

    def list(self, path: str) -> list[Entry]:
        """One directory's entries, sorted, links reported and not followed."""

    def lookup(self, path: str) -> Entry | None:
        """What `path` is (links inside the workspace followed), or None if nothing is there."""

    def glob(
        self, base: str, pattern: str, options: SearchOptions, progress: _Progress
    ) -> GlobFound:
        """Files under the directory `base` whose path relative to it matches `pattern`."""

    def grep(self, query: GrepQuery, progress: _Progress) -> GrepFound:
        """Lines matching `query.pattern` in the files under `query.root`."""


class _Progress:
    """Forwards a long call's progress to `ToolContext.progress`: nothing in its first second,
    then at most five times a second."""

    FIRST = 1.0
    EVERY = 0.2

    def __init__(self, sink: Callable[[float, float | None, str | None], None] | None, label: str):
        self._sink = sink
        self._label = label
        self._started = time.monotonic()
        self._last = 0.0

    def __call__(self, done: float, what: str) -> None:
        if self._sink is None:
            return
        now = time.monotonic()
        elapsed = now - self._started
        if elapsed < self.FIRST or now - self._last < self.EVERY:
            return
        self._last = now
        self._sink(done, None, f"{self._label}: {elapsed:.1f} s, {what}")


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


# -- @landlock: openat2 for single files, ripgrep in a Landlock-confined worker for searches ---

_RG_COMMON = (
    "--no-config",
    "--color=never",
    "--no-require-git",  # an ignore file means what it says, in a git repository or not
    "--iglob=!.git",  # never into .git (a directory or a gitdir file), at any depth
)
_RG_RECORD = re.compile(rb"(\d+)([:-])")
_RG_STATS = re.compile(rb"\n\n\d+ matches\n(?:.*\n)*?(\d+) files searched\n(?:.*\n)*\Z")


def _outside(exc: OSError) -> bool:
    return exc.errno in (errno.EXDEV, errno.ELOOP)


class LandlockFiles:
    """The read tools' file access on @landlock.

    A single file or directory is opened by the runtime itself with openat2(RESOLVE_BENEATH)
    from a descriptor of its root, so the kernel refuses any path, `..` or symlink that leads
    out (EXDEV), and never follows /proc magic links; descriptors are fstat'ed before they are
    read, so FIFOs and devices are refused, never read from. Searches run ripgrep in the
    environment's Landlock-confined worker, which can read nothing but the roots.
    """

    def __init__(
        self,
        env: LandlockEnvironment,
        workspace: Path,
        extra_read_roots: Mapping[str, Path] = MappingProxyType({}),
        *,
        timeout: float = 30.0,
    ) -> None:
        self._env = env
        # The runtime resolved the workspace once (`Runtime.project_dir`); the kernel follows
        # what is there when a call opens it, as resolving it again would (45 µs a call).
        self._workspace = Path(os.path.abspath(workspace))
        self._roots = {name: Path(os.path.abspath(root)) for name, root in extra_read_roots.items()}
        self._timeout = timeout

    def _locate(self, path: str) -> tuple[Path, str, str]:
        """The root directory of `path`, `path` relative to it, and the prefix to show."""
        head, _, rest = path.partition("/")
        try:
            if head.startswith("@") and head[1:] in self._roots:
                root = _as_checked(head[1:], self._roots[head[1:]])
                return root, normalise_path(rest, allow_root=True), head
            return self._workspace, normalise_path(path, allow_root=True), ""
        except ValueError as exc:
            raise ExecutionFailed(str(exc)) from exc

    @contextlib.contextmanager
    def _open(self, op: str, path: str, *, directory: bool = False) -> Iterator[int]:
        root, rel, _ = self._locate(path)
        try:
            root_fd = open_root(root)
        except OSError as exc:
            raise ExecutionFailed(
                f"{op} {path}: the root {root} cannot be opened ({exc.strerror})"
            ) from exc
        try:
            flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | (os.O_DIRECTORY if directory else 0)
            fd = open_beneath(root_fd, rel, flags, symlinks=True)
        except OSError as exc:
            raise ExecutionFailed(f"{op} {path}: {_describe_os_error(exc)}") from exc
        finally:
            os.close(root_fd)
        try:
            yield fd
        finally:
            os.close(fd)

    def read(self, path: str, *, offset: int = 0, limit: int = MAX_READ_BYTES) -> FileContent:
        with self._open("read", path) as fd:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise ExecutionFailed(
                    f"read {path}: it is {_kind_of(info.st_mode)}, not a regular file"
                )
            chunks: list[bytes] = []
            position, wanted = offset, limit
            while wanted > 0:
                chunk = os.pread(fd, min(wanted, 1 << 24), position)
                if not chunk:
                    break
                chunks.append(chunk)
                position += len(chunk)
                wanted -= len(chunk)
        return FileContent(data=b"".join(chunks), size=info.st_size, offset=offset)

    def list(self, path: str) -> builtins.list[Entry]:
        entries: builtins.list[Entry] = []
        with self._open("list", path, directory=True) as fd, os.scandir(fd) as listing:
            for item in listing:
                try:
                    info = item.stat(follow_symlinks=False)
                except OSError:
                    continue  # gone since it was listed
                name = os.fsdecode(item.name)
                if stat.S_ISLNK(info.st_mode):
                    entries.append(
                        Entry(name, "symlink", -1, self._link_target(path, item.name, fd))
                    )
                elif stat.S_ISDIR(info.st_mode):
                    entries.append(Entry(name, "dir", -1))
                elif stat.S_ISREG(info.st_mode):
                    entries.append(Entry(name, "file", info.st_size))
                else:
                    entries.append(Entry(name, "other", -1))
        return sorted(entries, key=lambda e: e.path)

    def _link_target(self, directory: str, name: str, dir_fd: int) -> str | None:
        """A link's text, if it resolves inside the workspace (or to nothing there)."""
        try:
            text = os.readlink(name, dir_fd=dir_fd)
        except OSError:
            return None
        try:
            self.lookup(_join(directory, name))
        except ExecutionFailed:
            return None  # it leads out: its text is not shown either
        return text

    def lookup(self, path: str) -> Entry | None:
        try:
            with self._open("stat", path) as fd:
                info = os.fstat(fd)
        except ExecutionFailed as exc:
            cause = exc.__cause__
            if isinstance(cause, OSError) and cause.errno == errno.ENOENT:
                return None
            raise
        if stat.S_ISDIR(info.st_mode):
            return Entry(path, "dir", -1)
        if stat.S_ISREG(info.st_mode):
            return Entry(path, "file", info.st_size)
        return Entry(path, "other", -1)

    def _ripgrep(
        self, path: str, args: builtins.list[str], progress: _Progress, what: str
    ) -> tuple[str, RipgrepResult]:
        root, rel, shown = self._locate(path)
        for name, other in self._roots.items():
            _as_checked(name, other)  # a new worker would be confined to what a swap leads to
        request = RipgrepRequest(
            roots=(self._workspace, *self._roots.values()),
            cwd=root,
            # No path for the root itself: ripgrep then prints paths without a `./` prefix.
            args=(*_RG_COMMON, *args, *(["--", rel] if rel != "." else [])),
            timeout=self._timeout,
            max_output=SEARCH_MAX_OUTPUT,
            on_progress=lambda lines: progress(lines, f"{lines:,} {what} so far"),
        )
        result = self._env.run(request)
        if result.exit_code not in (0, 1) and not result.stdout:
            raise ExecutionFailed(f"{path}: {_ripgrep_error(result.stderr)}")
        return shown, result

    def glob(
        self, base: str, pattern: str, options: SearchOptions, progress: _Progress
    ) -> GlobFound:
        top = self.lookup(base)
        if top is None or top.type != "dir":
            return GlobFound([])  # nothing there to search, so nothing matches
        _, rel, shown = self._locate(base)
        # ripgrep lists what its rules let through; the pattern is matched here, because a
        # ripgrep --glob would override those rules (ignored and hidden files would match).
        _, result = self._ripgrep(
            base, ["--files", "--null", *_option_args(options)], progress, "paths listed"
        )
        listing = result.stdout.decode("utf-8", "backslashreplace")
        regex = _listing_regex("" if rel == "." else rel + "/", pattern)
        prefix = f"{shown}/" if shown else ""
        paths = sorted(prefix + m.group(0) for m in regex.finditer(listing))
        return GlobFound(paths, partial=result.truncated)

    def grep(self, query: GrepQuery, progress: _Progress) -> GrepFound:
        top = self.lookup(query.root)
        if top is None:
            raise ExecutionFailed(f"grep {query.root}: no such file or directory")
        if top.type == "other":
            raise ExecutionFailed(f"grep {query.root}: not a regular file or directory")
        args = ["--null", "--max-filesize", str(GREP_MAX_FILE_BYTES), "--engine=auto"]
        args += _option_args(query.options)
        if query.case_insensitive:
            args.append("--ignore-case")
        if query.files_only:
            args.append("--files-with-matches")
        else:
            args += ["--line-number", "--with-filename", "--no-heading", "--stats"]
            args += ["--no-context-separator", "-B", str(query.before), "-A", str(query.after)]
        args += ["--regexp", query.pattern]
        shown, result = self._ripgrep(query.root, args, progress, "lines found")
        found = GrepFound(partial=result.truncated)
        prefix = shown.encode() + b"/" if shown else b""
        if query.files_only:
            names = result.stdout.split(b"\0")
            names.pop()
            found.files = [
                ((prefix + n).decode("utf-8", "backslashreplace"), []) for n in sorted(names)
            ]
        else:
            body = result.stdout
            stats = _RG_STATS.search(body)
            if stats is not None:
                found.searched = int(stats.group(1))
                body = body[: stats.start() + 1]
            by_file = _parse_records(body)
            found.files = [
                ((prefix + name).decode("utf-8", "backslashreplace"), by_file[name])
                for name in sorted(by_file)
            ]
        if query.glob is not None and top.type == "dir":
            # Matched here: a ripgrep --glob would override the ignore and hidden rules.
            _, rel, _ = self._locate(query.root)
            cut = len(shown) + 1 if shown else 0
            cut += 0 if rel == "." else len(rel) + 1
            wanted = glob_regex(query.glob if "/" in query.glob else "**/" + query.glob)
            found.files = [(path, lines) for path, lines in found.files if wanted.match(path[cut:])]
        found.unreadable = [line for line in result.stderr.splitlines() if line.startswith("rg: ")]
        return found


def _option_args(options: SearchOptions) -> list[str]:
    return [
        *(["--hidden"] if options.hidden else []),
        *(["--no-ignore"] if options.include_ignored else []),
    ]


def _parse_records(body: bytes) -> dict[bytes, list[GrepLine]]:
    """ripgrep's `PATH\\0NUMBER:TEXT` (a match) and `PATH\\0NUMBER-TEXT` (context) records.

    Paths may hold any byte but NUL, lines any byte but newline, so each record is read from
    its path's NUL to its line's newline. A record cut short by the output cap is dropped.
    """
    found: dict[bytes, list[GrepLine]] = {}
    position, size = 0, len(body)
    while position < size:
        nul = body.find(b"\0", position)
        end = body.find(b"\n", nul + 1) if nul >= 0 else -1
        record = _RG_RECORD.match(body, nul + 1) if end >= 0 else None
        if record is None:
            break
        text = body[record.end() : end].decode("utf-8", "replace")
        if text.endswith("\r"):
            text = text[:-1]
        line = GrepLine(int(record.group(1)), record.group(2) == b":", text)
        found.setdefault(body[position:nul], []).append(line)
        position = end + 1
    return found


def _ripgrep_error(stderr: str) -> str:
    lines = [line.removeprefix("rg: ") for line in stderr.strip().splitlines()]
    text = "; ".join(lines[:5]) or "ripgrep failed"
    if "Permission denied" in text:
        text += " (it is outside the workspace, or reached through a link leading out)"
    return text


def _as_checked(name: str, root: Path) -> Path:
    """`root` (the read root @name), if it is still the directory checked when the project was
    loaded: no symlink in its path. A root inside the workspace is as writable as the rest of
    it, so a sandbox could have replaced it with a link to `/` since; that is refused here, and
    the sandboxes pin what they open (`runtime.kernel.confined.open_root`)."""
    try:
        os.close(open_root(root))
    except OSError as exc:
        raise ExecutionFailed(
            f"the read root @{name} ({root}) is refused: {exc.strerror or exc}; it is no longer "
            "the directory checked when the project was loaded (/reload checks it again)"
        ) from exc
    return root


def _describe_os_error(exc: OSError) -> str:
    if _outside(exc):
        return "not permitted: it is outside the workspace, or reached through a link leading out"
    if exc.errno == errno.ENOENT:
        return "no such file or directory"
    if exc.errno == errno.ENOTDIR:
        return "not a directory"
    return exc.strerror or str(exc)


def _kind_of(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a special file"


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


def _read_text(files: ReadBackend, path: str) -> str:
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
    """What the read tools share: @landlock (or @wasm where the kernel has no Landlock),
    Permission.none, category READ."""

    category = Category.READ
    environment = EnvironmentTag.LANDLOCK
    bindable = frozenset({EnvironmentTag.LANDLOCK, EnvironmentTag.WASM})
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
        entries = _reader(ctx).list(args.path)
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
    path: DirPath = Field(default=".", description="The directory to search from.")
    max_results: int = Field(default=1000, ge=1, le=100_000, description="Stop after this many.")
    include_ignored: bool = Field(default=False, description=_IGNORED_DESCRIPTION)
    hidden: bool = Field(default=False, description=_HIDDEN_DESCRIPTION)

    @field_validator("pattern")
    @classmethod
    def _relative_pattern(cls, value: str) -> str:
        normalise_path(value)  # the same rules as a path: relative, no `..`
        return value


def _under_git(rel: str) -> bool:
    return ".git" in rel.casefold().split("/")


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
        text, truncated = _cap("".join(f"{path}\n" for path in shown), ctx.limits.max_output)
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
            notes.append(f"{found.skipped_large} files over {GREP_MAX_FILE_BYTES} bytes skipped")
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


def _line_filter(regex: re.Pattern[str]) -> re.Pattern[str] | None:
    """A whole-file pre-check that never rejects a file with a matching line, or None.

    With MULTILINE, `^`/`$` match at line boundaries, so a file none of whose lines match fails
    the whole-text search too; `\\A`, `\\Z` and lookbehinds would differ, so they get no filter.
    """
    if any(token in regex.pattern for token in ("\\A", "\\Z", "\\z", "(?<")):
        return None
    return re.compile(regex.pattern, regex.flags | re.MULTILINE)


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
                cancel=ctx.cancel,
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
