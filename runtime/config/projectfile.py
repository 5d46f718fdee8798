"""Reading and writing codecoder.json, the project's permanent allowlist and settings.

This module knows the file and nothing else: its JSON syntax, its schema, where each value
sits (line and column), and how to change it without ever losing what is in it. It does not
know tools or ceilings; the module that checks unknown tools and ceiling violations reports
them at the positions found here (`AllowEntry.line`, `Binding.line`, `ProjectFile.position_of`).

Reading (`load_project_file`) never raises for bad content. Every problem becomes a
`Diagnostic` with a code, a message and, where there is one, a 1-based line and column:

    syntax           not JSON (what the json module said, where it said it)
    unreadable       a directory, no permission, not UTF-8
    schema           a value of the wrong shape, an unknown key, an unknown environment
    invalid_pattern  an empty allowlist/deny pattern, or one with control characters
    invalid_scope    an allowlist value that is not a scope; AlwaysThisSession and Once are
                     only warnings (the entry grants nothing), anything else is an error
    duplicate_key    the same key twice in one object; the last one wins (a warning)
    duplicate_section  a top-level section twice (a second "deny" would silently replace the
                     first): an error, so the file grants nothing; the deny entries of every
                     occurrence are kept

Any error makes the file unusable: it fails closed, so callers grant nothing from it. Deny
entries that could be read are still returned, because a deny can only make things stricter;
environment bindings, limits, session_ttl and the web and agent settings fall back to their
defaults, because those could loosen them. A missing file is an empty configuration, and so is
an empty one.

The user's own file (`$XDG_CONFIG_HOME/codecoder/config.json`, `load_user_file`) has the same
schema without `allowlist` (grants are per project); its diagnostics carry its path in `file`.
How the two are layered, and which settings of a project file need the human's trust, is
`runtime.config.project`'s business.

Writing (`add_allow_entry`, `remove_allow_entry`) changes only the allowlist object, under an
exclusive `flock` on `.codecoder/codecoder.json.lock`, after re-reading the file from disk, so
grants made at the same time by other processes are merged and never lost. A file with errors
is never written (`ConfigError` says where it is broken). The new text goes to a temporary file
in the same directory, is fsynced, renamed over the old one and the directory fsynced, so a
crash at any moment leaves either the old file or the new one. Under the same lock the trust
record is kept as it was (`runtime.config.trust.after_write`): a write by the runtime never makes an
untrusted file trusted, nor a trusted one untrusted.

Positions come from one pass over the text after `json.loads` has accepted it (see
`_SourceIndex`), not from `json_source_map`: that package builds its pointers from the raw
source text of each key, without JSON-pointer escaping and without decoding escapes, so a key
like `write_file:tests/**` or `run_command:"a b"` cannot be looked up reliably, and it keeps only
the last of duplicate keys; it is also about five times slower on a 10,000-entry file.
"""

from __future__ import annotations

import bisect
import codecs
import contextlib
import dataclasses
import glob
import hashlib
import json
import os
import re
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails

from codecoder.runtime.config import trust
from codecoder.runtime.kernel.atomicfile import exclusive_lock, replace_atomically
from codecoder.runtime.kernel.ceiling import EnvironmentTag, Scope
from codecoder.runtime.kernel.display import quoted as _quote
from codecoder.runtime.kernel.display import visible
from codecoder.runtime.kernel.errors import ConfigError
from codecoder.runtime.kernel.hosts import parse_host_entry
from codecoder.runtime.kernel.state import config_directory, workspace_directory

__all__ = [
    "AgentSection",
    "AllowEntry",
    "Binding",
    "DenyEntry",
    "Diagnostic",
    "ProjectFile",
    "Severity",
    "WebSection",
    "add_allow_entry",
    "load_project_file",
    "load_user_file",
    "parse_host_entry",
    "remove_allow_entry",
    "user_file_path",
]

Severity = Literal["error", "warning"]

