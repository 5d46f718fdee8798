"""Running the real agent CLIs (Claude Code, Gemini CLI, Codex) against the stand-in model
server, with the network closed.

`run_agent` starts a runner process in a network namespace of its own with only loopback up
(`unshare -n`), so nothing the CLI tries can leave the machine: the runner starts the stand-in
on 127.0.0.1, runs the set-up commands and the CLI, stops any decision server the hooks started,
and reports what happened. The CLIs come from tests/integrations/node_modules (`npm ci` there;
.ci/run does it); their telemetry, error reports and update checks are switched off as well.

    python -m tests.integrations.agents SPEC.json RESULT.json    (the runner, inside)
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests import docsblocks
from tests.integrations.standin import Call, Script, StandIn, _offered, _results

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
BIN = HERE / "node_modules" / ".bin"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

# Every CLI: no telemetry, no error reports, no update checks, no other traffic.
QUIET = {
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "NO_UPDATE_NOTIFIER": "1",
    "NO_COLOR": "1",
}
# Gemini CLI reads these from its settings: the user's file in the test's home.
GEMINI_USER_SETTINGS = {
    "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "security": {"auth": {"selectedType": "gemini-api-key"}},
}


def recipe(name: str) -> str:
    """The text of the code block marked `<!-- recipe: NAME -->` in README.md or docs/ (the
    same wherever it is shown): the tests run the recipes exactly as the documentation gives
    them, with this checkout's codecoder where they name the docs' one (`hook install` here
    would write this text: tests/test_docs.py checks the docs' recipes are what it writes)."""
    from codecoder.interfaces.installation import codecoder_command

    program = codecoder_command()
    assert len(program) == 1 and shlex.join(program) == program[0], (
        f"the recipes name codecoder by one plain path, as hook install writes it: {program}"
    )
    return docsblocks.recipe(name).replace(docsblocks.DOCS_CODECODER, program[0])


def shell_lines(text: str, **variables: str) -> list[list[str]]:
    """A shell recipe's commands as argv lists, with `$NAME` replaced from `variables`."""
    commands = []
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            words = shlex.split(line)
            commands.append([_expand(word, variables) for word in words])
    return commands


def _expand(word: str, variables: dict[str, str]) -> str:
    for name, value in variables.items():
        word = word.replace(f"${name}", value)
    return word


def cli(name: str) -> Path | None:
    path = BIN / name
    return path if path.exists() else None


def unavailable(name: str) -> str | None:
    """Why the tests of CLI `name` cannot run here (None: they can). In CI they must."""
    reason = None
    if cli(name) is None:
        reason = f"{name} is not installed (npm ci --prefix tests/integrations)"
    elif (
        shutil.which("unshare") is None
        or subprocess.run(["unshare", "-n", "true"], capture_output=True, check=False).returncode
    ):
        reason = "cannot close the network (unshare -n)"
    if reason is not None and IN_CI:
        raise RuntimeError(f"CI must run the agent CLI tests: {reason}")
    return reason


@dataclass
class AgentRun:
    exit_code: int
    stdout: str
    stderr: str
    requests: list[dict[str, Any]]
    setup: list[dict[str, Any]]
    screen: str = ""  # in a terminal: what it showed, escapes removed, whitespace squeezed

    def main_requests(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["turn"] is not None]

    def tool_results(self) -> list[Any]:
        """The tool results the model was shown, from the last request of the conversation."""
        main = self.main_requests()
        return _results(main[-1]["body"]) if main else []

    def offered(self) -> set[str]:
        """The tools the CLI offered the model in its first request of the conversation."""
        body = self.main_requests()[0]["body"] if self.main_requests() else {}
        return _offered(body) - {""}


def base_env(root: Path, **extra: str) -> dict[str, str]:
    """A user's environment under `root`: home, state, configuration; codecoder on PATH."""
    home = root / "home"
    home.mkdir(parents=True, exist_ok=True)
    node = shutil.which("node")  # the one CI put first on PATH, where Debian's is too old
    path = [str(Path(sys.executable).parent), *([str(Path(node).parent)] if node else [])]
    env = {
        "PATH": os.pathsep.join([*path, "/usr/local/bin", "/usr/bin", "/bin"]),
        "HOME": str(home),
        "XDG_STATE_HOME": str(root / "state"),
        "XDG_CONFIG_HOME": str(root / "config"),
        "XDG_CACHE_HOME": str(root / "cache"),
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        **QUIET,
    }
    if "VIRTUAL_ENV" in os.environ:
        env["VIRTUAL_ENV"] = os.environ["VIRTUAL_ENV"]
    env.update(extra)
    return env


def run_agent(
    argv: list[str],
    *,
    cwd: Path,
    env: dict[str, str],
    script: list[Call],
    setup: list[list[str]] = (),  # type: ignore[assignment]
    timeout: float = 240.0,
    terminal: list[tuple[str, str]] | None = None,
) -> AgentRun:
    """Run `setup` then `argv` with the network closed, the stand-in playing `script`.
    "{URL}" in `env` values and in the words of `argv` and `setup` is replaced by the
    stand-in's address.

    With `terminal`, `argv` runs in a pseudo-terminal, as a person runs it: each step waits
    until the screen shows the step's text, then types its keys; after the last step the
    CLI is interrupted (Ctrl-C twice) and given time to end its session."""
    with tempfile.TemporaryDirectory(prefix="codecoder-agent-") as scratch:
        spec = Path(scratch) / "spec.json"
        result = Path(scratch) / "result.json"
        spec.write_text(
            json.dumps(
                {
                    "argv": argv,
                    "cwd": str(cwd),
                    "env": env,
                    "setup": list(setup),
                    "script": [[c.tool, c.input] for c in script],
                    "timeout": timeout,
                    "terminal": terminal,
                }
            )
        )
        proc = subprocess.run(
            ["unshare", "-n", sys.executable, "-m", "tests.integrations.agents", spec, result],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=timeout + 60,
            check=False,
        )
        assert proc.returncode == 0, f"the runner failed: {proc.stderr}"
        data = json.loads(result.read_text())
    return AgentRun(**data)


def _loopback_up() -> None:
    """Bring `lo` up in this (new) network namespace."""
    import fcntl
    import socket
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        flags = 0x1 | 0x8 | 0x40  # IFF_UP, IFF_LOOPBACK, IFF_RUNNING
        fcntl.ioctl(sock, 0x8914, struct.pack("16sH", b"lo", flags))  # SIOCSIFFLAGS


def _stop_decision_servers(env: dict[str, str]) -> None:
    directory = Path(env.get("XDG_STATE_HOME", "")) / "codecoder" / "daemon"
    for lock in directory.glob("*.lock"):
        with contextlib.suppress(ValueError, OSError):
            os.kill(int(lock.read_text()), signal.SIGTERM)


def _runner(spec_path: Path, result_path: Path) -> None:
    spec = json.loads(spec_path.read_text())
    _loopback_up()
    standin = StandIn(Script([Call(tool, args) for tool, args in spec["script"]]))
    env = {k: v.replace("{URL}", standin.url) for k, v in spec["env"].items()}
    spec["argv"] = [word.replace("{URL}", standin.url) for word in spec["argv"]]
    setup = []
    try:
        for words in spec["setup"]:
            command = [word.replace("{URL}", standin.url) for word in words]
            done = subprocess.run(
                command, cwd=spec["cwd"], env=env, capture_output=True, text=True, timeout=120
            )
            setup.append(
                {
                    "argv": command,
                    "exit_code": done.returncode,
                    "stdout": done.stdout,
                    "stderr": done.stderr,
                }
            )
        if spec.get("terminal") is not None:
            code, stdout, screen = _in_terminal(spec, env)
            stderr = ""
        else:
            code, stdout, stderr = _in_pipes(spec, env)
            screen = ""
    finally:
        standin.close()
        _stop_decision_servers(env)
    result = {
        "exit_code": code,
        "stdout": stdout,
        "stderr": stderr,
        "screen": screen,
        "requests": [seen.__dict__ for seen in standin.requests],
        "setup": setup,
    }
    result_path.write_text(json.dumps(result))


def _in_pipes(spec: dict[str, Any], env: dict[str, str]) -> tuple[int, str, str]:
    agent = subprocess.Popen(
        spec["argv"],
        cwd=spec["cwd"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = agent.communicate(timeout=spec["timeout"])
        return agent.returncode, stdout, stderr
    except subprocess.TimeoutExpired:
        os.killpg(agent.pid, signal.SIGKILL)
        stdout, stderr = agent.communicate()
        return -1, stdout, f"{stderr}\n[the runner: timed out after {spec['timeout']}s]"


_ESCAPES = re.compile(
    r"\x1b\[[0-9;?>]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()][A-Z0-9]|\x1b[=>]"
)


def _in_terminal(spec: dict[str, Any], env: dict[str, str]) -> tuple[int, str, str]:
    import pexpect

    child = pexpect.spawn(
        spec["argv"][0],
        spec["argv"][1:],
        cwd=spec["cwd"],
        env=env,
        encoding="utf-8",
        codec_errors="replace",
        timeout=spec["timeout"],
        dimensions=(50, 160),
    )
    seen: list[str] = []

    def screen() -> str:
        return " ".join(_ESCAPES.sub(" ", "".join(seen)).split())

    shown = 0  # how much of the screen the steps so far have matched

    def wait_for(text: str, seconds: float = spec["timeout"]) -> bool:
        """Read until `text` shows after what the previous step matched."""
        nonlocal shown
        deadline = time.monotonic() + seconds
        while (found := screen().find(text, shown)) < 0:
            if time.monotonic() > deadline:
                return False
            try:
                seen.append(child.read_nonblocking(65536, timeout=0.5))
            except pexpect.TIMEOUT:
                continue
            except pexpect.EOF:
                return False
        shown = found + len(text)
        return True

    code = 0
    for text, keys in spec["terminal"]:
        if not wait_for(text):
            code = -1
            seen.append(f"[the runner: {text!r} never showed]")
            break
        time.sleep(0.5)  # the TUI takes keys once it has drawn what it shows
        child.send(keys)
    for _ in range(2):
        time.sleep(1.0)
        child.sendcontrol("c")
    wait_for("\x00", 15.0)  # read until it ends (its SessionEnd hooks run then), or 15 s
    try:
        child.close(force=True)
    except pexpect.ExceptionPexpect:  # it outlived SIGHUP, SIGINT and SIGKILL's first wait
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signal.SIGKILL)
    return code, "", screen()


if __name__ == "__main__":
    _runner(Path(sys.argv[1]), Path(sys.argv[2]))
