"""The Python API (`codecoder.Runtime`, `codecoder.Session`): a runtime for a project directory,
and its sessions.

    runtime = Runtime("path/to/project", asker=ask)
    with runtime.session() as session:
        outcome = session.call("run_command", {"command": "git status"})
        print(outcome.unwrap().output)
        outcome = await session.acall("run_command", {"command": "pytest -q"})  # off the loop

Questions go to the asker given (sync or async, `runtime.eventloop`); without one nobody is
asked and whatever no rule grants is refused.

A runtime reads the user's file and codecoder.json once; edits (and trust given with `codecoder
trust`) are applied by `reload()` (never automatically), which returns the diagnostics of the
files as they now are. A file that cannot be read fails closed (`ProjectConfig.unreadable`:
every call that needs permission is refused); a `reload()` that meets one keeps the last good
rules instead, and says so in a `kept_last_good` diagnostic. A codecoder.json nobody trusted
is obeyed only for what cannot widen access (`runtime.config.untrusted`). Session grants live
in the session and are dropped with it; the audit log is in the runtime's state directory
(`runtime.auditlog`).

The runtime's tools are its catalogue (the built-in tools by default) plus, when the catalogue
has `run_capability`, one tool per capability of the project (`runtime.config.capabilities`), read
at start and again by `reload()`, like codecoder.json. A capability that `create_capability`
writes is added at once (`install_capability`): that is the runtime's own write, asked for.
When the human grants a capability for the project, the session records the approval of its
digest next to the grant (`runtime.config.capabilities.record_approval`), which is what tells a
grant made at the prompt from a digest edited into codecoder.json by hand.

Each session has its own @docker sandboxes (claimed from the warm pool where one is kept warm,
`environments.docker.pool`), so sessions never share a container's state and never wait for
each other's calls; they share the runtime's connection to the engine. Every other environment
is the runtime's, for all its sessions (they keep no state between calls), and so is an
environment given to the runtime.
"""

from __future__ import annotations

import functools
import logging
import os
import stat
import sys
import threading
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from codecoder.auditlog import AuditLog
from codecoder.config.capabilities import (
    RUN_CAPABILITY,
    Capability,
    CapabilitySet,
    load_capabilities,
    record_approval,
)
from codecoder.config.project import PROJECT_FILE, ProjectConfig, load_project
from codecoder.config.projectfile import Diagnostic
from codecoder.config.reading import user_file_path
from codecoder.config.writing import add_allow_entry, add_user_allow_entry
from codecoder.dispatcher import CallOutcome, Dispatcher, PreparedCall
from codecoder.environments.base import Environment, OutputListener
from codecoder.environments.host.gitseen import GitGuard
from codecoder.eventloop import AsyncAsker, answering, in_worker
from codecoder.foundation.ceiling import EnvironmentTag, Scope
from codecoder.foundation.decision import Answer, Source
from codecoder.foundation.errors import (
    CeilingViolation,
    ConfigError,
    RulesUnreadable,
    SandboxUnavailable,
    UsageError,
)
from codecoder.foundation.protected import is_protected_path
from codecoder.foundation.scratch import sweep_scratch
from codecoder.foundation.state import overlapping_directory, project_state_directory
from codecoder.permissions.allowlist import Lifetime, ProjectAllowlist, SessionAllowlist
from codecoder.permissions.chain import PROTECTED_NOTE, PermissionChain
from codecoder.permissions.entries import ToolInfo, check_entry
from codecoder.permissions.keys import (
    KeyStyle,
    PermissionKey,
    escape_literal,
    literal_of,
)
from codecoder.permissions.prompt import Asker, TerminalPrompt, in_ci, non_interactive
from codecoder.permissions.spellings import foreign_key
from codecoder.tools.base import Tool, ToolDefinition
from codecoder.tools.capability import (
    CapabilityTool,
    capability_tool,
    capability_tools,
)
from codecoder.tools.catalogue import builtin_tools
from codecoder.tools.network import NETWORK

log = logging.getLogger(__name__)

_DEFAULT_AUDIT = object()