_PROJECT_SCOPE = Scope.PROJECT.label


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
    diagnostics: tuple[Diagnostic, ...] = ()
    digest: str | None = field(default=None, compare=False)  # SHA-256 of the bytes read
    data: bytes | None = field(default=None, repr=False, compare=False)  # those bytes
    _index: _SourceIndex | None = field(default=None, repr=False, compare=False)

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


def load_project_file(path: Path) -> ProjectFile:
    """Read codecoder.json at `path`; problems with its content are reported, never raised."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return ProjectFile(path=path, exists=False, usable=True)
    except OSError as exc:
        problem = Diagnostic("error", "unreadable", f"cannot read {path.name}: {_os_reason(exc)}")
        return ProjectFile(path=path, exists=True, usable=False, diagnostics=(problem,))
    digest = hashlib.sha256(data).hexdigest()
    text = _decode(path, data)
    if isinstance(text, Diagnostic):
        return ProjectFile(
            path=path, exists=True, usable=False, diagnostics=(text,), digest=digest, data=data
        )
    parsed = _parse(text).project_file(path)
    return dataclasses.replace(parsed, digest=digest, data=data)


def user_file_path(environ: Mapping[str, str] | None = None) -> Path:
    """`$XDG_CONFIG_HOME/codecoder/config.json`, by default `~/.config/codecoder/config.json`
    (a relative XDG_CONFIG_HOME is ignored, as the XDG spec says)."""
    return config_directory(environ) / "config.json"


def load_user_file(path: Path) -> ProjectFile:
    """Read the user's own file: codecoder.json's schema without grants. Every diagnostic
    carries the file's path; a grant in it is an error (grants are per project)."""
    pf = load_project_file(path)
    problems = list(pf.diagnostics)
    if pf.allowlist:
        line, column = pf.position_of("/allowlist")
        problems.append(
            Diagnostic(
                "error",
                "schema",
                "the user file holds no grants: grants are per project, in codecoder.json "
                "(answer AlwaysThisProject at the prompt)",
                "allowlist",
                line,
                column,
            )
        )
    diagnostics = tuple(dataclasses.replace(d, file=str(path)) for d in problems)
    if any(d.severity == "error" for d in diagnostics):
        return dataclasses.replace(
            pf,
            usable=False,
            allowlist=(),
            bindings=(),
            read_roots=(),
            docker=(),
            web=WebSection(),
            agent=AgentSection(),
            timeout=None,
            max_output=None,
            session_ttl=None,
            diagnostics=diagnostics,
        )
    return dataclasses.replace(pf, diagnostics=diagnostics)


def add_allow_entry(
    path: Path, pattern: str, scope: str = _PROJECT_SCOPE, digest: str | None = None
) -> None:
    """Grant `pattern` for the project in the codecoder.json at `path`, creating it if missing.

    Raises `ConfigError` if the file on disk is malformed (it is then left untouched) or cannot
    be written; `ValueError` for a pattern or scope the file could not hold.
    """
    if problem := _pattern_problem(pattern):
        raise ValueError(f"cannot grant {_quote(pattern)}: {problem}")
    if scope != _PROJECT_SCOPE:
        raise ValueError(
            f"cannot write scope {_quote(scope)} to codecoder.json: only {_PROJECT_SCOPE} "
            "lasts beyond the session"
        )
    value: str | dict[str, str] = scope if digest is None else {"scope": scope, "digest": digest}

    def grant(document: dict[str, Any]) -> bool:
        if "allowlist" not in document:
            _insert_allowlist(document)
        allowlist: dict[str, Any] = document["allowlist"]
        if allowlist.get(pattern) == value:
            return False
        allowlist[pattern] = value
        return True

    _update(path, grant, granted=(pattern, digest))


def remove_allow_entry(path: Path, pattern: str) -> bool:
    """Revoke `pattern` from the codecoder.json at `path`; True if it was there.

    Raises `ConfigError` like `add_allow_entry`; a missing file holds nothing to remove.
    """
    removed = False

    def revoke(document: dict[str, Any]) -> bool:
        nonlocal removed
        allowlist: dict[str, Any] = document.get("allowlist", {})
        if pattern in allowlist:
            del allowlist[pattern]
            removed = True
        return removed

    _update(path, revoke, revoked=pattern)
    return removed


