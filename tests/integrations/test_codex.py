"""Codex (the real CLI, from npm) with codecoder as its MCP server, as the recipe of
docs/integrations/agents.md sets it up, run headless (`codex exec`). The model is the stand-in
on 127.0.0.1 (a custom `model_providers` entry speaking the Responses API, its key from an
environment variable: no login); the network is closed (tests/integrations/agents.py)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from codecoder.foundation.state import project_state_directory
from tests.integrations.agents import AgentRun, base_env, cli, recipe, run_agent, unavailable
from tests.integrations.standin import Call

pytestmark = pytest.mark.skipif(unavailable("codex") is not None, reason=str(unavailable("codex")))

# The stand-in as a model provider of the test's own Codex home, nothing else of the user's;
# its address (`base_url`) is given on the command line, where the runner knows it.
PROVIDER = """
model = "stand-in"
model_provider = "standin"
check_for_update_on_startup = false

[analytics]
enabled = false

[model_providers.standin]
name = "stand-in"
env_key = "STANDIN_API_KEY"
wire_api = "responses"
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / "README.md").write_text("hello\n")
    return root


def codex_env(tmp_path: Path) -> dict[str, str]:
    """A user's environment for Codex, with XDG directories of its own: Codex starts MCP
    servers with a few variables only (HOME, PATH, ...), and the recipe's `env_vars` passes
    these on, so codecoder under Codex keeps its state where `codecoder` in a shell does."""
    return base_env(tmp_path, CODEX_HOME=str(tmp_path / "codex-home"), STANDIN_API_KEY="sk-st")


