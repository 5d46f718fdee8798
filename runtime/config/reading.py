"""Reading codecoder.json and the user's file: from their bytes to a `ProjectFile` and its
diagnostics.

Reading (`load_project_file`) never raises for bad content. Every problem becomes a
`Diagnostic` with a code, a message and, where there is one, a 1-based line and column:

    syntax           not JSON (what the json module said, where it said it)
    unreadable       a directory, no permission, not UTF-8
    schema           a value of the wrong shape, an unknown key, an unknown environment, a
                     comment (a top-level key starting with //) that is not text
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
schema; its `allowlist` holds grants for every project (an AlwaysEveryProject answer), which
hold only where their tool runs contained (`runtime.config.project`), and never a capability's
digest (a capability is one project's code); its diagnostics carry its path in `file`.

The values are checked against the schema (`runtime.config.schema`) and located in the text
(`runtime.config.jsonsource`); `runtime.config.writing` reads the file it changes with
`parse_text` too, so it never writes over one that is broken.
"""

from __future__ import annotations

import codecs
import dataclasses
import hashlib
import json
import re
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from codecoder.config.jsonsource import Parts, SourceIndex, json_pointer, value_after_key
from codecoder.config.projectfile import (
    PROJECT_SCOPE,
    AgentSection,
    AllowEntry,
    Binding,
    BwrapSection,
    DenyEntry,
    Diagnostic,
    ProjectFile,
    Severity,
    WebSection,
)
from codecoder.config.schema import COMMENT_PREFIX, ProjectFileModel, pattern_problem
from codecoder.foundation.ceiling import Scope
from codecoder.foundation.display import quoted as _quote
from codecoder.foundation.regularfile import DEFAULT_LIMIT, read_regular_file
from codecoder.foundation.state import config_directory
from codecoder.permissions.spellings import did_you_mean

__all__ = [
    "ParsedText",
    "decode_text",
    "load_project_file",
    "load_user_file",
    "os_reason",
    "parse_text",
    "user_file_path",
]


# A codecoder.json of 10,000 grants is about 500 KB; what is larger is not a file a person wrote.
PROJECT_FILE_LIMIT = DEFAULT_LIMIT


def load_project_file(path: Path) -> ProjectFile:
    """Read codecoder.json at `path`; problems with its content are reported, never raised."""
    try:
        data = read_regular_file(path, limit=PROJECT_FILE_LIMIT)
    except FileNotFoundError:
        return ProjectFile(path=path, exists=False, usable=True)
    except OSError as exc:
        problem = Diagnostic("error", "unreadable", f"cannot read {path.name}: {os_reason(exc)}")
        return ProjectFile(path=path, exists=True, usable=False, diagnostics=(problem,))
    digest = hashlib.sha256(data).hexdigest()
    text = decode_text(path, data)
    if isinstance(text, Diagnostic):
        return ProjectFile(
            path=path, exists=True, usable=False, diagnostics=(text,), digest=digest, data=data
        )
    parsed = parse_text(text).project_file(path)
    return dataclasses.replace(parsed, digest=digest, data=data)


def user_file_path(environ: Mapping[str, str] | None = None) -> Path:
    """`$XDG_CONFIG_HOME/codecoder/config.json`, by default `~/.config/codecoder/config.json`
    (a relative XDG_CONFIG_HOME is ignored, as the XDG spec says)."""
    return config_directory(environ) / "config.json"


