"""The tool model: what a tool is, what it asks for, what it returns.

A tool is a small definition (name, description, category, environment, a pydantic parameter
model whose JSON Schema is what an LLM receives) plus two methods:

* `permission(args)` says what the call needs: `Permission.none()` or `Permission.ask(key)`.
  It must be pure and cheap: it runs before anything else, and for every call.
* `execute(args, ctx)` does the work in the environment the runtime hands it through `ctx`.

A tool whose key depends on where the call would run overrides `permission_in(args, site)`
instead: `run_command` on @shell looks its program up on the host's PATH, because a program
found in a directory a sandbox can write is keyed by its path, not its name. The dispatcher
always asks `permission_in`; `ctx.key` then carries the key that was decided, so `execute()`
runs what was keyed (the program found at key time, not a second lookup).

The dispatcher validates the arguments, calls `permission()`, decides, and only then calls
`execute()`. A tool never checks its own permission.
"""

from __future__ import annotations

import abc
import enum
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, ConfigDict

from runtime.ceiling import EnvironmentTag

if TYPE_CHECKING:
    from environments.base import Environment, NetworkGate
    from runtime.session import Session


class Category(enum.StrEnum):
    READ = "read"
    WRITE = "write"
    EXECUTE = "execute"
    GIT = "git"
    WEB = "web"
    AGENT = "agent"


class KeyStyle(enum.StrEnum):
    """How the action part of a tool's keys is matched by allowlist and deny patterns."""

    NAME = "name"  # the key is the tool name alone (`commit`) or an exact name
    COMMAND = "command"  # program and subcommand (`run_command:git:push`), see runtime.commandkey
    PATH = "path"  # a workspace-relative path, matched by glob (`write_file:tests/**`)


# The characters that make a pattern more than a literal: glob characters, the `:` that
# separates the levels of a command pattern, and the `"` that starts a whole-command pattern.
_PATTERN_SYNTAX = re.compile(r'[][*?:"]')


def escape_literal(text: str) -> str:
    """`text` as a pattern that matches only itself: each special character in brackets.

    `a*b.txt` becomes `a[*]b.txt`, `test:unit` becomes `test[:]unit`. Keys recorded from the
    human's answers go through this, so a path named `**` is granted as that one path.
    """
    return _PATTERN_SYNTAX.sub(lambda match: f"[{match.group()}]", text)


def literal_of(pattern: str) -> str | None:
    """The one text `pattern` matches when it is literal under `escape_literal`'s escaping
    (each glob character alone in brackets: `a[*]b` is `a*b`), else None: a real wildcard
    (`*`, `?`), a class (`[ab]`) or a stray bracket. `:` and `"` stand for themselves."""
    literal: list[str] = []
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char == "[":
            if pattern[index + 2 : index + 3] != "]" or pattern[index + 1] not in '[]*?:"':
                return None
            literal.append(pattern[index + 1])
            index += 3
            continue
        if char in "*?]":
            return None
        literal.append(char)
        index += 1
    return "".join(literal)


@dataclass(frozen=True, slots=True)
class GrantLevel:
    """One allowlist entry an "always" answer can record for a key, and what it covers.

    `entry` is a pattern that matches the key (`run_command:git:status`); `covers` says in
    words what else it matches, for the prompt ("only `git status …` commands").
    """

    entry: str
    covers: str


@dataclass(frozen=True, slots=True)
class DenyView:
    """One command as deny rules see it: the canonical name of its program (`git` for
    `/usr/lib/git-core/git-push`; `runtime.programs.ANY` when the parser cannot know it) and
    the lower-cased words after it, `words[start:]` (views of one command share `words`).
    `sub_any`: the word in its subcommand's place could be anything (an expansion, a git
    alias), so it counts as whichever subcommand a deny rule names. `glob`: the program word
    is a pattern bash would expand against file names (`/usr/bin/gi?`, `r[m]`), so it counts
    as every program whose name it matches.
    """

    program: str
    words: tuple[str, ...]
    start: int = 0
    sub_any: bool = False
    glob: bool = False


@dataclass(frozen=True, slots=True)
class PermissionKey:
    """What a grant is for: `("run_command", "git:status", "run_command:git:status")`.

    `raw` is the whole key, shown to the human and written to the audit log. Keys of compound
    commands are collision-free: their action is the JSON-quoted command, which no program name
    can equal.

    `levels` are the entries an "always" answer may record, narrowest first: the exact key
    (escaped, so a path named `a*b` is granted as that path only), then, for a command whose
    narrow key names a subcommand, the program-wide key. Empty means just `raw`.

    For command keys, `path` is what grants are matched against (the program as written, then
    the subcommand levels the program table names: `("git", "status")`), and `views` what deny
    rules are matched against: the program's canonical name (`git` for
    `/usr/lib/git-core/git-push`) and the words after it. A compound key's views (every command
    the parser can see in the string) are read when a deny rule needs them
    (`runtime.commandkey.compound_views`).
    A key that names several paths (a move: source and destination) lists them in `paths`.
    """

    tool: str
    action: str
    raw: str
    style: KeyStyle = KeyStyle.NAME
    compound: bool = False
    argv: tuple[str, ...] | None = None
    protected: bool = False
    subject: str = ""  # what the call does, in full, for the human (the command, the path)
    # What exactly would run, for keys whose grants are pinned to it (a capability's manifest
    # and code): a project grant recorded with another digest does not cover this key.
    digest: str | None = None
    levels: tuple[GrantLevel, ...] = ()
    path: tuple[str, ...] = ()
    views: tuple[DenyView, ...] = ()
    paths: tuple[str, ...] = ()

    @classmethod
    def named(cls, tool: str, action: str = "", **kw: Any) -> PermissionKey:
        raw = f"{tool}:{action}" if action else tool
        return cls(tool=tool, action=action, raw=raw, **kw)

    @property
    def grant_levels(self) -> tuple[GrantLevel, ...]:
        """`levels`, or the key itself when it has none."""
        return self.levels or (GrantLevel(self.raw, "exactly this key"),)


