"""What an MCP client shows its human: the question's text and choices through elicitation,
from a real `codecoder serve` over stdio: each choice says what it records, covers, how long
and where; a write shows its diff; nothing reads as an escaped newline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import write_config
from tests.runtime.interfaces.test_mcp_server import Human, connected, decision_of

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def titles(human: Human, index: int = 0) -> dict[str, str]:
    field = human.asked[index].requested_schema["properties"]["decision"]
    return {choice["const"]: choice["title"] for choice in field["oneOf"]}


async def test_a_write_question_shows_the_diff_and_where_a_project_grant_is_written(
    project: Path,
) -> None:
    (project / "app.py").write_text("x = 1\ny = 2\n")
    human = Human("project")
    async with connected(project, human) as session:
        result = await session.call_tool("write_file", {"path": "app.py", "content": "x = 1\n"})
    assert decision_of(result)["source"] == "project"
    message = human.asked[0].message
    assert message.splitlines()[4:] == [
        "path: app.py",
        "changes:",
        "  │ replaces app.py: 12 bytes, 2 lines → 6 bytes, 1 line",
        "  │ --- app.py (now)",
        "  │ +++ app.py (after)",
        "  │ @@ -1,2 +1 @@",
        "  │  x = 1",
        "  │ -y = 2",
    ]
    assert titles(human)["project"] == (
        "AlwaysThisProject: write_file:app.py — only app.py (lasts until revoked; written to "
        f"{project / 'codecoder.json'})"
    )
    assert json.loads((project / "codecoder.json").read_text())["allowlist"] == {
        "write_file:app.py": "AlwaysThisProject"
    }


async def test_a_multi_line_command_reads_as_lines_not_escaped_newlines(project: Path) -> None:
    human = Human("deny")
    async with connected(project, human) as session:
        await session.call_tool("run_command", {"command": "echo one\necho two"})
    message = human.asked[0].message
    assert "\\n" not in message
    assert message.splitlines()[3:7] == [
        'key: run_command:"…" (this whole command, exactly as shown below)',
        "runs:",
        "  │ echo one",
        "  │ echo two",
    ]
    assert "\\n" not in json.dumps(titles(human)).replace("\\\\n", "")


async def test_with_a_session_ttl_the_session_choice_says_it_ends_at_the_latest_then(
    project: Path,
) -> None:
    write_config(project, {"session_ttl": 600})
    human = Human("deny")
    async with connected(project, human) as session:
        await session.call_tool("run_command", {"command": "true"})
    session_title = titles(human)["session"]
    assert session_title.startswith(
        "AlwaysThisSession: run_command:true — every simple `true …` command, with any "
        "arguments (lasts while this MCP server runs (until its client disconnects), and at "
        "most until "
    )
    assert "(session_ttl 600 s)" in session_title


async def test_the_client_may_answer_in_codecoder_json_s_names(project: Path) -> None:
    human = Human("AlwaysThisSession", "once")
    async with connected(project, human) as session:
        first = await session.call_tool("run_command", {"command": "echo one"})
        second = await session.call_tool("run_command", {"command": "echo two"})
    assert [decision_of(r)["source"] for r in (first, second)] == ["session", "session"]
    assert len(human.asked) == 1
