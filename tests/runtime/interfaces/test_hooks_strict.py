"""Hooks judge as strictly as calls: a host's call meets every rule the same call would meet
inside codecoder (the web policy and address refusals, protected paths, the agents' own
settings, deny rules), and a tool name that could be another server's is not codecoder's.

Each class is attacked in several spellings, through `handle` (what `codecoder hook` runs) with
the hosts' documented events; a few go through the real command as well.
"""

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

REPO = Path(__file__).resolve().parents[3]


def event(host: str, tool: str, tool_input: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "session_id": "s1",
        "cwd": "/",
        "hook_event_name": "PreToolUse" if host == "claude-code" else "BeforeTool",
        "tool_name": tool,
        "tool_input": tool_input,
        "tool_use_id": "t1",
        **extra,
    }


def verdict(
    host: str, project: Path, tool: str, tool_input: dict[str, Any], *allow: str, **extra: Any
) -> tuple[str, str]:
    options = HookOptions(project=project, allow=allow, interactive=False)
    answer = handle(host, event(host, tool, tool_input, **extra), options)  # type: ignore[arg-type]
    if host == "claude-code":
        specific = answer["hookSpecificOutput"]
        return specific["permissionDecision"], specific["permissionDecisionReason"]
    return answer["decision"], answer["reason"]


# --- fetches: the web policy and the address refusals -----------------------------------------

REFUSED_URLS = [
    "http://169.254.169.254/latest/meta-data/",
    "http://127.0.0.1:8080/admin",
    "http://localhost/",
    "http://LOCALHOST./",
    "http://2130706433/",
    "http://0x7f.1/",
    "http://0177.0.0.1/",
    "http://[::1]/",
    "http://[::ffff:127.0.0.1]/",
    "http://10.0.0.5/",
    "http://192.168.1.1/",
    "http://0/",
    "HTTP://127.0.0.1/",
    "http://user@127.0.0.1/",
    "http://127.0.0.1\\@93.184.215.14/",  # a browser's URL parser reads the host as 127.0.0.1
    "http://%31%32%37.0.0.1/",
    "http://unresolvable.invalid/",
]


@pytest.mark.parametrize("url", REFUSED_URLS)
def test_claude_codes_web_fetch_of_a_local_or_metadata_address_is_denied(
    project: Path, url: str
) -> None:
    decided, reason = verdict("claude-code", project, "WebFetch", {"url": url, "prompt": "read"})
    assert decided == "deny", reason
    assert reason.startswith("codecoder: ")


@pytest.mark.parametrize("position", ["first", "second", "last"])
def test_gemini_web_fetch_judges_every_url_of_its_prompt(project: Path, position: str) -> None:
    urls = ["https://93.184.215.14/a", "https://93.184.215.15/b"]
    urls.insert({"first": 0, "second": 1, "last": 2}[position], "http://169.254.169.254/x")
    prompt = "compare " + " and ".join(urls)
    decided, reason = verdict("gemini", project, "web_fetch", {"prompt": prompt})
    assert decided == "deny"
    assert "169.254.169.254 is a cloud metadata address" in reason


def test_a_public_address_is_allowed_and_the_trusted_policy_decides(project: Path) -> None:
    fetch = {"url": "https://93.184.215.14/page", "prompt": "read"}
    assert verdict("claude-code", project, "WebFetch", fetch)[0] == "allow"
    write_config(project, {"web": {"deny_hosts": ["*"]}})
    decided, reason = verdict("claude-code", project, "WebFetch", fetch)
    assert decided == "deny" and "deny_hosts entry '*'" in reason
    gemini = verdict("gemini", project, "web_fetch", {"prompt": f"see {fetch['url']}"})
    assert gemini[0] == "deny"
    # A local address the trusted policy names is allowed, as the web tools allow it.
    write_config(project, {"web": {"allow_hosts": ["127.0.0.1:8123"]}})
    local = {"url": "http://127.0.0.1:8123/docs", "prompt": "read"}
    assert verdict("claude-code", project, "WebFetch", local)[0] == "allow"
    other_port = {"url": "http://127.0.0.1:8124/docs", "prompt": "read"}
    assert verdict("claude-code", project, "WebFetch", other_port)[0] == "deny"


def test_an_untrusted_file_cannot_open_local_addresses_to_a_hook(project: Path) -> None:
    write_config(project, {"web": {"allow_hosts": ["127.0.0.1"]}}, trusted=False)
    local = {"url": "http://127.0.0.1/", "prompt": "read"}
    assert verdict("claude-code", project, "WebFetch", local)[0] == "deny"


# --- the agents' own settings ------------------------------------------------------------------