@dataclass(frozen=True, slots=True)
class CallSite:
    """Where a call would run: what a key may depend on besides the call's arguments."""

    workspace: Path
    environment: EnvironmentTag


@dataclass(frozen=True, slots=True)
class Permission:
    """`Permission.none()` runs without asking; `Permission.ask(key)` goes through the chain."""

    key: PermissionKey | None = None

    @classmethod
    def none(cls) -> Permission:
        return cls(None)

    @classmethod
    def ask(cls, key: PermissionKey) -> Permission:
        return cls(key)

    @property
    def needs_asking(self) -> bool:
        return self.key is not None


@dataclass(slots=True)
class ToolResult:
    """What a call returns: text for the model, structured data for programs."""

    output: str
    is_error: bool = False
    data: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"output": self.output, "is_error": self.is_error, "data": self.data}


@dataclass(frozen=True, slots=True)
class ShellSettings:
    """Limits for commands, from codecoder.json's `limits` (defaults here)."""

    timeout: float = 120.0
    max_output: int = 64 * 1024


@dataclass(slots=True)
class ToolContext:
    """What `execute()` may use: the workspace, its bound environment, the call's limits.

    `progress`, when the caller can show it (a terminal, an MCP client that asked for it), is
    called by long-running tools as `progress(done, total, message)` (the shape of an MCP
    progress notification): `done` grows, `total` is None while unknown. Tools call it only
    once a call has run for about a second.
    """

    workspace: Path
    environment: Environment[Any, Any]
    environment_tag: EnvironmentTag
    session_id: str
    limits: ShellSettings = field(default_factory=ShellSettings)
    session: Session | None = None  # the calling session: lets `agent` start a child session
    extra: Mapping[str, Any] = field(default_factory=dict)
    grant: str | None = None  # the standing grant the call runs under (Decision.grant)
    key: PermissionKey | None = None  # the key the call was decided under, when it asked
    # Reports how far the call is (progress, total, message), the shape of an MCP progress
    # notification; None when nobody listens.
    progress: Callable[[float, float | None, str | None], None] | None = None
    # Decides the connections of a sandboxed call (`CommandRequest.network`); None refuses all.
    network: NetworkGate | None = None
    # Set when the caller gave up on the call (an MCP client's cancel): what the tool started
    # should stop (environments take it as `CommandRequest.cancel`), and the call ends Cancelled.
    cancel: threading.Event | None = None

    @property
    def site(self) -> CallSite:
        return CallSite(self.workspace, self.environment_tag)


class Parameters(BaseModel):
    """Base of every parameter model: unknown fields are errors, not silently dropped."""

    model_config = ConfigDict(extra="forbid", frozen=True)


P = TypeVar("P", bound=Parameters)


@dataclass(frozen=True, slots=True)
class ToolDefinition:
    """What an agent sees of a tool."""

    name: str
    description: str
    category: Category
    environment: EnvironmentTag
    needs_permission: bool
    input_schema: dict[str, Any]
    # What a successful result's `data` carries beyond its text, as JSON Schema (None: nothing).
    output_schema: dict[str, Any] | None = None


class Tool(abc.ABC, Generic[P]):
    """A tool: its definition plus `permission()` and `execute()`.

    Subclasses set the class attributes and implement the two methods. `bindable` lists the
    environments a project may bind the tool to in codecoder.json (`environments` section);
    the first element of `bindable` need not be the default, `environment` is.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    category: ClassVar[Category]
    environment: ClassVar[EnvironmentTag]
    bindable: ClassVar[frozenset[EnvironmentTag]] = frozenset()
    parameters: ClassVar[type[Parameters]]
    key_style: ClassVar[KeyStyle] = KeyStyle.NAME
    asks: ClassVar[bool] = True  # whether permission() can return Ask; shown by `tools`
    # The part of `ToolResult.data` that is not already in a form a program reads, as a JSON
    # Schema of an object; the MCP server sends exactly these fields in the result's `_meta`.
    output_schema: ClassVar[dict[str, Any] | None] = None

    @abc.abstractmethod
    def permission(self, args: P) -> Permission:
        """What this call needs. Pure: no I/O, no side effects."""

    def permission_in(self, args: P, site: CallSite) -> Permission:
        """What this call needs where it would run; the same as `permission(args)` unless the
        key depends on the place (see the module docstring). No side effects."""
        return self.permission(args)

    @abc.abstractmethod
    def execute(self, args: P, ctx: ToolContext) -> ToolResult:
        """Do the work. Reached only after the permission check passed."""

    def definition(self, environment: EnvironmentTag | None = None) -> ToolDefinition:
        return ToolDefinition(
            name=self.name,
            description=self.description,
            category=self.category,
            environment=environment or self.environment,
            needs_permission=self.asks,
            input_schema=self.parameters.model_json_schema(),
            output_schema=self.output_schema,
        )
