"""`run_audit`: the corpus of the chosen layers carried out against a project's own configuration,
layer by layer, through the runner the layer registry (`_Audit.layer`) names for each.

Nothing is attacked in the project itself: the runner builds a scratch workspace in a private
temporary directory holding a copy of the project's codecoder.json, the protected paths and
some bait (a secret outside the workspace, symlinks to it), owned like the project so the
sandbox runs as the same user. The environments are the ones the runtime would start for that
configuration (its bindings, limits and Docker settings). `AuditOptions` replaces parts of the
configuration, which is how the tests show that a weakened sandbox is reported as escaped.
While the audit runs, the state directory (XDG_STATE_HOME) is one of its own, so that what the
sandboxes plant is quarantined there and goes with the scratch workspace.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import secrets
import shutil
import tempfile
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from pathlib import Path
from typing import Any, Final

from codecoder.config.project import PROJECT_FILE
from codecoder.config.settings import ShellSettings
from codecoder.dispatcher import validate_arguments
from codecoder.environments.base import Environment
from codecoder.environments.docker.environment import DockerEnvironment
from codecoder.environments.wasm.environment import WasmEnvironment
from codecoder.foundation.ceiling import EnvironmentTag, Scope
from codecoder.foundation.errors import CodecoderError, SandboxUnavailable
from codecoder.interfaces.escapes.bwrap import _BwrapLayer
from codecoder.interfaces.escapes.calls import _last_line
from codecoder.interfaces.escapes.canary import _Canary
from codecoder.interfaces.escapes.contained import _ContainedLayer
from codecoder.interfaces.escapes.corpus import LAYERS, Attempt, Layer, ToolCall, load_corpus
from codecoder.interfaces.escapes.docker import _DockerLayer
from codecoder.interfaces.escapes.hooks import _HooksLayer
from codecoder.interfaces.escapes.keying import _KeyingLayer
from codecoder.interfaces.escapes.layer import _LayerRunner
from codecoder.interfaces.escapes.options import AuditOptions
from codecoder.interfaces.escapes.outcomes import Status, _NotApplicable, _NotRun, _Outcome
from codecoder.interfaces.escapes.permission_files import _PermissionFilesLayer
from codecoder.interfaces.escapes.pool import _PoolLayer
from codecoder.interfaces.escapes.report import AttemptResult, AuditReport
from codecoder.interfaces.escapes.rules import _RulesLayer
from codecoder.interfaces.escapes.wasm import _WasmLayer
from codecoder.interfaces.escapes.workspace import _Workspace
from codecoder.permissions.keys import CallSite, PermissionKey
from codecoder.permissions.prompt import non_interactive
from codecoder.session import Runtime

__all__ = ["run_audit"]


def run_audit(
    project: str | os.PathLike[str],
    layers: Collection[Layer] | None = None,
    *,
    options: AuditOptions | None = None,
    attempts: Collection[str] | None = None,
    on_result: Callable[[AttemptResult], None] | None = None,
) -> AuditReport:
    """Run the corpus of `layers` (all by default; `attempts` narrows it to those ids) against
    the configuration of `project`, calling `on_result` as each attempt ends."""
    started = time.monotonic()
    selected = tuple(layer for layer in LAYERS if layers is None or layer in layers)
    unknown = set(layers or ()) - set(LAYERS)
    if unknown:
        raise ValueError(f"unknown layers {sorted(unknown)}; the layers are {', '.join(LAYERS)}")
    # An id may name a docker attempt under one runtime only (`docker.mknod@runsc`).
    wanted = None if attempts is None else {a.partition("@")[0] for a in attempts}
    corpus = [a for a in load_corpus(selected) if wanted is None or a.id in wanted]
    missing = (wanted or set()) - {a.id for a in corpus}
    if missing:
        raise ValueError(f"no attempts {sorted(missing)} in the layers {', '.join(selected)}")
    results: list[AttemptResult] = []
    with _Audit(Path(project), options or AuditOptions()) as audit:
        for layer in selected:
            for runner in audit.runners(layer):
                for entry in (a for a in corpus if a.layer == layer):
                    attempt = Attempt(layer, entry.entry, runner.runtime)
                    if attempts is not None and not {attempt.id, entry.id} & set(attempts):
                        continue
                    result = audit.attempt(runner, attempt)
                    results.append(result)
                    if on_result is not None:
                        on_result(result)
    return AuditReport(audit.project, selected, tuple(results), time.monotonic() - started)


class _Audit:
    """What the layers share: the project's configuration, the scratch workspace, environments."""

    def __init__(self, project: Path, options: AuditOptions) -> None:
        self.project = project.resolve()
        self.options = options
        # The project itself is only read: its configuration, as the runtime sees it.
        self.project_runtime = Runtime(
            self.project, asker=non_interactive, audit_log=None, tools=options.tools
        )
        self.config = self.project_runtime.config
        self.tools = self.project_runtime.tools
        # The scratch copies are trusted as far as the project's file is: the attempts run
        # against what the runtime obeys for this project.
        self.trusted = self.config.trust.obeyed
        self.token = f"codecoder-audit-{secrets.token_hex(8)}"
        self.root = Path(tempfile.mkdtemp(prefix="codecoder-audit-"))
        # What the sandboxes plant is quarantined into the state directory: the audit's own.
        self._state_home = os.environ.get("XDG_STATE_HOME")
        os.environ["XDG_STATE_HOME"] = str(self.root / "state")
        self._workspace: _Workspace | None = None
        self._sandbox_runtime: Runtime | None = None
        self._environments: dict[EnvironmentTag, Environment[Any, Any]] = {}
        self._unavailable: dict[EnvironmentTag, str] = {}
        self._owned: list[Environment[Any, Any]] = []
        self._canary: _Canary | None = None
        self._closing: list[Callable[[], None]] = []

    def on_close(self, callback: Callable[[], None]) -> None:
        """Call `callback` when the audit ends (a layer's bait services)."""
        self._closing.append(callback)

    def __enter__(self) -> _Audit:
        return self

    def __exit__(self, *exc: object) -> None:
        for callback in reversed(self._closing):
            callback()
        if self._canary is not None:
            self._canary.close()
        for env in self._owned:
            env.close()
        if self._sandbox_runtime is not None:
            self._sandbox_runtime.close()
        if self._state_home is None:
            os.environ.pop("XDG_STATE_HOME", None)
        else:
            os.environ["XDG_STATE_HOME"] = self._state_home
        shutil.rmtree(self.root, ignore_errors=True)

    # -- the project's configuration ---------------------------------------------------------

    def binding(self, tool: str) -> EnvironmentTag:
        return self.project_runtime.environment_of(tool)

    def document(
        self, allow: Mapping[str, str] | Iterable[str] = (), deny: Iterable[str] = ()
    ) -> str:
        """The project's codecoder.json with more entries: `allow` patterns (or pattern -> scope)
        and `deny` patterns. A project whose file has errors cannot be extended meaningfully."""
        if not self.config.file.usable:
            errors = "; ".join(
                f"line {d.line}: {d.message}" if d.line else d.message
                for d in self.config.diagnostics
                if d.severity == "error"
            )
            raise _NotRun(f"the project's codecoder.json is not usable ({errors}); fix it first")
        path = self.project / PROJECT_FILE
        document: dict[str, Any] = json.loads(path.read_bytes()) if path.exists() else {}
        document = copy.deepcopy(document)
        scopes = dict(allow) if isinstance(allow, Mapping) else dict.fromkeys(allow, _PROJECT)
        if scopes:
            document.setdefault("allowlist", {}).update(scopes)
        denies = list(deny)
        if denies:
            document.setdefault("deny", []).extend(denies)
        return json.dumps(document, indent=2) + "\n"

    def key(self, call: ToolCall) -> PermissionKey | None:
        """The permission key of `call`, as the tool itself computes it for this project."""
        tool = self.tools[call.tool]
        site = CallSite(self.project, self.binding(call.tool))
        key: PermissionKey | None = tool.permission_in(
            validate_arguments(tool, call.args), site
        ).key
        return key

    def require_tool(self, name: str) -> None:
        if name not in self.tools:
            raise _NotApplicable(f"{name} is not a tool of this runtime")

    # -- the scratch workspace and its environments ------------------------------------------

    @property
    def workspace(self) -> _Workspace:
        if self._workspace is None:
            self._workspace = _Workspace(self.root, self.project, self.token)
        return self._workspace

    def own(self, env: Environment[Any, Any]) -> None:
        """Close `env` with the audit (a layer's own sandbox, made for some attempts)."""
        self._owned.append(env)

    def scratch_dir(self, name: str) -> Path:
        path = self.root / name
        path.mkdir(exist_ok=True)
        return path

    def fresh_dir(self, name: str) -> Path:
        """An empty scratch directory: whatever an earlier attempt left there is removed."""
        path = self.root / name
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir()
        return path

    @property
    def sandbox_runtime(self) -> Runtime:
        """A runtime on the scratch workspace, starting environments as it would for the project."""
        if self._sandbox_runtime is None:
            self._sandbox_runtime = Runtime(
                self.workspace.path,
                asker=non_interactive,
                audit_log=None,
                tools=self.tools,
                trusted=self.trusted,
            )
        return self._sandbox_runtime

    def environment(self, tag: EnvironmentTag) -> Environment[Any, Any]:
        """The shared environment for `tag` (started once); `_NotRun` when it cannot be."""
        if tag in self._unavailable:
            raise _NotRun(self._unavailable[tag])
        env = self._environments.get(tag)
        if env is not None:
            return env
        try:
            env = self._start(tag)
        except SandboxUnavailable as exc:
            self._unavailable[tag] = f"no {tag.value} sandbox: {exc}"
            raise _NotRun(self._unavailable[tag]) from exc
        self._environments[tag] = env
        return env

    def _start(self, tag: EnvironmentTag) -> Environment[Any, Any]:
        options = self.options
        if tag is EnvironmentTag.DOCKER and (
            options.docker_settings is not None or options.docker_client_factory is not None
        ):
            docker = DockerEnvironment(
                self.workspace.path,
                options.docker_settings or self.config.docker,
                client_factory=options.docker_client_factory,
            )
            self._owned.append(docker)
        elif tag is EnvironmentTag.WASM and options.wasm_cache_dir is not None:
            wasm = WasmEnvironment(options.wasm_cache_dir)
            self._owned.append(wasm)
            return wasm
        else:
            env = self.sandbox_runtime.environment(tag)
            if not isinstance(env, DockerEnvironment):
                return env
            docker = env
        docker.start()  # fails here, once, when there is no engine or image
        return docker

    @property
    def limits(self) -> ShellSettings:
        return self.config.limits

    @property
    def canary(self) -> _Canary:
        if self._canary is None:
            self._canary = _Canary(self.token)
        return self._canary

    # -- running ------------------------------------------------------------------------------

    def runners(self, layer: Layer) -> list[_LayerRunner]:
        """The runners of `layer`: one, or for docker one per engine runtime available (the
        project's own first), so that every sandbox the engine can give is attacked."""
        first = self.layer(layer)
        if not isinstance(first, _DockerLayer) or first.blocker is not None:
            return [first]
        runners: list[_LayerRunner] = [first]
        for runtime in first.other_runtimes():
            env = DockerEnvironment(
                self.workspace.path,
                dataclasses.replace(first.env.settings, runtime=runtime),
                client_factory=self.options.docker_client_factory,
            )
            self._owned.append(env)
            runners.append(_DockerLayer(self, env, runtime))
        return runners

    def layer(self, layer: Layer) -> _LayerRunner:
        runners: dict[Layer, Callable[[_Audit], _LayerRunner]] = {
            "keying": _KeyingLayer,
            "contained": _ContainedLayer,
            "permission-files": _PermissionFilesLayer,
            "rules": _RulesLayer,
            "hooks": _HooksLayer,
            "wasm": _WasmLayer,
            "bwrap": _BwrapLayer,
            "docker": _DockerLayer,
            "pool": _PoolLayer,
        }
        return runners[layer](self)

    def attempt(self, runner: _LayerRunner, attempt: Attempt) -> AttemptResult:
        started = time.monotonic()
        try:
            if runner.blocker is not None:
                raise runner.blocker
            try:
                status, how = Status.BLOCKED, runner.run(attempt)
            except _NotRun as first:
                # The sandbox stopped under the attempt (seen now and then under Debian's
                # gVisor): nothing came out of it, but nothing was shown either, so the attempt
                # is made once more in a fresh sandbox, and reported as not run if that stops too.
                if _SANDBOX_STOPPED not in first.how:
                    raise
                if self._workspace is not None:
                    self._workspace.restore()
                status, how = Status.BLOCKED, runner.run(attempt)
                how += f" (made twice: the first sandbox stopped: {_last_line(first.how)})"
        except _Outcome as outcome:
            status, how = outcome.status, outcome.how
        except CodecoderError as exc:
            status, how = Status.NOT_RUN, f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # the audit's own failure must be reported, never a pass
            status, how = Status.NOT_RUN, f"the audit failed: {type(exc).__name__}: {exc}"
        finally:
            if self._workspace is not None:
                self._workspace.restore()
        return AttemptResult(attempt, status, how, time.monotonic() - started)


_PROJECT: Final = Scope.PROJECT.label
_SANDBOX_STOPPED: Final = "the sandbox container stopped"  # environments.docker.environment's words
