"""What codecoder refuses, it refuses in every front end (issue 32.6): the hook's verdict on
each agent tool is the verdict `codecoder decide` gives the corresponding codecoder call.

On efe0ae4 Claude Code's `Read(/etc/passwd)` got `ask` from the hook (and Claude then offered
"allow reading from etc/ during this session") though codecoder never reads outside the
workspace: a path codecoder's tools refuse, a glob reaching out, a command run elsewhere are
now denied, with codecoder's reason. Each row is one host call, the codecoder call it
corresponds to, and the verdict both must give; `decide` runs as a real process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from codecoder.interfaces.hooks import HookOptions, handle
from tests.conftest import write_config
from tests.environments.bwrap_support import need_bwrap

# (host, host tool, its input; codecoder tool, its arguments; the verdict)
ROWS: list[tuple[str, str, dict[str, Any], str, dict[str, Any], str]] = [
    (
        "claude-code",
        "Read",
        {"file_path": "@/README.md"},
        "read_file",
        {"path": "README.md"},
        "allow",
    ),
    (
        "claude-code",
        "Read",
        {"file_path": "/etc/passwd"},
        "read_file",
        {"path": "/etc/passwd"},
        "deny",
    ),
    ("claude-code", "Read", {"file_path": "@/../x"}, "read_file", {"path": "../x"}, "deny"),
    (
        "claude-code",
        "Write",
        {"file_path": "@/notes/a.md", "content": "a"},
        "write_file",
        {"path": "notes/a.md", "content": "a"},
        "allow",
    ),
    (
        "claude-code",
        "Write",
        {"file_path": "@/src/x.py", "content": "a"},
        "write_file",
        {"path": "src/x.py", "content": "a"},
        "ask",
    ),
    (
        "claude-code",
        "Write",
        {"file_path": "@/.git/config", "content": ""},
        "write_file",
        {"path": ".git/config", "content": ""},
        "ask",
    ),
    (
        "claude-code",
        "Write",
        {"file_path": "/tmp/elsewhere", "content": "a"},
        "write_file",
        {"path": "/tmp/elsewhere", "content": "a"},
        "deny",
    ),
    (
        "claude-code",
        "Edit",
        {"file_path": "@/README.md", "old_string": "a", "new_string": "b"},
        "edit_file",
        {"path": "README.md", "old_string": "a", "new_string": "b"},
        "ask",
    ),
    (
        "claude-code",
        "Edit",
        {"file_path": "/etc/hosts", "old_string": "a", "new_string": "b"},
        "edit_file",
        {"path": "/etc/hosts", "old_string": "a", "new_string": "b"},
        "deny",
    ),
    ("claude-code", "Glob", {"pattern": "**/*.md"}, "glob", {"pattern": "**/*.md"}, "allow"),
    ("claude-code", "Glob", {"pattern": "/etc/*"}, "glob", {"pattern": "/etc/*"}, "deny"),
    (
        "claude-code",
        "Glob",
        {"pattern": "*", "path": "/etc"},
        "glob",
        {"pattern": "*", "path": "/etc"},
        "deny",
    ),
    (
        "claude-code",
        "Grep",
        {"pattern": "root", "path": "/etc"},
        "grep",
        {"pattern": "root", "path": "/etc"},
        "deny",
    ),
    ("claude-code", "Grep", {"pattern": "hello"}, "grep", {"pattern": "hello"}, "allow"),
    ("claude-code", "LS", {"path": "/etc"}, "list_dir", {"path": "/etc"}, "deny"),
    (
        "claude-code",
        "Bash",
        {"command": "git status"},
        "run_command",
        {"command": "git status"},
        "allow",
    ),
    (
        "claude-code",
        "Bash",
        {"command": "git push origin main"},
        "run_command",
        {"command": "git push origin main"},
        "deny",
    ),
    (
        "claude-code",
        "Bash",
        {"command": "touch made"},
        "run_command",
        {"command": "touch made"},
        "ask",
    ),
    (
        "claude-code",
        "Bash",
        {"command": "ls && git push"},
        "run_command",
        {"command": "ls && git push"},
        "deny",
    ),
    (
        "claude-code",
        "WebSearch",
        {"query": "bubblewrap"},
        "web_search",
        {"query": "bubblewrap"},
        "allow",
    ),
    (
        "claude-code",
        "mcp__codecoder__read_file",
        {"path": "README.md"},
        "read_file",
        {"path": "README.md"},
        "allow",
    ),
    (
        "gemini",
        "read_file",
        {"file_path": "/etc/passwd"},
        "read_file",
        {"path": "/etc/passwd"},
        "deny",
    ),
    (
        "gemini",
        "read_file",
        {"file_path": "README.md"},
        "read_file",
        {"path": "README.md"},
        "allow",
    ),
    (
        "gemini",
        "write_file",
        {"file_path": "notes/b.md", "content": "b"},
        "write_file",
        {"path": "notes/b.md", "content": "b"},
        "allow",
    ),
    (
        "gemini",
        "replace",
        {"file_path": "/etc/hosts", "old_string": "a", "new_string": "b"},
        "edit_file",
        {"path": "/etc/hosts", "old_string": "a", "new_string": "b"},
        "deny",
    ),
    ("gemini", "glob", {"pattern": "../*"}, "glob", {"pattern": "../*"}, "deny"),
    (
        "gemini",
        "grep_search",
        {"pattern": "x", "dir_path": "/root"},
        "grep",
        {"pattern": "x", "path": "/root"},
        "deny",
    ),
    ("gemini", "list_directory", {"dir_path": "."}, "list_dir", {"path": "."}, "allow"),
    (
        "gemini",
        "run_shell_command",
        {"command": "git log"},
        "run_command",
        {"command": "git log"},
        "allow",
    ),
    (
        "gemini",
        "run_shell_command",
        {"command": "git push"},
        "run_command",
        {"command": "git push"},
        "deny",
    ),
    (
        "gemini",
        "run_shell_command",
        {"command": "rm README.md"},
        "run_command",
        {"command": "rm README.md"},
        "ask",
    ),
]

DECIDED = {0: "allow", 3: "deny", 4: "ask", 2: "deny"}  # 2: arguments codecoder refuses


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("agree") / "project"
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / "README.md").write_text("hello\n")
    return root


def decide(project: Path, tool: str, args: dict[str, Any]) -> str:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    done = subprocess.run(
        [sys.executable, "-m", "codecoder", "decide", tool, json.dumps(args), "--json"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode in DECIDED, done.stderr
    return DECIDED[done.returncode]


def hook_verdict(project: Path, host: str, tool: str, tool_input: dict[str, Any]) -> str:
    event = {
        "session_id": "agree",
        "cwd": str(project),
        "hook_event_name": "PreToolUse" if host == "claude-code" else "BeforeTool",
        "tool_name": tool,
        "tool_input": tool_input,
        "tool_use_id": f"{tool}-{len(json.dumps(tool_input))}",
    }
    answer = handle(host, event, HookOptions(project=project))  # type: ignore[arg-type]
    if host == "claude-code":
        return str(answer["hookSpecificOutput"]["permissionDecision"])
    return str(answer["decision"])


@pytest.mark.parametrize(("host", "tool", "tool_input", "call", "args", "verdict"), ROWS)
def test_the_hook_gives_each_agent_tool_the_verdict_decide_gives_its_codecoder_call(
    project: Path,
    host: str,
    tool: str,
    tool_input: dict[str, Any],
    call: str,
    args: dict[str, Any],
    verdict: str,
) -> None:
    need_bwrap()  # the default hook contains the agent's shell in @bwrap, as decide does
    write_config(
        project,
        {
            "allowlist": {"write_file:notes/**": "AlwaysThisProject"},
            "deny": ["run_command:git:push"],
        },
    )
    shown = json.loads(json.dumps(tool_input).replace("@/", f"{project}/"))
    assert (hook_verdict(project, host, tool, shown), decide(project, call, args)) == (
        verdict,
        verdict,
    )


def test_a_refusal_says_codecoders_reason(project: Path) -> None:
    event = {
        "session_id": "agree",
        "cwd": str(project),
        "hook_event_name": "PreToolUse",
        "tool_name": "Read",
        "tool_input": {"file_path": "/etc/passwd"},
        "tool_use_id": "passwd",
    }
    specific = handle("claude-code", event, HookOptions(project=project))["hookSpecificOutput"]
    assert specific == {
        "hookEventName": "PreToolUse",
        "permissionDecision": "deny",
        "permissionDecisionReason": f"codecoder: /etc/passwd is outside the workspace {project}: "
        "codecoder's read_file reaches the workspace only, so it never allows this",
    }


def test_a_read_in_a_read_root_the_project_names_is_allowed_as_codecoder_reads_it(
    tmp_path: Path,
) -> None:
    project = tmp_path / "project"
    docs = tmp_path / "docs"
    project.mkdir()
    docs.mkdir()
    (docs / "guide.md").write_text("read me\n")
    write_config(project, {"read_roots": {"docs": str(docs)}})
    event = {
        "session_id": "roots",
        "cwd": str(project),
        "hook_event_name": "PreToolUse",
        "tool_name": "Read",
        "tool_input": {"file_path": str(docs / "guide.md")},
        "tool_use_id": "guide",
    }
    specific = handle("claude-code", event, HookOptions(project=project))["hookSpecificOutput"]
    assert specific["permissionDecision"] == "allow"
    assert decide(project, "read_file", {"path": "@docs/guide.md"}) == "allow"