class Runtime:
    """One project: its tools, its configuration, its environments."""

    def __init__(
        self,
        project_dir: str | os.PathLike[str],
        *,
        asker: Asker | AsyncAsker | None = None,
        environments: Mapping[EnvironmentTag, Environment[Any, Any]] | None = None,
        audit_log: Path | object | None = _DEFAULT_AUDIT,
        tools: Mapping[str, Tool[Any]] | None = None,
        clock: Callable[[], float] | None = None,
        trusted: bool | None = None,
        bindings: Mapping[str, EnvironmentTag] | None = None,
        ahead: bool = True,
    ) -> None:
        """`trusted` overrides the trust record of the project file (`runtime.config.trust`): None
        (the default) reads it; True is for a caller that has established trust otherwise
        (`codecoder audit` runs attempts on scratch copies of a trusted file). `bindings`
        override where tools run, over codecoder.json's (`codecoder audit` runs the read tools
        in their @wasm fallback too); each must be one the tool can be bound to. `ahead` False
        is for a process that makes one call and ends (`codecoder call`, `exec`): nothing is
        built ahead for calls that will never come (a warm @bwrap sandbox).

        `asker` answers the questions of the runtime's sessions (an `AsyncAsker` too: a
        coroutine function, `runtime.eventloop`); without one nothing is asked, and whatever
        no rule grants is denied (`non_interactive`). The command line passes its terminal
        prompt (`default_asker()`)."""
        self.project_dir = Path(project_dir).resolve()
        self._trusted = trusted
        if not self.project_dir.is_dir():
            raise FileNotFoundError(_not_a_project(self.project_dir))
        overlap = overlapping_directory(self.project_dir)
        if overlap is not None:
            raise ConfigError(overlap)
        # What killed runtimes left in their scratch goes now (foundation.scratch).
        sweep_scratch()
        self._catalogue: dict[str, Tool[Any]] = dict(
            tools if tools is not None else builtin_tools()
        )
        self.capabilities = CapabilitySet()
        self.tools: dict[str, Tool[Any]] = dict(self._catalogue)
        self.asker: Asker = answering(asker or non_interactive)
        self._environments: dict[EnvironmentTag, Environment[Any, Any]] = dict(environments or {})
        self._bindings = dict(bindings or {})
        self._ahead = ahead
        self._owned: set[EnvironmentTag] = set()
        self._starting = threading.Lock()
        self._per_session: dict[str, Environment[Any, Any]] = {}
        self._docker_engine: Any = None
        if audit_log is _DEFAULT_AUDIT:
            audit_log = project_state_directory(self.project_dir) / "audit.jsonl"
        assert audit_log is None or isinstance(audit_log, Path)
        self.audit = AuditLog(audit_log, self.project_dir)
        self.clock = clock
        self._git_guard: GitGuard | None = None
        self.config: ProjectConfig = self._load()

    @property
    def project_file(self) -> Path:
        return self.project_dir / PROJECT_FILE

    @property
    def git_guard(self) -> GitGuard:
        """What host git would run of the workspace, checked around every host command
        (`environments.host.gitseen`); made at the first one."""
        guard = self._git_guard
        if guard is None:
            guard = self._git_guard = GitGuard(self.project_dir)
        return guard

    def record_grant(self, entry: str, digest: str | None) -> None:
        """Write an AlwaysThisProject answer to codecoder.json (the engine's `GrantRecorder`)."""
        add_allow_entry(self.project_file, entry, digest=digest)

    @property
    def user_file(self) -> Path:
        """The user's own file (`$XDG_CONFIG_HOME/codecoder/config.json`)."""
        return user_file_path()

    def record_user_grant(self, entry: str, digest: str | None) -> None:
        """Write an AlwaysEveryProject answer to the user's own file (a `GrantRecorder`)."""
        if digest is not None:
            raise ConfigError("a grant pinned to a digest is one project's", self.user_file)
        try:
            add_user_allow_entry(self.user_file, entry)
        except ValueError as exc:
            raise ConfigError(str(exc), self.user_file) from exc

    @property
    def diagnostics(self) -> tuple[Diagnostic, ...]:
        return self.config.diagnostics

    def reload(self) -> list[Diagnostic]:
        """Apply the current codecoder.json and capabilities, and return their diagnostics.

        When a file cannot be read now but the rules in effect were read whole, they stay in
        effect (with the capabilities they were read with): a broken edit must not turn a deny
        rule into a question, nor every call into a refusal, in a running session. The
        diagnostics then say so (`kept_last_good`, an error)."""
        previous = self.config
        capabilities, tools, config = self._read()
        if config.unreadable and not previous.unreadable:
            kept = Diagnostic(
                "error",
                "kept_last_good",
                "the rules cannot be read now, so the last good rules stay in effect until "
                "the file is fixed and reloaded",
                line=config.unreadable[0].line,
                column=config.unreadable[0].column,
                file=config.unreadable[0].file,
            )
            return [*config.diagnostics, kept]
        self.capabilities, self.tools, self.config = capabilities, tools, config
        return list(config.diagnostics)

    def _load(self) -> ProjectConfig:
        self.capabilities, self.tools, config = self._read()
        return config

    def _read(self) -> tuple[CapabilitySet, dict[str, Tool[Any]], ProjectConfig]:
        capabilities = self.capabilities
        if RUN_CAPABILITY in self._catalogue:
            capabilities = load_capabilities(self.project_dir, taken=self._catalogue)
        # A new dict, never changed in place: the MCP server lists tools while a call runs.
        tools = {**self._catalogue, **capability_tools(capabilities)}
        # `network:<host>` keys are checked as a tool's, though no agent can call it.
        checked = {**tools, NETWORK.name: NETWORK}
        config = load_project(self.project_dir, checked, capabilities, trusted=self._trusted)
        return capabilities, tools, config

    def install_capability(self, capability: Capability) -> None:
        """Add (or replace) one capability's tool, as `create_capability` just wrote it.

        codecoder.json is not reread: its edits still wait for `reload()`.
        """
        if capability.name in self._catalogue:
            raise UsageError(f"{capability.name!r} is the name of a built-in tool")
        self.capabilities = self.capabilities.with_capability(capability)
        self.tools = {**self.tools, capability.name: capability_tool(capability)}

    def environment_of(self, tool: str) -> EnvironmentTag:
        """Where `tool` runs: its binding in codecoder.json, else its own environment; @landlock
        falls back to @wasm where this machine cannot run it, and the default @bwrap of commands
        to @confined or @shell (`environments.bwrap.probe`), each said once, on stderr."""
        pinned = self._bindings.get(tool)
        if pinned is not None:
            if pinned not in self.tools[tool].bindable | {self.tools[tool].environment}:
                raise UsageError(f"{tool} cannot run in {pinned.value}")
            return pinned
        bound = self.config.bindings.get(tool)
        tag = bound or self.tools[tool].environment
        if tag is EnvironmentTag.BWRAP and bound is None and tag not in self._environments:
            # The default for commands: where bubblewrap cannot run, Landlock alone, else the
            # host; an explicit binding to @bwrap is kept (and fails clearly where it cannot).
            from codecoder.environments.bwrap.probe import command_sandbox

            found = command_sandbox()
            if found.tag is not EnvironmentTag.BWRAP:
                _notice_command_fallback(found.tag, found.reason)
                return found.tag
        if tag is EnvironmentTag.LANDLOCK and tag not in self._environments:
            from codecoder.environments.landlock import unavailable_reason

            reason = unavailable_reason()
            if reason is not None:
                _notice_fallback(reason)
                return EnvironmentTag.WASM
        return tag

    def definitions(self) -> list[ToolDefinition]:
        return [tool.definition(self.environment_of(name)) for name, tool in self.tools.items()]

    def environment(
        self, tag: EnvironmentTag, *, session: str | None = None
    ) -> Environment[Any, Any]:
        """The environment for `tag`, started on first use and kept for the runtime's life; for
        @docker and a `session`, that session's own (until `end_session`), unless an
        environment was given for it.

        Safe to call from several threads: each environment is started once."""
        if session is not None and tag is EnvironmentTag.DOCKER and tag not in self._environments:
            return self._session_environment(session)
        env = self._environments.get(tag)
        if env is None:
            with self._starting:
                env = self._environments.get(tag)
                if env is None:
                    env = self._start(tag)
                    self._environments[tag] = env
                    self._owned.add(tag)
        return env

    def _session_environment(self, session: str) -> Environment[Any, Any]:
        env = self._per_session.get(session)
        if env is not None:
            return env
        from codecoder.environments.docker.engine import DockerEngine
        from codecoder.environments.docker.environment import DockerEnvironment
        from codecoder.environments.docker.pool.client import pool_for

        with self._starting:
            if self._docker_engine is None:
                self._docker_engine = DockerEngine(pool=pool_for(self.config.docker))
            engine = self._docker_engine
        # Made outside the lock: nothing touches the engine before a call needs a sandbox.
        made = DockerEnvironment(
            self.project_dir, self.config.docker, session_id=session, engine=engine
        )
        with self._starting:
            env = self._per_session.setdefault(session, made)
        if env is not made:
            made.close()
        return env

    def end_session(self, session: str) -> None:
        """Remove the sandboxes of `session` (its @docker containers)."""
        with self._starting:
            env = self._per_session.pop(session, None)
            shared = list(self._environments.values())
        if env is not None:
            env.close()
        for each in shared:
            each.end_session(session)  # a warm @bwrap sandbox of the session's

    def _start(self, tag: EnvironmentTag) -> Environment[Any, Any]:
        if tag is EnvironmentTag.SHELL:
            from codecoder.environments.shell import ShellEnvironment

            return ShellEnvironment()
        if tag is EnvironmentTag.WASM:
            from codecoder.environments.wasm.environment import WasmEnvironment

            return WasmEnvironment()
        if tag is EnvironmentTag.BWRAP:
            from codecoder.environments.bwrap.environment import BwrapEnvironment

            return BwrapEnvironment(
                self.project_dir,
                self.config.bwrap,
                egress=self.config.docker.egress,
                credentials=self.config.credentials,
                warm=self._ahead,
            )
        if tag is EnvironmentTag.CONFINED:
            from codecoder.environments.bwrap.confined import ConfinedEnvironment

            return ConfinedEnvironment(self.project_dir, self.config.bwrap)
        if tag is EnvironmentTag.DOCKER:
            from codecoder.environments.docker.environment import DockerEnvironment

            return DockerEnvironment(self.project_dir, self.config.docker)
        if tag is EnvironmentTag.LANDLOCK:
            from codecoder.environments.landlock import LandlockEnvironment

            return LandlockEnvironment()
        if tag is EnvironmentTag.RUNTIME:
            from codecoder.environments.inprocess import InProcessEnvironment

            return InProcessEnvironment()
        raise SandboxUnavailable(f"no environment {tag.value} is available to run tools in")

    def session(
        self,
        *,
        asker: Asker | AsyncAsker | None = None,
        session_id: str | None = None,
        lifetime: Lifetime | None = None,
        standing: str = ".",
    ) -> Session:
        """A new session. `asker` answers its questions instead of the runtime's; `lifetime`
        says, in the questions, what "this session" is where it is asked (a `codecoder call`,
        an MCP server) and where its grants are kept; `standing`, where its caller stands in
        the workspace (`standing_in`)."""
        return Session(
            self,
            answering(asker) if asker is not None else self.asker,
            session_id or uuid.uuid4().hex[:12],
            lifetime=lifetime,
            standing=standing,
        )

    def standing_in(self, directory: str | os.PathLike[str] | None = None) -> str:
        """Where a person in `directory` (this process's working directory by default) stands
        in the workspace: its workspace-relative POSIX path ("." for the workspace, or for a
        directory outside it, from where paths are read from the workspace itself). Relative
        paths of that person's calls are read from there, and a command runs there
        (`tools.files.paths`)."""
        try:
            here = Path(os.getcwd() if directory is None else directory)
            inside = here.resolve().relative_to(self.project_dir)
        except (OSError, ValueError):  # a directory removed, or outside the workspace
            return "."
        return inside.as_posix() or "."

    def close(self) -> None:
        for tag in list(self._owned):
            self._environments.pop(tag).close()
        self._owned.clear()
        for session in list(self._per_session):
            self.end_session(session)
        with self._starting:
            engine, self._docker_engine = self._docker_engine, None
        if engine is not None:
            engine.close()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Runtime:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await _closed_in_worker(self.close)


