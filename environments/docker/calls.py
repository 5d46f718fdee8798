"""One call as the container sees it: the request translated, the message, the answer read back.

A `CommandRequest` becomes a `_Call` (the argv, the working directory inside the container, a
summary for messages), then the message the agent is sent (protocol in the agent's docstring);
the agent's answer, or a cold container's output, becomes a `CommandResult` or the error it
means (`ExecutionTimeout`, `OutOfMemory`, `ExecutionFailed`).
"""

from __future__ import annotations

import base64
import os
import re
import shlex
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from codecoder.environments.base import CommandRequest, CommandResult
from codecoder.environments.docker.channel import _AgentChannel
from codecoder.environments.docker.containers import SNAPSHOT_MOUNT
from codecoder.environments.docker.settings import WORKSPACE_MOUNT, DockerSettings
from codecoder.environments.docker.sync import WorkspaceVolume
from codecoder.foundation.display import visible
from codecoder.foundation.errors import ExecutionFailed, ExecutionTimeout, OutOfMemory

__all__ = ["call_result", "out_of_memory", "plain_result", "request_message", "translate"]


@dataclass(slots=True)
class _Call:
    """What the environment knows about a request once it is translated for the container."""

    argv: list[str]
    cwd: str
    summary: str
    compound: bool = False
    started: float = field(default_factory=time.monotonic)


def translate(workspace: Path, request: CommandRequest) -> _Call:
    """The request as the container runs it; its working directory must be in `workspace`."""
    if request.argv is not None:
        argv = list(request.argv)
        summary = shlex.join(argv)
    else:
        assert request.script is not None  # CommandRequest guarantees one of the two
        argv = ["/bin/bash", "-c", request.script]
        summary = request.script
    compound = request.script is not None
    if request.snapshot is not None:
        return _Call(argv, SNAPSHOT_MOUNT, _visible(summary), compound)
    cwd = Path(os.path.normpath(workspace / request.cwd))
    try:
        relative = cwd.relative_to(workspace)
    except ValueError:
        raise ExecutionFailed(
            f"working directory {request.cwd} is outside the workspace {workspace}, "
            "which is all the sandbox can see"
        ) from None
    inside = PurePosixPath(WORKSPACE_MOUNT, relative.as_posix())
    return _Call(argv, str(inside), _visible(summary), compound)


def request_message(
    call: _Call,
    request: CommandRequest,
    channel: _AgentChannel,
    *,
    fresh: bool,
    settings: DockerSettings,
    sync: bool,
    volume: WorkspaceVolume | None,
) -> dict[str, Any]:
    """The message that asks the agent of `channel` to run `call` (`volume`: sync mode's)."""
    message: dict[str, Any] = {
        "argv": call.argv,
        "cwd": call.cwd,
        "env": dict(request.env or {}),
        "stdin": base64.b64encode(request.stdin).decode(),
        "timeout": request.timeout,
        "max_output": request.max_output,
        "fresh": fresh,
        "disk_budget": settings.disk_budget_bytes if request.writable else None,
        "capability": None,
        "sync": sync and request.writable,
        # Nothing went into the volume since this container listed it: the agent may take
        # that listing as the one before the call (a fork of the agent saved per call).
        "unchanged": sync
        and request.writable
        and volume is not None
        and channel.synced_generation == volume.generation,
    }
    snapshot = request.snapshot
    if snapshot is not None:
        known = channel.snapshot_digest == snapshot.digest
        channel.snapshot_digest = None  # until the agent has confirmed this one
        message["capability"] = {
            "digest": snapshot.digest,
            "files": None
            if known
            else {path: base64.b64encode(data).decode() for path, data in snapshot.files.items()},
        }
    return message


