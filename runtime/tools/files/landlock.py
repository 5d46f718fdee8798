"""The read tools' file access on @landlock: `LandlockFiles`, openat2 for single files
(`BeneathFiles`), ripgrep in the environment's Landlock-confined worker for searches."""

from __future__ import annotations

import builtins
import re
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

from codecoder.environments.landlock import LandlockEnvironment, RipgrepRequest, RipgrepResult
from codecoder.foundation.display import spelled
from codecoder.foundation.errors import ExecutionFailed
from codecoder.tools.files import limits
from codecoder.tools.files.backend import (
    GlobFound,
    GrepFound,
    GrepLine,
    GrepQuery,
    SearchOptions,
    _Progress,
)
from codecoder.tools.files.beneath import BeneathFiles
from codecoder.tools.files.globs import _listing_regex, glob_regex
from codecoder.tools.files.paths import _as_checked

_RG_COMMON = (
    "--no-config",
    "--color=never",
    "--no-require-git",  # an ignore file means what it says, in a git repository or not
    "--iglob=!.git",  # never into .git (a directory or a gitdir file), at any depth
)
_RG_RECORD = re.compile(rb"(\d+)([:-])")
_RG_STATS = re.compile(rb"\n\n\d+ matches\n(?:.*\n)*?(\d+) files searched\n(?:.*\n)*\Z")


class LandlockFiles(BeneathFiles):
    """The read tools' file access on @landlock.

    Single files and directories are opened with openat2 (`BeneathFiles`). Searches run ripgrep
    in the environment's Landlock-confined worker, which can read nothing but the roots.
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
        super().__init__(workspace, extra_read_roots)
        self._timeout = timeout

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
            max_output=limits.SEARCH_MAX_OUTPUT,
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
        listing = spelled(result.stdout)
        regex = _listing_regex("" if rel == "." else rel + "/", pattern)
        paths = regex.findall(listing)  # whole matches: the regex has no capturing group
        paths.sort()
        if shown:
            paths = [f"{shown}/{path}" for path in paths]
        return GlobFound(paths, partial=result.truncated)

    def grep(self, query: GrepQuery, progress: _Progress) -> GrepFound:
        top = self.lookup(query.root)
        if top is None:
            raise ExecutionFailed(f"grep {query.root}: no such file or directory")
        if top.type == "other":
            raise ExecutionFailed(f"grep {query.root}: not a regular file or directory")
        args = ["--null", "--max-filesize", str(limits.GREP_MAX_FILE_BYTES), "--engine=auto"]
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
            found.files = [(spelled(prefix + n), []) for n in sorted(names)]
        else:
            body = result.stdout
            stats = _RG_STATS.search(body)
            if stats is not None:
                found.searched = int(stats.group(1))
                body = body[: stats.start() + 1]
            by_file = _parse_records(body)
            found.files = [(spelled(prefix + name), by_file[name]) for name in sorted(by_file)]
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
