"""Every decision of every front end is audited, with who or what decided (issue 32.4).

On efe0ae4 a hook's verdict without `--sandbox` left no record at all (a `git push` Claude Code
was refused never reached `codecoder log`), and a non-interactive refusal was recorded as
`"answer": "deny"` / DeniedByUser / "answered deny", as if a person had answered."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.decision import Answer, Decider
from codecoder.foundation.errors import Unanswered
from codecoder.permissions.prompt import AskRequest, TerminalPrompt
from tests.conftest import write_config
from tests.runtime.interfaces.test_cli import codecoder
from tests.runtime.interfaces.test_hooks import answer, claude


def log(project: Path) -> list[dict[str, Any]]:
    proc = codecoder("log", "--json", project=project)
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


def who(record: dict[str, Any]) -> tuple[Any, ...]:
    return (record["tool"], record["decision"], record["decided_by"], record["answer"])


def test_a_non_interactive_refusal_is_the_policys_not_an_answer(project: Path) -> None:
    refused = codecoder(
        "call", "run_command", "rm x", "--non-interactive", "--json", project=project
    )
    given = codecoder("call", "run_command", "rm y", "--answer", "deny", project=project)
    assert refused.returncode == given.returncode == 3
    assert json.loads(refused.stdout)["error"]["type"] == "Unanswered"
    records = log(project)
    assert [who(r) for r in records] == [
        ("run_command", "deny", "non-interactive", None),
        ("run_command", "deny", "given-answer", "deny"),
    ]
    text = codecoder("log", project=project).stdout.splitlines()
    assert "nobody could be asked (non-interactive)" in text[0]
    assert "answered deny (given)" in text[1]


def test_a_hooks_verdicts_are_audited_with_who_decided(project: Path) -> None:
    """Claude Code's own shell on the host (`--host-shell`): a deny rule refuses `git push`, a
    path outside the workspace is refused, `touch` is asked and the person's approval at
    Claude Code's prompt is recorded when Claude Code reports that it ran."""
    write_config(project, {"deny": ["run_command:git:push"]})
    push = answer("claude-code", claude("Bash", {"command": "git push"}, call="p"), project)
    passwd = answer("claude-code", claude("Read", {"file_path": "/etc/passwd"}, call="r"), project)
    touch = answer("claude-code", claude("Bash", {"command": "touch t"}, call="t"), project)
    ran = claude("Bash", {"command": "touch t"}, call="t", event="PostToolUse")
    answer("claude-code", ran, project)
    verdicts = [r["hookSpecificOutput"]["permissionDecision"] for r in (push, passwd, touch)]
    assert verdicts == ["deny", "deny", "ask"]
    records = log(project)
    assert [(*who(r), r["outcome"], r["front_end"], r["host_tool"]) for r in records] == [
        ("run_command", "deny", "rule", None, "denied", "hook claude-code", "Bash"),
        ("Read", "deny", "rule", None, "denied", "hook claude-code", "Read"),
        ("run_command", "ask", None, None, "asked", "hook claude-code", "Bash"),
        ("run_command", "allow", "person", "session", "ran", "hook claude-code", "Bash"),
    ]
    assert records[0]["matched"] == "run_command:git:push"
    assert records[0]["session"] == "claude-code:s1"


def test_a_hooks_refusal_for_nobody_to_ask_is_the_policys(project: Path) -> None:
    answer("claude-code", claude("Bash", {"command": "touch t"}), project, "--non-interactive")
    (record,) = log(project)
    assert who(record) == ("run_command", "deny", "non-interactive", None)


def test_a_terminal_question_ended_without_an_answer_is_cancelled_not_denied_by_a_person() -> None:
    request = AskRequest(
        tool="run_command",
        environment=EnvironmentTag.BWRAP,
        key="run_command:touch",
        subject="touch x",
        choices=(Answer.ONCE, Answer.DENY),
    )
    prompt = TerminalPrompt(io.StringIO(""), io.StringIO())
    with pytest.raises(Unanswered) as refused:
        prompt(request)
    assert refused.value.decision is not None
    assert refused.value.decision.decided_by is Decider.CANCELLED
    assert refused.value.decision.answer is None


def test_old_records_without_decided_by_still_read(project: Path) -> None:
    from codecoder.foundation.state import project_state_directory

    path = project_state_directory(project.resolve()) / "audit.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    old = {"ts": 1.0, "tool": "run_command", "key": "run_command:ls", "environment": "@bwrap"}
    with path.open("w") as fh:
        fh.write(json.dumps({**old, "decision": "allow", "source": "once", "answer": "once"}))
        fh.write("\n" + json.dumps({**old, "decision": "deny", "source": "deny"}) + "\n")
    proc = codecoder("log", project=project)
    assert proc.returncode == 0, proc.stderr
    assert "answered once" in proc.stdout.splitlines()[0]
