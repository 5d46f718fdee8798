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
from codecoder.environments.privatefiles import MachinePrivateFiles, machine_private_files
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.permissions.commandkey import key_command

__all__ = ["AREA"]

COMMAND = "true"
SHELL_CALL = "the same call on @shell"
BARE = "bare `bwrap --unshare-all ... true`"
NO_NET = "bare bwrap without a network namespace"
WITHOUT_PRIVATE = "the same call, nothing of the host's private entries covered"
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
        "bwrap.private_cold",
        f"BwrapEnvironment.run(`{COMMAND}`), read-only, cold, the host's private entries "
        "covered (environments.privatefiles: the look before the call, a mount each)",
        "ms",
        WITHOUT_PRIVATE,
    ),
    FigureSpec(
        "bwrap.private_warm",
        f"the same, warm (after a {PAUSE * 1000:.0f} ms pause): the look is on the call's path, "
        "the mounts are not",
        "ms",
        WITHOUT_PRIVATE + " (warm)",
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
        private_files = machine_private_files()
        walk_started = time.perf_counter()
        private_files.entries()  # the first walk of this machine, if none is kept yet
        walk_took = time.perf_counter() - walk_started
        nothing = MachinePrivateFiles(None, roots=())
        private_envs = {
            (rule, warm): BwrapEnvironment(
                cold_project, warm=warm, private_files=private_files if rule else nothing
            )
            for rule in (True, False)
            for warm in (True, False)
        }

        def private_run(rule: bool, warm: bool) -> Subject:
            env = private_envs[rule, warm]
            if not warm:
                return lambda: env.run(read_only)

            def paused() -> float:
                time.sleep(PAUSE)
                started = time.perf_counter()
                env.run(read_only)
                return time.perf_counter() - started

            return SelfTimed(paused)

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
            "bwrap.private_cold": (private_run(True, False), WITHOUT_PRIVATE),
            "bwrap.private_warm": (private_run(True, True), WITHOUT_PRIVATE + " (warm)"),
            "bwrap.bare_without_network": (lambda: _spawn(_bare(False)), BARE),
        }
        bare = _bare(True)
        baselines = {
            SHELL_CALL: lambda: host_session.call("run_command", args),
            BARE: lambda: _spawn(bare),
            WITHOUT_PRIVATE: private_run(False, False),
            WITHOUT_PRIVATE + " (warm)": private_run(False, True),
        }
        try:
            measured = compare(figures, baselines, rounds=ctx.rounds(40, 6), sample_seconds=None)
        finally:
            for env in private_envs.values():
                env.close()
        plan = private_envs[True, False].plan(read_only)
        looks = []
        for _ in range(50):
            started = time.perf_counter()
            private_files.entries()
            looks.append(time.perf_counter() - started)
        looks.sort()
        measured["bwrap.private_cold"].note = (
            f"This machine: {len(plan.private.directories)} private directories and "
            f"{len(plan.private.files)} private files covered, {len(plan.kernel_private)} "
            f"kernel files of /proc; the look before a call {looks[len(looks) // 2] * 1000:.2f} ms "
            f"(median of 50, {private_files.looked_at_each_call} directories looked at); the "
            f"first walk of the machine, when none was kept, {walk_took:.1f} s (0 when kept). "
            "A directory costs a tmpfs (next to nothing), a file a bind mount (bubblewrap reads "
            "the mount table for each: about 0.2 ms idle, more under load)."
        )
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
