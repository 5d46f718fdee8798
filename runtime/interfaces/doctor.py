"""`codecoder doctor`: everything the first hour needs, checked, one line each with its fix.

    codecoder doctor [--json] [--project DIR]

Each check says `ok`, `FAIL` (something this machine or this user's set-up uses is broken: the
command exits 1) or `note` (a piece that is missing but not used here: Docker when nothing is
bound to @docker, an agent whose hook was never installed, codecoder not on the PATH when the
hooks name it by its path). The checks, in order:

    bubblewrap      bwrap found and able to create the sandbox's namespaces (user namespaces)
    landlock        the kernel's Landlock ABI (reads confined by the kernel; 0: none)
    contained       a real `echo` run contained in @bwrap, through the confine helper
    decision server the warm server starts and answers (CODECODER_DAEMON=0 turns it off)
    docker          the engine (DOCKER_HOST) answers and has the sandbox image
    gvisor          runsc registered with the engine (needed only where a file asks for it)
    hook …          each agent's hook (Claude Code, Gemini CLI; Codex's MCP server), user and
                    project level: installed, every event there, naming a codecoder that exists
    PATH            `codecoder` on the PATH, and the same one as this
    state           the state directory: private (0700, this user's) and writable
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shlex
import shutil
import stat
import subprocess
import tempfile
import tomllib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from codecoder.interfaces.hookinstall import AGENTS, HOOK_EVENTS, hook_program, settings_file
from codecoder.interfaces.installation import codecoder_command

__all__ = ["Check", "diagnose"]

Status = Literal["ok", "FAIL", "note"]


@dataclass(frozen=True, slots=True)
class Check:
    """One line of the report: what was checked, how it stands, what was seen, the fix."""

    name: str
    status: Status
    detail: str
    fix: str = ""

    def line(self, width: int) -> str:
        text = f"{self.status:<4}  {self.name:<{width}}  {self.detail}"
        return text + (f"\n      {'':<{width}}  fix: {self.fix}" if self.fix else "")

    def to_json(self) -> dict[str, str]:
        return {"name": self.name, "status": self.status, "detail": self.detail, "fix": self.fix}


def diagnose(project: Path) -> list[Check]:
    """Every check, for `project` (its configuration says what is used)."""
    checks: list[Check] = []
    uses_docker, uses_gvisor = _docker_used(project)
    for check in (
        _bubblewrap,
        _landlock,
        _contained,
        _decision_server,
        lambda: _docker(uses_docker),
        lambda: _gvisor(uses_gvisor),
    ):
        checks.append(_guarded(check))
    checks += _hooks(project)
    checks.append(_guarded(_path))
    checks.append(_guarded(_state))
    return checks


def _guarded(check: Callable[[], Check]) -> Check:
    try:
        return check()
    except Exception as exc:  # a check that cannot run is itself a finding
        name = getattr(getattr(check, "func", check), "__name__", "check").strip("_")
        return Check(name, "FAIL", f"the check itself failed: {type(exc).__name__}: {exc}")


def _bubblewrap() -> Check:
    from codecoder.environments.bwrap.probe import bwrap_binary, command_sandbox
    from codecoder.foundation.ceiling import EnvironmentTag

    found = command_sandbox()
    if found.tag is EnvironmentTag.BWRAP:
        return Check("bubblewrap", "ok", f"{found.bwrap} {found.bwrap_version or ''}".strip())
    if bwrap_binary() is None:
        fix = (
            "apt-get install bubblewrap" if os.geteuid() == 0 else "sudo apt-get install bubblewrap"
        )
        return Check("bubblewrap", "FAIL", f"not installed: {found.reason}", fix)
    return Check(
        "bubblewrap",
        "FAIL",
        found.reason,
        "allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1; on "
        "Ubuntu 24.04+ kernel.apparmor_restrict_unprivileged_userns=0), or run as root",
    )


def _landlock() -> Check:
    from codecoder.sandboxes.landlock.worker import landlock_abi

    abi = landlock_abi()
    if abi >= 1:
        return Check("landlock", "ok", f"ABI {abi}")
    return Check(
        "landlock",
        "note",
        "this kernel has no Landlock: reads are confined by openat2 and Wasm instead",
        "a kernel of 5.13 or later with CONFIG_SECURITY_LANDLOCK and lsm=landlock",
    )


def _contained() -> Check:
    from codecoder.environments.bwrap.probe import command_sandbox
    from codecoder.foundation.ceiling import EnvironmentTag
    from codecoder.session import Runtime

    if command_sandbox().tag is not EnvironmentTag.BWRAP:
        return Check("contained", "FAIL", "no command can run contained here", "see bubblewrap")
    with (
        tempfile.TemporaryDirectory(prefix="codecoder-doctor-") as scratch,
        Runtime(Path(scratch), audit_log=None) as runtime,
    ):
        outcome = runtime.session().call("run_command", {"command": "echo contained"})
    stdout = outcome.result.data.get("stdout") if outcome.result is not None else None
    if outcome.ok and stdout == "contained\n" and outcome.decision is not None:
        where = outcome.decision.environment.value
        return Check("contained", "ok", f"`echo contained` ran in {where} (the confine helper)")
    why = str(outcome.error) if outcome.error else (outcome.result.output if outcome.result else "")
    return Check(
        "contained",
        "FAIL",
        f"a contained `echo` failed: {why.strip()[:300]}",
        "reinstall codecoder (the confine helper must be reachable inside the sandbox)",
    )


def _decision_server() -> Check:
    from codecoder.foundation.state import state_directory

    if os.environ.get("CODECODER_DAEMON", "").strip().lower() in ("0", "false", "no", "off"):
        return Check("decision server", "note", "off (CODECODER_DAEMON=0): commands run in-process")
    done = subprocess.run(
        [*codecoder_command(), "key", "ls"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    # The server a served command starts listens in the state directory (forkserver.protocol).
    directory = state_directory() / "daemon"
    sockets = sorted(directory.glob("decide-*.sock")) if directory.is_dir() else []
    if done.returncode == 0 and done.stdout.strip() == "run_command:ls" and sockets:
        return Check("decision server", "ok", f"answers at {sockets[0]}")
    return Check(
        "decision server",
        "FAIL",
        f"`codecoder key ls` gave {done.returncode} ({done.stderr.strip()[:200]}) and no server "
        f"listens in {directory}",
        "check that the state directory is private (see state); CODECODER_DAEMON=0 runs "
        "every command in-process meanwhile",
    )


def _docker_used(project: Path) -> tuple[bool, bool]:
    """Whether the project's configuration binds anything to @docker, and asks for gVisor."""
    from codecoder.foundation.ceiling import EnvironmentTag
    from codecoder.session import Runtime

    try:
        with Runtime(project, audit_log=None) as runtime:
            uses = any(
                runtime.environment_of(name) is EnvironmentTag.DOCKER
                for name in runtime.tools
                if name != "run_container"
            )
            settings = runtime.config.docker
            return uses or settings.image != _default_image(), settings.runtime == "runsc"
    except Exception:
        return False, False


