"""Where the user stands: a person in `src/` means `src/x` by `x`, and a command runs in `src/`,
in every environment and through every front end a person types into (call, decide, key, exec,
session); keys stay relative to the project root. An agent speaking MCP stands at the project
root; an agent behind a hook stands where its host says (the event's `cwd`). Real processes,
real sandboxes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from codecoder.dispatcher import validate_arguments
from codecoder.foundation.errors import InvalidArguments
from codecoder.tools.catalogue import builtin_tools
from tests.conftest import write_config

TOOLS = builtin_tools()


def codecoder(
    *args: str, cwd: Path, stdin: str = "", daemon: bool = False
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if daemon:
        env.pop("CODECODER_DAEMON", None)
    return subprocess.run(
        [sys.executable, "-m", "codecoder", *args],
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )


def as_json(proc: subprocess.CompletedProcess[str]) -> Any:
    assert proc.stdout, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture
def tree(project: Path) -> Path:
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    (project / "README.md").write_text("root readme\n")
    (project / "src").mkdir()
    (project / "src" / "__init__.py").write_text("print('src')\n")
    return project


# --- paths ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("standing", "given", "meant"),
    [
        (".", "src/a.py", "src/a.py"),
        ("src", "a.py", "src/a.py"),
        ("src", "./a.py", "src/a.py"),
        ("src", "../README.md", "README.md"),
        ("src/deep", "../../README.md", "README.md"),
        ("src", "@docs/x.md", "@docs/x.md"),  # a read root is named, not joined
    ],
)
def test_a_relative_path_is_read_from_where_the_caller_stands(
    standing: str, given: str, meant: str
) -> None:
    params = validate_arguments(TOOLS["read_file"], {"path": given}, standing)
    assert params.path == meant


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("../../etc/passwd", "it climbs out of it"),
        ("a/../../x", "it has `..` past its start"),
        ("/etc/passwd", "is absolute"),
    ],
)
def test_a_path_out_of_the_workspace_says_where_paths_are_read_from(given: str, said: str) -> None:
    with pytest.raises(InvalidArguments) as refused:
        validate_arguments(TOOLS["write_file"], {"path": given, "content": ""}, "src")
    message = str(refused.value)
    assert said in message
    assert "paths are relative to where you stand (src/ in the workspace" in message


def test_every_path_argument_follows_the_caller() -> None:
    """The class, not the instance: each tool's path fields (and their defaults)."""
    standing = "src"
    checked = {
        "list_dir": ({}, "path", "src"),
        "glob": ({"pattern": "*.py"}, "path", "src"),
        "grep": ({"pattern": "x"}, "path", "src"),
        "diff": ({"path": "a", "other_path": "b"}, "other_path", "src/b"),
        "write_file": ({"path": "a", "content": ""}, "path", "src/a"),
        "edit_file": ({"path": "a", "old_string": "x", "new_string": "y"}, "path", "src/a"),
        "move_file": ({"source": "a", "destination": "b"}, "destination", "src/b"),
        "delete_file": ({"path": "a"}, "path", "src/a"),
        "run_wasm": ({"path": "m.wasm"}, "path", "src/m.wasm"),
        "git_status": ({"paths": ["."]}, "paths", ["src"]),
        "commit": ({"message": "m", "paths": ["a"]}, "paths", ["src/a"]),
    }
    for tool, (args, field, expected) in checked.items():
        params = validate_arguments(TOOLS[tool], args, standing)
        assert getattr(params, field) == expected, tool
        # An agent (no standing) gets the workspace's paths, as before.
        assert getattr(validate_arguments(TOOLS[tool], args), field) != expected, tool


