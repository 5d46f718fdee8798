"""agent (child agents on the scripted and the OpenAI-compatible driver), reason, todo, memory."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest

from codecoder.config.settings import AgentSettings
from codecoder.environments.mock import MockEnvironment
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.decision import Answer
from codecoder.foundation.errors import ExecutionFailed, InvalidArguments
from codecoder.permissions.keys import Permission
from codecoder.session import Runtime
from codecoder.tools.agent import (
    AGENT_TOOLS,
    CHILD_INSTRUCTIONS,
    CHILD_TOOLSET,
    Agent,
    Memory,
    Reason,
    Todo,
    driver_from_settings,
    memory_path,
    state_directory,
)
from codecoder.tools.base import Category, Parameters, Tool, ToolContext, ToolResult
from codecoder.tools.catalogue import builtin_tools
from codecoder.tools.drivers import (
    Message,
    ModelTurn,
    OpenAIChatDriver,
    ScriptedDriver,
    ToolCall,
)
from codecoder.tools.git import GIT_TOOLS
from codecoder.tools.web import WEB_TOOLS
from tests.conftest import write_config
from tests.runtime.tools.loopback import LoopbackServer, Reply, Request

REPO = Path(__file__).resolve().parents[3]

# What a child is offered: its nine read-only tools, sorted by name.
CHILD_TOOLS_HERE = sorted(CHILD_TOOLSET)
DEPTH_LOCK = (
    "agent: a child agent cannot start agents of its own (depth is locked at 1); do this part "
    "of the task yourself with your other tools"
)


def never_ask(request: Any) -> Answer:
    raise AssertionError(f"the runtime asked for {request.key}")


class WriteParameters(Parameters):
    path: str
    content: str


class FakeWriteFile(Tool[WriteParameters]):
    """A write_file that would run unasked if reached: only the toolset keeps a child off it."""

    name = "write_file"
    description = "writes a file"
    category = Category.WRITE
    environment = EnvironmentTag.RUNTIME
    parameters = WriteParameters
    written: ClassVar[list[str]] = []

    def permission(self, args: WriteParameters) -> Permission:
        return Permission.none()

    def execute(self, args: WriteParameters, ctx: ToolContext) -> ToolResult:
        self.written.append(args.path)
        return ToolResult(output="written")


@pytest.fixture
def make_agent_runtime(project: Path, tmp_path: Path) -> Callable[..., Runtime]:
    """Every tool of this issue, the builtin run_command and commit, and a write_file."""

    def make(agent: Agent | None = None) -> Runtime:
        tools = [*WEB_TOOLS, *GIT_TOOLS, agent or Agent(), Reason(), Todo(), Memory()]
        return Runtime(
            project,
            asker=never_ask,
            audit_log=tmp_path / "audit.jsonl",
            environments={EnvironmentTag.SHELL: MockEnvironment(lambda r: None)},
            tools={**builtin_tools(), FakeWriteFile.name: FakeWriteFile()}
            | {t.name: t for t in tools},
        )

    return make


@pytest.fixture(autouse=True)
def isolated_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    for name in ("OPENAI_BASE_URL", "OPENAI_MODEL", "OPENAI_API_KEY", "http_proxy", "HTTP_PROXY"):
        monkeypatch.delenv(name, raising=False)
    FakeWriteFile.written.clear()


def audit_trail(runtime: Runtime) -> list[tuple[str, str, Any]]:
    return [(r["tool"], r["outcome"], r.get("agent")) for r in runtime.audit.read()]


# --- agent on the scripted driver ------------------------------------------------------------


def test_a_child_sees_only_its_read_only_tools_and_cannot_call_others_by_name(
    make_agent_runtime: Callable[..., Runtime],
) -> None:
    driver = ScriptedDriver(
        [
            ModelTurn.calling(
                ToolCall("c1", "reason", {"thought": "look around first"}),
                ToolCall("c2", "write_file", {"path": "src/evil.py", "content": "x"}),
                ToolCall("c3", "run_command", {"command": "rm -rf /"}),
            ),
            ModelTurn.say("Nothing needs changing."),
        ]
    )
    runtime = make_agent_runtime(Agent(driver))

    outcome = runtime.session().call("agent", {"task": "Find where errors are defined."})

    child = outcome.result.data["agent_id"]
    unknown = "unknown tool {!r}; available: " + ", ".join(CHILD_TOOLS_HERE)
    assert outcome.result.output == "Nothing needs changing."
    assert outcome.result.data == {
        "agent_id": child,
        "depth": 1,
        "turns": 2,
        "finished": True,
        "calls": [
            {"tool": "reason", "ok": True, "error": None},
            {
                "tool": "write_file",
                "ok": False,
                "error": "UnknownTool: " + unknown.format("write_file"),
            },
            {
                "tool": "run_command",
                "ok": False,
                "error": "UnknownTool: " + unknown.format("run_command"),
            },
        ],
    }
    first, second = driver.requests
    assert first.messages == (
        Message.system(CHILD_INSTRUCTIONS),
        Message.user("Find where errors are defined."),
    )
    assert first.tool_names == CHILD_TOOLS_HERE
    assert first.tools[CHILD_TOOLS_HERE.index("reason")].parameters == (
        Reason.parameters.model_json_schema()
    )
    assert second.messages[-3:] == (
        Message.tool_result("c1", "Thought recorded."),
        Message.tool_result("c2", "error: UnknownTool: " + unknown.format("write_file")),
        Message.tool_result("c3", "error: UnknownTool: " + unknown.format("run_command")),
    )
    assert FakeWriteFile.written == []
    shell = runtime.environment(EnvironmentTag.SHELL)
    assert isinstance(shell, MockEnvironment) and shell.requests == []
    marked = {"id": child, "depth": 1}
    assert audit_trail(runtime) == [
        ("reason", "ok", marked),
        ("write_file", "invalid", marked),
        ("run_command", "invalid", marked),
        ("agent", "ok", None),
    ]


def test_a_childs_own_agent_call_fails_and_starts_nothing(
    make_agent_runtime: Callable[..., Runtime],
) -> None:
    driver = ScriptedDriver(
        [
            ModelTurn.calling(ToolCall("c1", "agent", {"task": "go one level deeper"})),
            ModelTurn.say("I will do it myself."),
        ]
    )
    runtime = make_agent_runtime(Agent(driver))

    outcome = runtime.session().call("agent", {"task": "research"})

    assert outcome.result.output == "I will do it myself."
    assert outcome.result.data["calls"] == [
        {"tool": "agent", "ok": False, "error": f"ExecutionFailed: {DEPTH_LOCK}"}
    ]
    assert len(driver.requests) == 2  # no turn went to a grandchild
    assert driver.requests[1].messages[-1] == Message.tool_result(
        "c1", f"error: ExecutionFailed: {DEPTH_LOCK}"
    )
    child = {"id": outcome.result.data["agent_id"], "depth": 1}
    assert audit_trail(runtime) == [("agent", "error", child), ("agent", "ok", None)]


def test_a_child_that_does_not_finish_stops_at_max_turns(
    make_agent_runtime: Callable[..., Runtime],
) -> None:
    thinking = ModelTurn.calling(
        ToolCall("c", "reason", {"thought": "hmm"}), content="still thinking"
    )
    driver = ScriptedDriver([thinking] * 5)
    runtime = make_agent_runtime(Agent(driver))

    outcome = runtime.session().call("agent", {"task": "ponder", "max_turns": 2})

    assert outcome.result.is_error is True
    assert outcome.result.output == (
        "the child agent did not finish within 2 turns; its last words: still thinking"
    )
    assert (outcome.result.data["turns"], outcome.result.data["finished"]) == (2, False)
    assert len(driver.requests) == 2


def test_the_project_sets_the_turn_limit(
    make_agent_runtime: Callable[..., Runtime], project: Path
) -> None:
    write_config(project, {"agent": {"max_turns": 1}})
    driver = ScriptedDriver([ModelTurn.calling(ToolCall("c", "reason", {"thought": "a"}))] * 3)
    runtime = make_agent_runtime(Agent(driver))

    outcome = runtime.session().call("agent", {"task": "ponder"})

    assert outcome.result.output == "the child agent did not finish within 1 turns"
    assert runtime.config.agent == AgentSettings(max_turns=1)


def test_arguments_a_model_garbled_are_refused_and_explained_to_it(
    make_agent_runtime: Callable[..., Runtime],
) -> None:
    garbled = ToolCall("c1", "reason", "{thought: x", "the arguments are not JSON: Expecting ...")
    driver = ScriptedDriver([ModelTurn.calling(garbled), ModelTurn.say("ok")])
    runtime = make_agent_runtime(Agent(driver))

    runtime.session().call("agent", {"task": "t"})

    assert driver.requests[1].messages[-1] == Message.tool_result(
        "c1",
        "error: InvalidArguments: invalid arguments for reason: (arguments): must be a JSON "
        "object, got str (the arguments are not JSON: Expecting ...)",
    )


def test_the_child_toolset_is_the_nine_read_only_tools_of_the_spec() -> None:
    read_only = {"read_file", "glob", "grep", "diff", "web_search", "web_fetch", "github_search"}
    assert set(CHILD_TOOLSET) == read_only | {"agent", "reason"}


# --- agent on the OpenAI-compatible driver, against a fake server ----------------------------


class FakeOpenAI:
    """Answers chat completions from a script, like the real protocol does."""

    def __init__(self, *turns: dict[str, Any]) -> None:
        self.turns = list(turns)

    def __call__(self, request: Request) -> Reply:
        message = self.turns.pop(0)
        return Reply.json({"choices": [{"index": 0, "message": message}]})


def calls(*pairs: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": f"call_{i}",
                "type": "function",
                "function": {"name": n, "arguments": json.dumps(a)},
            }
            for i, (n, a) in enumerate(pairs)
        ],
    }


def test_a_child_on_the_openai_driver_configured_by_the_project(
    make_agent_runtime: Callable[..., Runtime], project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = FakeOpenAI(
        calls(("reason", {"thought": "check"}), ("run_command", {"command": "git push"})),
        calls(("agent", {"task": "deeper"}), ("write_file", {"path": "a", "content": "b"})),
        {"role": "assistant", "content": "The answer is 42."},
    )
    monkeypatch.setenv("CHILD_MODEL_KEY", "sk-child")
    with LoopbackServer({"/v1/chat/completions": model}) as server:
        write_config(
            project,
            {
                "agent": {
                    "base_url": server.url("/v1"),
                    "model": "small-model",
                    "api_key_env": "CHILD_MODEL_KEY",
                }
            },
        )
        runtime = make_agent_runtime()
        outcome = runtime.session().call("agent", {"task": "What is the answer?"})

    assert outcome.result.output == "The answer is 42."
    assert [c["tool"] for c in outcome.result.data["calls"]] == [
        "reason",
        "run_command",
        "agent",
        "write_file",
    ]
    first, second, third = (request.json() for request in server.requests)
    assert {r.headers["Authorization"] for r in server.requests} == {"Bearer sk-child"}
    assert first["model"] == "small-model"
    assert [tool["function"]["name"] for tool in first["tools"]] == CHILD_TOOLS_HERE
    assert first["messages"] == [
        {"role": "system", "content": CHILD_INSTRUCTIONS},
        {"role": "user", "content": "What is the answer?"},
    ]
    unknown = "error: UnknownTool: unknown tool {!r}; available: " + ", ".join(CHILD_TOOLS_HERE)
    assert second["messages"][-2:] == [
        {"role": "tool", "content": "Thought recorded.", "tool_call_id": "call_0"},
        {"role": "tool", "content": unknown.format("run_command"), "tool_call_id": "call_1"},
    ]
    assert third["messages"][-2:] == [
        {
            "role": "tool",
            "content": f"error: ExecutionFailed: {DEPTH_LOCK}",
            "tool_call_id": "call_0",
        },
        {"role": "tool", "content": unknown.format("write_file"), "tool_call_id": "call_1"},
    ]
    assert FakeWriteFile.written == []


def test_a_model_server_failure_fails_the_agent_call(
    make_agent_runtime: Callable[..., Runtime],
) -> None:
    failing = Reply.json({"error": {"message": "model overloaded"}}, 503)
    with LoopbackServer({"/v1/chat/completions": failing}) as server:
        driver = OpenAIChatDriver(server.url("/v1"), "m")
        runtime = make_agent_runtime(Agent(lambda settings: driver))
        outcome = runtime.session().call("agent", {"task": "t"})

    assert isinstance(outcome.error, ExecutionFailed)
    assert str(outcome.error) == (
        f"the model server at {server.url('/v1/chat/completions')} answered HTTP 503 "
        "Service Unavailable: model overloaded"
    )


def test_without_a_model_the_agent_says_how_to_configure_one(
    make_agent_runtime: Callable[..., Runtime],
) -> None:
    outcome = make_agent_runtime().session().call("agent", {"task": "t"})

    assert str(outcome.error) == (
        'agent has no model to run: set "agent": {"model": ...} in codecoder.json or '
        "OPENAI_MODEL in the environment"
    )


def test_the_driver_comes_from_the_project_then_the_environment() -> None:
    environ = {"OPENAI_BASE_URL": "http://127.0.0.1:1/v1", "OPENAI_MODEL": "env-model", "K": "k"}

    from_env = driver_from_settings(AgentSettings(api_key_env="K"), environ)
    from_project = driver_from_settings(
        AgentSettings(base_url="http://127.0.0.1:2/v1/", model="project-model", timeout=7), {}
    )

    assert isinstance(from_env, OpenAIChatDriver) and isinstance(from_project, OpenAIChatDriver)
    assert (from_env.endpoint, from_env.model, from_env.timeout) == (
        "http://127.0.0.1:1/v1/chat/completions",
        "env-model",
        120.0,
    )
    assert (from_project.endpoint, from_project.model, from_project.timeout) == (
        "http://127.0.0.1:2/v1/chat/completions",
        "project-model",
        7,
    )


# --- reason and todo -------------------------------------------------------------------------


def test_reason_records_a_thought_and_changes_nothing(
    make_agent_runtime: Callable[..., Runtime], project: Path
) -> None:
    runtime = make_agent_runtime()

    outcome = runtime.session().call("reason", {"thought": "The bug is in the parser."})

    assert outcome.result.to_json() == {
        "output": "Thought recorded.",
        "is_error": False,
        "data": {"thought": "The bug is in the parser."},
    }
    assert list(project.iterdir()) == []


def test_todo_keeps_a_task_list_for_its_session(make_agent_runtime: Callable[..., Runtime]) -> None:
    runtime = make_agent_runtime()
    session, other = runtime.session(), runtime.session()

    outputs = [
        session.call("todo", args).result.output
        for args in [
            {"action": "add", "title": "write the tests"},
            {"action": "add", "title": "make them pass"},
            {"action": "update", "id": 2, "status": "in_progress"},
            {"action": "complete", "id": 1},
            {"action": "update", "id": 2, "title": "make them all pass"},
        ]
    ]

    assert outputs[-1] == ("1. [x] write the tests\n2. [~] make them all pass\n2 tasks, 1 not done")
    assert outputs[0] == "1. [ ] write the tests\n1 tasks, 1 not done"
    assert other.call("todo", {"action": "list"}).result.output == "no tasks"
    assert session.call("todo", {"action": "list"}).result.data == {
        "tasks": [
            {"id": 1, "title": "write the tests", "status": "done"},
            {"id": 2, "title": "make them all pass", "status": "in_progress"},
        ]
    }


def test_todo_explains_what_each_action_needs(make_agent_runtime: Callable[..., Runtime]) -> None:
    session = make_agent_runtime().session()

    no_title = session.call("todo", {"action": "add"})
    extra = session.call("todo", {"action": "list", "id": 3})
    missing = session.call("todo", {"action": "complete", "id": 9})

    assert isinstance(no_title.error, InvalidArguments)
    assert no_title.error.problems == [("(arguments)", "`title` is required to add a task")]
    assert isinstance(extra.error, InvalidArguments)
    assert extra.error.problems == [("(arguments)", "list takes no `id`")]
    assert str(missing.error) == "no task 9: the list is empty"


# --- memory ----------------------------------------------------------------------------------


def test_memory_keeps_notes_in_the_state_directory_not_in_the_project(
    make_agent_runtime: Callable[..., Runtime], project: Path, tmp_path: Path
) -> None:
    session = make_agent_runtime().session()

    results = [
        session.call("memory", args).result.output
        for args in [
            {"action": "write", "key": "build", "content": "make all\nthen make test"},
            {"action": "write", "key": "style", "content": "ruff, 100 columns"},
            {"action": "read", "key": "build"},
            {"action": "list"},
            {"action": "search", "query": "RUFF"},
            {"action": "delete", "key": "style"},
            {"action": "list"},
        ]
    ]

    assert results == [
        "saved 'build'",
        "saved 'style'",
        "make all\nthen make test",
        "build: make all\nstyle: ruff, 100 columns",
        "style: ruff, 100 columns",
        "deleted 'style'",
        "build: make all",
    ]
    path = memory_path(project)
    digest = hashlib.sha256(str(project).encode()).hexdigest()[:16]
    assert path == tmp_path / "state" / "codecoder" / "projects" / digest / "memory.json"
    assert json.loads(path.read_text()) == {
        "project": str(project),
        "notes": {"build": "make all\nthen make test"},
    }
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert list(project.iterdir()) == []


def test_memory_outlives_the_runtime_and_is_per_project(
    make_agent_runtime: Callable[..., Runtime], tmp_path: Path
) -> None:
    make_agent_runtime().session().call("memory", {"action": "write", "key": "k", "content": "v"})
    other_project = tmp_path / "other"
    other_project.mkdir()
    other = Runtime(other_project, asker=never_ask, audit_log=None, tools={"memory": Memory()})

    again = make_agent_runtime().session().call("memory", {"action": "read", "key": "k"})
    elsewhere = other.session().call("memory", {"action": "read", "key": "k"})

    assert again.result.output == "v"
    assert str(elsewhere.error) == "no note 'k'; list shows the keys there are"


def test_a_damaged_memory_file_is_reported_and_never_overwritten(
    make_agent_runtime: Callable[..., Runtime], project: Path
) -> None:
    path = memory_path(project)
    path.parent.mkdir(parents=True)
    path.write_text('{"notes": {"a": ')

    outcome = (
        make_agent_runtime()
        .session()
        .call("memory", {"action": "write", "key": "b", "content": "c"})
    )

    assert str(outcome.error) == (
        f"the memory file {path} is not valid (Expecting value: line 1 column 17 (char 16)); it "
        "is left as it is: fix or remove it"
    )
    assert path.read_text() == '{"notes": {"a": '


def test_notes_written_by_processes_at_once_all_land(project: Path, tmp_path: Path) -> None:
    script = (
        "import sys; from pathlib import Path; from codecoder.session import Runtime; "
        "from codecoder.tools.agent import Memory; "
        "r = Runtime(Path(sys.argv[1]), audit_log=None, tools={'memory': Memory()}); "
        "o = r.session().call('memory', {'action': 'write', 'key': sys.argv[2], 'content': 'x'}); "
        "o.unwrap()"
    )
    environ = {**os.environ, "PYTHONPATH": str(REPO), "CI": "true"}
    writers = [
        subprocess.Popen([sys.executable, "-c", script, str(project), f"note-{i}"], env=environ)
        for i in range(8)
    ]

    assert [writer.wait(timeout=60) for writer in writers] == [0] * 8
    notes = json.loads(memory_path(project).read_text())["notes"]
    assert sorted(notes) == [f"note-{i}" for i in range(8)]


def test_memory_arguments_are_checked_per_action(
    make_agent_runtime: Callable[..., Runtime],
) -> None:
    session = make_agent_runtime().session()

    outcome = session.call("memory", {"action": "write", "key": "k"})
    bad_key = session.call("memory", {"action": "read", "key": "../../etc/passwd"})

    assert outcome.error.problems == [("(arguments)", "`content` is required to write")]
    assert [field for field, _ in bad_key.error.problems] == ["key"]


def test_the_state_directory_follows_xdg_and_ignores_a_relative_value() -> None:
    assert state_directory({"XDG_STATE_HOME": "/var/state"}) == Path("/var/state/codecoder")
    assert state_directory({"XDG_STATE_HOME": "relative"}) == (
        Path.home() / ".local" / "state" / "codecoder"
    )
    assert state_directory({}) == Path.home() / ".local" / "state" / "codecoder"
    assert memory_path(Path("/p"), {"XDG_STATE_HOME": "/s"}) == Path(
        "/s/codecoder/projects/00d74baf14ea415c/memory.json"
    )


# --- the tools themselves --------------------------------------------------------------------


def test_every_agent_tool_needs_no_permission_and_runs_in_the_runtime() -> None:
    examples: dict[str, dict[str, Any]] = {
        "agent": {"task": "t"},
        "reason": {"thought": "t"},
        "todo": {"action": "list"},
        "memory": {"action": "list"},
    }
    assert [
        (
            tool.name,
            tool.permission(tool.parameters.model_validate(examples[tool.name])),
            tool.environment,
            tool.category,
            tool.asks,
        )
        for tool in AGENT_TOOLS
    ] == [
        (name, Permission.none(), EnvironmentTag.RUNTIME, Category.AGENT, False)
        for name in ("agent", "reason", "todo", "memory")
    ]
    for tool in AGENT_TOOLS:
        schema = tool.parameters.model_json_schema()
        assert all(prop.get("description") for prop in schema["properties"].values()), tool.name