# --- the schema ------------------------------------------------------------------------------

# strict: a JSON string "120" is not a number and true is not 1. allow_inf_nan: Python's json
# module reads NaN and Infinity, which are not JSON and mean nothing as a limit.
_STRICT = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class _Grant(BaseModel):
    model_config = _STRICT

    scope: str
    digest: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _bare_scope(cls, value: Any) -> Any:
        # "AlwaysThisProject" is short for {"scope": "AlwaysThisProject"}. Normalising here
        # rather than declaring `str | _Grant` keeps one error per bad value instead of one
        # per union member.
        return {"scope": value} if isinstance(value, str) else value


class _Limits(BaseModel):
    model_config = _STRICT

    timeout: float | None = Field(default=None, gt=0, le=86400)
    max_output: int | None = Field(default=None, ge=1024)


def _check_host_entry(value: str) -> str:
    host, _ = parse_host_entry(value)
    if host == "*":
        raise ValueError(
            'must name hosts: "*" would let every address through; to reach only some hosts, '
            'deny "*" in deny_hosts and name them here'
        )
    return value


def _check_denied_host(value: str) -> str:
    parse_host_entry(value)
    return value


def _check_base_url(value: str) -> str:
    # Parsed the way the web tools parse it, so a URL accepted here is one they can use.
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - the property raises ValueError for a bad port
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"must be an http:// or https:// URL with a host, not {_quote(value)}")
    if parts.username is not None or parts.query or parts.fragment:
        raise ValueError(f"must not hold credentials, a query or a fragment: {_quote(value)}")
    return value


