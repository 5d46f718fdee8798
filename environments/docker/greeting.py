"""Greeting a sandbox's agent: the set-up line, the hello, and what is in force in the sandbox.

The same steps whoever greets it, a session starting its own container or the warm pool
preparing one for a later claim (`environments.docker.pool`): send the session key and the
command user, wait for the hello, refuse an agent of another protocol or one that found a
problem with its own protections (capabilities, no-new-privs, root), and check that the limits
the template asked for are those in force (an engine that silently dropped one is refused).
"""

from __future__ import annotations

from typing import Any, Final

from codecoder.environments.docker.cgroups import host_limits
from codecoder.environments.docker.channel import AGENT_PROTOCOL, Mode, _AgentChannel
from codecoder.environments.docker.engine import SETUP_HINT, _engine_address, engine_is_local
from codecoder.environments.egress import PROXY_PORT, SOCKET_NAME
from codecoder.environments.engineseam import Sandbox, SandboxEngine, SandboxTemplate
from codecoder.foundation.errors import SandboxUnavailable

__all__ = ["AGENT_START_SECONDS", "greet", "limit_problems", "relay_for"]

AGENT_START_SECONDS: Final = 20.0


def greet(
    engine: SandboxEngine,
    sandbox: Sandbox,
    template: SandboxTemplate,
    mode: Mode,
    *,
    outbox: str | None = None,
    handover: bool = False,
) -> _AgentChannel:
    """A channel to `sandbox`'s agent, greeted and checked; `SandboxUnavailable` (the channel
    closed, the sandbox left to the caller to remove) when it cannot be used.

    A sandbox claimed already greeted gets its channel from what the pool handed over: the
    pool ran these same checks. `handover`: the pool's own greeting, whose channel stops
    reading after the hello (`_AgentChannel.release`). A template with an egress directory
    gets the agent's relay to the socket in it (`relay_for`), listening before any command
    runs; the socket itself may come later (a warm sandbox's, once a session claims it)."""
    attached = sandbox.keep if sandbox.keep is not None else sandbox.stream
    if sandbox.greeted is not None:
        return _AgentChannel(sandbox.id, sandbox.name, mode, attached, greeted=sandbox.greeted)
    channel = _AgentChannel(sandbox.id, sandbox.name, mode, attached, handover=handover)
    try:
        channel.begin(*template.command_user, relay_for(template), outbox)
        if not channel.wait_ready(AGENT_START_SECONDS):
            detail = channel.stderr_tail or channel.gone or "no answer"
            raise SandboxUnavailable(
                f"the agent of image {template.image!r} did not start ({detail}); "
                f"rebuild the image: {SETUP_HINT}"
            )
        hello = channel.hello
        if hello.get("hello") != AGENT_PROTOCOL:
            raise SandboxUnavailable(
                f"image {template.image!r} has an agent speaking protocol "
                f"{hello.get('hello')!r}, this runtime speaks {AGENT_PROTOCOL}; "
                f"rebuild the image: {SETUP_HINT}"
            )
        if hello.get("problem"):
            raise SandboxUnavailable(
                f"the sandbox agent refused to run: {hello['problem']}; nothing ran"
            )
        channel.runtime, limits = _enforced_limits(engine, sandbox.id, hello)
        problems = limit_problems(template, limits)
        if problems:
            raise SandboxUnavailable(
                "the container engine did not apply the sandbox's limits ("
                + "; ".join(problems)
                + "), as rootless Podman on cgroup v1 silently does; refusing to run in it. "
                "Use an engine that enforces cgroup limits (Docker, or Podman on cgroup v2)"
            )
    except BaseException:
        channel.close()
        raise
    return channel


def relay_for(template: SandboxTemplate) -> dict[str, Any] | None:
    """The set-up of the agent's egress relay (127.0.0.1:PROXY_PORT to the proxy's socket in
    the sandbox's egress directory), or None when the template has no egress directory."""
    target = template.egress_target
    if target is None:
        return None
    return {"port": PROXY_PORT, "socket": f"{target}/{SOCKET_NAME}"}


def _enforced_limits(
    engine: SandboxEngine, sandbox_id: str, hello: dict[str, Any]
) -> tuple[str, dict[str, Any]]:
    """The engine runtime of the sandbox and the limits in force on it.

    The agent reports what its kernel enforces. Under gVisor (runsc) that kernel is gVisor's,
    which enforces none of them and shows none; the host's enforces them on the whole sandbox,
    so they are read from the host, from the cgroup of the sandbox's process, which must
    therefore run on this machine.
    """
    state = engine.inspect(sandbox_id)
    if state.runtime != "runsc":
        return state.runtime, hello.get("limits") or {}
    if not engine_is_local():
        # The pid a remote engine reports is one of its machine (or its PID namespace):
        # whatever process has that number here is not the sandbox.
        raise SandboxUnavailable(
            "the sandbox runs under gVisor (runsc), whose limits are checked on the machine "
            f"it runs on, and the engine at {_engine_address()} is on another one; use "
            'runc there ("docker": {"runtime": "runc"})'
        )
    found = host_limits(state.pid)
    if found is None:
        raise SandboxUnavailable(
            "the sandbox runs under gVisor (runsc), whose limits are checked on the host, "
            "but the container's process is not visible on this machine (a remote engine?); "
            "refusing to run in it"
        )
    return state.runtime, found


def limit_problems(template: SandboxTemplate, found: dict[str, Any]) -> list[str]:
    """What the kernel enforces on the sandbox, against what its template asked for."""
    problems = []

    def check(what: str, value: Any, wanted: float) -> None:
        shown = f"{wanted:,}" if isinstance(wanted, int) else f"{wanted:g}"
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            problems.append(f"{what}: asked for {shown}, none is in force")
        elif value > wanted * 1.0001:
            problems.append(f"{what}: asked for {shown}, {value:,} in force")

    check("memory bytes", found.get("memory"), template.memory_bytes)
    check("pids", found.get("pids"), template.pids_limit)
    check("cpus", found.get("cpus"), template.cpus)
    if found.get("swap_total"):
        check("memory+swap bytes", found.get("memory_swap"), template.memory_bytes)
    return problems
