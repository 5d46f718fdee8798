"""@shell: a `run_command` call against `subprocess.run` of the same argv.

The call goes through the whole dispatcher (validation, keying from the cache, a session grant,
the look at what the workspace's git would run before and after the command, the audit log) into
`ShellEnvironment`, which starts the process in its own session and reads its output until the
process group is gone. The baseline captures output the same way
(`stdout`/`stderr` piped, no stdin, the workspace as cwd). The environment alone is a second row,
so the dispatcher's share and the environment's share can be told apart.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from codecoder.benchmarks.measure import Measured, compare
from codecoder.benchmarks.report import Area, BenchContext, FigureSpec, Target
from codecoder.benchmarks.workspace import make_project, make_runtime, require_tools
from codecoder.environments.base import CommandRequest
from codecoder.environments.host.gitseen import GitGuard
from codecoder.environments.shell import ShellEnvironment
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.permissions.commandkey import key_command

__all__ = ["AREA"]

COMMAND = "echo hello"
ARGV = ("echo", "hello")
SUBPROCESS = "subprocess.run, same argv"
TRUE = 'subprocess.run(["true"])'
GUARD_DIRS, GUARD_FILES = 300, 10

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
    FigureSpec(
        "shell.git_guard",
        f"the host-git guard of one host command, repository of {GUARD_DIRS * GUARD_FILES:,} "
        f"files in {GUARD_DIRS} directories (before and after)",
        "ms",
        TRUE,
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
        guard = GitGuard(_repository(ctx.scratch / "repository"))
        guard.before()  # the first look, which walks the whole tree once
        # Directories changed in the last two seconds are listed again at every look (their
        # ctime cannot tell a change in the same clock tick): a tree just written is not what
        # a command meets, neither the repository of the guard's row nor the project of the
        # calls (made a moment ago, its first call just now).
        time.sleep(2.1)
        guard.before()
        session.call("run_command", args)
        figures = {
            "shell.call": (lambda: session.call("run_command", args), SUBPROCESS),
            "shell.environment": (lambda: shell.run(request), SUBPROCESS),
            "shell.git_guard": (lambda: _guarded(guard), TRUE),
        }
        baselines = {
            SUBPROCESS: lambda: subprocess_baseline(project, ARGV),
            TRUE: lambda: subprocess_baseline(project, ("true",)),
        }
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
                "record, and the look at what the workspace's git would run before and after "
                "the command (the next row measures it on a repository of 3,000 files: "
                "environments.host.gitseen); the environment alone adds git's guard to a copy "
                "of the environment "
                "(environments.host.git.guarded_environ). Each is what keys a PATH-hijacked "
                "program by its path and keeps a planted bare repository inert; caching the lookup "
                "would have to re-check every sandbox-writable PATH entry anyway."
            )
        yield measured


def _guarded(guard: GitGuard) -> None:
    """What the dispatcher does around one host command: a look before, one after."""
    guard.before()
    guard.after()


def _repository(root: Path) -> Path:
    """A repository as a host command meets it: its .git (hooks, config) and a work tree of
    GUARD_DIRS directories (one nested repository among them)."""
    (root / ".git" / "hooks").mkdir(parents=True)
    (root / ".git" / "config").write_text(
        "[core]\n\trepositoryformatversion = 0\n\tbare = false\n[user]\n\tname = A\n"
    )
    (root / ".git" / "hooks" / "pre-commit").write_text("#!/bin/sh\nexit 0\n")
    for d in range(GUARD_DIRS):
        directory = root / f"pkg{d // 30}" / f"mod{d}"
        directory.mkdir(parents=True)
        for f in range(GUARD_FILES):
            (directory / f"f{f}.py").write_text("x = 1\n")
    (root / "pkg0" / "vendored" / ".git").mkdir(parents=True)
    return root


AREA = Area("shell", "@shell calls", SPECS, run)