def configure(env: dict[str, str], servers: str) -> None:
    """`$CODEX_HOME/config.toml`: the stand-in provider, then `servers` (the recipe)."""
    home = Path(env["CODEX_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(PROVIDER + "\n" + servers)


def with_args(toml: str, *extra: str) -> str:
    """The recipe with `extra` added to codecoder's `args`, as the docs say to grant a run."""
    old = 'args = ["serve"]'
    assert old in toml
    return toml.replace(old, "args = " + json.dumps(["serve", *extra]))


def exec_codex(project: Path, env: dict[str, str], script: list[Call]) -> AgentRun:
    return run_agent(
        [
            str(cli("codex")),
            "exec",
            "-c",
            'model_providers.standin.base_url="{URL}/v1"',
            "Read the README, then touch a file.",
        ],
        cwd=project,
        env=env,
        script=script,
    )


def texts(run: AgentRun) -> list[str]:
    """Each tool result as the text the model was shown (Codex puts the call's wall time
    before it)."""
    shown = []
    for result in run.tool_results():
        output = result["output"]
        if isinstance(output, list):
            output = "".join(block.get("text", "") for block in output)
        shown.append(output.split("Output:", 1)[1].lstrip("\n"))
    return shown


def audit(project: Path, env: dict[str, str]) -> list[tuple[str, str]]:
    state = Path(env["XDG_STATE_HOME"]) / "codecoder" / "projects"
    digest = project_state_directory(project.resolve(), {"XDG_STATE_HOME": "/x"}).name
    path = state / digest / "audit.jsonl"
    if not path.exists():
        return []
    return [(r["tool"], r["outcome"]) for r in map(json.loads, path.read_text().splitlines())]


READ_THEN_TOUCH = [
    Call("mcp__codecoder__read_file", {"path": "README.md"}),
    Call("mcp__codecoder__run_command", {"command": "touch made"}),
]


def test_codex_exec_runs_what_needs_no_permission_and_declines_what_codecoder_asks(
    project: Path, tmp_path: Path
) -> None:
    env = codex_env(tmp_path)
    configure(env, recipe("codex-mcp"))
    run = exec_codex(project, env, READ_THEN_TOUCH)
    assert run.exit_code == 0, run.stderr
    assert run.stdout.strip() == "All done.", (run.stdout, run.stderr)
    offered = run.offered()
    assert {"mcp__codecoder__read_file", "mcp__codecoder__run_command"} <= offered
    assert not offered & {"exec_command", "write_stdin", "shell", "apply_patch"}  # Codex's own
    read, touched = texts(run)
    assert read == "     1\thello\n"  # the file's content reached the model's next request
    # `codex exec` answers codecoder's question itself, with a decline that no human saw:
    # codecoder says so, and nothing ran.
    assert touched == (
        "permission denied: run_command:touch was not allowed: the MCP client declined the "
        "question (no answer was given)"
    )
    assert not (project / "made").exists()
    assert audit(project, env) == [("read_file", "ok"), ("run_command", "denied")]


def test_an_allow_in_the_recipes_args_lets_exactly_that_command_run_and_its_output_reach_the_model(
    project: Path, tmp_path: Path
) -> None:
    env = codex_env(tmp_path)
    configure(
        env,
        with_args(recipe("codex-mcp"), "--allow", "run_command:touch", "--allow", "run_command:ls"),
    )
    run = exec_codex(
        project,
        env,
        [
            *READ_THEN_TOUCH,
            Call("mcp__codecoder__run_command", {"command": "ls"}),
            Call("mcp__codecoder__run_command", {"command": "rm README.md"}),
        ],
    )
    assert run.exit_code == 0, run.stderr
    read, touched, listed, removed = texts(run)
    assert read == "     1\thello\n"
    assert touched == "[exit code 0]"
    # The command's output itself, not only its exit code (Codex shows the model a result's
    # structuredContent in place of its text, so codecoder sends none).
    assert listed == "README.md\nmade\n[exit code 0]"
    assert removed.startswith("permission denied: run_command:rm was not allowed: the MCP client")
    assert (project / "made").exists() and (project / "README.md").exists()
    assert audit(project, env) == [
        ("read_file", "ok"),
        ("run_command", "ok"),
        ("run_command", "ok"),
        ("run_command", "denied"),
    ]


def test_with_codexs_default_approval_mode_codex_itself_refuses_what_is_not_read_only(
    project: Path, tmp_path: Path
) -> None:
    """Why the recipe sets "approve": without it, `codex exec` runs read_file (annotated
    read-only) but refuses run_command before codecoder is even called."""
    env = codex_env(tmp_path)
    toml = recipe("codex-mcp")
    assert 'default_tools_approval_mode = "approve"\n' in toml
    configure(env, toml.replace('default_tools_approval_mode = "approve"\n', ""))
    run = exec_codex(project, env, READ_THEN_TOUCH)
    assert run.exit_code == 0, run.stderr
    read, touched = texts(run)
    assert read == "     1\thello\n"
    assert touched == "MCP tool call requires approval, but approval policy is never"
    assert not (project / "made").exists()
    assert audit(project, env) == [("read_file", "ok")]


def test_in_a_terminal_codex_shows_codecoders_question_and_the_answer_holds_for_the_session(
    project: Path, tmp_path: Path
) -> None:
    """Codex run by a person (a pseudo-terminal), as the recipe sets it up: Codex shows
    codecoder's question as a form with codecoder's own choices; "Always allow for this
    session" lets the same key run again without asking, a narrower question is asked anew,
    and Esc is reported as what it was (cancelled), with nothing run."""
    env = codex_env(tmp_path)
    env["TERM"] = "xterm-256color"
    # A person who has used Codex in this folder before: they trusted it.
    configure(env, recipe("codex-mcp") + f'\n[projects."{project}"]\ntrust_level = "trusted"\n')
    run = run_agent(
        [str(cli("codex")), "-c", 'model_providers.standin.base_url="{URL}/v1"', "Work."],
        cwd=project,
        env=env,
        script=[
            Call("mcp__codecoder__run_command", {"command": "touch one"}),
            Call("mcp__codecoder__run_command", {"command": "touch two"}),
            # Not `git log`: a read-only command runs in @bwrap without a question.
            Call("mcp__codecoder__run_command", {"command": "git tag v1"}),
        ],
        terminal=[
            ("runs: touch one", ""),
            ("esc to cancel", "\x1b[B\r"),  # the second choice: for this session
            ("runs: git tag v1", ""),
            ("esc to cancel", "\x1b"),  # Esc
            ("All done.", ""),
        ],
    )
    screen = run.screen
    assert run.exit_code == 0, screen[-3000:]
    assert screen.count("codecoder: permission required") == 2, screen[-3000:]  # never `two`
    # Each choice says what it records, what that covers, how long and where it is kept (in
    # @bwrap, the default, project grants too; the file's path is wrapped on the screen).
    written = r"\(lasts until revoked; written to [^)]*codecoder\.json\) "
    choices = (
        "› 1. Once: this call only; nothing is recorded 2. AlwaysThisSession: run_command:touch "
        "— every simple `touch …` command, with any arguments (lasts while this MCP server runs "
        "(until its client disconnects); kept in the server's memory; `codecoder allowlist "
        "list` shows it) 3. AlwaysThisProject: run_command:touch — every simple `touch …` "
        "command, with any arguments ",
        "4. AlwaysThisProject: run_command:** — any command in @bwrap, compound lines included "
        "(never one that needs the host, nor one touching a protected path; deny rules still "
        "refuse) ",
        "5. AlwaysEveryProject: run_command:** — any command in @bwrap, compound lines "
        "included (never one that needs the host, nor one touching a protected path; deny rules "
        "still refuse) (lasts until revoked, in every project where it runs contained; written "
        "to your own file, ",
    )
    pattern = written.join(re.escape(c) for c in choices)
    pattern += r"[^)]*config\.json\) " + re.escape("6. Deny: nothing runs; nothing is recorded")
    assert re.search(pattern, screen), screen[-3000:]
    # The refusal's reason is in the transcript the person reads, not only the model's.
    assert "permission denied: run_command:git:tag was not allowed" in screen, screen[-3000:]
    assert (project / "one").exists() and (project / "two").exists()
    one, two, log = texts(run)
    assert one == two == "[exit code 0]"
    assert log == (
        "permission denied: run_command:git:tag was not allowed: the MCP client cancelled the "
        "question (no answer was given)"
    )
    assert audit(project, env) == [
        ("run_command", "ok"),
        ("run_command", "ok"),
        ("run_command", "denied"),
    ]