def call_result(
    call: _Call,
    channel: _AgentChannel,
    request: CommandRequest,
    response: dict[str, Any],
    settings: DockerSettings,
    oom_killed: Callable[[], bool],
) -> CommandResult:
    """The agent's answer as a result, or the error it means. `oom_killed` asks the engine
    whether the container was killed at its memory limit (when the agent cannot tell)."""
    if "error" in response:
        raise ExecutionFailed(f"`{call.summary}` could not run: {response['error']}")
    pids_note = (
        f"; it also reached the pids limit ({settings.pids_limit})"
        if response.get("pids_limit_hit")
        else ""
    )
    if response.get("oom_killed") or (
        not channel.hello.get("oom_counter")
        and response.get("exit_code") == 137
        and not response.get("timed_out")
        and oom_killed()
    ):
        raise out_of_memory(call, settings)
    if response.get("disk_budget_hit"):
        grew = response.get("disk_used")
        raise ExecutionFailed(
            f"`{call.summary}` wrote more than its disk budget of "
            f"{settings.disk_budget} to the workspace"
            + (f" (it wrote {grew:,} bytes)" if grew else "")
            + " and was stopped; what it wrote is still there. A project can raise "
            '"docker": {"disk_budget": ...} in codecoder.json'
        )
    if response.get("timed_out"):
        stdout, stderr = str(response.get("stdout", "")), str(response.get("stderr", ""))
        between = "\n" if stdout and stderr and not stdout.endswith("\n") else ""
        raise ExecutionTimeout(
            f"`{call.summary}` did not finish within {request.timeout:g}s and was killed "
            f"with all its processes{pids_note}",
            output=stdout + between + stderr,
        )
    signal_number = response.get("signal")
    stderr = str(response["stderr"])
    if response.get("exit_code") == 127:
        stderr += _missing_program_hint(call, stderr, settings.image)
    return CommandResult(
        exit_code=int(response["exit_code"]),
        stdout=response["stdout"],
        stderr=stderr,
        duration=time.monotonic() - call.started,
        truncated=bool(response["truncated"]),
        killed_by=_signal_name(signal_number) if signal_number else None,
        extra={
            "container": channel.name,
            "stdout_bytes": response["stdout_bytes"],
            "stderr_bytes": response["stderr_bytes"],
            "pids_limit_hit": bool(response.get("pids_limit_hit")),
            "disk_used": response.get("disk_used"),
        },
    )


# A base image that has the program, to name in the hint (any image on the engine will do).
_IMAGES_WITH = {
    "node": "node:20", "npm": "node:20", "npx": "node:20", "yarn": "node:20", "pnpm": "node:20",
    "cargo": "rust:1", "rustc": "rust:1", "go": "golang:1.22", "ruby": "ruby:3",
    "bundle": "ruby:3", "rake": "ruby:3", "mvn": "maven:3", "gradle": "gradle:8",
    "java": "eclipse-temurin:21", "make": "gcc:13", "gcc": "gcc:13", "cc": "gcc:13",
    "pytest": "python:3.12", "pip": "python:3.12",
}  # fmt: skip
_NOT_FOUND = re.compile(r"(?:^|: )([^\s:/]+): (?:command )?not found$", re.MULTILINE)


def _missing_program_hint(call: _Call, stderr: str, image: str) -> str:
    """What to do when the sandbox image lacks the program a command needs (exit 127): build
    a sandbox image of one that has it. Empty when no missing program is named."""
    found = _NOT_FOUND.findall(stderr)
    program = found[-1] if found else None
    if program is None and not call.compound:
        program = PurePosixPath(call.argv[0]).name
    if program is None:
        return ""
    base = _IMAGES_WITH.get(program, "IMAGE")
    return (
        f"{'' if stderr.endswith(chr(10)) or not stderr else chr(10)}"
        f"codecoder: the sandbox image {image} has no {program}. "
        f"`codecoder image build --from {base}` makes a sandbox image of an image that has it "
        f'(one on this engine), then set "docker": {{"image": ...}} in codecoder.json to use '
        "it (`codecoder check` confirms it)\n"
    )


def out_of_memory(call: _Call, settings: DockerSettings) -> OutOfMemory:
    return OutOfMemory(
        f"`{call.summary}` was killed at the sandbox's memory limit "
        f"({settings.memory}, swap included)"
    )


def plain_result(
    call: _Call, code: int, stdout: bytes, stderr: bytes, request: CommandRequest
) -> CommandResult:
    """A cold container's (or an exec's) output as a result, each stream capped."""
    out, out_cut = _cap(stdout, request.max_output)
    err, err_cut = _cap(stderr, request.max_output)
    return CommandResult(
        exit_code=code,
        stdout=out,
        stderr=err,
        duration=time.monotonic() - call.started,
        truncated=out_cut or err_cut,
    )


def _cap(data: bytes, limit: int) -> tuple[str, bool]:
    if len(data) <= limit:
        return data.decode(errors="replace"), False
    head, tail = limit // 2, limit - limit // 2
    dropped = len(data) - head - tail
    text = (
        data[:head].decode(errors="replace")
        + f"\n[... {dropped} bytes truncated ...]\n"
        + data[len(data) - tail :].decode(errors="replace")
    )
    return text, True


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _visible(text: str, limit: int = 120) -> str:
    """The text made visible (runtime.permissions.prompt.visible) and shortened for a message."""
    shown = visible(text)
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"
