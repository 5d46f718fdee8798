"""@bwrap: a contained `true` through `Session.call`, against the same call on @shell and against a
bare `bwrap ... true`: the call an agent gets (warm: the sandbox built in the background after
the previous call, claimed after a pause like an agent's turn, the pause not timed), the cold
call back to back (warm sandboxes off), and the warm-enabled call back to back (the next
sandbox still being built when the call comes).

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
import time
from collections.abc import Iterator

from codecoder.benchmarks.measure import Measured, SelfTimed, Subject, compare
from codecoder.benchmarks.report import Area, BenchContext, FigureSpec, Skipped, Target
from codecoder.benchmarks.workspace import make_project, make_runtime, require_tools
from codecoder.environments.base import CommandRequest
from codecoder.environments.bwrap.environment import BwrapEnvironment
from codecoder.environments.bwrap.probe import command_sandbox
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.permissions.commandkey import key_command

__all__ = ["AREA"]

COMMAND = "true"
SHELL_CALL = "the same call on @shell"
BARE = "bare `bwrap --unshare-all ... true`"
NO_NET = "bare bwrap without a network namespace"
PAUSE = 0.2  # seconds between calls for the warm figure: an agent's turn is longer

SPECS = (
    FigureSpec(
        "bwrap.call",
        f"Session.call(run_command, `{COMMAND}`) on @bwrap (writable), warm: after a "
        f"{PAUSE * 1000:.0f} ms pause (an agent's turn, not timed)",
        "ms",
        SHELL_CALL,
        Target("max_ratio", 4.0, "≤ 4× the @shell call"),
    ),
    FigureSpec(
        "bwrap.cold_call",
        "the same call cold (warm sandboxes off), back to back",
        "ms",
        SHELL_CALL,
    ),
    FigureSpec(
        "bwrap.back_to_back",
        "the same call, warm sandboxes on, right after another (its sandbox still building)",
        "ms",
        SHELL_CALL,
    ),
    FigureSpec(
        "bwrap.call_vs_bare",
        "the cold contained call",
        "ms",
        BARE,
    ),
    FigureSpec(
        "bwrap.read_only",
        f"BwrapEnvironment.run(`{COMMAND}`) alone, read-only, cold",
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
    cold_project = make_project(ctx.scratch / "cold")
    host_project = make_project(ctx.scratch / "host", {"environments": {"run_command": "@shell"}})
    key = key_command(COMMAND).permission_key("run_command")
    args = {"command": COMMAND}
    with (
        make_runtime(contained_project) as contained,
        make_runtime(cold_project) as cold,
        make_runtime(host_project) as host,
    ):
        contained_session, host_session = contained.session(), host.session()
        cold_session = cold.session()
        contained_session.allowlist.grant(key, EnvironmentTag.BWRAP)
        cold_session.allowlist.grant(key, EnvironmentTag.BWRAP)
        host_session.allowlist.grant(key, EnvironmentTag.SHELL)
        cold_environment = cold.environment(EnvironmentTag.BWRAP)
        assert isinstance(cold_environment, BwrapEnvironment)
        cold_environment.warm = False
        for session, where in (
            (contained_session, "@bwrap"),
            (cold_session, "@bwrap"),
            (host_session, "@shell"),
        ):
            outcome = session.call("run_command", args)
            if not outcome.ok or outcome.decision is None:
                raise RuntimeError(f"the {where} call did not run: {outcome.to_json()}")
            if outcome.decision.environment.value != where:
                raise RuntimeError(f"the call ran in {outcome.decision.environment}, not {where}")
        environment = contained.environment(EnvironmentTag.BWRAP)
        assert isinstance(environment, BwrapEnvironment)
        read_only = CommandRequest(cwd=cold_project, argv=(COMMAND,))

        def contained_call() -> object:
            return contained_session.call("run_command", args)

        def cold_call() -> object:
            return cold_session.call("run_command", args)

        misses = [0]

        def after_a_pause() -> float:
            time.sleep(PAUSE)
            claimed = environment.warm_sandboxes.claimed
            started = time.perf_counter()
            contained_call()
            took = time.perf_counter() - started
            misses[0] += environment.warm_sandboxes.claimed == claimed
            return took

        def back_to_back() -> float:
            contained_call()
            started = time.perf_counter()
            contained_call()  # its sandbox is the one the call before started building
            return time.perf_counter() - started

        figures: dict[str, tuple[Subject, str]] = {
            "bwrap.call": (SelfTimed(after_a_pause), SHELL_CALL),
            "bwrap.cold_call": (cold_call, SHELL_CALL),
            "bwrap.back_to_back": (SelfTimed(back_to_back), SHELL_CALL),
            "bwrap.call_vs_bare": (cold_call, BARE),
            "bwrap.read_only": (lambda: cold_environment.run(read_only), BARE),
            "bwrap.bare_without_network": (lambda: _spawn(_bare(False)), BARE),
        }
        bare = _bare(True)
        baselines = {
            SHELL_CALL: lambda: host_session.call("run_command", args),
            BARE: lambda: _spawn(bare),
        }
        measured = compare(figures, baselines, rounds=ctx.rounds(40, 6), sample_seconds=None)
        if misses[0]:
            missed = f"{misses[0]} of the paused calls found no warm sandbox and ran cold"
            measured["bwrap.call"].note = missed
        measured["bwrap.cold_call"].note = (
            "A cold sandbox per call is bounded by the kernel's work for bubblewrap's namespaces: "
            "the bare bubblewrap row is most of the cold call (its network namespace alone is "
            "the difference to the row without one); the runtime's own work (planning the "
            "mounts, the helper's Landlock and seccomp, the protected-path checks around a "
            "writable call) is the rest."
        )
        yield measured


AREA = Area("bwrap", "@bwrap calls", SPECS, run)