def _check_variable_name(value: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
        raise ValueError(f"must be the name of an environment variable, not {_quote(value)}")
    return value


_HostEntry = Annotated[str, AfterValidator(_check_host_entry)]
_DeniedHost = Annotated[str, AfterValidator(_check_denied_host)]
_BaseUrl = Annotated[str, AfterValidator(_check_base_url)]
_VariableName = Annotated[str, AfterValidator(_check_variable_name)]


class _Web(BaseModel):
    model_config = _STRICT

    allow_hosts: list[_HostEntry] = Field(default_factory=list)
    deny_hosts: list[_DeniedHost] = Field(default_factory=list)
    search_url: _BaseUrl | None = None
    github_api_url: _BaseUrl | None = None
    github_token_env: _VariableName | None = None
    max_bytes: int | None = Field(default=None, ge=1024, le=1024**3)
    timeout: float | None = Field(default=None, gt=0, le=3600)
    max_redirects: int | None = Field(default=None, ge=0, le=20)


class _Agent(BaseModel):
    model_config = _STRICT

    base_url: _BaseUrl | None = None
    model: str | None = Field(default=None, min_length=1)
    api_key_env: _VariableName | None = None
    max_turns: int | None = Field(default=None, ge=1, le=1000)
    timeout: float | None = Field(default=None, gt=0, le=86400)


def _check_root_name(value: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", value):
        raise ValueError("a read root's name is letters, digits, `_`, `.` and `-` only")
    return value


_RootName = Annotated[str, AfterValidator(_check_root_name)]


def _frozen(value: Any) -> Any:
    """A settings value as the runtime keeps it: lists as tuples, at any depth."""
    if isinstance(value, list):
        return tuple(_frozen(item) for item in value)
    if isinstance(value, dict):
        return {key: _frozen(item) for key, item in value.items()}
    return value


class _Egress(BaseModel):
    """`"network": {"allow": [hosts]}`: egress through the runtime's proxy to these hosts only."""

    model_config = _STRICT

    allow: list[Annotated[str, Field(min_length=1)]] = Field(min_length=1)


class _Docker(BaseModel):
    """Overrides of the hardened @docker defaults
    (environments.docker.environment.DockerSettings)."""

    model_config = _STRICT

    image: str | None = Field(default=None, min_length=1)
    runtime: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    workspace: Literal["auto", "bind", "sync"] | None = None
    memory: str | None = Field(default=None, pattern=r"^[0-9]+[kmgKMG]?$")
    cpus: float | None = Field(default=None, gt=0, le=1024)
    pids_limit: int | None = Field(default=None, ge=8, le=1_000_000)
    tmpfs_size: str | None = Field(default=None, pattern=r"^[0-9]+[kmgKMG]?$")
    network: Annotated[str, Field(min_length=1)] | _Egress | None = None
    read_only_rootfs: bool | None = None
    user: str | None = Field(default=None, pattern=r"^(auto|[0-9]+(:[0-9]+)?)$")
    extra_writable_paths: list[str] | None = None
    disk_budget: str | None = Field(default=None, pattern=r"^[0-9]+[kmgKMG]?$")


class _ProjectFileModel(BaseModel):
    model_config = _STRICT

    schema_: str | None = Field(default=None, alias="$schema")
    allowlist: dict[str, _Grant] = Field(default_factory=dict)
    deny: list[str] = Field(default_factory=list)
    # Strict(False): in strict mode pydantic accepts only enum members, and JSON has strings.
    environments: dict[str, Annotated[EnvironmentTag, Strict(False)]] = Field(default_factory=dict)
    limits: _Limits = Field(default_factory=_Limits)
    session_ttl: float | None = None
    web: _Web = Field(default_factory=_Web)
    agent: _Agent = Field(default_factory=_Agent)
    # Extra directories the read tools may read (never write), addressed as `@name/path`.
    read_roots: dict[_RootName, Annotated[str, Field(min_length=1)]] = Field(default_factory=dict)
    docker: _Docker = Field(default_factory=_Docker)

    @field_validator("session_ttl")
    @classmethod
    def _never_or_positive(cls, value: float | None) -> float | None:
        if value is not None and value != -1 and not value > 0:
            raise ValueError("must be -1 (never expires) or a positive number of seconds")
        return value


_TOP_LEVEL_KEYS = ", ".join(
    info.alias or name for name, info in _ProjectFileModel.model_fields.items()
)

# Objects whose keys the user chooses (patterns, tool names), as opposed to schema fields.
_USER_KEYED = frozenset({"allowlist", "environments", "read_roots"})

# Unicode category Cc is exactly these two ranges; a regex is much faster than unicodedata on
# a file with thousands of patterns.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _pattern_problem(pattern: str) -> str | None:
    if not pattern:
        return "a pattern must not be empty"
    if _CONTROL.search(pattern):
        return "a pattern must not contain control characters"
    return None


# --- parsing ---------------------------------------------------------------------------------

_Parts = tuple[str | int, ...]


@dataclass(slots=True)
class _Parse:
    """The outcome of reading one text: the JSON value, where things are, what is wrong."""

    document: Any = None
    index: _SourceIndex | None = None
    model: _ProjectFileModel | None = None
    diagnostics: list[Diagnostic] = field(default_factory=list)
    # The values of "deny" sections a later one replaced, with their offsets: still obeyed.
    earlier_denies: list[tuple[Any, int]] = field(default_factory=list)

    def errors(self) -> list[Diagnostic]:
        return [d for d in self.sorted_diagnostics() if d.severity == "error"]

    def sorted_diagnostics(self) -> tuple[Diagnostic, ...]:
        return tuple(sorted(self.diagnostics, key=lambda d: (d.line or 0, d.column or 0)))

    def project_file(self, path: Path) -> ProjectFile:
        diagnostics = self.sorted_diagnostics()
        deny = self._deny_entries()
        if self.model is None or self.errors():
            return ProjectFile(
                path=path,
                exists=True,
                usable=False,
                deny=deny,
                diagnostics=diagnostics,
                _index=self.index,
            )
        model = self.model
        return ProjectFile(
            path=path,
            exists=True,
            usable=True,
            allowlist=tuple(
                AllowEntry(
                    pattern,
                    grant.scope,
                    grant.digest,
                    *self.key_position(("allowlist", pattern)),
                    grants=grant.scope == _PROJECT_SCOPE,
                )
                for pattern, grant in model.allowlist.items()
            ),
            deny=deny,
            bindings=tuple(
                Binding(tool, environment.value, *self.key_position(("environments", tool)))
                for tool, environment in model.environments.items()
            ),
            timeout=model.limits.timeout,
            max_output=model.limits.max_output,
            session_ttl=model.session_ttl,
            web=WebSection(
                allow_hosts=tuple(model.web.allow_hosts),
                deny_hosts=tuple(model.web.deny_hosts),
                search_url=model.web.search_url,
                github_api_url=model.web.github_api_url,
                github_token_env=model.web.github_token_env,
                max_bytes=model.web.max_bytes,
                timeout=model.web.timeout,
                max_redirects=model.web.max_redirects,
            ),
            agent=AgentSection(**model.agent.model_dump()),
            read_roots=tuple(model.read_roots.items()),
            docker=tuple(
                (name, _frozen(value))
                for name, value in model.docker.model_dump(exclude_none=True).items()
            ),
            diagnostics=diagnostics,
            _index=self.index,
        )

    def _deny_entries(self) -> tuple[DenyEntry, ...]:
        # From the raw document, not the model: denies are kept even when the file is not
        # usable (they only make things stricter), and a list with one bad item has good ones.
        deny = self.document.get("deny") if isinstance(self.document, dict) else None
        entries: list[DenyEntry] = []
        for earlier, offset in self.earlier_denies:
            position = self.index.line_column(offset) if self.index else (None, None)
            for item in earlier if isinstance(earlier, list) else ():
                if isinstance(item, str) and _pattern_problem(item) is None:
                    entries.append(DenyEntry(item, *position))
        if isinstance(deny, list):
            entries.extend(
                DenyEntry(item, *self.value_position(("deny", i)))
                for i, item in enumerate(deny)
                if isinstance(item, str) and _pattern_problem(item) is None
            )
        return tuple(entries)

    def key_position(self, parts: _Parts) -> tuple[int | None, int | None]:
        return self.index.key_position(_pointer(parts)) if self.index else (None, None)

    def value_position(self, parts: _Parts) -> tuple[int | None, int | None]:
        return self.index.nearest_value_position(parts) if self.index else (None, None)

    def report(
        self,
        severity: Severity,
        code: str,
        message: str,
        parts: _Parts,
        position: tuple[int | None, int | None],
    ) -> None:
        key = _subject(self.document, parts)
        self.diagnostics.append(Diagnostic(severity, code, message, key, *position))


def _decode(path: Path, data: bytes) -> str | Diagnostic:
    # A byte-order mark, which some editors add, is not worth refusing the file over.
    data = data.removeprefix(codecs.BOM_UTF8)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        line_start = data.rfind(b"\n", 0, exc.start) + 1
        column = len(data[line_start : exc.start].decode("utf-8", "replace")) + 1
        message = f"{path.name} is not UTF-8: byte 0x{data[exc.start]:02x} cannot be decoded"
        return Diagnostic("error", "unreadable", message, None, line, column)


def _parse(text: str) -> _Parse:
    result = _Parse()
    if not text.strip(" \t\r\n"):
        # An empty file holds nothing to lose and nothing to grant: `touch codecoder.json`
        # should not make every later grant fail.
        result.document = {}
        result.model = _ProjectFileModel()
        return result
    try:
        result.document = json.loads(text)
    except json.JSONDecodeError as exc:
        message = f"not valid JSON: {exc.msg}"
        result.diagnostics.append(
            Diagnostic("error", "syntax", message, None, exc.lineno, exc.colno)
        )
        return result
    except (ValueError, RecursionError) as exc:
        # json.loads also refuses integers of more than 4300 digits (ValueError) and nesting
        # deeper than the recursion limit, without saying where.
        detail = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        result.diagnostics.append(Diagnostic("error", "syntax", f"not valid JSON: {detail}"))
        return result
    index = result.index = _SourceIndex(text)
    for parts, earlier, later in index.duplicates:
        # Reported where the ignored occurrence is: that is the line to delete.
        (line, column), (later_line, _) = index.line_column(earlier), index.line_column(later)
        if len(parts) == 1:
            message = (
                f"the section {_quote(parts[0])} appears again on line {later_line}; a JSON "
                "reader keeps only the last one, so what this one says would be silently lost: "
                "merge the two"
            )
            result.report("error", "duplicate_section", message, parts, (line, column))
            if parts[0] == "deny":
                result.earlier_denies.append(_value_after_key(text, earlier))
            continue
        message = (
            f"{_describe(parts)} appears again on line {later_line}; the entry on line {line} "
            "is ignored (the last one wins)"
        )
        result.report("warning", "duplicate_key", message, parts, (line, column))
    try:
        result.model = _ProjectFileModel.model_validate(result.document)
    except ValidationError as exc:
        for error in exc.errors():
            _report_schema_error(result, error)
    _check_patterns_and_scopes(result)
    return result


def _report_schema_error(result: _Parse, error: ErrorDetails) -> None:
    parts: _Parts = tuple(error["loc"])
    kind = error["type"]
    position = result.value_position(parts)
    if kind == "extra_forbidden":
        name, parent = parts[-1], parts[:-1]
        message = f"unknown key {_quote(name)} " + (
            f"in {_describe(parent)}" if parent else f"at the top level (known: {_TOP_LEVEL_KEYS})"
        )
        position = result.key_position(parts)
    elif kind == "missing":
        message = f"{_describe(parts[:-1])} is missing {_quote(parts[-1])}"
    elif kind == "model_type" and len(parts) == 2 and parts[0] == "allowlist":
        message = (
            f'{_describe(parts)} should be a scope ("{_PROJECT_SCOPE}") or an object '
            '{"scope": ..., "digest": ...}'
        )
    elif kind in ("model_type", "dict_type"):
        message = f"{_describe(parts)} should be an object"
    elif kind == "value_error":
        message = f"{_describe(parts)} {error.get('ctx', {}).get('error', error['msg'])}"
    else:
        message = f"{_describe(parts)} {error['msg'].removeprefix('Input ')}"
    result.report("error", "schema", message, parts, position)


def _check_patterns_and_scopes(result: _Parse) -> None:
    document = result.document
    if not isinstance(document, dict):
        return
    allowlist = document.get("allowlist")
    for pattern, value in allowlist.items() if isinstance(allowlist, dict) else ():
        parts: _Parts = ("allowlist", pattern)
        if problem := _pattern_problem(pattern):
            message = f"{_describe(parts)}: {problem}"
            result.report("error", "invalid_pattern", message, parts, result.key_position(parts))
        if isinstance(value, dict) and isinstance(value.get("scope"), str):
            _check_scope(result, value["scope"], (*parts, "scope"))
        elif isinstance(value, str):
            _check_scope(result, value, parts)
    deny = document.get("deny")
    for i, item in enumerate(deny) if isinstance(deny, list) else ():
        if isinstance(item, str) and (problem := _pattern_problem(item)):
            parts = ("deny", i)
            message = f"{_describe(parts)}: {problem}"
            result.report("error", "invalid_pattern", message, parts, result.value_position(parts))


def _check_scope(result: _Parse, label: str, parts: _Parts) -> None:
    try:
        scope = Scope.from_label(label)
    except ValueError:
        message = (
            f'{_quote(label)} is not a scope: entries of codecoder.json are "{_PROJECT_SCOPE}"'
        )
        result.report("error", "invalid_scope", message, parts, result.value_position(parts))
        return
    if scope is not Scope.PROJECT:
        message = (
            f"{label} means nothing in codecoder.json: the entry grants nothing; "
            f"answer {label} at the prompt instead"
        )
        result.report("warning", "invalid_scope", message, parts, result.value_position(parts))


def _subject(document: Any, parts: _Parts) -> str | None:
    """The pattern or tool name a diagnostic at `parts` is about, if it is about one."""
    if len(parts) < 2:
        return None
    if parts[0] in _USER_KEYED and isinstance(parts[1], str):
        return parts[1]
    if parts[0] == "deny" and isinstance(parts[1], int) and isinstance(document, dict):
        deny = document.get("deny")
        if isinstance(deny, list) and parts[1] < len(deny) and isinstance(deny[parts[1]], str):
            item: str = deny[parts[1]]
            return item
    return None


_NAME = re.compile(r"[$A-Za-z_][A-Za-z0-9_]*")


def _describe(parts: _Parts) -> str:
    """`allowlist["write_file:tests/**"]`, `limits.timeout`, `deny[2]`: a place, in words."""
    if not parts:
        return "the file"
    described = ""
    for i, part in enumerate(parts):
        if isinstance(part, int):
            described += f"[{part}]"
        elif (i == 1 and parts[0] in _USER_KEYED) or not _NAME.fullmatch(part):
            described += f"[{_quote(part)}]"
        else:
            described += f".{part}" if described else part
    return described


def _pointer(parts: _Parts) -> str:
    """The RFC 6901 JSON pointer of `parts`: `/` in a key is `~1`, `~` is `~0`."""
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in parts)


_WHITESPACE = re.compile(r"[ \t\n\r]*")
_NEWLINE = re.compile(r"\n")
_DECODER = json.JSONDecoder()
# The json module's string scanner (C when available); typeshed does not declare it.
_scanstring: Callable[[str, int], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]


def _value_after_key(text: str, key_offset: int) -> tuple[Any, int]:
    """The value of the object member whose key starts at `key_offset`, and where it starts."""
    _, offset = _scanstring(text, key_offset + 1)
    offset = _skip_whitespace(text, _skip_whitespace(text, offset) + 1)
    return _DECODER.raw_decode(text, offset)[0], offset


def _skip_whitespace(text: str, offset: int) -> int:
    match = _WHITESPACE.match(text, offset)
    assert match is not None  # the pattern matches the empty string anywhere
    return match.end()


class _SourceIndex:
    """Where each key and value of a JSON text is, down to the depth the schema has.

    Built by one pass over text that `json.loads` has already accepted, so it trusts the
    syntax; strings are read by the json module's scanner (which decodes escapes, so keys are
    the same strings `json.loads` produced) and values below `_DEPTH` are skipped by its C
    decoder. Duplicate keys in an object are collected as they are met.
    """

    # allowlist / pattern / scope: nothing in the schema is deeper.
    _DEPTH = 3

    __slots__ = ("_keys", "_newlines", "_values", "duplicates")

    def __init__(self, text: str) -> None:
        self._newlines = [match.start() for match in _NEWLINE.finditer(text)]
        self._keys: dict[str, int] = {}
        self._values: dict[str, int] = {}
        self.duplicates: list[tuple[_Parts, int, int]] = []
        self._walk(text, 0, "", ())

    def line_column(self, offset: int) -> tuple[int, int]:
        """The 1-based line and column of a character offset, as json.JSONDecodeError counts."""
        lines_before = bisect.bisect_left(self._newlines, offset)
        line_start = self._newlines[lines_before - 1] + 1 if lines_before else 0
        return lines_before + 1, offset - line_start + 1

    def key_position(self, pointer: str) -> tuple[int | None, int | None]:
        offset = self._keys.get(pointer)
        return (None, None) if offset is None else self.line_column(offset)

    def value_position(self, pointer: str) -> tuple[int | None, int | None]:
        offset = self._values.get(pointer)
        return (None, None) if offset is None else self.line_column(offset)

    def nearest_value_position(self, parts: _Parts) -> tuple[int | None, int | None]:
        """The value at `parts` or, if there is none (a missing field), its nearest ancestor."""
        for length in range(len(parts), -1, -1):
            line, column = self.value_position(_pointer(parts[:length]))
            if line is not None:
                return line, column
        return None, None

    def _walk(self, text: str, offset: int, pointer: str, parts: _Parts) -> int:
        """Index the value at `offset` and everything in it; return the offset after it."""
        offset = _skip_whitespace(text, offset)
        self._values[pointer] = offset
        opening = text[offset]
        if len(parts) >= self._DEPTH or opening not in "{[":
            return _DECODER.raw_decode(text, offset)[1]
        closing = "}" if opening == "{" else "]"
        seen: dict[str, int] = {}
        offset = _skip_whitespace(text, offset + 1)
        i = 0
        while text[offset] != closing:
            if opening == "{":
                key_offset = offset
                key, offset = _scanstring(text, offset + 1)
                child: str | int = key
                child_pointer = f"{pointer}/{key.replace('~', '~0').replace('/', '~1')}"
                if key in seen:
                    self.duplicates.append(((*parts, key), seen[key], key_offset))
                seen[key] = self._keys[child_pointer] = key_offset
                offset = _skip_whitespace(text, offset) + 1
            else:
                child, child_pointer = i, f"{pointer}/{i}"
                i += 1
            offset = self._walk(text, offset, child_pointer, (*parts, child))
            offset = _skip_whitespace(text, offset)
            if text[offset] == ",":
                offset = _skip_whitespace(text, offset + 1)
        return offset + 1


# --- writing ---------------------------------------------------------------------------------


def _update(
    path: Path,
    change: Callable[[dict[str, Any]], bool],
    *,
    granted: tuple[str, str | None] | None = None,
    revoked: str | None = None,
) -> None:
    """Apply `change` to the document on disk under the lock; write if it says it changed, and
    keep the file's trust as it was (`runtime.config.trust.after_write`) under the same lock."""
    try:
        with exclusive_lock_of(path):
            _remove_stale_temporaries(path)
            document, mode, before = _read_for_update(path)
            if change(document):
                after = _serialize(document)
                replace_atomically(path, after, mode)
                trust.after_write(
                    path.parent.resolve(), before, after, granted=granted, revoked=revoked
                )
    except OSError as exc:
        raise ConfigError(f"cannot update {path.name}: {_os_reason(exc)}", path) from exc


def exclusive_lock_of(path: Path) -> contextlib.AbstractContextManager[None]:
    """The lock every change to the project file at `path` (and to its trust) is made under."""
    return exclusive_lock(workspace_directory(path.parent) / f"{path.name}.lock")


def _read_for_update(path: Path) -> tuple[dict[str, Any], int | None, bytes | None]:
    """The document on disk, its permission bits and bytes; None for a file that does not
    exist."""
    try:
        with path.open("rb") as file:
            mode = stat.S_IMODE(os.fstat(file.fileno()).st_mode)
            data = file.read()
    except FileNotFoundError:
        return {}, None, None
    text = _decode(path, data)
    parse = _parse(text) if isinstance(text, str) else _Parse(diagnostics=[text])
    if errors := parse.errors():
        first = errors[0]
        raise ConfigError(
            f"{first.message}; the file is left as it is: fix it, then grant again",
            path,
            first.line,
            first.column,
        )
    document: dict[str, Any] = parse.document
    return document, mode, data


def _insert_allowlist(document: dict[str, Any]) -> None:
    # Where a reader looks for it: first, or right after "$schema".
    items = list(document.items())
    at = next((i + 1 for i, (key, _) in enumerate(items) if key == "$schema"), 0)
    items.insert(at, ("allowlist", {}))
    document.clear()
    document.update(items)


def _serialize(document: dict[str, Any]) -> bytes:
    try:
        return (json.dumps(document, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate (read from a "\ud800" escape) has no UTF-8 form; \u escapes keep
        # the very same value.
        return (json.dumps(document, indent=2) + "\n").encode("ascii")


def _remove_stale_temporaries(path: Path) -> None:
    # Only a writer holding the lock creates these, and we hold it: any left over belongs to a
    # writer that died between creating it and renaming it.
    stale = re.compile(rf"\.{re.escape(path.name)}\.[0-9a-f]{{16}}\.tmp")
    for candidate in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        if stale.fullmatch(candidate.name):
            with contextlib.suppress(FileNotFoundError):
                candidate.unlink()


def _os_reason(exc: OSError) -> str:
    return exc.strerror.lower() if exc.strerror else str(exc)
