"""Permission decisions: `PermissionChain.decide()` for a granted key and for a None tool, and
the whole dispatcher path on a mock environment, against a bare dict lookup.

The projects are realistic rather than empty: a handful of allowlist entries and deny rules,
so a decision goes through the deny index and the project index before it finds its grant.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from codecoder.benchmarks.measure import Measured, compare, median_time
from codecoder.benchmarks.report import Area, BenchContext, FigureSpec, Target
from codecoder.benchmarks.workspace import make_project, make_runtime, require_tools
from codecoder.environments.base import CommandRequest, CommandResult
from codecoder.environments.mock import MockEnvironment
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.decision import Decision, Source
from codecoder.permissions.commandkey import key_command
from codecoder.permissions.keys import Permission
from codecoder.session import Runtime, Session

__all__ = ["AREA", "project_config"]

DICT = "bare dict lookup"
FIVE_US = Target("max_value", 5.0, "≤ 5 µs")

SPECS = (
    FigureSpec(
        "permission.decide.session",
        "decide(): key granted for the session (run_command:git:status, @shell)",
        "us",
        DICT,
        FIVE_US,
    ),
    FigureSpec(
        "permission.decide.project",
        "decide(): key granted by codecoder.json (cargo build under run_command:cargo, @docker)",
        "us",
        DICT,
        FIVE_US,
    ),
    FigureSpec(
        "permission.decide.none",
        "decide(): Permission.none() (read_file)",
        "us",
        DICT,
    ),
    FigureSpec(
        "permission.call.mock",
        "Session.call(run_command) on a mock environment, audit log on",
        "us",
        DICT,
    ),
    FigureSpec(
        "permission.call.mock_no_audit",
        "Session.call(run_command) on a mock environment, audit log off",
        "us",
        DICT,
    ),
)

_DENY = ["run_command:git:push", "run_command:rm", "write_file:secrets/**"]
_PATH_GRANTS = ["write_file:tests/**", "write_file:docs/*.md", "edit_file:src/**"]
_COMMAND_GRANTS = [
    "run_command:cargo",
    "run_command:npm:test",
    "run_command:make:*",
    'run_command:"make -j4 && make check"',
    "run_command:pytest",
    "run_command:ruff",
    "run_command:git:status",
]


def project_config(tools: Mapping[str, Any], *, commands_in_docker: bool) -> dict[str, Any]:
    """About ten entries and three deny rules, naming only tools this build has."""
    grants = [g for g in _PATH_GRANTS if g.split(":", 1)[0] in tools]
    if commands_in_docker:
        grants += _COMMAND_GRANTS
    config: dict[str, Any] = {
        "allowlist": dict.fromkeys(grants, "AlwaysThisProject"),
        "deny": [d for d in _DENY if d.split(":", 1)[0] in tools],
    }
    config["environments"] = {"run_command": "@docker" if commands_in_docker else "@shell"}
    return config


def _echo(request: CommandRequest) -> CommandResult:
    return CommandResult(exit_code=0, stdout="ok\n", stderr="", duration=0.0)


@contextlib.contextmanager
def run(ctx: BenchContext) -> Iterator[dict[str, Measured]]:
    tools = require_tools("run_command")
    shell_project = make_project(
        ctx.scratch / "session", project_config(tools, commands_in_docker=False)
    )
    docker_project = make_project(
        ctx.scratch / "project", project_config(tools, commands_in_docker=True)
    )
    mocks = {
        EnvironmentTag.SHELL: MockEnvironment(_echo, EnvironmentTag.SHELL),
        EnvironmentTag.DOCKER: MockEnvironment(_echo, EnvironmentTag.DOCKER),
    }

    with contextlib.ExitStack() as stack:
        shell_runtime = stack.enter_context(
            make_runtime(shell_project, environments=mocks, tools=tools)
        )
        docker_runtime = stack.enter_context(
            make_runtime(docker_project, environments=mocks, tools=tools)
        )
        quiet_runtime = stack.enter_context(
            make_runtime(shell_project, environments=mocks, tools=tools, audit=False)
        )
        yield _measure(ctx, shell_runtime, docker_runtime, quiet_runtime)


def _measure(
    ctx: BenchContext, shell_runtime: Runtime, docker_runtime: Runtime, quiet_runtime: Runtime
) -> dict[str, Measured]:
    git = Permission.ask(key_command("git status").permission_key("run_command"))
    cargo = Permission.ask(key_command("cargo build").permission_key("run_command"))
    assert git.key is not None
    shell_session = shell_runtime.session()
    quiet_session = quiet_runtime.session()
    for session in (shell_session, quiet_session):
        session.allowlist.grant(git.key, EnvironmentTag.SHELL)
    session_engine = shell_session.engine
    project_engine = docker_runtime.session().engine
    docker_tag = docker_runtime.environment_of("run_command")
    _check(session_engine.decide("run_command", EnvironmentTag.SHELL, git).source, "session")
    _check(project_engine.decide("run_command", docker_tag, cargo).source, "project")

    grants = {(git.key.tool, git.key.raw): -1.0}
    lookup_key = (git.key.tool, git.key.raw)
    none = Permission.none()
    args = {"command": "git status"}
    _check(shell_session.call("run_command", args).ok, True)

    def call() -> object:
        return shell_session.call("run_command", args)

    def quiet_call() -> object:
        return quiet_session.call("run_command", args)

    def decide_session() -> object:
        return session_engine.decide("run_command", EnvironmentTag.SHELL, git)

    def decide_project() -> object:
        return project_engine.decide("run_command", docker_tag, cargo)

    def decide_none() -> object:
        return session_engine.decide("read_file", EnvironmentTag.WASM, none)

    figures = {
        "permission.decide.session": (decide_session, DICT),
        "permission.decide.project": (decide_project, DICT),
        "permission.decide.none": (decide_none, DICT),
        "permission.call.mock": (call, DICT),
        "permission.call.mock_no_audit": (quiet_call, DICT),
    }
    baselines = {DICT: lambda: grants.get(lookup_key)}
    measured = compare(
        figures, baselines, rounds=ctx.rounds(15, 5), sample_seconds=ctx.sample_seconds
    )
    parts = _parts(ctx, shell_runtime, docker_runtime, shell_session, git, cargo)
    for name, found in parts.items():
        measured[name].note = "alone: " + ", ".join(
            f"{what} {seconds * 1e6:.2f} µs" for what, seconds in found.items()
        )
    for name in ("permission.decide.session", "permission.decide.project"):
        measured[name].miss_note = (
            "Decision is a frozen dataclass, so its __init__ sets each of 9 fields through "
            "object.__setattr__; each index lookup (deny, then grants) runs three nested "
            "generators and a `seen` set even when one bucket holds the one candidate."
        )
    return measured


def _parts(
    ctx: BenchContext,
    shell_runtime: Runtime,
    docker_runtime: Runtime,
    session: Session,
    git: Permission,
    cargo: Permission,
) -> dict[str, dict[str, float]]:
    """What the steps inside decide() cost on their own, for the notes."""
    assert git.key is not None and cargo.key is not None
    git_key, cargo_key = git.key, cargo.key
    shell_project = shell_runtime.config.allowlist
    docker_project = docker_runtime.config.allowlist

    def time(fn: Callable[[], object]) -> float:
        return median_time(fn, sample_seconds=ctx.sample_seconds / 2)

    decision = time(
        lambda: Decision(
            True, Source.SESSION, "run_command", EnvironmentTag.SHELL, "k", "k", reason="r"
        )
    )
    return {
        "permission.decide.session": {
            "deny rules": time(lambda: shell_project.denied_by(git_key)),
            "project grants": time(lambda: shell_project.granted_by(git_key)),
            "session grants": time(lambda: session.allowlist.lookup(git_key, EnvironmentTag.SHELL)),
            "building the Decision": decision,
        },
        "permission.decide.project": {
            "deny rules": time(lambda: docker_project.denied_by(cargo_key)),
            "project grants": time(lambda: docker_project.granted_by(cargo_key)),
            "building the Decision": decision,
        },
        "permission.decide.none": {"building the Decision": decision},
    }


def _check(value: object, expected: object) -> None:
    if value != expected:
        raise RuntimeError(f"benchmark set-up went wrong: got {value!r}, expected {expected!r}")


AREA = Area("permission", "Permission decisions", SPECS, run, cheap=True)