SETTINGS_WRITES = [
    ("claude-code", "Write", {"file_path": ".claude/settings.json", "content": "{}"}),
    ("claude-code", "Write", {"file_path": ".claude/settings.local.json", "content": "{}"}),
    ("claude-code", "Edit", {"file_path": ".claude/settings.json", "old_string": "a"}),
    ("claude-code", "MultiEdit", {"file_path": ".mcp.json", "edits": []}),
    ("claude-code", "Write", {"file_path": ".vscode/tasks.json", "content": "{}"}),
    ("claude-code", "Write", {"file_path": ".Claude/settings.json", "content": "{}"}),
    ("claude-code", "Write", {"file_path": "pkg/.claude/settings.json", "content": "{}"}),
    ("claude-code", "Write", {"file_path": "src/../.claude/commands/x.md", "content": "x"}),
    ("claude-code", "Write", {"file_path": "via-link/settings.json", "content": "{}"}),
    ("gemini", "write_file", {"file_path": ".gemini/settings.json", "content": "{}"}),
    ("gemini", "replace", {"file_path": ".gemini/settings.json", "old_string": "a"}),
    ("gemini", "write_file", {"file_path": ".codex/config.toml", "content": ""}),
    ("gemini", "write_file", {"file_path": ".vscode/settings.json", "content": "{}"}),
]


@pytest.mark.parametrize(("host", "tool", "tool_input"), SETTINGS_WRITES)
def test_an_agents_settings_are_protected_under_a_grant_for_every_write(
    project: Path, host: str, tool: str, tool_input: dict[str, Any]
) -> None:
    (project / ".claude").mkdir()
    (project / "via-link").symlink_to(".claude")
    write_config(
        project,
        {"allowlist": {"write_file:**": "AlwaysThisProject", "edit_file:**": "AlwaysThisProject"}},
    )
    path = {**tool_input, "file_path": str(project / tool_input["file_path"])}
    decided, reason = verdict(host, project, tool, path)
    assert decided == "deny"
    assert "a protected path" in reason and "only a person can allow it, once" in reason
    # The same grant covers an ordinary file.
    ordinary = {**path, "file_path": str(project / "src" / "app.py")}
    assert verdict(host, project, tool, ordinary)[0] == "allow"


def test_codecoders_own_write_tools_grant_an_agents_settings_only_once(project: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "CI"}

    def call(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "codecoder", "call", *args, "--project", str(project)],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )

    write_config(project, {"allowlist": {"write_file:**": "AlwaysThisProject"}})
    payload = json.dumps({"path": ".claude/settings.json", "content": '{"hooks": {}}'})
    refused = call("write_file", payload, "--non-interactive")
    assert refused.returncode == 3
    assert not (project / ".claude" / "settings.json").exists()
    allowed = call("write_file", payload, "--allow", "write_file:.claude/settings.json")
    assert allowed.returncode == 3 and "can be allowed only once" in allowed.stderr
    forever = call("write_file", payload, "--answer", "project")
    assert forever.returncode == 3 and not (project / ".claude" / "settings.json").exists()
    once = call("write_file", payload, "--answer", "once")
    assert once.returncode == 0, once.stderr
    assert json.loads((project / ".claude" / "settings.json").read_text()) == {"hooks": {}}


# --- tool names --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "mcp__codecoder__tools__run",  # server `codecoder__tools`, tool `run`
        "mcp__codecoder___run_command",  # server `codecoder_`, tool `run_command`
        "mcp__codecoder__run_command__x",
        "mcp__codecoder__",
        "mcp__codecoder__no_such_tool",
    ],
)
def test_a_tool_name_that_could_be_another_servers_is_not_codecoders(
    project: Path, name: str
) -> None:
    decided, reason = verdict("claude-code", project, name, {"command": "touch M"})
    assert decided == "deny", reason
    assert "not allowed by codecoder" in reason


def test_codecoders_own_tools_are_left_to_its_server(project: Path) -> None:
    claude = verdict("claude-code", project, "mcp__codecoder__run_command", {"command": "ls"})
    assert claude[0] == "allow"
    context = {"server_name": "codecoder", "tool_name": "run_command"}
    gemini = verdict(
        "gemini", project, "mcp_codecoder_run_command", {"command": "ls"}, mcp_context=context
    )
    assert gemini[0] == "allow"


@pytest.mark.parametrize(
    "context",
    [
        None,  # no context: Gemini's `mcp_<server>_<tool>` cannot say which server it is
        {"server_name": "codecoder_run", "tool_name": "command"},
        {"server_name": "other", "tool_name": "run_command"},
        {"server_name": "codecoder", "tool_name": 7},
    ],
)
def test_gemini_mcp_tools_are_codecoders_only_by_the_context_it_sends(
    project: Path, context: Any
) -> None:
    extra = {} if context is None else {"mcp_context": context}
    decided, _ = verdict("gemini", project, "mcp_codecoder_run_command", {"command": "ls"}, **extra)
    assert decided == "deny"


def test_the_real_hook_denies_a_metadata_fetch_and_a_settings_write(project: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    write_config(project, {"allowlist": {"write_file:**": "AlwaysThisProject"}})
    for tool, tool_input in (
        ("WebFetch", {"url": "http://169.254.169.254/", "prompt": "x"}),
        ("Write", {"file_path": str(project / ".claude" / "settings.json"), "content": "{}"}),
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "codecoder", "hook", "claude-code", "--non-interactive"],
            input=json.dumps({**event("claude-code", tool, tool_input), "cwd": str(project)}),
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            cwd=REPO,
        )
        assert proc.returncode == 0, proc.stderr
        answer = json.loads(proc.stdout)["hookSpecificOutput"]
        assert answer["permissionDecision"] == "deny", answer
