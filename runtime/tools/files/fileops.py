"""The confined file layer on @wasm: `ConfinedFiles`.

Every byte goes through `sandboxes/fileops/fileops.wasm`, a small WASI program run in @wasm with
only the directory the call needs preopened: the workspace (or a read root) read-only for
reads, the workspace read-write for changes. Changes never follow symlinks (fileops walks each
path component with O_NOFOLLOW) and never write through a file with several hard links. The
write tools and run_wasm stand on this layer; the read tools do where the kernel has no Landlock,
and search here too then (`ConfinedFiles.glob`, `ConfinedFiles.grep`).
"""

from __future__ import annotations

import functools
import importlib.resources
import json
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from codecoder.environments.wasm.environment import WasmEnvironment
from codecoder.environments.wasm.request import Preopen, WasmRequest, WasmResult
from codecoder.foundation.display import spelled
from codecoder.foundation.errors import ExecutionFailed, SandboxUnavailable
from codecoder.tools.base import ToolContext
from codecoder.tools.files import limits
from codecoder.tools.files.backend import (
    Entry,
    FileContent,
    GlobFound,
    GrepFound,
    GrepLine,
    GrepQuery,
    SearchOptions,
    Walk,
    _Progress,
)
from codecoder.tools.files.globs import glob_regex
from codecoder.tools.files.ignore import _searched_files
from codecoder.tools.files.paths import _as_checked, _join, normalise_path
from codecoder.tools.files.text import _is_binary, _lines

WORKSPACE_GUEST = "/workspace"
EXTRA_ROOT_GUEST = "/root"


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
        return spelled(bytes.fromhex(raw))
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

    def read(
        self, path: str, *, offset: int = 0, limit: int = limits.MAX_READ_BYTES
    ) -> FileContent:
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
        each sends files until about limits.CAT_BATCH_BYTES, then the rest is asked for again."""
        preopen, guest = self._locate(root, write=False)
        pending = list(paths)
        while pending:
            names = [p.encode("utf-8", errors="surrogateescape") for p in pending]
            headers = sum(2 * len(name) + 160 for name in names)  # names may come hex-encoded
            out = self._run(
                "cat",
                root,
                preopen,
                [guest, str(limit), str(limits.CAT_BATCH_BYTES)],
                stdin=b"\0".join(names),
                max_output=limits.CAT_BATCH_BYTES + limit + headers,
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
        out = self._run("list", path, preopen, [guest], max_output=limits.LISTING_MAX_OUTPUT)
        return sorted(
            (_entry(json.loads(line), "name") for line in out.splitlines()),
            key=lambda e: e.path,
        )

    def walk(
        self, path: str, *, max_entries: int = limits.WALK_MAX_ENTRIES, sizes: bool = True
    ) -> Walk:
        """Every entry under `path`, recursively, sorted. Without `sizes` (each entry's size is
        then -1) no entry is stat'ed, which makes the walk about twice as fast."""
        preopen, guest = self._locate(path, write=False)
        argv = [guest, str(max_entries), *([] if sizes else ["--no-size"])]
        out = self._run("walk", path, preopen, argv, max_output=limits.LISTING_MAX_OUTPUT)
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
        for rel, content in self.read_many(base, wanted, limit=limits.GREP_MAX_FILE_BYTES):
            path = _join(base, rel)
            progress(searched, f"{searched:,} files searched so far")
            if isinstance(content, str):
                found.unreadable.append(f"{path}: {content}")
                continue
            if content.size > limits.GREP_MAX_FILE_BYTES:
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


def _line_filter(regex: re.Pattern[str]) -> re.Pattern[str] | None:
    """A whole-file pre-check that never rejects a file with a matching line, or None.

    With MULTILINE, `^`/`$` match at line boundaries, so a file none of whose lines match fails
    the whole-text search too; `\\A`, `\\Z` and lookbehinds would differ, so they get no filter.
    """
    if any(token in regex.pattern for token in ("\\A", "\\Z", "\\z", "(?<")):
        return None
    return re.compile(regex.pattern, regex.flags | re.MULTILINE)


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


def _files(ctx: ToolContext) -> ConfinedFiles:
    env = ctx.environment
    if not isinstance(env, WasmEnvironment):
        raise SandboxUnavailable(
            f"the file tools run in @wasm, but this call was given {type(env).__name__}"
        )
    roots = ctx.extra.get("read_roots", {})
    return ConfinedFiles(env, ctx.workspace, roots, timeout=ctx.limits.timeout)