def _default_image() -> str:
    from codecoder.environments.docker.settings import DEFAULT_IMAGE

    return DEFAULT_IMAGE


def _docker(used: bool) -> Check:
    from codecoder.environments.docker.engine import _client_from_env

    image = _default_image()
    with contextlib.suppress(Exception):
        from codecoder.session import Runtime

        with Runtime(Path.cwd(), audit_log=None) as runtime:
            image = runtime.config.docker.image
    status: Status = "FAIL" if used else "note"
    where = os.environ.get("DOCKER_HOST") or "the local engine"
    try:
        client = _client_from_env()
        client.ping()
    except Exception as exc:
        return Check(
            "docker",
            status,
            f"{where} does not answer ({type(exc).__name__})"
            + ("" if used else "; only @docker and run_container need it"),
            "start dockerd (or set DOCKER_HOST to a reachable engine)",
        )
    try:
        client.images.get(image)
    except Exception:
        return Check(
            "docker",
            status,
            f"{where} answers, but has no image {image!r}"
            + ("" if used else "; only @docker and run_container need it"),
            "docker build -t codecoder-sandbox . (in codecoder's checkout; nothing is pulled), "
            "or `codecoder image build --from IMAGE`",
        )
    return Check("docker", "ok", f"{where} answers; image {image} is there")