def load_user_file(path: Path) -> ProjectFile:
    """Read the user's own file: codecoder.json's schema, its grants for every project. Every
    diagnostic carries the file's path; a grant pinned to a digest is an error (a capability
    is one project's code)."""
    pf = load_project_file(path)
    problems = list(pf.diagnostics)
    for entry in pf.allowlist:
        if entry.digest is not None:
            problems.append(
                Diagnostic(
                    "error",
                    "schema",
                    f"{entry.pattern}: a grant pinned to a digest (a capability's) belongs to "
                    "its project's codecoder.json, not to your own file",
                    entry.pattern,
                    entry.line,
                    entry.column,
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
            bwrap=BwrapSection(),
            credentials=(),
            web=WebSection(),
            agent=AgentSection(),
            timeout=None,
            max_output=None,
            session_ttl=None,
            diagnostics=diagnostics,
        )
    return dataclasses.replace(pf, diagnostics=diagnostics)


# --- parsing ---------------------------------------------------------------------------------


def _frozen(value: Any) -> Any:
    """A settings value as the runtime keeps it: lists as tuples, at any depth."""
    if isinstance(value, list):
        return tuple(_frozen(item) for item in value)
    if isinstance(value, dict):
        return {key: _frozen(item) for key, item in value.items()}
    return value


_TOP_LEVEL_KEYS = ", ".join(
    info.alias or name for name, info in ProjectFileModel.model_fields.items()
)

# Objects whose keys the user chooses (patterns, tool names), as opposed to schema fields.
_USER_KEYED = frozenset({"allowlist", "environments", "read_roots"})


@dataclass(slots=True)
class ParsedText:
    """The outcome of reading one text: the JSON value, where things are, what is wrong."""

    document: Any = None
    index: SourceIndex | None = None
    model: ProjectFileModel | None = None
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
                    grants=grant.scope == PROJECT_SCOPE,
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
            bwrap=BwrapSection(tuple(model.bwrap.home), tuple(model.bwrap.env)),
            credentials=tuple((host, route.from_) for host, route in model.credentials.items()),
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
                if isinstance(item, str) and pattern_problem(item) is None:
                    entries.append(DenyEntry(item, *position))
        if isinstance(deny, list):
            entries.extend(
                DenyEntry(item, *self.value_position(("deny", i)))
                for i, item in enumerate(deny)
                if isinstance(item, str) and pattern_problem(item) is None
            )
        return tuple(entries)

    def key_position(self, parts: Parts) -> tuple[int | None, int | None]:
        return self.index.key_position(json_pointer(parts)) if self.index else (None, None)

    def value_position(self, parts: Parts) -> tuple[int | None, int | None]:
        return self.index.nearest_value_position(parts) if self.index else (None, None)

    def report(
        self,
        severity: Severity,
        code: str,
        message: str,
        parts: Parts,
        position: tuple[int | None, int | None],
    ) -> None:
        key = _subject(self.document, parts)
        self.diagnostics.append(Diagnostic(severity, code, message, key, *position))


def decode_text(path: Path, data: bytes) -> str | Diagnostic:
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


def parse_text(text: str) -> ParsedText:
    result = ParsedText()
    if not text.strip(" \t\r\n"):
        # An empty file holds nothing to lose and nothing to grant: `touch codecoder.json`
        # should not make every later grant fail.
        result.document = {}
        result.model = ProjectFileModel()
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
    index = result.index = SourceIndex(text)
    for parts, earlier, later in index.duplicates:
        if len(parts) == 1 and str(parts[0]).startswith(COMMENT_PREFIX):
            continue  # a comment said twice loses nothing
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
                result.earlier_denies.append(value_after_key(text, earlier))
            continue
        message = (
            f"{_describe(parts)} appears again on line {later_line}; the entry on line {line} "
            "is ignored (the last one wins)"
        )
        result.report("warning", "duplicate_key", message, parts, (line, column))
    try:
        result.model = ProjectFileModel.model_validate(result.document)
    except ValidationError as exc:
        for error in exc.errors():
            _report_schema_error(result, error)
    _check_patterns_and_scopes(result)
    _check_comments(result)
    return result


def _check_comments(result: ParsedText) -> None:
    document = result.document
    for key, note in document.items() if isinstance(document, dict) else ():
        if not key.startswith(COMMENT_PREFIX):
            continue
        lines = note if isinstance(note, list) else [note]
        if not all(isinstance(line, str) for line in lines):
            message = (
                f"the comment {_quote(key)} should be a string or a list of strings (a key "
                f"starting with {COMMENT_PREFIX} is a comment)"
            )
            result.report("error", "schema", message, (key,), result.value_position((key,)))


def _report_schema_error(result: ParsedText, error: ErrorDetails) -> None:
    parts: Parts = tuple(error["loc"])
    kind = error["type"]
    position = result.value_position(parts)
    if kind == "extra_forbidden":
        name, parent = parts[-1], parts[:-1]
        meant = did_you_mean(str(name), _known_keys(parent))
        message = f"unknown key {_quote(name)}{meant} " + (
            f"in {_describe(parent)}" if parent else f"at the top level (known: {_TOP_LEVEL_KEYS})"
        )
        position = result.key_position(parts)
    elif kind == "missing":
        message = f"{_describe(parts[:-1])} is missing {_quote(parts[-1])}"
    elif kind == "model_type" and len(parts) == 2 and parts[0] == "allowlist":
        message = (
            f'{_describe(parts)} should be a scope ("{PROJECT_SCOPE}") or an object '
            '{"scope": ..., "digest": ...}'
        )
    elif kind in ("model_type", "dict_type"):
        message = f"{_describe(parts)} should be an object"
    elif kind == "value_error":
        message = f"{_describe(parts)} {error.get('ctx', {}).get('error', error['msg'])}"
    else:
        message = f"{_describe(parts)} {error['msg'].removeprefix('Input ')}"
    result.report("error", "schema", message, parts, position)


def _check_patterns_and_scopes(result: ParsedText) -> None:
    document = result.document
    if not isinstance(document, dict):
        return
    allowlist = document.get("allowlist")
    for pattern, value in allowlist.items() if isinstance(allowlist, dict) else ():
        parts: Parts = ("allowlist", pattern)
        if problem := pattern_problem(pattern):
            message = f"{_describe(parts)}: {problem}"
            result.report("error", "invalid_pattern", message, parts, result.key_position(parts))
        if isinstance(value, dict) and isinstance(value.get("scope"), str):
            _check_scope(result, value["scope"], (*parts, "scope"))
        elif isinstance(value, str):
            _check_scope(result, value, parts)
    deny = document.get("deny")
    for i, item in enumerate(deny) if isinstance(deny, list) else ():
        if isinstance(item, str) and (problem := pattern_problem(item)):
            parts = ("deny", i)
            message = f"{_describe(parts)}: {problem}"
            result.report("error", "invalid_pattern", message, parts, result.value_position(parts))


def _check_scope(result: ParsedText, label: str, parts: Parts) -> None:
    try:
        scope = Scope.from_label(label)
    except ValueError:
        message = f'{_quote(label)} is not a scope: entries of codecoder.json are "{PROJECT_SCOPE}"'
        result.report("error", "invalid_scope", message, parts, result.value_position(parts))
        return
    if scope is not Scope.PROJECT:
        message = (
            f"{label} means nothing in codecoder.json: the entry grants nothing; "
            f"answer {label} at the prompt instead"
        )
        result.report("warning", "invalid_scope", message, parts, result.value_position(parts))


def _subject(document: Any, parts: Parts) -> str | None:
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


def _known_keys(parent: Parts) -> list[str]:
    """The keys the object at `parent` may hold (`limits` at the top level; `memory` in
    `docker`), as the file spells them; none where the user chooses the keys."""
    model: Any = ProjectFileModel
    for part in parent:
        fields = getattr(model, "model_fields", None)
        field = fields.get(part) if isinstance(part, str) and fields else None
        if field is None:
            return []
        candidates = [field.annotation, *typing.get_args(field.annotation)]
        model = next(
            (c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None
        )
    fields = getattr(model, "model_fields", None) or {}
    return [info.alias or name for name, info in fields.items()]


def _describe(parts: Parts) -> str:
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


def os_reason(exc: OSError) -> str:
    """An OSError in words, for a message: `permission denied`."""
    if not exc.strerror:
        return str(exc)
    return exc.strerror[:1].lower() + exc.strerror[1:]