class Session:
    """One conversation with the runtime: its session allowlist lives as long as it does.

    A child session (`child()`, for the `agent` tool) shares the parent's engine, allowlist and
    audit log but sees only its own toolset, and its calls are audited with its id and depth.
    """

    def __init__(
        self,
        runtime: Runtime,
        asker: Asker,
        session_id: str,
        *,
        toolset: frozenset[str] | None = None,
        depth: int = 0,
        agent_id: str | None = None,
        engine: PermissionChain | None = None,
        lifetime: Lifetime | None = None,
        standing: str = ".",
    ) -> None:
        self.runtime = runtime
        self.id = session_id
        # Where the caller stands in the workspace (Runtime.standing_in); a child agent, like
        # any agent, stands at the workspace itself.
        self.standing = standing
        self.toolset = toolset
        self.depth = depth
        self.agent_id = agent_id
        if engine is None:
            engine = PermissionChain(
                project=self._project_allowlist,
                session=SessionAllowlist(runtime.config.session_ttl, runtime.clock, lifetime),
                asker=asker,
                record_grant=runtime.record_grant,
                project_file=str(runtime.project_file),
                record_user_grant=runtime.record_user_grant,
                user_file=str(runtime.user_file),
            )
        self.engine = engine
        self.allowlist = engine.session
        self._dispatcher = Dispatcher(runtime, self, engine, runtime.audit)

    def _project_allowlist(self) -> ProjectAllowlist:
        return self.runtime.config.allowlist

    def tools(self) -> dict[str, Tool[Any]]:
        """The tools this session can see and call."""
        if self.toolset is None:
            return self.runtime.tools
        return {n: t for n, t in self.runtime.tools.items() if n in self.toolset}

    def call(
        self,
        tool: str,
        args: Any,
        *,
        cancel: threading.Event | None = None,
        progress: Callable[[float, float | None, str | None], None] | None = None,
        output: OutputListener | None = None,
        asker: Asker | AsyncAsker | None = None,
        call_id: str | None = None,
    ) -> CallOutcome:
        """Run one call through the whole chain. Never raises for the call's own failures:
        the outcome carries them (use `outcome.unwrap()` to raise). Setting `cancel` stops
        the call; `progress` receives the tool's progress reports (a command's latest lines);
        `output` a command's output as it comes (`environments.base.OutputListener`);
        `asker` answers this call's question instead of the session's; `call_id` names the
        call in its OpenTelemetry span (`gen_ai.tool.call.id`, runtime.telemetry)."""
        outcome = self._dispatcher.call(
            tool,
            args,
            cancel=cancel,
            progress=progress,
            output=output,
            asker=answering(asker) if asker is not None else None,
            call_id=call_id,
        )
        self._record_capability_approval(tool, outcome)
        return outcome

    def prepare(self, tool: str, args: Any) -> PreparedCall:
        """What `call(tool, args)` would run and under which decision, with nobody asked,
        nothing run and nothing recorded (`Dispatcher.prepare`; `codecoder decide`)."""
        return self._dispatcher.prepare(tool, args, ask=False)

    async def acall(
        self,
        tool: str,
        args: Any,
        *,
        progress: Callable[[float, float | None, str | None], None] | None = None,
        output: OutputListener | None = None,
        asker: Asker | AsyncAsker | None = None,
        call_id: str | None = None,
    ) -> CallOutcome:
        """`call()` for an event loop (asyncio, or anyio on either backend): the call runs in
        a worker thread, so the loop is not blocked. Cancelling the awaiting task stops the
        call and what it started (a command's process tree, a container's process) before the
        cancellation goes on. An async asker's questions are asked on this loop
        (`runtime.eventloop`). `progress` and `output` are called from the worker thread."""

        def run(cancel: threading.Event) -> CallOutcome:
            return self.call(
                tool,
                args,
                cancel=cancel,
                progress=progress,
                output=output,
                asker=asker,
                call_id=call_id,
            )

        return await in_worker(run)

    def grant(self, raw: str) -> PermissionKey:
        """Grant one key for this session before any call (`--allow KEY`): a session grant
        like the human's AlwaysThisSession answer, checked as one.

        `raw` is a key as `codecoder key` prints it (`run_command:npm`); a capability's grant
        is pinned to the capability as it is now. Refused with a clear error: a key that is not
        one (bad syntax, unknown tool, a wildcard: patterns belong in codecoder.json), a
        protected path, which can be allowed only once, and any key while a rules file cannot
        be read (`RulesUnreadable`: its deny rules are unknown).
        """
        meant = foreign_key(raw)
        if meant is not None:
            raise UsageError(
                f"--allow {raw!r} is another agent's rule, not a codecoder key; did you mean "
                f"--allow {meant!r}? (`codecoder key` shows a call's key)"
            )
        unreadable = self.runtime.config.unreadable_reason
        if unreadable is not None:
            raise RulesUnreadable(f"--allow {raw!r} is refused: {unreadable}")
        # `network:<host>` keys are checked as a tool's, though no agent can call it.
        tools: dict[str, ToolInfo] = {**self.tools(), NETWORK.name: NETWORK}
        checked = check_entry(raw, tools, deny=False)
        if checked.problem is not None:
            raise UsageError(checked.problem.as_option("--allow", raw))
        pattern = checked.pattern
        assert pattern is not None
        tool = self.tools().get(pattern.tool) or NETWORK
        literal = pattern.action if pattern.is_exact_compound else literal_of(pattern.action)
        if literal is None:
            escaped = escape_literal(pattern.action)
            raise UsageError(
                f"--allow {raw!r}: a session grant is one key, as `codecoder key` lists it in "
                f"its grants; wildcard patterns belong in codecoder.json (for a name with "
                f"glob characters in it, escape each: {pattern.tool}:{escaped})"
            )
        environment = (
            tool.environment if tool is NETWORK else self.runtime.environment_of(tool.name)
        )
        if tool.key_style is KeyStyle.PATH and is_protected_path(literal):
            raise CeilingViolation(raw, environment.value, "Once", f"{raw}: {PROTECTED_NOTE}")
        if not environment.allows(Scope.SESSION):  # no environment is below it today
            raise CeilingViolation(raw, environment.value, environment.ceiling.label)
        key = PermissionKey(pattern.tool, pattern.action, raw, style=tool.key_style)
        if pattern.tool == RUN_CAPABILITY:
            capability = self.runtime.capabilities.get(literal)
            if capability is None:
                raise UsageError(f"--allow {raw!r}: the project has no capability of that name")
            key = capability.permission_key()
        # A host is granted for the sandboxes that reach it through the egress proxy.
        sandboxes = (
            (EnvironmentTag.BWRAP, EnvironmentTag.DOCKER) if tool is NETWORK else (environment,)
        )
        for each in sandboxes:
            self.allowlist.grant(key, each, digest=key.digest, origin="--allow")
        return key

    def _record_capability_approval(self, tool: str, outcome: CallOutcome) -> None:
        """If the human just granted a capability for the project, record the approved digest.

        Only a grant written to codecoder.json counts (source project, answered at the prompt).
        Should recording fail, the grant asks again at the next load: it fails safe.
        """
        decision = outcome.decision
        if decision is None or decision.source is not Source.PROJECT:
            return
        runs = self.runtime.tools.get(tool)
        if decision.answer is not Answer.PROJECT or not isinstance(runs, CapabilityTool):
            return
        if decision.key != runs.capability.permission_key().raw:
            return
        try:
            record_approval(self.runtime.project_dir, runs.capability)
        except ConfigError as exc:
            log.warning("the grant of %s will be asked for again: %s", decision.key, exc)

    def child(self, toolset: frozenset[str], agent_id: str | None = None) -> Session:
        """A child agent's session: a narrower toolset, one level deeper, same audit log."""
        if self.toolset is not None:
            toolset = toolset & self.toolset
        return Session(
            self.runtime,
            self.engine.asker,
            self.id,
            toolset=toolset,
            depth=self.depth + 1,
            agent_id=agent_id or uuid.uuid4().hex[:8],
            engine=self.engine,
        )

    def close(self) -> None:
        if self.depth == 0:
            self.allowlist.clear()
            self.runtime.end_session(self.id)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await _closed_in_worker(self.close)


