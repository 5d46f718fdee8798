"""What codecoder.json, the project's permanent allowlist and settings, says (and the user's file,
which has its schema without grants), and what is wrong with it.

These values know the file and nothing else: its entries, its settings, where each sits (line and
column) and the problems found in it (`Diagnostic`). They do not know tools or ceilings; the
module that checks unknown tools and ceiling violations reports them at the positions found here
(`AllowEntry.line`, `Binding.line`, `ProjectFile.position_of`).

The files are read by `runtime.config.reading` and written by `runtime.config.writing`. How the
two are layered is `runtime.config.project`'s business, and which settings of a project file need
the human's trust, `runtime.config.untrusted`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from codecoder.config.jsonsource import SourceIndex
from codecoder.foundation.ceiling import Scope
from codecoder.foundation.display import visible

__all__ = [
    "PROJECT_SCOPE",
    "AgentSection",
    "AllowEntry",
    "Binding",
    "BwrapSection",
    "DenyEntry",
    "Diagnostic",
    "ProjectFile",
    "Severity",
    "WebSection",
    "format_diagnostic",
]

Severity = Literal["error", "warning"]

# The one scope an entry of the file holds: the others last no longer than a session.
PROJECT_SCOPE = Scope.PROJECT.label


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One problem found in codecoder.json (or, with `file` set, in that file); `key` is the
    pattern or tool it concerns, if any."""

    severity: Severity
    code: str
    message: str
    key: str | None = None
    line: int | None = None
    column: int | None = None
    file: str | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "severity": self.severity,
            "code": self.code,
            "key": self.key,
            "message": self.message,
            "line": self.line,
            "column": self.column,
            "file": self.file,
        }


@dataclass(frozen=True, slots=True)
class AllowEntry:
    """An allowlist entry; `grants` is False when its scope means nothing in the file."""

    pattern: str
    scope: str
    digest: str | None
    line: int | None
    column: int | None
    grants: bool


@dataclass(frozen=True, slots=True)
class DenyEntry:
    """A deny pattern; a matching call is refused without asking."""

    pattern: str
    line: int | None
    column: int | None


@dataclass(frozen=True, slots=True)
class Binding:
    """The environment the project binds a tool to (`"run_command": "@docker"`)."""

    tool: str
    environment: str
    line: int | None
    column: int | None


@dataclass(frozen=True, slots=True)
class WebSection:
    """The `web` object: what the web tools may reach and how much they may read.

    `None` means "not set": the runtime's default applies (see
    `runtime.config.project.WebSettings`).
    """

    allow_hosts: tuple[str, ...] = ()
    deny_hosts: tuple[str, ...] = ()
    search_url: str | None = None
    github_api_url: str | None = None
    github_token_env: str | None = None
    max_bytes: int | None = None
    timeout: float | None = None
    max_redirects: int | None = None


@dataclass(frozen=True, slots=True)
class AgentSection:
    """The `agent` object: the model behind child agents. Never a key, only the name of the
    environment variable that holds one, because codecoder.json is committed with the project."""

    base_url: str | None = None
    model: str | None = None
    api_key_env: str | None = None
    max_turns: int | None = None
    timeout: float | None = None


@dataclass(frozen=True, slots=True)
class BwrapSection:
    """The `bwrap` object: what the @bwrap sandbox shows of the home (`home`, as written) and
    which environment variables pass its scrubbing (`env`, names or `*` patterns)."""

    home: tuple[str, ...] = ()
    env: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ProjectFile:
    """What codecoder.json says, and what is wrong with it.

    `usable` is False when the file has any error: then `allowlist` and `bindings` are empty and
    the limits are the defaults (callers grant nothing from it), while `deny` keeps every deny
    entry that could be read. Positions are 1-based; an entry's position is that of its key
    (a deny entry's, that of its string).
    """

    path: Path
    exists: bool
    usable: bool
    allowlist: tuple[AllowEntry, ...] = ()
    deny: tuple[DenyEntry, ...] = ()
    bindings: tuple[Binding, ...] = ()
    timeout: float | None = None
    max_output: int | None = None
    session_ttl: float | None = None  # None: not set (never expires, unless a layer below says)
    web: WebSection = WebSection()
    agent: AgentSection = AgentSection()
    read_roots: tuple[tuple[str, str], ...] = ()  # (name, directory as written)
    docker: tuple[tuple[str, Any], ...] = ()  # the @docker settings the file sets
    bwrap: BwrapSection = BwrapSection()
    credentials: tuple[tuple[str, str], ...] = ()  # (host entry, source): the user's file's only
    diagnostics: tuple[Diagnostic, ...] = ()
    digest: str | None = field(default=None, compare=False)  # SHA-256 of the bytes read
    data: bytes | None = field(default=None, repr=False, compare=False)  # those bytes
    _index: SourceIndex | None = field(default=None, repr=False, compare=False)

    def position_of(self, pointer: str) -> tuple[int | None, int | None]:
        """Line and column of the value at a JSON pointer (RFC 6901: `/` is `~1`, `~` is `~0`).

        `(None, None)` when the file has no such value, could not be parsed, or the value is
        nested deeper than anything the schema allows.
        """
        if self._index is None:
            return None, None
        return self._index.value_position(pointer)


def format_diagnostic(path: Path, d: Diagnostic) -> str:
    """`file:line:column: severity: [code] message`, as every interface prints a diagnostic."""
    where = d.file or f"{path}"
    if d.line is not None:
        where += f":{d.line}" + (f":{d.column}" if d.column is not None else "")
    return f"{where}: {d.severity}: [{d.code}] {visible(d.message)}"
