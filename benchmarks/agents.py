"""Inside other agents: how fast `decide` and `hook` start, and how big an MCP result is.

A hook runs as a new process on every tool call of the host, so its start-up is its cost:
`codecoder decide` and `codecoder hook claude-code` (a Bash call, evaluated through the whole
chain) are timed as processes against `python -c pass` in the same run. An MCP result of
`seq 1 20000` (capped output) is measured in characters of its JSON against its text alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from benchmarks.measure import Measured, compare
from benchmarks.report import Area, BenchContext, FigureSpec, Target
from benchmarks.workspace import make_project

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
        "`codecoder decide run_command` as a new process",
        "ms",
        PYTHON_PASS,
        Target("max_ratio", 3.0, "≤ 3× python -c pass"),
    ),
    FigureSpec(
        "agents.startup.hook",
        "`codecoder hook claude-code`, a Bash call, as a new process",
        "ms",
        PYTHON_PASS,
        Target("max_ratio", 3.0, "≤ 3× python -c pass"),
    ),
    FigureSpec(
        "agents.mcp.result_size",
        "MCP result of run_command `seq 1 20000` (JSON)",
        "chars",
        "the text output alone",
        Target("max_ratio", 1.1, "≤ 1.1× the text"),
    ),
)


def _process(argv: list[str], stdin: str, env: dict[str, str]) -> None:
    subprocess.run(argv, input=stdin, capture_output=True, text=True, env=env, check=False)


def result_size(project: Path) -> tuple[int, int, int]:
    """(the MCP result's JSON, the text, the text as a JSON string), in characters."""
    from runtime.mcp_server import tool_result
    from runtime.prompt import non_interactive
    from runtime.session import Runtime

    with Runtime(project, asker=non_interactive, audit_log=None) as runtime:
        session = runtime.session()
        session.grant("run_command:seq")
        outcome = session.call("run_command", {"command": "seq 1 20000"})
        schema = runtime.tools["run_command"].output_schema
        result = tool_result(outcome, schema)
    text = outcome.unwrap().output
    wire = json.dumps(result.model_dump(by_alias=True, mode="json", exclude_none=True))
    return len(wire), len(text), len(json.dumps(text))


@contextlib.contextmanager
def run(ctx: BenchContext) -> Iterator[dict[str, Measured]]:
    project = make_project(ctx.scratch / "project")
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["XDG_STATE_HOME"] = str(ctx.scratch / "state")
    codecoder = [sys.executable, "-m", "runtime"]
    decide = [*codecoder, "decide", "run_command", '{"command": "git status"}', "--project"]
    hook = [*codecoder, "hook", "claude-code", "--project", str(project)]
    figures = {
        "agents.startup.decide": (
            lambda: _process([*decide, str(project)], "", env),
            PYTHON_PASS,
        ),
        "agents.startup.hook": (lambda: _process(hook, json.dumps(EVENT), env), PYTHON_PASS),
    }
    baselines = {PYTHON_PASS: lambda: _process([sys.executable, "-c", "pass"], "", env)}
    measured = compare(figures, baselines, rounds=ctx.rounds(20, 3), sample_seconds=None)
    for name in figures:
        measured[name].miss_note = (
            "-X importtime: the engine's path imports pydantic (~50 ms, the tool model's "
            "parameter models), bashlex (~90 ms, command keys), and the tool catalogue "
            "(dulwich, wasmtime, jsonschema: ~150 ms) before the first decision; the CLI "
            "itself imports them only for these commands. A warm process (the MCP server, or "
            "a daemon a hook talks to) decides in microseconds."
        )
    wire, text, quoted = result_size(project)
    measured["agents.mcp.result_size"] = Measured(
        subject=[float(wire)],
        baseline=[float(text)],
        note=(
            f"the text as a JSON string alone is {quoted:,} chars ({wire / quoted:.2f}×): "
            "JSON's escapes of the newlines are most of the difference to the raw text"
        ),
    )
    yield measured


AREA = Area("agents", "inside other agents", SPECS, run)