def _gvisor(used: bool) -> Check:
    from codecoder.environments.docker.engine import _client_from_env

    try:
        runtimes = _client_from_env().info().get("Runtimes", {})
    except Exception:
        return Check("gvisor", "FAIL" if used else "note", "the engine does not answer")
    if "runsc" in runtimes:
        return Check("gvisor", "ok", "runsc is registered with the engine")
    return Check(
        "gvisor",
        "FAIL" if used else "note",
        "runsc is not registered with the engine"
        + ("" if used else " (only a file asking for runtime runsc needs it)"),
        'apt-get install runsc; add "runtimes": {"runsc": {"path": "/usr/bin/runsc"}} to '
        "/etc/docker/daemon.json and restart dockerd",
    )


_AGENT_NAMES = {"claude-code": "Claude Code", "gemini": "Gemini CLI", "codex": "Codex"}


def _hooks(project: Path) -> list[Check]:
    checks: list[Check] = []
    for agent in AGENTS:
        for level, where in (("user", None), ("project", project)):
            name = f"hook {agent} ({level})"
            file = settings_file(agent, where)
            install = f"codecoder hook install {agent}" + (" --project" if where else "")
            checks.append(_guarded(functools.partial(_hook, agent, file, name, install)))
    return checks


def _hook(agent: str, file: Path, name: str, install: str) -> Check:
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        return Check(name, "note", f"not installed ({file} does not exist)", install)
    if agent == "codex":
        return _codex_server(text, file, name, install)
    try:
        settings = json.loads(text)
    except json.JSONDecodeError as exc:
        return Check(name, "FAIL", f"{file}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg}")
    hooks = settings.get("hooks") if isinstance(settings, dict) else None
    found: dict[str, list[str]] = {}
    for event, groups in hooks.items() if isinstance(hooks, dict) else ():
        for group in groups if isinstance(groups, list) else ():
            entries = group.get("hooks") if isinstance(group, dict) else None
            for entry in entries if isinstance(entries, list) else ():
                command = entry.get("command") if isinstance(entry, dict) else None
                if (
                    isinstance(command, str)
                    and f" {agent}" in command
                    and hook_program(command) is not None
                ):
                    found.setdefault(event, []).append(command)
    if not found:
        return Check(name, "note", f"not installed (no codecoder hook in {file})", install)
    return _programs_hold(name, file, found, [event for event, _ in HOOK_EVENTS[agent]], install)


def _programs_hold(
    name: str, file: Path, found: dict[str, list[str]], events: Sequence[str], install: str
) -> Check:
    missing = [event for event in events if event not in found]
    programs = {hook_program(c) or () for commands in found.values() for c in commands}
    for program in sorted(programs):
        problem = _program_problem(program)
        if problem is not None:
            return Check(name, "FAIL", f"{file}: {problem}", f"{install} (names this codecoder)")
    if any(event in missing for event in ("PreToolUse", "BeforeTool")):
        return Check(name, "FAIL", f"{file}: no hook on {', '.join(missing)}", install)
    shown = ", ".join(shlex.join(p) for p in sorted(programs))
    if tuple(codecoder_command()) not in programs:
        return Check(name, "ok", f"{file}: runs {shown} (not this codecoder, which is fine)")
    note = f"; not on {', '.join(missing)}" if missing else ""
    return Check(name, "ok", f"{file}: runs {shown}{note}")