def test_call_reads_and_writes_where_you_stand_and_keys_stay_the_projects(tree: Path) -> None:
    src = tree / "src"
    read = codecoder("call", "read_file", "__init__.py", cwd=src)
    assert (read.returncode, read.stdout) == (0, "     1\tprint('src')\n"), read.stderr
    up = codecoder("call", "read_file", "../README.md", cwd=src)
    assert up.stdout == "     1\troot readme\n"
    # write_file runs in @wasm: the file lands in src/, keyed from the project root.
    wrote = codecoder(
        "call", "write_file", '{"path": "new.txt", "content": "x"}', "--answer", "once",
        "--json", cwd=src,
    )  # fmt: skip
    assert as_json(wrote)["decision"]["key"] == "write_file:src/new.txt"
    assert (src / "new.txt").read_text() == "x" and not (tree / "new.txt").exists()
    # The same grant, whether asked from src/ or the root.
    for cwd, path in ((src, "granted.txt"), (tree, "src/granted.txt")):
        proc = codecoder(
            "call", "write_file", json.dumps({"path": path, "content": "y"}), "--allow",
            "write_file:src/granted.txt", "--non-interactive", cwd=cwd,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
    key = codecoder("key", "--tool", "write_file", '{"path": "k", "content": ""}', cwd=src)
    assert key.stdout == "write_file:src/k\n"
    out = codecoder("call", "read_file", "../../etc/passwd", cwd=src)
    assert out.returncode == 2
    assert "paths are relative to where you stand (src/ in the workspace" in out.stderr


def test_outside_the_project_paths_are_the_projects(tree: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = codecoder("call", "--project", str(tree), "read_file", "README.md", cwd=elsewhere)
    assert proc.stdout == "     1\troot readme\n", proc.stderr


# --- where a command runs ------------------------------------------------------------------


def _needs(what: str) -> None:
    if what == "@docker":
        import docker

        try:
            docker.from_env().ping()
        except Exception as exc:
            if os.environ.get("CI") == "true":
                pytest.fail(f"CI=true, so the Docker tests must run: {exc}")
            pytest.skip(f"no Docker engine: {exc}")
    if what == "@bwrap" and shutil.which("bwrap") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true, so the bubblewrap tests must run")
        pytest.skip("bubblewrap is not installed")


@pytest.mark.parametrize(
    ("tool", "environment", "expected"),
    [
        ("run_command", "@bwrap", "{project}/src"),
        ("run_command", "@shell", "{project}/src"),
        ("run_command", "@docker", "/workspace/src"),
        ("run_container", "@docker", "/workspace/src"),
    ],
)
def test_a_command_runs_where_you_stand_in_every_environment(
    tree: Path, tool: str, environment: str, expected: str
) -> None:
    _needs(environment)
    if tool == "run_command":
        write_config(tree, {"environments": {"run_command": environment}})
    proc = codecoder("call", tool, "--answer", "once", "--json", "--", "pwd", cwd=tree / "src")
    outcome = as_json(proc)
    assert outcome["decision"]["environment"] == environment
    assert outcome["result"]["data"]["stdout"] == expected.format(project=tree) + "\n"


def test_a_served_call_runs_where_its_client_stands(tree: Path) -> None:
    _needs("@bwrap")
    proc = codecoder("call", "run_command", "--answer", "once", "--", "pwd", cwd=tree / "src",
                     daemon=True)  # fmt: skip
    assert proc.stdout == f"{tree}/src\n[exit code 0]\n", proc.stderr


def test_the_question_says_where_a_command_runs(tree: Path) -> None:
    verdict = as_json(codecoder("decide", "--json", "run_command", "--", "make", cwd=tree / "src"))
    assert verdict["key"] == "run_command:make"
    options = {option["scope"] for option in verdict["options"]}
    assert "AlwaysThisProject" in options
    shown = codecoder("decide", "run_command", "--", "make", cwd=tree / "src")
    assert shown.returncode == 4
    from codecoder.session import Runtime

    with Runtime(tree) as runtime:
        session = runtime.session(standing="src")
        from codecoder.evaluation import evaluate

        question = evaluate(session, "run_command", {"command": "make"}).question
    assert question is not None
    assert "runs in src/ (where you stand in the workspace)" in question.notes


def test_a_protected_path_reached_from_where_you_stand_is_protected(tree: Path) -> None:
    """On the host a relative word leads from where the command runs: from src/,
    `../alias/config` is .git/config through a symlink (read from the root, it would lead out
    of the project, and nothing would be protected)."""
    write_config(tree, {"environments": {"run_command": "@shell"}})
    (tree / "alias").symlink_to(".git")
    for cwd, protected in ((tree / "src", True), (tree, False)):
        verdict = as_json(
            codecoder("decide", "--json", "run_command", "--", "touch ../alias/config", cwd=cwd)
        )
        assert verdict["protected"] is protected, cwd


def test_exec_runs_where_the_hosts_shell_stands(tree: Path) -> None:
    _needs("@bwrap")
    proc = codecoder(
        "exec", "--project", str(tree), "--sandbox", "bwrap", "--allow", "run_command:pwd",
        "--", "pwd", cwd=tree / "src",
    )  # fmt: skip
    assert (proc.returncode, proc.stdout) == (0, f"{tree}/src\n"), proc.stderr


# --- agents --------------------------------------------------------------------------------


def test_a_hook_reads_relative_paths_from_where_the_agent_stands(tree: Path) -> None:
    event = {
        "session_id": "g1",
        "cwd": str(tree / "src"),
        "hook_event_name": "BeforeTool",
        "tool_name": "write_file",
        "tool_input": {"file_path": "x.txt", "content": "x"},
    }
    proc = codecoder("hook", "gemini", "--project", str(tree), stdin=json.dumps(event), cwd=tree)
    assert proc.returncode == 0, proc.stderr
    assert "write_file:src/x.txt" in json.loads(proc.stdout)["reason"]
    # A shell command runs there: on the host (`--host-shell`; contained, the sandbox itself
    # keeps .git/config read-only), `../alias/config` is .git/config.
    (tree / "alias").symlink_to(".git")
    shell = {**event, "tool_name": "run_shell_command"}
    shell["tool_input"] = {"command": "touch ../alias/config"}
    proc = codecoder(
        "hook", "gemini", "--host-shell", "--project", str(tree), stdin=json.dumps(shell), cwd=tree
    )
    reason = json.loads(proc.stdout)["reason"]
    assert "runs in src/ (where you stand in the workspace)" in reason
    assert "a protected path is never granted for longer" in reason


def test_an_mcp_agent_stands_at_the_project_root(tree: Path) -> None:
    """An MCP client sees tools whose paths are "relative to the workspace": wherever the
    server was started, they are the project root's."""
    requests = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
         "params": {"name": "read_file", "arguments": {"path": "README.md"}}},
    ]  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "codecoder", "serve", "--project", str(tree)],
        cwd=tree / "src",
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "CI"},
    )
    assert proc.stdin is not None and proc.stdout is not None
    for request in requests:
        proc.stdin.write(json.dumps(request) + "\n")
        proc.stdin.flush()
    answers = []
    while len(answers) < 2:
        line = proc.stdout.readline()
        assert line, "the server ended"
        message = json.loads(line)
        if "id" in message:
            answers.append(message)
    proc.stdin.close()
    proc.wait(timeout=60)
    text = answers[1]["result"]["content"][0]["text"]
    assert text == "     1\troot readme\n"
