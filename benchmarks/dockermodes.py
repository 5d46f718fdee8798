"""@docker's other modes: warm calls under gVisor (`"runtime": "runsc"`) and with the workspace
synced into a volume (`"workspace": "sync"`, what a remote engine needs), each against the
default (runc, the workspace bind-mounted) in the same run.

Three projects, each with its own runtime and its own @docker environment (warm containers),
bind `run_command` to @docker and grant the commands measured:

* **runc, bind** (the default): the baseline of every figure;
* **runsc, bind**: the same call under gVisor, against the same call under runc and against
  `exec_run` into the same gVisor container (what the warm agent saves there);
* **runc, sync**: the same call with the workspace in a volume (the workspace is listed before
  every call, and what a writable call changed comes back after it), against bind mode; and a
  call that writes a file (`cp`, whose copy then comes back), against the same in bind mode.

`run_command` is always a writable call, so every call here goes to the writable container. On
an engine without runsc the gVisor figures are skipped, with the reason.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codecoder.benchmarks.measure import Measured, compare
from codecoder.benchmarks.report import Area, BenchContext, FigureSpec, Skipped, Target
from codecoder.benchmarks.workspace import (
    make_project,
    make_runtime,
    owned_by_a_user,
    require_tools,
)
from codecoder.environments.base import CommandRequest
from codecoder.environments.docker.settings import DockerSettings
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.errors import SandboxUnavailable
from codecoder.session import Session

__all__ = ["AREA"]

TRUE = "true"
WRITE = "cp small.txt copy.txt"
RUNC_CALL = "the same call under runc (bind mode, the default)"
RUNSC_EXEC = "exec_run into the same gVisor container"
BIND_WRITE = "the same writable call in bind mode"

SPECS = (
    FigureSpec(
        "docker_modes.runsc.vs_runc",
        "Session.call(run_command, `true`) on warm @docker under gVisor (runsc)",
        "ms",
        RUNC_CALL,
    ),
    FigureSpec(
        "docker_modes.runsc.vs_exec_run",
        "the same call under gVisor, against exec_run there",
        "ms",
        RUNSC_EXEC,
        Target("max_ratio", 1 / 5, "≤ 1/5 of exec_run"),
    ),
    FigureSpec(
        "docker_modes.sync.vs_bind",
        "Session.call(run_command, `true`) on warm @docker in sync mode",
        "ms",
        RUNC_CALL,
        Target("max_ratio", 2.0, "≤ 2× bind mode"),
    ),
    FigureSpec(
        "docker_modes.sync.write",
        f"Session.call(run_command, `{WRITE}`) in sync mode (the copy comes back)",
        "ms",
        BIND_WRITE,
        Target("max_ratio", 3.0, "≤ 3× bind mode"),
    ),
)


# What profiling found, shown with each figure (docs/benchmarks.md).
NOTES = {
    "docker_modes.runsc.vs_runc": (
        "Inside gVisor each exec costs milliseconds (Debian's runsc, ptrace platform): a call "
        "execs runas, then the program; the round trip to the agent is the same as under runc"
    ),
    "docker_modes.sync.vs_bind": (
        "The host lists the workspace before each call (an lstat per entry); after a writable "
        "call the agent lists the volume itself (a fork as the command user only where a "
        "directory is private to it) and, when nothing changed, answers with nothing more"
    ),
    "docker_modes.sync.write": (
        "What changed comes back inline in the agent's answer (read by the agent itself, a "
        "fork only for a file private to the command user; through get_archive, about 40 ms "
        "more, above 256 KiB); the host checks the change set whole, stages it beneath the "
        "workspace and swaps it in with an undo log"
    ),
}


@dataclass(slots=True)
class _Warm:
    """One project with a runtime whose run_command goes to a warm @docker environment."""

    # environments.docker.environment.DockerEnvironment (imported lazily: the SDK may be missing)
    env: Any
    session: Session

    def call(self, command: str) -> object:
        outcome = self.session.call("run_command", {"command": command})
        if not outcome.ok:
            raise RuntimeError(f"`{command}` failed on @docker: {outcome.to_json()}")
        return outcome


@contextlib.contextmanager
def run(ctx: BenchContext) -> Iterator[dict[str, Measured | Skipped]]:
    require_tools("run_command")
    try:
        from codecoder.environments.docker.environment import DockerEnvironment
    except ImportError as exc:
        raise Skipped(f"@docker is unavailable: {exc}") from exc
    with contextlib.ExitStack() as stack:

        def warm(name: str, settings: DockerSettings) -> _Warm:
            config = {
                "environments": {"run_command": "@docker"},
                "allowlist": {
                    f"run_command:{command.split()[0]}": "AlwaysThisProject"
                    for command in (TRUE, WRITE)
                },
            }
            project = owned_by_a_user(make_project(ctx.scratch / name, config))
            env = DockerEnvironment(project, settings)
            stack.callback(env.close)
            env.start()
            runtime = stack.enter_context(
                make_runtime(project, environments={EnvironmentTag.DOCKER: env})
            )
            made = _Warm(env, runtime.session())
            made.call(TRUE)  # the writable container, warm before any sample
            return made

        try:
            bind = warm("bind", DockerSettings(workspace="bind"))
        except SandboxUnavailable as exc:
            raise Skipped(f"no Docker engine or image: {exc}") from exc
        sync = warm("sync", DockerSettings(workspace="sync"))
        figures: dict[str, tuple[Any, str]] = {
            "docker_modes.sync.vs_bind": (lambda: sync.call(TRUE), RUNC_CALL),
            "docker_modes.sync.write": (lambda: sync.call(WRITE), BIND_WRITE),
        }
        baselines: dict[str, Any] = {
            RUNC_CALL: lambda: bind.call(TRUE),
            BIND_WRITE: lambda: bind.call(WRITE),
        }
        measured: dict[str, Measured | Skipped] = {}
        if "runsc" in bind.env.engine_runtimes():
            gvisor = warm("runsc", DockerSettings(workspace="bind", runtime="runsc"))
            request = CommandRequest(cwd=gvisor.env.workspace, argv=(TRUE,), writable=True)

            def gvisor_call() -> object:
                return gvisor.call(TRUE)

            figures["docker_modes.runsc.vs_runc"] = (gvisor_call, RUNC_CALL)
            figures["docker_modes.runsc.vs_exec_run"] = (gvisor_call, RUNSC_EXEC)
            baselines[RUNSC_EXEC] = lambda: gvisor.env.exec_run(request)
        else:
            why = Skipped(
                "the Docker engine offers no runsc runtime (gVisor): scripts/docker-setup.sh "
                "installs and registers it"
            )
            measured["docker_modes.runsc.vs_runc"] = why
            measured["docker_modes.runsc.vs_exec_run"] = why
        measured.update(compare(figures, baselines, rounds=ctx.rounds(40, 5), sample_seconds=None))
        for name, note in NOTES.items():
            found = measured.get(name)
            if isinstance(found, Measured):
                found.note = note
        _check_written_back(sync.env.workspace, bind.env.workspace)
        yield measured


def _check_written_back(*projects: Path) -> None:
    """The writable call really wrote (in sync mode: really came back)."""
    for project in projects:
        if (project / "copy.txt").read_bytes() != (project / "small.txt").read_bytes():
            raise RuntimeError(f"`{WRITE}` did not leave copy.txt in {project}")


AREA = Area("docker_modes", "@docker under gVisor and in sync mode", SPECS, run)
