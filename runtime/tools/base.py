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
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict

from codecoder.config.capabilities import Capability, CapabilitySet
from codecoder.config.project import ProjectConfig
from codecoder.config.settings import ShellSettings
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.decision import Decision
from codecoder.foundation.errors import CodecoderError
from codecoder.permissions.allowlist import SessionAllowlist
from codecoder.permissions.keys import CallSite, KeyStyle, Permission, PermissionKey
from codecoder.tools.liveoutput import LiveOutput

if TYPE_CHECKING:
    from codecoder.environments.base import Environment, NetworkGate


class Category(enum.StrEnum):
    READ = "read"
    WRITE = "write"
    EXECUTE = "execute"
    GIT = "git"
    WEB = "web"
    AGENT = "agent"


@dataclass(slots=True)
class ToolResult:
    """What a call returns: text for the model, structured data for programs."""

    output: str
    is_error: bool = False
    data: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"output": self.output, "is_error": self.is_error, "data": self.data}


class CallOutcomeView(Protocol):
    """How a call a tool made through its session ended (runtime.dispatcher.CallOutcome)."""

    @property
    def ok(self) -> bool: ...
    @property
    def result(self) -> ToolResult | None: ...
    @property
    def error(self) -> CodecoderError | None: ...
    @property
    def decision(self) -> Decision | None: ...


class RuntimeView(Protocol):
    """The runtime behind a calling session, as the tools see it (runtime.session.Runtime)."""

    @property
    def config(self) -> ProjectConfig: ...
    @property
    def capabilities(self) -> CapabilitySet: ...
    def install_capability(self, capability: Capability) -> None: ...
    def environment_of(self, tool: str) -> EnvironmentTag: ...


class CallingSession(Protocol):
    """The session a call came from, as far as a tool may use it (runtime.session.Session is
    one): `agent` starts a child session and calls through it, the capability tools install and
    run capabilities and read their grants, the web tools read the project's web policy. Named
    here so that the tools need not import the session, which imports them."""

    @property
    def depth(self) -> int: ...
    @property
    def agent_id(self) -> str | None: ...
    @property
    def runtime(self) -> RuntimeView: ...
    @property
    def allowlist(self) -> SessionAllowlist: ...
    def tools(self) -> Mapping[str, Tool[Any]]: ...
    def call(self, tool: str, args: Any) -> CallOutcomeView: ...
    def child(self, toolset: frozenset[str], agent_id: str | None = None) -> CallingSession: ...


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
    session: CallingSession | None = None  # the calling session: lets `agent` start a child
    extra: Mapping[str, Any] = field(default_factory=dict)
    grant: str | None = None  # the standing grant the call runs under (Decision.grant)
    key: PermissionKey | None = None  # the key the call was decided under, when it asked
    # Where the caller stands in the workspace ("." for the workspace itself): relative paths
    # were read from there (tools.files.paths), and a command runs there.
    standing: str = "."
    # Reports how far the call is (progress, total, message), the shape of an MCP progress
    # notification; None when nobody listens.
    progress: Callable[[float, float | None, str | None], None] | None = None
    # Decides the connections of a sandboxed call (`CommandRequest.network`); None refuses all.
    network: NetworkGate | None = None
    # Set when the caller gave up on the call (an MCP client's cancel): what the tool started
    # should stop (environments take it as `CommandRequest.cancel`), and the call ends Cancelled.
    cancel: threading.Event | None = None
    # The call was allowed because it only reads (Source.READ_ONLY): it must run confined
    # read-only (`CommandRequest.writable=False`).
    read_only: bool = False
    # The call's output as it comes (runtime.tools.liveoutput): a tool that runs a command calls
    # `output.running(name)` and hands it to the environment as `CommandRequest.output`.
    output: LiveOutput | None = None

    @property
    def site(self) -> CallSite:
        return CallSite(self.workspace, self.environment_tag, standing=self.standing)


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
