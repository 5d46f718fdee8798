"""Inside other agents: how fast a `codecoder` command starts, and what an MCP result costs.

A hook is a new process on every tool call of its host, and so is an agent's `codecoder call`,
so its start-up is its cost: `codecoder decide`, `codecoder hook claude-code` (a Bash call,
evaluated through the whole chain), `codecoder call read_file` (a tool run, its output
printed, its audit record written), `key`, `tools` and `replay` are timed as the processes a
host starts (the `codecoder` command) against `python -c pass` in the same run. They are run
by the warm decision server (`interfaces.forkserver.protocol`), which the first command starts;
the same commands in their own process (`CODECODER_DAEMON=0`) are reported beside them.

The MCP result's figure is what the model receives: the text of the result's `content`, or the
`structuredContent` as JSON where a client prefers it (Codex shows only that; codecoder sends
none). So the figure is the characters of the content's text plus those of any
structuredContent's JSON, for run_command `seq 1 20000` (capped output), against the tool's
text output alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from codecoder.benchmarks.measure import Measured, compare
from codecoder.benchmarks.report import Area, BenchContext, FigureSpec, Target
from codecoder.benchmarks.workspace import SMALL_FILE, make_project

__all__ = ["AREA"]

PYTHON_PASS = "python -c pass"
EVENT = {
    "session_id": "bench",
    "hook_event_name": "PreToolUse",
    "tool_name": "Bash",
    "tool_input": {"command": "git status"},
    "tool_use_id": "t1",
}

SPECS = (
    FigureSpec(
        "agents.startup.decide",
        "`codecoder decide run_command` as a new process (decision server)",
        "ms",
        PYTHON_PASS,
        Target("max_ratio", 3.0, "≤ 3× python -c pass"),
    ),
    FigureSpec(
        "agents.startup.hook",
        "`codecoder hook claude-code`, a Bash call, as a new process (decision server)",
        "ms",
        PYTHON_PASS,
        Target("max_ratio", 3.0, "≤ 3× python -c pass"),
    ),
    FigureSpec(
        "agents.startup.call",
        "`codecoder call read_file` (a small file) as a new process (decision server)",
        "ms",
        PYTHON_PASS,
        Target("max_ratio", 2.0, "≤ 2× python -c pass"),
    ),
    FigureSpec(
        "agents.startup.key",
        "`codecoder key 'git status'` as a new process (decision server)",
        "ms",
        PYTHON_PASS,
    ),
    FigureSpec(
        "agents.startup.tools",
        "`codecoder tools --json` as a new process (decision server)",
        "ms",
        PYTHON_PASS,
    ),
    FigureSpec(
        "agents.startup.replay",
        "`codecoder replay -`, two read_file calls, as a new process (decision server)",
        "ms",
        PYTHON_PASS,
    ),
    FigureSpec(
        "agents.startup.call_in_process",
        "`codecoder call read_file`, in its own process (CODECODER_DAEMON=0)",
        "ms",
        PYTHON_PASS,
    ),
    FigureSpec(
        "agents.startup.decide_in_process",
        "`codecoder decide run_command`, evaluated in-process (CODECODER_DAEMON=0)",
        "ms",
        PYTHON_PASS,
    ),
    FigureSpec(
        "agents.startup.hook_in_process",
        "`codecoder hook claude-code`, evaluated in-process (CODECODER_DAEMON=0)",
        "ms",
        PYTHON_PASS,
    ),
    FigureSpec(
        "agents.mcp.result_size",
        "MCP result of run_command `seq 1 20000`: content text + structuredContent JSON",
        "chars",
        "the tool's text output",
        Target("max_ratio", 1.1, "≤ 1.1× the text"),
    ),
)


def _process(argv: list[str], stdin: str, env: dict[str, str]) -> None:
    subprocess.run(argv, input=stdin, capture_output=True, text=True, env=env, check=False)


def codecoder_command() -> list[str]:
    """The `codecoder` command a host runs (the console script beside this interpreter), or
    `python -m runtime` where it is not installed."""
    script = Path(sys.executable).with_name("codecoder")
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [sys.executable, "-m", "codecoder"]


def model_sees(result: dict[str, object]) -> int:
    """The characters a model receives from an MCP tool result (see the module docstring)."""
    content = result.get("content")
    texts = [
        str(block.get("text", ""))
        for block in (content if isinstance(content, list) else [])
        if isinstance(block, dict) and block.get("type") == "text"
    ]
    structured = result.get("structuredContent")
    extra = len(json.dumps(structured, ensure_ascii=False)) if structured is not None else 0
    return sum(len(text) for text in texts) + extra


def result_size(project: Path) -> tuple[int, int, int]:
    """(what the model receives of the MCP result, the tool's text, the result's whole JSON),
    in characters."""
    from codecoder.interfaces.mcp_server import tool_result
    from codecoder.permissions.prompt import non_interactive
    from codecoder.session import Runtime

    with Runtime(project, asker=non_interactive, audit_log=None) as runtime:
        session = runtime.session()
        session.grant("run_command:seq")
        outcome = session.call("run_command", {"command": "seq 1 20000"})
        schema = runtime.tools["run_command"].output_schema
        result = tool_result(outcome, schema)
    text = outcome.unwrap().output
    wire = result.model_dump(by_alias=True, mode="json", exclude_none=True)
    return model_sees(wire), len(text), len(json.dumps(wire))


@contextlib.contextmanager
def decision_server(env: dict[str, str]) -> Iterator[None]:
    """Stop the decision server the measured commands started, when the area is done."""
    try:
        yield
    finally:
        directory = Path(env["XDG_STATE_HOME"]) / "codecoder" / "daemon"
        for lock in directory.glob("*.lock"):
            with contextlib.suppress(ValueError, OSError):
                os.kill(int(lock.read_text()), signal.SIGTERM)
        time.sleep(0.1)


@contextlib.contextmanager
def run(ctx: BenchContext) -> Iterator[dict[str, Measured]]:
    project = make_project(ctx.scratch / "project")
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "CODECODER_DAEMON")}
    env["XDG_STATE_HOME"] = str(ctx.scratch / "state")
    in_process = {**env, "CODECODER_DAEMON": "0"}
    codecoder = codecoder_command()
    decide = [*codecoder, "decide", "run_command", '{"command": "git status"}']
    decide += ["--project", str(project)]
    hook = [*codecoder, "hook", "claude-code", "--project", str(project)]
    event = json.dumps(EVENT)
    read = json.dumps({"path": SMALL_FILE})
    call = [*codecoder, "call", "read_file", read, "--project", str(project)]
    key = [*codecoder, "key", "git status"]
    tools = [*codecoder, "tools", "--json"]
    replay = [*codecoder, "replay", "-", "--project", str(project)]
    replayed = json.dumps({"tool": "read_file", "args": {"path": SMALL_FILE}}) + "\n"
    with decision_server(env):
        _process(decide, "", env)  # starts the server: the first call waits for it
        figures = {
            "agents.startup.decide": (lambda: _process(decide, "", env), PYTHON_PASS),
            "agents.startup.hook": (lambda: _process(hook, event, env), PYTHON_PASS),
            "agents.startup.call": (lambda: _process(call, "", env), PYTHON_PASS),
            "agents.startup.key": (lambda: _process(key, "", env), PYTHON_PASS),
            "agents.startup.tools": (lambda: _process(tools, "", env), PYTHON_PASS),
            "agents.startup.replay": (lambda: _process(replay, replayed * 2, env), PYTHON_PASS),
            "agents.startup.call_in_process": (
                lambda: _process(call, "", in_process),
                PYTHON_PASS,
            ),
            "agents.startup.decide_in_process": (
                lambda: _process(decide, "", in_process),
                PYTHON_PASS,
            ),
            "agents.startup.hook_in_process": (
                lambda: _process(hook, event, in_process),
                PYTHON_PASS,
            ),
        }
        baselines = {PYTHON_PASS: lambda: _process([sys.executable, "-c", "pass"], "", env)}
        measured = compare(figures, baselines, rounds=ctx.rounds(20, 3), sample_seconds=None)
    for name in ("agents.startup.decide", "agents.startup.hook", "agents.startup.call"):
        measured[name].miss_note = (
            "the client imports only socket, json and signal and reads its context from /proc; "
            "the rest is the fork of the server and the child's fresh read of codecoder.json, "
            "trust and grants (~5 ms warm), then the command itself"
        )
    seen, text, whole = result_size(project)
    measured["agents.mcp.result_size"] = Measured(
        subject=[float(seen)],
        baseline=[float(text)],
        note=(
            f"the result's whole JSON (with _meta and JSON escapes) is {whole:,} chars; "
            "clients hand the model the content's text, or a structuredContent in its "
            "place (codecoder sends none)"
        ),
    )
    yield measured


AREA = Area("agents", "inside other agents", SPECS, run)