async def _closed_in_worker(close: Callable[[], None]) -> None:
    """`close()` off the event loop (it may stop containers), and finished even when the
    awaiting task is cancelled: nothing is left running."""
    import anyio
    import anyio.to_thread

    with anyio.CancelScope(shield=True):
        await anyio.to_thread.run_sync(close)


@functools.cache
def _notice_fallback(reason: str) -> None:
    print(
        f"codecoder: the read tools run in @wasm instead of @landlock: {reason}",
        file=sys.stderr,
    )


@functools.cache
def _notice_command_fallback(tag: EnvironmentTag, reason: str) -> None:
    print(f"codecoder: commands run in {tag.value} instead of @bwrap: {reason}", file=sys.stderr)


def _not_a_project(path: Path) -> str:
    """Why `path` (resolved) cannot be a project directory, saying what it is."""
    if not os.path.lexists(path):
        return f"project directory {path} does not exist"
    mode = os.stat(path).st_mode if os.path.exists(path) else 0
    what = (
        "a file"
        if stat.S_ISREG(mode)
        else "a device"
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
        else "a pipe or socket"
        if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)
        else "a broken symbolic link"
        if not mode
        else "not a directory"
    )
    parent = f" (its directory is {path.parent})" if stat.S_ISREG(mode) else ""
    return f"{path} is {what}, not a directory: a project is a directory{parent}"


def default_asker() -> Asker:
    """The terminal prompt where a person can answer; otherwise (CI, no terminal) deny."""
    if in_ci():
        return non_interactive
    return TerminalPrompt() if TerminalPrompt.available() else non_interactive
