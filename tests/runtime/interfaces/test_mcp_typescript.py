"""`codecoder serve` driven by the MCP TypeScript SDK from npm (tests/mcp_client/drive.mjs).

A client the server was not built with: annotations and output schemas as it reads them,
`listChanged`, cancellation through an AbortSignal, None-level calls alongside a running call
and a pending question, and the size of a result. CI installs the SDK (`npm ci` in
tests/mcp_client); elsewhere these tests skip without node or the installed SDK.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from codecoder.foundation.state import project_state_directory
from codecoder.session import Runtime

REPO = Path(__file__).resolve().parents[3]
CLIENT = REPO / "tests" / "mcp_client"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _ready() -> str | None:
    if shutil.which("node") is None:
        return "node is not installed"
    if not (CLIENT / "node_modules" / "@modelcontextprotocol" / "sdk").is_dir():
        return "the MCP TypeScript SDK is not installed (npm ci in tests/mcp_client)"
    return None


if _ready() is not None:
    if IN_CI:
        raise RuntimeError(f"CI must run the TypeScript client tests: {_ready()}")
    pytestmark = pytest.mark.skip(reason=_ready() or "")


def drive(scenario: str, project: Path, *extra: str) -> dict[str, Any]:
    proc = subprocess.run(
        ["node", str(CLIENT / "drive.mjs"), scenario, str(project), sys.executable, *extra],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def audit(project: Path) -> list[dict[str, Any]]:
    path = project_state_directory(project.resolve()) / "audit.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_every_tool_has_a_title_and_annotations_derived_from_the_tool_model(
    project: Path,
) -> None:
    seen = drive("list", project)
    assert seen["capabilities"]["tools"] == {"listChanged": True}
    tools = {tool["name"]: tool for tool in seen["tools"]}
    assert set(tools) == set(Runtime(project, audit_log=None).tools)
    assert tools["read_file"]["annotations"] == {
        "title": "Read file (@landlock)",
        "readOnlyHint": True,
        "destructiveHint": False,
        "idempotentHint": True,
        "openWorldHint": False,
    }
    assert tools["run_command"]["annotations"] == {
        "title": "Run command (@bwrap)",  # contained: no network
        "readOnlyHint": False,
        "destructiveHint": True,
        "idempotentHint": False,
        "openWorldHint": False,
    }
    assert tools["run_container"]["annotations"]["openWorldHint"] is False  # no network
    assert tools["web_fetch"]["annotations"]["openWorldHint"] is True
    for tool in tools.values():
        annotations = tool["annotations"]
        assert annotations["readOnlyHint"] is not annotations["destructiveHint"]
        assert tool["title"] == annotations["title"]
    # No output schema: it would oblige structuredContent, which Codex shows the model in
    # place of the text (tests/integrations/test_codex.py).
    assert not [n for n, t in tools.items() if "outputSchema" in t]


def test_a_result_carries_its_text_once_and_the_exit_code_and_truncation_only_in_meta(
    project: Path,
) -> None:
    seen = drive("size", project)
    result = seen["result"]
    text = result["content"][0]["text"]
    assert text.startswith("1\n2\n3\n") and text.endswith("20000\n[exit code 0]")
    assert "[... " in text  # capped: head and tail kept, the cut marked
    assert "structuredContent" not in result
    assert result["_meta"]["codecoder/result"] == {
        "exit_code": 0,
        "truncated": True,
        "killed_by": None,
    }
    assert result["_meta"]["codecoder/decision"]["source"] == "once"
    # Besides the text itself (as JSON escapes it), the result adds under 2 KiB.
    assert seen["result_chars"] - len(json.dumps(text)) < 2048


def test_a_cancelled_call_is_stopped_and_audited_and_the_next_call_runs_at_once(
    project: Path,
) -> None:
    seen = drive("cancel", project)
    assert "the user pressed Esc" in seen["error"]
    assert seen["after"] == "after\n[exit code 0]"
    assert seen["after_ms"] < 5000  # not behind a `sleep 31` that kept running
    records = audit(project)
    assert [(r["key"], r["outcome"]) for r in records] == [
        ("run_command:sleep", "cancelled"),
        ("run_command:echo", "ok"),
    ]
    assert "whole process group was killed" in records[0]["error"]
    assert records[0]["duration_ms"] < 10_000
    sleeping = subprocess.run(["pgrep", "-f", "^sleep 31$"], capture_output=True, text=True)
    assert sleeping.stdout == ""


def test_a_cancelled_wasm_module_is_stopped_at_once_not_at_its_timeout(project: Path) -> None:
    # Each turn yields to the kernel: slow on the wall clock for its fuel, so that the module is
    # still running when the client cancels (a bare loop uses its 2e9 units up in a second).
    (project / "spin.wat").write_text(
        '(module (import "wasi_snapshot_preview1" "sched_yield" (func $yield (result i32)))'
        ' (memory (export "memory") 1)'
        ' (func (export "_start") (loop $l (drop (call $yield)) (br $l))))'
    )
    target = {"name": "run_wasm", "arguments": {"path": "spin.wat", "timeout": 60}}
    seen = drive("cancel", project, json.dumps(target))
    assert "the user pressed Esc" in seen["error"]
    assert seen["after"] == "after\n[exit code 0]"
    assert seen["after_ms"] < 5000
    records = audit(project)
    assert [(r["key"], r["outcome"]) for r in records] == [
        ("run_wasm:spin.wat", "cancelled"),
        ("run_command:echo", "ok"),
    ]
    assert "the module was stopped" in records[0]["error"]
    assert records[0]["duration_ms"] < 5_000  # 1.5 s in, stopped: not at its 60 s timeout


def test_none_level_calls_run_beside_a_pending_question_and_a_running_call(
    project: Path,
) -> None:
    started = time.monotonic()
    seen = drive("concurrent", project)
    assert seen["listed_is_error"] is False
    assert seen["none_during_question_ms"] < 3000  # the question is still unanswered
    assert seen["none_during_call_ms"] < 3000  # `sleep 5` is still running
    assert seen["slow"] == "[exit code 0]"
    assert time.monotonic() - started < 60
    outcomes = [(r["tool"], r["outcome"]) for r in audit(project)]
    assert outcomes == [
        ("list_dir", "ok"),
        ("list_dir", "ok"),
        ("run_command", "ok"),
    ]


def test_creating_a_capability_sends_list_changed_and_lists_the_new_tool(project: Path) -> None:
    wat = '(module (memory (export "memory") 1) (func (export "_start")))'
    arguments = {
        "manifest": {
            "name": "hello",
            "description": "Say hello.",
            "environment": "@wasm",
            "parameters": {"type": "object", "properties": {}},
            "entry": "hello.wat",
        },
        "files": [{"path": "hello.wat", "content": wat}],
    }
    seen = drive("changed", project, json.dumps(arguments))
    assert seen["added"] == ["hello"]
    assert seen["list_changed"] == 1
