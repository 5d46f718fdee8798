"""What every layer's runner is (`_LayerRunner`: keying.py, permission_files.py, wasm.py,
bwrap.py, docker.py) and what it may use of the audit it runs in (`AuditContext`: the project's
configuration, the scratch workspace, the environments).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Final, Protocol

from codecoder.config.project import ProjectConfig
from codecoder.config.settings import ShellSettings
from codecoder.environments.base import Environment
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.interfaces.escapes.canary import _Canary
from codecoder.interfaces.escapes.corpus import Attempt, ToolCall
from codecoder.interfaces.escapes.options import AuditOptions
from codecoder.interfaces.escapes.outcomes import _Outcome
from codecoder.interfaces.escapes.workspace import _Workspace
from codecoder.permissions.keys import PermissionKey
from codecoder.tools.base import Tool

# How much later than its timeout a call may end before it counts as having outlived it.
OVERRUN_GRACE: Final = 2.0


class AuditContext(Protocol):
    """What a layer's runner may use of the audit it runs in (runner._Audit is one): the
    project's configuration, the scratch workspace, the environments. Named here so that the
    layers need not import the runner, which imports them."""

    @property
    def options(self) -> AuditOptions: ...
    @property
    def config(self) -> ProjectConfig: ...
    @property
    def tools(self) -> Mapping[str, Tool[Any]]: ...
    @property
    def trusted(self) -> bool: ...
    @property
    def token(self) -> str: ...
    @property
    def workspace(self) -> _Workspace: ...
    @property
    def limits(self) -> ShellSettings: ...
    @property
    def canary(self) -> _Canary: ...
    def binding(self, tool: str) -> EnvironmentTag: ...
    def document(
        self, allow: Mapping[str, str] | Iterable[str] = (), deny: Iterable[str] = ()
    ) -> str: ...
    def key(self, call: ToolCall) -> PermissionKey | None: ...
    def require_tool(self, name: str) -> None: ...
    def scratch_dir(self, name: str) -> Path: ...
    def fresh_dir(self, name: str) -> Path: ...
    def environment(self, tag: EnvironmentTag) -> Environment[Any, Any]: ...
    def on_close(self, callback: Callable[[], None]) -> None: ...
    def own(self, env: Environment[Any, Any]) -> None: ...


class _LayerRunner:
    """Carries out the attempts of one layer; `blocker` set is the outcome of every one of them
    (the layer's sandbox cannot be started, the tool it attacks does not exist). `runtime` is
    the engine runtime a docker runner attacks when it is not the project's own."""

    blocker: _Outcome | None = None
    runtime: str | None = None

    def run(self, attempt: Attempt) -> str:
        raise NotImplementedError
