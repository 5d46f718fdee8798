"""`codecoder serve`, driven as real MCP clients drive it: the SDK's client over stdio.

Most tests spawn `python -m runtime serve --project DIR` with `stdio_client` + `ClientSession`
(the initialize handshake, where the server asks with an `elicitation/create` request). The
SDK's `Client` negotiates the 2026-07-28 protocol, where the question travels in an
`input_required` result instead; a few tests drive that era. Tests that need a tool the
built-in registry does not have (a Permission.None tool, a sandboxed Ask tool) serve a
`ToolServer` in-process over the SDK's in-memory transport.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TextIO

import anyio
import mcp.types as types
import pytest
from mcp import Client, ClientSession, StdioServerParameters, stdio_client
from mcp.client.session import ClientRequestContext, ElicitationFnT
from pydantic import Field

from codecoder.environments.mock import MockEnvironment
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.decision import Answer
from codecoder.foundation.state import project_state_directory
from codecoder.interfaces.mcp_server import (
    ToolServer,
    elicitation_message,
    elicitation_schema,
    live_servers,
    permission_required_message,
    pid_directory,
)
from codecoder.interfaces.schemas import input_schema
from codecoder.permissions.keys import Permission, PermissionKey
from codecoder.permissions.prompt import AskRequest, non_interactive
from codecoder.session import Runtime
from codecoder.tools.base import Category, Parameters, Tool, ToolContext, ToolResult
from tests.conftest import echo_handler, write_config

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parents[3]
# Where a test is about a tool on the host (its questions, the session ceiling).
ON_SHELL = {"environments": {"run_command": "@shell"}}
SHELL_REFUSAL = (
    "run_command:echo runs in @shell (host processes, not sandboxed), whose ceiling is "
    "AlwaysThisSession: permanent trust goes only to sandboxed tools"
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Human:
    """Answers elicitations in order ("decline" declines) and keeps every question it saw."""

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)
        self.asked: list[types.ElicitRequestFormParams] = []

    async def __call__(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestFormParams)
        self.asked.append(params)
        answer = self.answers.pop(0)
        if answer == "decline":
            return types.ElicitResult(action="decline")
        return types.ElicitResult(action="accept", content={"decision": answer})


def choices(question: types.ElicitRequestFormParams) -> list[str]:
    field = question.requested_schema["properties"]["decision"]
    if "oneOf" in field:
        return [option["const"] for option in field["oneOf"]]
    return list(field["enum"])


def server_parameters(project: Path) -> StdioServerParameters:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "codecoder", "serve", "--project", str(project)],
        cwd=str(REPO),
        env=env,
    )


@asynccontextmanager
async def connected(
    project: Path, human: ElicitationFnT | None = None, log: TextIO | None = None
) -> AsyncIterator[ClientSession]:
    """A handshake-era client of a freshly spawned `codecoder serve`."""
    errlog = log or open(os.devnull, "w")  # noqa: SIM115
    try:
        async with (
            stdio_client(server_parameters(project), errlog=errlog) as (read, write),
            ClientSession(read, write, elicitation_callback=human) as session,
        ):
            await session.initialize()
            yield session
    finally:
        if log is None:
            errlog.close()


def text_of(result: types.CallToolResult) -> str:
    assert len(result.content) == 1
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


def decision_of(result: types.CallToolResult) -> dict[str, Any]:
    assert result.meta is not None
    decision: dict[str, Any] = result.meta["codecoder/decision"]
    return decision


def audit(project: Path) -> list[dict[str, Any]]:
    path = project_state_directory(project.resolve()) / "audit.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


# --- listing and calling ------------------------------------------------------------------


async def test_the_server_lists_every_tool_of_the_runtime_with_its_schema(project: Path) -> None:
    runtime = Runtime(project, audit_log=None)
    async with connected(project) as session:
        listed = await session.list_tools()
    assert [tool.name for tool in listed.tools] == list(runtime.tools)
    for tool, definition in zip(listed.tools, runtime.definitions(), strict=True):
        assert (tool.name, tool.description, tool.input_schema) == (
            definition.name,
            definition.description,
            input_schema(definition),
        )


async def test_a_none_tool_of_the_registry_runs_without_asking(project: Path) -> None:
    registered = Runtime(project, audit_log=None).tools
    # Permission.None tools with arguments that need nothing from the project.
    name = next((n for n in ("git_status", "list_dir") if n in registered), None)
    if name is None or registered[name].asks:
        pytest.skip("no Permission.None tool in the built-in registry yet")
    human = Human()
    async with connected(project, human) as session:
        result = await session.call_tool(name, {})
    assert human.asked == []
    # Whether the tool itself succeeds here is its own tests' business; it ran without asking.
    assert decision_of(result)["source"] == "none"
    assert audit(project)[0]["source"] == "none"


async def test_an_ask_tool_answered_once_runs_and_asks_again_next_time(project: Path) -> None:
    write_config(project, ON_SHELL)
    human = Human("once", "once")
    async with connected(project, human) as session:
        first = await session.call_tool("run_command", {"command": "echo hi"})
        second = await session.call_tool("run_command", {"command": "echo again"})
    assert (text_of(first), first.is_error) == ("hi\n[exit code 0]", False)
    assert (text_of(second), second.is_error) == ("again\n[exit code 0]", False)
    assert [decision_of(r)["source"] for r in (first, second)] == ["once", "once"]
    assert len(human.asked) == 2
    question = human.asked[0]
    assert question.message == (
        "codecoder: permission required\n"
        "tool: run_command\n"
        "environment: @shell (host processes, not sandboxed)\n"
        "key: run_command:echo\n"
        "runs: echo hi\n"
        f"AlwaysThisProject is not offered: {SHELL_REFUSAL}"
    )
    assert question.requested_schema == {
        "type": "object",
        "properties": {
            "decision": {
                "type": "string",
                "title": "Allow this call?",
                "description": "run_command:echo on @shell",
                "oneOf": [
                    {"const": "once", "title": "Once: this call only; nothing is recorded"},
                    {
                        "const": "session",
                        "title": "AlwaysThisSession: run_command:echo — every simple `echo …` "
                        "command, with any arguments (lasts while this MCP server runs (until "
                        "its client disconnects); kept in the server's memory; `codecoder "
                        "allowlist list` shows it)",
                    },
                    {"const": "deny", "title": "Deny: nothing runs; nothing is recorded"},
                ],
            }
        },
        "required": ["decision"],
    }


async def test_answered_for_the_session_the_next_call_of_that_key_does_not_ask(
    project: Path,
) -> None:
    human = Human("session")
    async with connected(project, human) as session:
        first = await session.call_tool("run_command", {"command": "mkdir -v hi"})
        second = await session.call_tool("run_command", {"command": "mkdir -v bye"})
    assert len(human.asked) == 1
    assert text_of(second) == "mkdir: created directory 'bye'\n[exit code 0]"
    assert [decision_of(r)["reason"] for r in (first, second)] == [
        "allowed for this session",
        "session allowlist",
    ]


async def test_a_declined_question_is_a_denied_tool_error_and_nothing_runs(
    project: Path,
) -> None:
    human = Human("decline")
    async with connected(project, human) as session:
        result = await session.call_tool("run_command", {"command": "touch marker"})
    assert result.is_error
    assert text_of(result) == (
        "permission denied: run_command:touch was not allowed: the MCP client declined the "
        "question (no answer was given)"
    )
    assert decision_of(result)["source"] == "denied"
    assert not (project / "marker").exists()
    assert [(r["key"], r["decision"], r["outcome"]) for r in audit(project)] == [
        ("run_command:touch", "deny", "denied")
    ]


async def test_the_project_answer_is_refused_where_it_was_not_offered(project: Path) -> None:
    write_config(project, ON_SHELL)
    human = Human("project")
    async with connected(project, human) as session:
        result = await session.call_tool("run_command", {"command": "touch marker"})
    assert choices(human.asked[0]) == ["once", "session", "deny"]
    assert result.is_error
    assert decision_of(result)["source"] == "denied"
    assert not (project / "marker").exists()
    assert "allowlist" not in (project / "codecoder.json").read_text()


async def test_accepted_for_the_project_on_docker_the_grant_is_written_and_not_asked_again(
    project: Path,
) -> None:
    write_config(project, {"environments": {"run_command": "@docker"}})
    human = Human("project")
    async with connected(project, human) as session:
        first = await session.call_tool("run_command", {"command": "true"})
        second = await session.call_tool("run_command", {"command": "true"})
    assert choices(human.asked[0]) == [
        "once",
        "session",
        "project",
        "project-any",
        "every-project",
        "deny",
    ]
    assert "AlwaysThisProject is not offered" not in human.asked[0].message
    assert len(human.asked) == 1
    # Whether Docker can run the command here does not matter: the decision was taken first.
    assert [decision_of(r)["source"] for r in (first, second)] == ["project", "project"]
    assert decision_of(second)["matched"] == "run_command:true"
    config = json.loads((project / "codecoder.json").read_text())
    assert config["allowlist"] == {"run_command:true": "AlwaysThisProject"}


async def test_a_client_without_elicitation_gets_an_error_naming_the_key_and_how_to_grant(
    project: Path,
) -> None:
    write_config(project, ON_SHELL)
    async with connected(project) as session:
        result = await session.call_tool("run_command", {"command": "touch marker"})
    assert result.is_error
    assert text_of(result) == (
        "permission denied: permission required: run_command needs approval for "
        "run_command:touch (@shell), and this MCP client cannot ask the human (it declared no "
        "elicitation support). Nothing ran. To allow it: connect with an MCP client that "
        "supports elicitation, so the human can answer; codecoder.json cannot grant it "
        "(run_command:touch runs in @shell (host processes, not sandboxed), whose ceiling is "
        "AlwaysThisSession: permanent trust goes only to sandboxed tools); start the server "
        "with `codecoder serve --allow run_command:touch` for that run; or run the call "
        "yourself in `codecoder session` (it asks in the terminal)."
    )
    assert decision_of(result)["source"] == "denied"
    assert not (project / "marker").exists()


async def test_invalid_arguments_and_unknown_tools_are_tool_errors_not_protocol_errors(
    project: Path,
) -> None:
    human = Human()
    async with connected(project, human) as session:
        invalid = await session.call_tool("run_command", {"cmd": "ls"})
        unknown = await session.call_tool("no_such_tool", {})
        still_serving = await session.list_tools()
    assert invalid.is_error and unknown.is_error
    assert text_of(invalid) == (
        "invalid call: invalid arguments for run_command: command: Field required; "
        "cmd: Extra inputs are not permitted"
    )
    available = ", ".join(sorted(Runtime(project, audit_log=None).tools))
    assert text_of(unknown) == f"invalid call: unknown tool 'no_such_tool'; available: {available}"
    assert human.asked == []
    assert still_serving.tools


async def test_a_failing_command_is_a_tool_error_with_its_output(project: Path) -> None:
    async with connected(project, Human("once")) as session:
        result = await session.call_tool("run_command", {"command": "ls no-such-file"})
    assert result.is_error
    assert "[exit code 2]" in text_of(result)
    # The command ran: its exit code is in `_meta` too, for a program; never structured
    # content, which clients show the model in place of the text (and so of the output).
    assert result.structured_content is None
    assert result.meta is not None
    meta = result.meta["codecoder/result"]
    assert meta == {"exit_code": 2, "truncated": False, "killed_by": None}


async def test_a_long_command_sends_its_latest_lines_as_progress_to_a_client_that_asked(
    project: Path,
) -> None:
    reports: list[tuple[float, float | None, str | None]] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        reports.append((done, total, message))

    command = "for i in 1 2 3 4 5 6; do echo line $i; sleep 0.4; done"
    async with connected(project, Human("once")) as session:
        result = await session.call_tool(
            "run_command", {"command": command}, progress_callback=progress
        )
    assert text_of(result) == "".join(f"line {i}\n" for i in range(1, 7)) + "[exit code 0]"
    # From its first second on, at most twice a second: the time so far and the latest lines.
    # (How many depends on how long the run took on a loaded machine; the spacing does not.)
    assert len(reports) >= 2
    done = [report[0] for report in reports]
    assert done == sorted(set(done)) and done[0] >= 1.0
    # Times are shown to a tenth of a second, so half a second apart reads as 0.4 at worst.
    assert all(later - earlier >= 0.4 for earlier, later in itertools.pairwise(done))
    # Each says the time so far and the latest lines, in order, until the last line printed.
    seen: list[list[str]] = []
    for done_so_far, total, message in reports:
        assert total is None and message is not None
        head, *lines = message.split("\n")
        if head == f"run_command: {done_so_far:.1f} s, no output yet":
            assert not lines and not seen  # only before the first line
            continue
        assert head == f"run_command: {done_so_far:.1f} s, latest output:"
        last = int(lines[-1].removeprefix("line "))
        assert lines == [f"line {i}" for i in range(last - len(lines) + 1, last + 1)]
        seen.append(lines)
    assert seen, "no report showed output"
    lasts = [lines[-1] for lines in seen]
    assert lasts == sorted(lasts)


async def test_a_command_killed_at_its_deadline_reports_the_output_it_printed_before(
    project: Path,
) -> None:
    command = "echo started; echo halfway >&2; sleep 30"
    async with connected(project, Human("once")) as session:
        result = await session.call_tool("run_command", {"command": command, "timeout": 1})
    assert result.is_error
    assert text_of(result) == (
        "tool error: command killed after 1s (its whole process group)\n"
        "output so far:\nstarted\nhalfway\n"
    )
    record = audit(project)[-1]
    assert (record["outcome"], record["output"]) == ("error", "started\nhalfway\n")


async def test_a_question_the_client_fails_to_answer_is_a_denial(project: Path) -> None:
    async def broken(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ErrorData:
        return types.ErrorData(code=types.INTERNAL_ERROR, message="the form crashed")

    async with connected(project, broken) as session:
        result = await session.call_tool("run_command", {"command": "touch marker"})
    assert result.is_error
    assert text_of(result) == (
        "permission denied: run_command:touch was not allowed: asking through the MCP client "
        "failed (MCPError: the form crashed)"
    )
    assert not (project / "marker").exists()


async def test_the_server_keeps_serving_while_a_question_waits_for_the_human(
    project: Path,
) -> None:
    listed_meanwhile: list[int] = []

    class SlowHuman(Human):
        async def __call__(
            self, context: ClientRequestContext, params: types.ElicitRequestParams
        ) -> types.ElicitResult:
            # The call's worker thread is blocked on this question; the event loop is not.
            with anyio.fail_after(10):
                listed_meanwhile.append(len((await context.session.list_tools()).tools))
            return await super().__call__(context, params)

    async with connected(project, SlowHuman("once")) as session:
        result = await session.call_tool("run_command", {"command": "mkdir -v hi"})
    assert text_of(result) == "mkdir: created directory 'hi'\n[exit code 0]"
    assert listed_meanwhile and listed_meanwhile[0] >= 2


# --- reload -------------------------------------------------------------------------------


def wait_for(path: Path, text: str, timeout: float = 20) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        content = path.read_text()
        if text in content:
            return content
        time.sleep(0.05)
    raise AssertionError(f"{text!r} never appeared in {path}:\n{path.read_text()}")


def codecoder(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    return subprocess.run(
        [sys.executable, "-m", "codecoder", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


async def test_an_edit_applies_only_after_codecoder_reload_and_then_the_deny_rule_refuses(
    project: Path, tmp_path: Path
) -> None:
    log_path = tmp_path / "serve.log"
    human = Human("session")
    with log_path.open("w") as log:
        async with connected(project, human, log) as session:
            first = await session.call_tool("run_command", {"command": "mkdir -v one"})
            write_config(project, {"deny": ["run_command:mkdir"]})
            not_yet = await session.call_tool("run_command", {"command": "mkdir -v two"})
            reload = codecoder("reload", "--project", str(project))
            wait_for(log_path, "codecoder serve: reloaded")
            refused = await session.call_tool("run_command", {"command": "mkdir -v three"})
    assert [text_of(r) for r in (first, not_yet)] == [
        "mkdir: created directory 'one'\n[exit code 0]",
        "mkdir: created directory 'two'\n[exit code 0]",
    ]
    assert not (project / "three").exists()
    assert reload.returncode == 0, reload.stderr
    (reloaded,) = [line for line in reload.stdout.splitlines() if line.startswith("reloaded")]
    assert reloaded.startswith(f"reloaded 1 server(s) of {project}: ")
    assert refused.is_error
    assert decision_of(refused)["source"] == "deny"
    assert text_of(refused) == (
        "permission denied: run_command:mkdir is refused by deny rule 'run_command:mkdir' of "
        "codecoder.json line 3"
    )
    assert len(human.asked) == 1


async def test_sighup_with_a_broken_file_logs_where_and_keeps_the_last_good_rules(
    project: Path, tmp_path: Path
) -> None:
    write_config(project, {"deny": ["run_command:echo"]})
    log_path = tmp_path / "serve.log"
    human = Human("once")
    with log_path.open("w") as log:
        async with connected(project, human, log) as session:
            (pid,) = live_servers(project)
            write_config(project, '{\n  "deny": ["run_command:echo",]\n}\n')
            os.kill(pid, signal.SIGHUP)
            content = wait_for(log_path, "codecoder serve: reloaded")
            result = await session.call_tool("run_command", {"command": "echo hi"})
    file = project / "codecoder.json"
    assert f"codecoder serve: {file}:2:31: error: [syntax]" in content
    assert f"codecoder serve: {file}:2:31: error: [kept_last_good]" in content
    assert (
        f"codecoder serve: reloaded {file}: errors found, the last good rules stay in effect"
        in content
    )
    # The deny rule of the last good file still refuses, without a question.
    assert result.is_error and decision_of(result)["source"] == "deny"
    assert "deny rule 'run_command:echo'" in text_of(result)
    assert human.asked == []


async def test_a_server_started_on_a_broken_file_refuses_what_needs_permission(
    project: Path, tmp_path: Path
) -> None:
    write_config(project, '{"deny": "run_command:echo"}\n')
    (project / "notes.txt").write_text("readable\n")
    human = Human("once")
    async with connected(project, human) as session:
        refused = await session.call_tool("run_command", {"command": "echo hi"})
        read = await session.call_tool("read_file", {"path": "notes.txt"})
    file = project / "codecoder.json"
    assert refused.is_error and decision_of(refused)["source"] == "deny"
    assert f"{file}:1:10: error: [schema]" in text_of(refused)
    assert "nothing that needs permission runs" in text_of(refused)
    assert human.asked == []
    assert not read.is_error and "readable" in text_of(read)


async def test_the_pid_file_lives_as_long_as_the_server(project: Path) -> None:
    async with connected(project) as session:
        await session.list_tools()
        (pid,) = live_servers(project)
        assert (pid_directory(project) / f"serve-{pid}.pid").exists()
        assert (pid_directory(project) / ".gitignore").read_text() == "*\n"
    deadline = time.monotonic() + 10
    while live_servers(project) and time.monotonic() < deadline:
        await anyio.sleep(0.05)
    assert live_servers(project) == []
    assert list(pid_directory(project).glob("serve-*.pid")) == []


def test_sigterm_removes_the_pid_file_and_the_server_dies_of_it(project: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    server = subprocess.Popen(
        [sys.executable, "-m", "codecoder", "serve", "--project", str(project)],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        deadline = time.monotonic() + 20
        while live_servers(project) != [server.pid] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert live_servers(project) == [server.pid]
        server.terminate()
        assert server.wait(timeout=10) == -signal.SIGTERM
    finally:
        server.kill()
        server.wait()
    assert list(pid_directory(project).glob("serve-*.pid")) == []


def test_stale_pid_files_are_ignored_and_removed(project: Path) -> None:
    directory = pid_directory(project)
    directory.mkdir(parents=True)
    gone = directory / "serve-999999999.pid"
    gone.write_text(json.dumps({"pid": 999_999_999, "started": "1"}))
    reused = directory / f"serve-{os.getpid()}.pid"
    reused.write_text(json.dumps({"pid": os.getpid(), "started": "not-this-process"}))
    garbage = directory / "serve-x.pid"
    garbage.write_text("{")
    assert live_servers(project) == []
    assert list(directory.iterdir()) == []


def test_reload_without_a_running_server_prints_the_diagnostics_of_the_file(
    project: Path,
) -> None:
    write_config(project, {**ON_SHELL, "allowlist": {"run_command:git": "AlwaysThisProject"}})
    proc = codecoder("reload", "--project", str(project))
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(f"{project / 'codecoder.json'}:6:5: error: [ceiling_violation]")
    assert lines[1:] == [
        f"no running server of {project} to reload",
        f"{project / 'codecoder.json'}: errors found",
    ]
    as_json = json.loads(codecoder("reload", "--project", str(project), "--json").stdout)
    assert (as_json["ok"], as_json["signalled"]) == (False, [])
    assert [d["code"] for d in as_json["diagnostics"]] == ["ceiling_violation"]


# --- the 2026-07-28 protocol: questions travel in input_required ---------------------------


async def test_a_2026_client_is_asked_through_input_required(project: Path) -> None:
    write_config(project, ON_SHELL)
    human = Human("once", "session")
    async with Client(server_parameters(project), elicitation_callback=human) as client:
        assert client.protocol_version == "2026-07-28"
        results = [
            await client.call_tool("run_command", {"command": f"echo {word}"})
            for word in ("one", "two", "three")
        ]
    assert [text_of(r) for r in results] == [f"{w}\n[exit code 0]" for w in ("one", "two", "three")]
    assert [decision_of(r)["source"] for r in results] == ["once", "session", "session"]
    assert len(human.asked) == 2
    assert choices(human.asked[0]) == ["once", "session", "deny"]
    # One call, one audit record: the round that only asked left none.
    assert [r["source"] for r in audit(project)] == ["once", "session", "session"]


async def test_a_2026_answer_cannot_be_replayed(project: Path) -> None:
    # The client declares elicitation but answers by hand, as a client keeping its own state.
    async with Client(server_parameters(project), elicitation_callback=Human()) as client:
        arguments = {"command": "mkdir -v hi"}
        asked = await client.session.call_tool("run_command", arguments, allow_input_required=True)
        assert isinstance(asked, types.InputRequiredResult)
        assert asked.input_requests is not None and asked.request_state is not None
        once = {"permission": types.ElicitResult(action="accept", content={"decision": "once"})}
        runs = await client.session.call_tool(
            "run_command",
            arguments,
            input_responses=dict(once),
            request_state=asked.request_state,
            allow_input_required=True,
        )
        replayed = await client.session.call_tool(
            "run_command",
            arguments,
            input_responses=dict(once),
            request_state=asked.request_state,
            allow_input_required=True,
        )
    assert isinstance(runs, types.CallToolResult)
    assert text_of(runs) == "mkdir: created directory 'hi'\n[exit code 0]"
    assert isinstance(replayed, types.InputRequiredResult)


async def test_a_2026_client_without_elicitation_gets_the_permission_required_error(
    project: Path,
) -> None:
    async with Client(server_parameters(project)) as client:
        result = await client.call_tool("run_command", {"command": "touch hi"})
    assert result.is_error
    assert text_of(result).startswith(
        "permission denied: permission required: run_command needs approval for run_command:touch"
    )
    assert not (project / "hi").exists()


# --- in process: tools the built-in registry does not have --------------------------------


class NoteParameters(Parameters):
    text: str = Field(description="What to note.")


class Note(Tool[NoteParameters]):
    """An Ask tool in a sandboxed environment: AlwaysThisProject is within its ceiling."""

    name = "note"
    description = "Note something."
    category = Category.AGENT
    environment = EnvironmentTag.RUNTIME
    parameters = NoteParameters

    def permission(self, args: NoteParameters) -> Permission:
        return Permission.ask(PermissionKey.named(self.name, subject=args.text))

    def execute(self, args: NoteParameters, ctx: ToolContext) -> ToolResult:
        return ToolResult(output=f"noted: {args.text}")


class Reason(Tool[NoteParameters]):
    """A Permission.None tool."""

    name = "reason"
    description = "Think aloud."
    category = Category.AGENT
    environment = EnvironmentTag.RUNTIME
    parameters = NoteParameters
    asks = False

    def permission(self, args: NoteParameters) -> Permission:
        return Permission.none()

    def execute(self, args: NoteParameters, ctx: ToolContext) -> ToolResult:
        return ToolResult(output=f"thought: {args.text}")


@asynccontextmanager
async def in_process(project: Path, human: Human | None) -> AsyncIterator[Client]:
    runtime = Runtime(project, asker=non_interactive, tools={"note": Note(), "reason": Reason()})
    tool_server = ToolServer(runtime, log=open(os.devnull, "w"))  # noqa: SIM115
    try:
        async with Client(tool_server.server, mode="legacy", elicitation_callback=human) as client:
            yield client
    finally:
        tool_server.close()


async def test_a_none_tool_runs_without_asking(project: Path) -> None:
    human = Human()
    async with in_process(project, human) as client:
        result = await client.call_tool("reason", {"text": "hmm"})
    assert (text_of(result), result.is_error, human.asked) == ("thought: hmm", False, [])
    assert decision_of(result) == {
        "decision": "allow",
        "source": "none",
        "key": None,
        "tool": "reason",
        "environment": "@runtime",
        "matched": None,
        "answer": None,
        "reason": "needs no permission",
        "violations": [],
        "decided_by": "rule",
    }


async def test_accepted_for_the_project_a_sandboxed_tool_is_granted_in_codecoder_json(
    project: Path,
) -> None:
    human = Human("project")
    async with in_process(project, human) as client:
        first = await client.call_tool("note", {"text": "a"})
        second = await client.call_tool("note", {"text": "b"})
    assert choices(human.asked[0]) == ["once", "session", "project", "deny"]
    assert len(human.asked) == 1
    assert [text_of(r) for r in (first, second)] == ["noted: a", "noted: b"]
    assert [decision_of(r)["source"] for r in (first, second)] == ["project", "project"]
    assert json.loads((project / "codecoder.json").read_text()) == {
        "allowlist": {"note": "AlwaysThisProject"}
    }


# --- what the human is shown ---------------------------------------------------------------


def shell_request(subject: str) -> AskRequest:
    return AskRequest(
        tool="run_command",
        environment=EnvironmentTag.SHELL,
        key="run_command:echo",
        subject=subject,
        choices=(Answer.ONCE, Answer.SESSION, Answer.DENY),
        why_not_project=SHELL_REFUSAL,
    )


def test_escape_sequences_in_the_question_are_made_visible() -> None:
    message = elicitation_message(shell_request("echo ok\x1b[2K\rrm -rf ~"))
    assert "\x1b" not in message and "\r" not in message
    assert "runs: echo ok\\e[2K\\rrm -rf ~" in message.splitlines()


def test_clients_before_2025_11_25_get_the_choices_as_enum_with_names() -> None:
    schema = elicitation_schema(shell_request("echo hi"), "2025-06-18")
    assert schema["properties"]["decision"]["enum"] == ["once", "session", "deny"]
    assert schema["properties"]["decision"]["enumNames"] == [
        "Once: this call only; nothing is recorded",
        "AlwaysThisSession: run_command:echo — exactly this key (lasts until this session ends; "
        "kept in memory only (nothing is written))",
        "Deny: nothing runs; nothing is recorded",
    ]


def test_the_permission_required_message_offers_codecoder_json_where_the_ceiling_allows() -> None:
    request = AskRequest(
        tool="note",
        environment=EnvironmentTag.RUNTIME,
        key="note",
        subject="a",
        choices=(Answer.ONCE, Answer.SESSION, Answer.PROJECT, Answer.DENY),
    )
    assert (
        'add "note": "AlwaysThisProject" to the allowlist of codecoder.json, then apply it '
        "with `codecoder reload`" in permission_required_message(request)
    )


# --- contained commands (@bwrap) ------------------------------------------------------------------


@asynccontextmanager
async def contained(
    project: Path, human: Human
) -> AsyncIterator[tuple[Client, dict[EnvironmentTag, MockEnvironment]]]:
    """The real tool catalogue, run_command bound to @bwrap; environments are recorders."""
    environments = {
        tag: MockEnvironment(echo_handler, tag)
        for tag in (EnvironmentTag.BWRAP, EnvironmentTag.SHELL)
    }
    runtime = Runtime(
        project,
        asker=non_interactive,
        environments=dict(environments),
        bindings={"run_command": EnvironmentTag.BWRAP},
    )
    tool_server = ToolServer(runtime, log=open(os.devnull, "w"))  # noqa: SIM115
    try:
        async with Client(tool_server.server, mode="legacy", elicitation_callback=human) as client:
            yield client, environments
    finally:
        tool_server.close()


async def test_a_read_only_command_runs_with_no_question_and_meta_says_read_only(
    project: Path,
) -> None:
    human = Human()
    async with contained(project, human) as (client, environments):
        result = await client.call_tool("run_command", {"command": "cat README.md | head -5"})
    assert human.asked == []
    decision = decision_of(result)
    assert (decision["source"], decision["environment"]) == ("read-only", "@bwrap")
    (request,) = environments[EnvironmentTag.BWRAP].requests
    assert request.writable is False


async def test_a_contained_command_is_offered_any_command_in_the_sandbox(
    project: Path,
) -> None:
    human = Human("project-any")
    async with contained(project, human) as (client, _):
        first = await client.call_tool("run_command", {"command": "npm test"})
        second = await client.call_tool("run_command", {"command": "cargo clippy"})
    (question,) = human.asked
    assert choices(question) == [
        "once",
        "session",
        "session-program",
        "project",
        "project-program",
        "project-any",
        "every-project",
        "deny",
    ]
    titles = {
        o["const"]: o["title"] for o in question.requested_schema["properties"]["decision"]["oneOf"]
    }
    assert titles["project-any"] == (
        "AlwaysThisProject: run_command:** — any command in @bwrap, compound lines included "
        "(never one that needs the host, nor one touching a protected path; deny rules still "
        f"refuse) (lasts until revoked; written to {project / 'codecoder.json'})"
    )
    assert [decision_of(r)["matched"] for r in (first, second)] == ["run_command:**"] * 2


async def test_git_push_offers_the_host_as_an_explicit_choice_and_runs_there_once(
    project: Path,
) -> None:
    human = Human("host-once")
    async with contained(project, human) as (client, environments):
        result = await client.call_tool("run_command", {"command": "git push"})
    (question,) = human.asked
    assert choices(question) == [
        "once",
        "session",
        "project",
        "host-once",
        "host-session",
        "host-session-program",
        "deny",
    ]
    titles = {
        o["const"]: o["title"] for o in question.requested_schema["properties"]["decision"]["oneOf"]
    }
    assert titles["host-once"] == (
        "Once on the host: this call only, run on the host, unconfined (@shell), as "
        "run_command:git:push; nothing is recorded"
    )
    assert "would likely fail" in question.message
    decision = decision_of(result)
    assert (decision["environment"], decision["escalated_from"], decision["answer"]) == (
        "@shell",
        "@bwrap",
        "host-once",
    )
    assert environments[EnvironmentTag.BWRAP].requests == []
    assert len(environments[EnvironmentTag.SHELL].requests) == 1
