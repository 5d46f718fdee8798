"""@shell: a `run_command` call against `subprocess.run` of the same argv.

The call goes through the whole dispatcher (validation, keying from the cache, a session grant,
the audit log) into `ShellEnvironment`, which starts the process in its own session and reads
its output until the process group is gone. The baseline captures output the same way
(`stdout`/`stderr` piped, no stdin, the workspace as cwd). The environment alone is a second row,
so the dispatcher's share and the environment's share can be told apart.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

from codecoder.benchmarks.measure import Measured, compare
from codecoder.benchmarks.report import Area, BenchContext, FigureSpec, Target
from codecoder.benchmarks.workspace import make_project, make_runtime, require_tools
from codecoder.environments.base import CommandRequest
from codecoder.environments.shell import ShellEnvironment
from codecoder.runtime.kernel.ceiling import EnvironmentTag
from codecoder.runtime.permissions.commandkey import key_command

__all__ = ["AREA"]

COMMAND = "echo hello"
ARGV = ("echo", "hello")
SUBPROCESS = "subprocess.run, same argv"

SPECS = (
    FigureSpec(
        "shell.call",
        f"Session.call(run_command, `{COMMAND}`) on @shell",
        "ms",
        SUBPROCESS,
        Target("max_ratio", 1.2, "≤ 1.2× subprocess.run"),
    ),
    FigureSpec(
        "shell.environment",
        f"ShellEnvironment.run(`{COMMAND}`) alone",
        "ms",
        SUBPROCESS,
    ),
)


def subprocess_baseline(cwd: Path, argv: tuple[str, ...]) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(argv, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, check=False)


@contextlib.contextmanager
def run(ctx: BenchContext) -> Iterator[dict[str, Measured]]:
    require_tools("run_command")
    project = make_project(ctx.scratch / "project", {"environments": {"run_command": "@shell"}})
    shell = ShellEnvironment()
    with make_runtime(project, environments={EnvironmentTag.SHELL: shell}) as runtime:
        session = runtime.session()
        session.allowlist.grant(
            key_command(COMMAND).permission_key("run_command"), EnvironmentTag.SHELL
        )
        args = {"command": COMMAND}
        outcome = session.call("run_command", args)
        if not outcome.ok or outcome.unwrap().data["stdout"] != "hello\n":
            raise RuntimeError(f"the @shell call did not run: {outcome.to_json()}")
        request = CommandRequest(cwd=project, argv=ARGV)
        figures = {
            "shell.call": (lambda: session.call("run_command", args), SUBPROCESS),
            "shell.environment": (lambda: shell.run(request), SUBPROCESS),
        }
        baselines = {SUBPROCESS: lambda: subprocess_baseline(project, ARGV)}
        measured = compare(
            figures, baselines, rounds=ctx.rounds(60, 8), sample_seconds=ctx.sample_seconds
        )
        for figure in measured.values():
            figure.miss_note = (
                "Profiled on an environment that answers at once, the runtime's own work is "
                "about 0.1 ms a call: most of it is finding the program on PATH as execvp would "
                "and judging where it lives (an access() per PATH entry before the hit, then "
                "the ownership of each directory above it: environments.host.path), then the "
                "audit "
                "record; the environment alone adds git's guard to a copy of the environment "
                "(environments.host.git.guarded_environ). Each is what keys a PATH-hijacked "
                "program by its path and keeps a planted bare repository inert; caching the lookup "
                "would have to re-check every sandbox-writable PATH entry anyway."
            )
        yield measured


AREA = Area("shell", "@shell calls", SPECS, run)
