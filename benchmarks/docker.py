"""@docker: a warm `run_command` call against `exec_run` and `docker run --rm` of the same
command in the same image, with the same hardening.

The project binds run_command to @docker and grants `run_command:true` in codecoder.json, so the
call goes through the whole dispatcher into the warm container's agent. The baselines:

* `exec_run`: `DockerEnvironment.exec_run`, the engine's exec API into the same warm container;
* `docker run --rm` (SDK): `DockerEnvironment.cold_run`, a fresh container with the hardened
  configuration, created, started, waited for, read and removed through the SDK;
* `docker run --rm` (CLI): the docker command line with the same hardening flags, which is
  what a user would type.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

from codecoder.benchmarks.measure import Measured, compare
from codecoder.benchmarks.report import Area, BenchContext, FigureSpec, Skipped, Target
from codecoder.benchmarks.workspace import (
    make_project,
    make_runtime,
    owned_by_a_user,
    require_tools,
)
from codecoder.environments.base import CommandRequest
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.errors import SandboxUnavailable

__all__ = ["AREA", "hardened_run_argv"]

COMMAND = "true"
EXEC_RUN = "exec_run, same command and container"
COLD_SDK = "docker run --rm (SDK: DockerEnvironment.cold_run)"
COLD_CLI = "docker run --rm (CLI, hardened flags)"
IMAGE = "codecoder-sandbox"

SPECS = (
    FigureSpec(
        "docker.call.vs_exec_run",
        "Session.call(run_command, `true`) on warm @docker, against exec_run",
        "ms",
        EXEC_RUN,
        Target("max_ratio", 1 / 5, "≤ 1/5 of exec_run"),
    ),
    FigureSpec(
        "docker.call.vs_cold_sdk",
        "the same warm call, against docker run --rm (SDK)",
        "ms",
        COLD_SDK,
        Target("max_ratio", 1 / 25, "≤ 1/25 of docker run --rm"),
    ),
    FigureSpec(
        "docker.call.vs_cold_cli",
        "the same warm call, against docker run --rm (CLI)",
        "ms",
        COLD_CLI,
        Target("max_ratio", 1 / 25, "≤ 1/25 of docker run --rm"),
    ),
    FigureSpec(
        "docker.environment",
        "DockerEnvironment.run(`true`) alone, warm",
        "ms",
        EXEC_RUN,
    ),
)


def hardened_run_argv(workspace: Path, image: str, user: str, argv: tuple[str, ...]) -> list[str]:
    """`docker run --rm` with the hardening DockerSettings() applies by default."""
    return [
        "docker",
        "run",
        "--rm",
        "--network=none",
        "--read-only",
        "--cap-drop=ALL",
        "--security-opt=no-new-privileges:true",
        "--pids-limit=256",
        "--memory=1g",
        "--memory-swap=1g",
        "--cpus=1",
        "--ipc=private",
        "--init",
        f"--user={user}",
        "--tmpfs=/tmp:rw,noexec,nosuid,nodev,size=64m",
        "--log-driver=none",
        f"--mount=type=bind,source={workspace},target=/workspace,readonly",
        "--workdir=/workspace",
        image,
        *argv,
    ]


@contextlib.contextmanager
def run(ctx: BenchContext) -> Iterator[dict[str, Measured]]:
    require_tools("run_command")
    try:
        from codecoder.environments.docker.environment import DockerEnvironment
    except ImportError as exc:
        raise Skipped(f"@docker is unavailable: {exc}") from exc
    config = {
        "environments": {"run_command": "@docker"},
        "allowlist": {f"run_command:{COMMAND}": "AlwaysThisProject"},
    }
    project = owned_by_a_user(make_project(ctx.scratch / "project", config))
    env = DockerEnvironment(project)
    try:
        env.start()
    except SandboxUnavailable as exc:
        env.close()
        raise Skipped(f"no Docker engine or image: {exc}") from exc
    with (
        contextlib.closing(env),
        make_runtime(project, environments={EnvironmentTag.DOCKER: env}) as runtime,
    ):
        session = runtime.session()
        args = {"command": COMMAND}
        outcome = session.call("run_command", args)
        if not outcome.ok or outcome.decision is None or outcome.decision.source != "project":
            raise RuntimeError(f"the @docker call did not run as granted: {outcome.to_json()}")
        request = CommandRequest(cwd=project, argv=(COMMAND,))
        user = _user_of(project)
        cli = hardened_run_argv(project, env.settings.image, user, (COMMAND,))
        _check_cli(cli)

        def call() -> object:
            return session.call("run_command", args)

        warm = compare(
            {
                "docker.call.vs_exec_run": (call, EXEC_RUN),
                "docker.environment": (lambda: env.run(request), EXEC_RUN),
            },
            {EXEC_RUN: lambda: env.exec_run(request)},
            rounds=ctx.rounds(40, 5),
            sample_seconds=None,
        )
        cold = compare(
            {
                "docker.call.vs_cold_sdk": (call, COLD_SDK),
                "docker.call.vs_cold_cli": (call, COLD_CLI),
            },
            {
                COLD_SDK: lambda: env.cold_run(request),
                COLD_CLI: lambda: subprocess.run(cli, capture_output=True, check=True),
            },
            rounds=ctx.rounds(9, 2),
            sample_seconds=None,
        )
        yield {**warm, **cold}


def _user_of(workspace: Path) -> str:
    """The user DockerSettings(user="auto") picks: the workspace's owner, 10001 for root."""
    info = workspace.stat()
    return f"{info.st_uid}:{info.st_gid}" if info.st_uid != 0 else "10001:10001"


def _check_cli(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise Skipped(f"`docker run` does not work here: {done.stderr.strip()[:200]}")


AREA = Area("docker", "@docker calls", SPECS, run)
