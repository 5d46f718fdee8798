"""The tool model: what a tool is, what it asks for, what it returns.

A tool is a small definition (name, description, category, environment, a pydantic parameter
model whose JSON Schema is what an LLM receives) plus two methods:

* `permission(args)` says what the call needs: `Permission.none()` or `Permission.ask(key)`.
  It must be pure and cheap: it runs before anything else, and for every call.
* `execute(args, ctx)` does the work in the environment the runtime hands it through `ctx`.

The dispatcher validates the arguments, calls `permission()`, decides, and only then calls
`execute()`. A tool never checks its own permission.
"""

from __future__ import annotations

import abc
import enum
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, ConfigDict

from runtime.ceiling import EnvironmentTag

if TYPE_CHECKING:
    from environments.base import Environment
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


@dataclass(frozen=True, slots=True)
class PermissionKey:
    """What a grant is for: `("run_command", "git", "run_command:git")`.

    `raw` is the whole key, the string stored in allowlists. Keys of compound commands are
    collision-free: their action is the JSON-quoted command, which no program name can equal.
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

    @classmethod
    def named(cls, tool: str, action: str = "", **kw: Any) -> PermissionKey:
        raw = f"{tool}:{action}" if action else tool
        return cls(tool=tool, action=action, raw=raw, **kw)


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
    """What `execute()` may use: the workspace, its bound environment, the call's limits."""

    workspace: Path
    environment: Environment[Any, Any]
    environment_tag: EnvironmentTag
    session_id: str
    limits: ShellSettings = field(default_factory=ShellSettings)
    session: Session | None = None  # the calling session: lets `agent` start a child session
    extra: Mapping[str, Any] = field(default_factory=dict)
    # Reports how far the call is (progress, total, message); None when nobody listens.
    progress: Callable[[float, float | None, str | None], None] | None = None
    # Set when the caller gave up on the call (an MCP client's cancel): what the tool started
    # should stop (environments take it as `CommandRequest.cancel`), and the call ends Cancelled.
    cancel: threading.Event | None = None


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
    # The part of `ToolResult.data` that is not already in the text, as a JSON Schema of an
    # object; interfaces that carry structured results (MCP) send exactly these fields.
    output_schema: ClassVar[dict[str, Any] | None] = None

    @abc.abstractmethod
    def permission(self, args: P) -> Permission:
        """What this call needs. Pure: no I/O, no side effects."""

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