def _program_problem(program: tuple[str, ...]) -> str | None:
    if not program:
        return "a hook command with no program"
    first = program[0]
    if not os.path.isabs(first):
        found = shutil.which(first)
        if found is None:
            return f"the hook runs {first!r}, which is not on this PATH (an agent started "
            "elsewhere may not find it either: the hook would not run)"
        return (
            f"the hook runs {first!r} by name, found on the PATH only (an agent started "
            "without it there would run the call unjudged)"
        )
    if not (os.path.isfile(first) and os.access(first, os.X_OK)):
        return f"the hook runs {first}, which does not exist (or cannot be run)"
    return None


def _codex_server(text: str, file: Path, name: str, install: str) -> Check:
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        return Check(name, "FAIL", f"{file}: not valid TOML: {exc}")
    servers = document.get("mcp_servers")
    server = servers.get("codecoder") if isinstance(servers, dict) else None
    if not isinstance(server, dict):
        return Check(name, "note", f"not installed (no [mcp_servers.codecoder] in {file})", install)
    command = server.get("command")
    args = server.get("args") or []
    program = (str(command), *(str(a) for a in args[:-1])) if isinstance(args, list) else ()
    problem = _program_problem(program) if command else "no command"
    if problem is not None:
        return Check(name, "FAIL", f"{file}: {problem}", install)
    if server.get("required") is not True:
        return Check(name, "FAIL", f"{file}: not `required`: Codex would run without it", install)
    return Check(name, "ok", f"{file}: Codex's MCP server runs {shlex.join(program)}")


def _path() -> Check:
    mine = codecoder_command()
    found = shutil.which("codecoder")
    if found is None:
        return Check(
            "PATH",
            "note",
            f"`codecoder` is not on the PATH (this is {shlex.join(mine)}; the hooks name it by "
            "its path)",
            f"add {os.path.dirname(mine[0])} to PATH (or link {mine[0]} into ~/.local/bin)"
            if len(mine) == 1
            else "install codecoder with its console script (scripts/install.sh)",
        )
    if len(mine) == 1 and os.path.realpath(found) != os.path.realpath(mine[0]):
        return Check(
            "PATH",
            "note",
            f"`codecoder` on the PATH is {found}, another than this one ({mine[0]})",
            "put the one you mean first on PATH",
        )
    return Check("PATH", "ok", f"`codecoder` is {found}")


def _state() -> Check:
    from codecoder.foundation.state import state_directory

    directory = state_directory()
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        info = directory.stat()
    except OSError as exc:
        return Check("state", "FAIL", f"{directory}: {exc}", "make it writable by you")
    mode = stat.S_IMODE(info.st_mode)
    if info.st_uid != os.geteuid():
        return Check("state", "FAIL", f"{directory} belongs to uid {info.st_uid}", "chown it")
    if mode & 0o022:
        return Check(
            "state",
            "FAIL",
            f"{directory} can be written by others (mode {mode:o})",
            f"chmod go-w {directory}",
        )
    with _probe_file(directory) as written:
        if not written:
            return Check("state", "FAIL", f"{directory} is not writable", "make it writable by you")
    return Check("state", "ok", f"{directory} (yours, writable by you only)")


@contextlib.contextmanager
def _probe_file(directory: Path) -> Iterator[bool]:
    try:
        handle, name = tempfile.mkstemp(dir=directory, prefix=".doctor-")
    except OSError:
        yield False
        return
    os.close(handle)
    try:
        yield True
    finally:
        os.unlink(name)


def report(checks: Sequence[Check]) -> str:
    width = max(len(check.name) for check in checks)
    return "\n".join(check.line(width) for check in checks)


def as_json(checks: Sequence[Check]) -> dict[str, Any]:
    return {
        "ok": not any(c.status == "FAIL" for c in checks),
        "checks": [c.to_json() for c in checks],
    }
