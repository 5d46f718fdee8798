"""What the read tools need from the environment they run in: the `ReadBackend` protocol
(implemented on @landlock by `LandlockFiles`, on @wasm by `ConfinedFiles`), the values it takes
and returns, and `_Progress`, which reports a long call's progress."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol

from codecoder.tools.files import limits


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

    def read(
        self, path: str, *, offset: int = 0, limit: int = limits.MAX_READ_BYTES
    ) -> FileContent:
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
