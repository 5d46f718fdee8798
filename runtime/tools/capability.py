"""The capability tools: `create_capability`, `run_capability`, `list_capabilities`, and one
tool per capability.

Each loaded capability (`runtime.config.capabilities`) is also a tool of its own, named after it
(`capability_tool`): its `environment` is the capability's, its parameters are the manifest's
JSON Schema, its key is `run_capability:<name>` pinned to the capability's digest. Being a
tool of its own is what makes the rest follow without special cases: the dispatcher asks
`Runtime.environment_of(name)` for the ceiling, so a @shell capability can never be granted
for the project; the arguments are validated against the manifest's schema before anything is
asked; and the capability shows up in `codecoder tools`, the exported schemas and the MCP tool
list. `run_capability` is the generic way in: it names the capability and hands its arguments to
that tool through the same session, so the call is checked, asked and audited as the
capability's own (the audit log shows the `run_capability` call, which needs no permission of
its own, then the capability's call with its key and decision).

A run re-reads the capability's directory and refuses to run if its digest is no longer the one
the permission was decided for (the code changed on disk since it was loaded): what runs is
what was approved. It runs from those very bytes: a @wasm module is compiled from them, and a
@docker or @shell command runs in a snapshot of them (`environments.base.Snapshot`), written
where it cannot change and checked there, so code swapped in after the check never runs. A
@docker capability also starts from an empty home and /tmp.

Arguments reach the capability as one JSON object on standard input, in every environment.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from codecoder.config.capabilities import (
    MANIFEST,
    MAX_BYTES,
    MAX_FILES,
    RUN_CAPABILITY,
    Capability,
    CapabilityManifest,
    CapabilityName,
    CapabilitySet,
    argument_problems,
    field_errors,
    load_capability,
    normalise_file_path,
    write_capability,
)
from codecoder.environments.base import CommandRequest, CommandResult, Snapshot
from codecoder.environments.docker.settings import WORKSPACE_MOUNT
from codecoder.environments.wasm.environment import WasmEnvironment
from codecoder.environments.wasm.limits import DEFAULT_FUEL, DEFAULT_MEMORY_LIMIT
from codecoder.environments.wasm.request import WasmRequest
from codecoder.foundation.ceiling import EnvironmentTag, Scope
from codecoder.foundation.errors import (
    ConfigError,
    ExecutionFailed,
    InvalidArguments,
    SandboxUnavailable,
)
from codecoder.permissions.keys import KeyStyle, Permission, PermissionKey
from codecoder.tools.base import (
    CallingSession,
    Category,
    Parameters,
    Tool,
    ToolContext,
    ToolDefinition,
    ToolResult,
)
from codecoder.tools.execute import result_of
from codecoder.tools.files import module_result, run_wasm_preopens
from codecoder.tools.names import BUILTIN_TOOL_NAMES

__all__ = [
    "CAPABILITY_TOOLS",
    "CapabilityArguments",
    "CapabilityTool",
    "CreateCapability",
    "ListCapabilities",
    "RunCapability",
    "capability_tool",
    "capability_tools",
]

_SUBJECT_ARGUMENTS = 500  # characters of the arguments shown at the prompt


# --- one tool per capability -----------------------------------------------------------------


class CapabilityArguments(Parameters):
    """A capability's arguments: any JSON object that fits `manifest_schema`.

    Subclassed per capability. Problems are reported per field (`count`, `items.0.name`), as
    for every other tool; the values are kept as given, in `arguments`.
    """

    model_config = ConfigDict(extra="allow", frozen=True)
    manifest_schema: ClassVar[Mapping[str, Any]] = {"type": "object"}

    @model_validator(mode="before")
    @classmethod
    def _fits_the_schema(cls, data: Any) -> Any:
        problems = argument_problems(cls.manifest_schema, data)
        if problems:
            raise field_errors(cls.__name__, problems, data)
        return data

    @property
    def arguments(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class CapabilityTool(Tool[CapabilityArguments]):
    """A capability as a tool; `capability_tool()` makes one per capability."""

    category = Category.AGENT
    key_style = KeyStyle.NAME
    capability: ClassVar[Capability]

    def permission(self, args: CapabilityArguments) -> Permission:
        return Permission.ask(self.capability.permission_key(_run_subject(self.capability, args)))

    def definition(self, environment: EnvironmentTag | None = None) -> ToolDefinition:
        # The schema the model receives is the manifest's, not the wrapper model's.
        return ToolDefinition(
            name=self.name,
            description=self.description,
            category=self.category,
            environment=environment or self.environment,
            needs_permission=True,
            input_schema=json.loads(json.dumps(self.capability.manifest.parameters)),
        )

    def execute(self, args: CapabilityArguments, ctx: ToolContext) -> ToolResult:
        approved = self.capability
        try:
            current = load_capability(ctx.workspace, approved.name)
        except ConfigError as exc:
            raise ExecutionFailed(f"capability {approved.name!r} cannot be read: {exc}") from exc
        if current.digest != approved.digest:
            raise ExecutionFailed(
                f"capability {approved.name!r} changed on disk since it was loaded (it was "
                f"{approved.digest}, it is now {current.digest}); nothing ran. Reload "
                "(/reload) to load it as it is: it will be asked for again"
            )
        stdin = json.dumps(args.arguments, ensure_ascii=False).encode("utf-8")
        if current.environment is EnvironmentTag.WASM:
            return _run_module(current, stdin, ctx)
        return result_of(_run_command(current, stdin, ctx))


def capability_tool(capability: Capability) -> CapabilityTool:
    """The tool that runs `capability`: its name, environment, schema and pinned key."""
    manifest = capability.manifest

    class Arguments(CapabilityArguments):
        manifest_schema = manifest.parameters

    class Runs(CapabilityTool):
        name = manifest.name
        description = f"{manifest.description} (a capability, runs in {manifest.environment})"
        environment = manifest.tag
        bindable = frozenset({manifest.tag})
        parameters = Arguments

    # Set here: a class body cannot read a closure variable of the name it assigns.
    Runs.capability = capability
    Arguments.__name__ = Arguments.__qualname__ = f"{manifest.name} arguments"
    return Runs()


def capability_tools(capabilities: CapabilitySet) -> dict[str, Tool[Any]]:
    return {name: capability_tool(c) for name, c in sorted(capabilities.capabilities.items())}


def _run_subject(capability: Capability, args: CapabilityArguments) -> str:
    shown = json.dumps(args.arguments, ensure_ascii=False)
    if len(shown) > _SUBJECT_ARGUMENTS:
        shown = shown[:_SUBJECT_ARGUMENTS] + "…"
    manifest = capability.manifest
    entry = manifest.entry if isinstance(manifest.entry, str) else json.dumps(manifest.entry)
    writable = ", workspace writable" if manifest.writable else ""
    return (
        f"{capability.name} in {manifest.environment}{writable}: {entry} "
        f"({capability.digest}) with {shown}"
    )


def _run_module(capability: Capability, stdin: bytes, ctx: ToolContext) -> ToolResult:
    env = ctx.environment
    if not isinstance(env, WasmEnvironment):
        raise SandboxUnavailable(
            f"{capability.name} runs in @wasm, but this call was given {type(env).__name__}"
        )
    manifest = capability.manifest
    assert isinstance(manifest.entry, str)  # a @wasm manifest's entry is its module path
    limits = manifest.limits
    result = env.run(
        WasmRequest(
            module=capability.files[manifest.entry],
            argv=(capability.name,),
            stdin=stdin,
            preopens=run_wasm_preopens(ctx.workspace, writable=manifest.writable),
            fuel=limits.fuel or DEFAULT_FUEL,
            timeout=limits.timeout or ctx.limits.timeout,
            memory_limit=limits.memory_bytes or DEFAULT_MEMORY_LIMIT,
            max_output=limits.max_output or ctx.limits.max_output,
            workspace=ctx.workspace,
            cancel=ctx.cancel,
        )
    )
    return module_result(result)


def _run_command(capability: Capability, stdin: bytes, ctx: ToolContext) -> CommandResult:
    manifest = capability.manifest
    contained = capability.environment is EnvironmentTag.DOCKER
    extra = {
        "CODECODER_CAPABILITY": capability.name,
        "CODECODER_WORKSPACE": WORKSPACE_MOUNT if contained else str(ctx.workspace),
    }
    # The host's environment for @shell (a request's env replaces it); the image's for @docker.
    env = extra if contained else {**os.environ, **extra}
    entry = manifest.entry
    request = CommandRequest(
        cwd=capability.directory,
        argv=tuple(entry) if isinstance(entry, list) else None,
        script=entry if isinstance(entry, str) else None,
        timeout=manifest.limits.timeout or ctx.limits.timeout,
        max_output=manifest.limits.max_output or ctx.limits.max_output,
        env=env,
        stdin=stdin,
        writable=manifest.writable,
        # The bytes read and digested above, not the directory, which could change under it;
        # and no grant to share state with: a capability starts from an empty home.
        snapshot=Snapshot(capability.files, capability.digest),
        grant=None,
        cancel=ctx.cancel,
        network=ctx.network,
        output=ctx.output,
    )
    if ctx.output is not None:
        ctx.output.running(capability.name)
    result: CommandResult = ctx.environment.run(request)
    return result


# --- create_capability -----------------------------------------------------------------------


class CapabilityFile(Parameters):
    path: str = Field(
        description=(
            "Where the file goes, relative to the capability's directory (e.g. `main.py`, "
            "`src/lib.wat`). The manifest, capability.json, is written from `manifest`."
        )
    )
    content: str = Field(description="The file's content: text, or base64 if `encoding` says so.")
    encoding: Literal["utf-8", "base64"] = Field(
        default="utf-8", description="`base64` for binary files such as a `.wasm` module."
    )

    @field_validator("path")
    @classmethod
    def _inside(cls, value: str) -> str:
        path = normalise_file_path(value)
        if path == MANIFEST:
            raise ValueError(f"{MANIFEST} is written from `manifest`, not given as a file")
        return path

    @model_validator(mode="after")
    def _decodes(self) -> CapabilityFile:
        try:
            self.data()
        except (binascii.Error, ValueError):
            raise field_errors(
                "CapabilityFile", [("content", "is not valid base64")], self.content
            ) from None
        return self

    def data(self) -> bytes:
        if self.encoding == "base64":
            return base64.b64decode(self.content, validate=True)
        return self.content.encode("utf-8")


class CreateCapabilityParameters(Parameters):
    manifest: CapabilityManifest = Field(
        description=(
            "The capability's manifest: name, description, environment (@wasm, @docker or "
            "@shell), parameters (the JSON Schema of its arguments, an object), entry (@wasm: "
            "its module file; @docker, @shell: a command, argv list or bash string, started in "
            "its directory; arguments arrive as JSON on stdin), writable, limits."
        )
    )
    files: list[CapabilityFile] = Field(
        default_factory=list,
        max_length=MAX_FILES - 1,
        description="Its code and data files. An existing capability of that name is replaced.",
    )

    @field_validator("files")
    @classmethod
    def _one_tree(cls, files: list[CapabilityFile]) -> list[CapabilityFile]:
        paths = [f.path for f in files]
        if len(set(paths)) != len(paths):
            raise ValueError("a path is given twice")
        parents = {
            "/".join(parts[:i])
            for parts in (p.split("/") for p in paths)
            for i in range(1, len(parts))
        }
        if clash := sorted(set(paths) & parents):
            raise ValueError(f"{clash[0]!r} is given as a file and used as a directory")
        total = sum(len(f.data()) for f in files)
        if total > MAX_BYTES:
            raise ValueError(f"the files are larger than {MAX_BYTES} bytes together")
        return files

    @model_validator(mode="after")
    def _complete_and_free(self) -> CreateCapabilityParameters:
        manifest = self.manifest
        problems: list[tuple[str, str]] = []
        if manifest.environment == "@wasm" and manifest.entry not in {f.path for f in self.files}:
            problems.append(
                (
                    "manifest.entry",
                    f"the module {manifest.entry!r} is not among the files; a @wasm "
                    "capability's module is written with it",
                )
            )
        if manifest.name in BUILTIN_TOOL_NAMES:
            problems.append(("manifest.name", f"{manifest.name!r} is the name of a built-in tool"))
        if problems:
            raise field_errors(type(self).__name__, problems, manifest.name)
        return self


class CreateCapability(Tool[CreateCapabilityParameters]):
    name = "create_capability"
    description = (
        "Write a new tool for yourself, a capability: a manifest and its code under "
        ".codecoder/capabilities/<name>/. It runs in its environment (@wasm or @docker are "
        "sandboxed and can be trusted for the project; @shell runs on the host and only ever "
        "for the session) and is asked for before its first run and whenever its code changes. "
        "It becomes a tool named after it at once; run_capability runs it too."
    )
    category = Category.AGENT
    environment = EnvironmentTag.RUNTIME
    bindable = frozenset({EnvironmentTag.RUNTIME})
    parameters = CreateCapabilityParameters

    def permission(self, args: CreateCapabilityParameters) -> Permission:
        manifest = args.manifest
        entry = manifest.entry if isinstance(manifest.entry, str) else json.dumps(manifest.entry)
        files = ", ".join(f"{f.path} ({len(f.content)} chars)" for f in args.files) or "no files"
        subject = f"{manifest.name} in {manifest.environment}: entry {entry}; {files}"
        return Permission.ask(PermissionKey.named(self.name, manifest.name, subject=subject))

    def execute(self, args: CreateCapabilityParameters, ctx: ToolContext) -> ToolResult:
        files = {f.path: f.data() for f in args.files}
        try:
            capability = write_capability(ctx.workspace, args.manifest, files)
        except ConfigError as exc:
            raise ExecutionFailed(str(exc)) from exc
        if ctx.session is not None:
            # The runtime's own write is loaded at once; hand edits wait for /reload.
            ctx.session.runtime.install_capability(capability)
        relative = capability.directory.relative_to(ctx.workspace).as_posix()
        return ToolResult(
            f"created capability {capability.name} in {relative}/ "
            f"({capability.environment.value}, {capability.digest}); call it as the tool "
            f"{capability.name} or with run_capability. It is asked for before it first runs.",
            data={
                "name": capability.name,
                "environment": capability.environment.value,
                "digest": capability.digest,
                "directory": relative,
                "files": sorted(capability.files),
            },
        )


# --- run_capability --------------------------------------------------------------------------


class RunCapabilityParameters(Parameters):
    name: CapabilityName = Field(
        description="The capability to run (list_capabilities lists them)."
    )
    arguments: dict[str, Any] = Field(
        default_factory=dict, description="Its arguments, as its parameters schema describes."
    )


class RunCapability(Tool[RunCapabilityParameters]):
    """Runs a capability by name through its own tool, so the call is decided as that tool's:
    with its key, pinned digest and environment (and so its ceiling)."""

    name = RUN_CAPABILITY
    description = (
        "Run one of the project's capabilities (self-written tools) by name with its arguments. "
        "It runs in the capability's own environment and is asked for as that capability."
    )
    category = Category.AGENT
    environment = EnvironmentTag.RUNTIME
    bindable = frozenset({EnvironmentTag.RUNTIME})
    parameters = RunCapabilityParameters

    def permission(self, args: RunCapabilityParameters) -> Permission:
        # Routing only: the capability's tool asks, in the capability's environment. Asking
        # here would decide with this tool's environment, whatever the capability runs in.
        return Permission.none()

    def execute(self, args: RunCapabilityParameters, ctx: ToolContext) -> ToolResult:
        if ctx.session is None:
            raise ExecutionFailed("run_capability needs a session: call it through Session.call()")
        session = ctx.session
        if not isinstance(session.tools().get(args.name), CapabilityTool):
            raise ExecutionFailed(
                f"there is no capability {args.name!r}"
                + _known(session.runtime.capabilities)
                + "; one written or changed by hand is loaded by /reload"
            )
        outcome = session.call(args.name, args.arguments)
        if isinstance(outcome.error, InvalidArguments):
            problems = [
                ("arguments" if f == "(arguments)" else f"arguments.{f}", m)
                for f, m in outcome.error.problems
            ]
            raise InvalidArguments(self.name, problems) from outcome.error
        if outcome.error is not None:
            raise outcome.error
        assert outcome.result is not None
        result = outcome.result
        decision = outcome.decision.to_json() if outcome.decision else None
        return ToolResult(result.output, result.is_error, {**result.data, "decision": decision})


def _known(capabilities: CapabilitySet) -> str:
    names = sorted(capabilities.capabilities)
    return f" (the capabilities: {', '.join(names)})" if names else " (there are none)"


# --- list_capabilities -----------------------------------------------------------------------


class ListCapabilitiesParameters(Parameters):
    pass


class ListCapabilities(Tool[ListCapabilitiesParameters]):
    name = "list_capabilities"
    description = (
        "List the project's capabilities (self-written tools): name, environment, description, "
        "the digest of their code, and whether running them is granted (for the project, for "
        "this session) or will be asked."
    )
    category = Category.AGENT
    environment = EnvironmentTag.RUNTIME
    bindable = frozenset({EnvironmentTag.RUNTIME})
    parameters = ListCapabilitiesParameters
    asks = False

    def permission(self, args: ListCapabilitiesParameters) -> Permission:
        return Permission.none()

    def execute(self, args: ListCapabilitiesParameters, ctx: ToolContext) -> ToolResult:
        if ctx.session is None:
            raise ExecutionFailed("list_capabilities needs a session: call it through Session")
        session = ctx.session
        capabilities = session.runtime.capabilities
        rows = [
            _row(capability, session) for _, capability in sorted(capabilities.capabilities.items())
        ]
        problems = [{"name": p.name, "problem": p.message} for p in capabilities.problems]
        lines = [
            f"{row['name']:<20} {row['environment']:<8} {row['grant']:<8} {row['digest'][:19]}… "
            f"{row['description']}"
            for row in rows
        ]
        lines += [f"{p['name']:<20} (cannot be loaded) {p['problem']}" for p in problems]
        text = "\n".join(lines) if lines else "no capabilities in .codecoder/capabilities/"
        return ToolResult(text, data={"capabilities": rows, "problems": problems})


def _row(capability: Capability, session: CallingSession) -> dict[str, Any]:
    key = capability.permission_key()
    allowlist = session.runtime.config.allowlist
    environment = session.runtime.environment_of(capability.name)
    pinned = {g.digest for g in allowlist.granted_by(key) if g.digest is not None}
    project = environment.allows(Scope.PROJECT) and key.digest in pinned
    approved_other = sorted(pinned - {capability.digest})
    found = session.allowlist.lookup(key, environment, key.digest)
    in_session = found is not None and found[0]
    denied = allowlist.denied_by(key) is not None
    grant = "denied" if denied else "project" if project else "session" if in_session else "ask"
    return {
        "name": capability.name,
        "environment": environment.value,
        "description": capability.manifest.description,
        "digest": capability.digest,
        "grant": grant,
        "project": project,
        "session": in_session,
        # Project grants for other digests: the code changed since they were approved.
        "approved_digests": approved_other,
        "files": sorted(capability.files),
    }


CAPABILITY_TOOLS: tuple[Tool[Any], ...] = (CreateCapability(), RunCapability(), ListCapabilities())
