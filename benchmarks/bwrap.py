"""@bwrap: a contained `true` through `Session.call`, against the same call on @shell and against a
bare `bwrap ... true`.

The contained call goes through the whole dispatcher into `BwrapEnvironment`, which plans the
sandbox (toolchains, hidden directories, protected paths: a writable call), runs bubblewrap with
a fresh user, mount, PID, network, IPC, UTS and cgroup namespace, and the confine helper
(Landlock, seccomp) before `true`. The @shell call is the same call bound to @shell; the bare
bubblewrap is what any sandbox of this kind costs at least: the same namespaces, `--ro-bind / /`,
a /dev, a /proc and a /tmp, nothing else. Rows for the environment alone and for bubblewrap
without a network namespace tell the shares apart.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator

from codecoder.benchmarks.measure import Measured, compare
from codecoder.benchmarks.report import Area, BenchContext, FigureSpec, Skipped, Target
from codecoder.benchmarks.workspace import make_project, make_runtime, require_tools
from codecoder.environments.base import CommandRequest
from codecoder.environments.bwrap.probe import command_sandbox
from codecoder.runtime.kernel.ceiling import EnvironmentTag
from codecoder.runtime.permissions.commandkey import key_command

__all__ = ["AREA"]

COMMAND = "true"
SHELL_CALL = "the same call on @shell"
BARE = "bare `bwrap --unshare-all ... true`"
NO_NET = "bare bwrap without a network namespace"

SPECS = (
    FigureSpec(
        "bwrap.call",
        f"Session.call(run_command, `{COMMAND}`) on @bwrap (writable)",
        "ms",
        SHELL_CALL,
        Target("max_ratio", 4.0, "≤ 4× the @shell call"),
    ),
    FigureSpec(
        "bwrap.call_vs_bare",
        "the same contained call",
        "ms",
        BARE,
    ),
    FigureSpec(
        "bwrap.read_only",
        f"BwrapEnvironment.run(`{COMMAND}`) alone, read-only",
        "ms",
        BARE,
    ),
    FigureSpec(
        "bwrap.bare_without_network",
        "bare bwrap, every namespace but the network's",
        "ms",
        BARE,
    ),
)


def _bare(unshare_net: bool) -> list[str]:
    sandbox = command_sandbox()
    assert sandbox.bwrap is not None
    namespaces = (
        ["--unshare-all"]
        if unshare_net
        else ["--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
    )
    return [
        sandbox.bwrap,
        *namespaces,
        "--die-with-parent",
        "--new-session",
        "--ro-bind", "/", "/",
        "--dev", "/dev",
        "--proc", "/proc",
        "--tmpfs", "/tmp",
        "true",
    ]  # fmt: skip


def _spawn(argv: list[str]) -> None:
    subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, check=True)


@contextlib.contextmanager
def run(ctx: BenchContext) -> Iterator[dict[str, Measured]]:
    require_tools("run_command")
    sandbox = command_sandbox()
    if sandbox.tag is not EnvironmentTag.BWRAP:
        raise Skipped(f"@bwrap cannot run here: {sandbox.reason}")
    contained_project = make_project(ctx.scratch / "contained")
    host_project = make_project(ctx.scratch / "host", {"environments": {"run_command": "@shell"}})
    key = key_command(COMMAND).permission_key("run_command")
    args = {"command": COMMAND}
    with (
        make_runtime(contained_project) as contained,
        make_runtime(host_project) as host,
    ):
        contained_session, host_session = contained.session(), host.session()
        contained_session.allowlist.grant(key, EnvironmentTag.BWRAP)
        host_session.allowlist.grant(key, EnvironmentTag.SHELL)
        for session, where in ((contained_session, "@bwrap"), (host_session, "@shell")):
            outcome = session.call("run_command", args)
            if not outcome.ok or outcome.decision is None:
                raise RuntimeError(f"the {where} call did not run: {outcome.to_json()}")
            if outcome.decision.environment.value != where:
                raise RuntimeError(f"the call ran in {outcome.decision.environment}, not {where}")
        environment = contained.environment(EnvironmentTag.BWRAP)
        read_only = CommandRequest(cwd=contained_project, argv=(COMMAND,))
        contained_call = lambda: contained_session.call("run_command", args)  # noqa: E731
        figures = {
            "bwrap.call": (contained_call, SHELL_CALL),
            "bwrap.call_vs_bare": (contained_call, BARE),
            "bwrap.read_only": (lambda: environment.run(read_only), BARE),
            "bwrap.bare_without_network": (lambda: _spawn(_bare(False)), BARE),
        }
        bare = _bare(True)
        baselines = {
            SHELL_CALL: lambda: host_session.call("run_command", args),
            BARE: lambda: _spawn(bare),
        }
        measured = compare(figures, baselines, rounds=ctx.rounds(40, 6), sample_seconds=None)
        measured["bwrap.call"].miss_note = (
            "A cold sandbox per call is bounded by the kernel's work for bubblewrap's namespaces: "
            "the bare bubblewrap row is most of the contained call (its network namespace alone "
            "is the difference to the row without one), and the runtime's own work (planning "
            "the mounts, the helper's Landlock and seccomp, the protected-path checks around a "
            "writable call) is the rest. A warm sandbox per session (issue 26's pool) is what "
            "would meet the target."
        )
        yield measured


AREA = Area("bwrap", "@bwrap calls", SPECS, run)
