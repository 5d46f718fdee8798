"""run_wasm: a WASI command module from the workspace, run in @wasm with the workspace
preopened read-only (or, writable, its unprotected directories read-write; see
`run_wasm_preopens`), and `module_result`, how a module's run is told to the agent."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, Field, ValidationInfo, field_validator

from codecoder.environments.wasm.environment import WasmEnvironment
from codecoder.environments.wasm.request import Preopen, WasmRequest, WasmResult
from codecoder.environments.workspaceguard import ProtectedScan
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.errors import ExecutionFailed
from codecoder.foundation.protected import is_protected_path
from codecoder.permissions.keys import KeyStyle, Permission
from codecoder.tools.base import Category, Parameters, Tool, ToolContext, ToolResult
from codecoder.tools.files import limits
from codecoder.tools.files.fileops import WORKSPACE_GUEST, _files
from codecoder.tools.files.keys import _path_key
from codecoder.tools.files.paths import normalise_path, standing_of


def _module_path(value: str, info: ValidationInfo) -> str:
    path = normalise_path(value, standing=standing_of(info))
    if not path.endswith((".wasm", ".wat")):
        raise ValueError(f"{path!r} is not a .wasm or .wat module")
    return path


class RunWasmParameters(Parameters):
    path: Annotated[str, AfterValidator(_module_path)] = Field(
        description="The WASI module to run (`.wasm` or `.wat`), relative to the workspace."
    )
    args: list[str] = Field(
        default_factory=list, description="Its arguments (after the program name)."
    )
    stdin: str = Field(default="", description="Text given to it on standard input.")
    writable: bool = Field(
        default=False,
        description=(
            "Let it change the workspace's directories (not the files at the top level, never "
            "codecoder.json, .codecoder/, or a .git or .gitmodules at any depth); otherwise it "
            "sees the workspace read-only, at /workspace."
        ),
    )
    timeout: float | None = Field(
        default=None, gt=0, le=3600, description="Seconds before it is stopped."
    )

    @field_validator("args")
    @classmethod
    def _no_nul(cls, value: list[str]) -> list[str]:
        if any("\0" in arg for arg in value):
            raise ValueError("arguments must not contain NUL bytes")
        return value


def run_wasm_preopens(workspace: Path, *, writable: bool) -> tuple[Preopen, ...]:
    """The directories a run_wasm module sees.

    The workspace is always preopened read-only at /workspace. A writable run adds, read-write
    at /workspace/PATH, the largest directories below the top level that are real directories
    (not symlinks) and hold no protected path at any depth (`.git`, `.gitmodules`): WASI
    resolves a path by its longest preopened prefix, so writes land only in those directories,
    and neither `..` nor a symlink leads from them to a protected path. Files at the top level,
    and files of a directory with a protected path somewhere below it, stay read-only. The
    environment checks this again before the call and quarantines any protected path the
    module creates (`WasmRequest.workspace`).
    """
    preopens = [Preopen(workspace, WORKSPACE_GUEST, writable=False)]
    if not writable:
        return tuple(preopens)
    scan = ProtectedScan(workspace)
    unreadable = set(scan.unreadable)  # could hold anything: never writable
    # Every directory with a protected path (or one that cannot be looked into) below it.
    holding = {
        "/".join(parts[:i])
        for found in (*scan.entries, *unreadable)
        for parts in [found.split("/")]
        for i in range(1, len(parts))
    }

    def add(relative: str) -> None:
        if relative in unreadable:
            return
        if relative not in holding:
            preopens.append(Preopen(workspace / relative, f"{WORKSPACE_GUEST}/{relative}", True))
            return
        for name in _subdirectories(workspace / relative):
            add(f"{relative}/{name}")

    for name in _subdirectories(workspace):
        add(name)
    return tuple(preopens)


def _subdirectories(directory: Path) -> list[str]:
    """Real, unprotected subdirectories whose names WASI can carry (UTF-8), sorted."""
    names = []
    with os.scandir(directory) as entries:
        for entry in entries:
            if is_protected_path(entry.name):
                continue
            if not entry.is_dir(follow_symlinks=False):
                continue
            try:
                entry.name.encode("utf-8")
            except UnicodeEncodeError:
                continue  # cannot be named in a WASI preopen
            names.append(entry.name)
    return sorted(names)


class RunWasm(Tool[RunWasmParameters]):
    name = "run_wasm"
    description = (
        "Run a WASI command module (`.wasm` or `.wat`) from the workspace with arguments and "
        "standard input. It sees the workspace at /workspace (read-only unless writable is "
        "set), no network and no environment variables, and is stopped at its time, fuel "
        "and memory limits."
    )
    category = Category.EXECUTE
    environment = EnvironmentTag.WASM
    bindable = frozenset({EnvironmentTag.WASM})
    parameters = RunWasmParameters
    key_style = KeyStyle.PATH

    def permission(self, args: RunWasmParameters) -> Permission:
        mode = " (writable)" if args.writable else ""
        subject = " ".join([args.path, *args.args]) + mode
        return _path_key(self.name, args.path, subject=subject)

    def execute(self, args: RunWasmParameters, ctx: ToolContext) -> ToolResult:
        files = _files(ctx)
        # Read through fileops like any other file, so a module path that is a symlink
        # leading out of the workspace fails the same way.
        module = files.read(args.path, limit=limits.MAX_MODULE_BYTES)
        if not module.complete:
            raise ExecutionFailed(f"{args.path} is larger than {limits.MAX_MODULE_BYTES} bytes")
        env = ctx.environment
        assert isinstance(env, WasmEnvironment)  # _files checked it
        result = env.run(
            WasmRequest(
                module=module.data,
                argv=(args.path.rsplit("/", 1)[-1], *args.args),
                stdin=args.stdin.encode("utf-8"),
                preopens=run_wasm_preopens(files.workspace, writable=args.writable),
                timeout=args.timeout or ctx.limits.timeout,
                max_output=ctx.limits.max_output,
                workspace=files.workspace,
                cancel=ctx.cancel,
            )
        )
        return module_result(result)


def module_result(result: WasmResult) -> ToolResult:
    """How a WASI module's run is told to the agent: its output and exit code."""
    stdout, stderr = result.stdout_text(), result.stderr_text()
    text = stdout + ("\n" if stdout and not stdout.endswith("\n") and stderr else "") + stderr
    if text and not text.endswith("\n"):
        text += "\n"
    text += f"[exit code {result.exit_code}]"
    return ToolResult(
        text,
        is_error=result.exit_code != 0,
        data={
            "exit_code": result.exit_code,
            "stdout": stdout,
            "stderr": stderr,
            "truncated": result.truncated,
            "fuel_consumed": result.fuel_consumed,
            "duration_ms": round(result.duration * 1000, 3),
        },
    )
