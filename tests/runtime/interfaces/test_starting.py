"""Starting with codecoder, as a new user does: `codecoder init` in a project, the file it
writes checked by `codecoder check`, completion in real bash, zsh and fish, `call --help`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pexpect
import pytest

from codecoder.config.reading import load_project_file
from codecoder.tools.names import BUILTIN_TOOL_NAMES

NO_ENGINE = "unix:///nonexistent/docker.sock"
JEST = '{"scripts": {"test": "jest"}}'


def codecoder(project: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "CI"} | env
    return subprocess.run(
        [sys.executable, "-m", "codecoder", *args],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
        env=environ,
    )


def init_json(project: Path, **env: str) -> dict[str, Any]:
    done = codecoder(project, "init", "--json", **env)
    assert done.returncode == 0, done.stderr
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


def test_init_in_a_node_project_without_an_engine_writes_a_file_check_accepts(
    project: Path,
) -> None:
    """No Docker engine: commands are contained in @bwrap, the machine's default, so a grant
    for the tests may be for the project, and nothing is bound in the file."""
    (project / "package.json").write_text('{"scripts": {"test": "node test.js"}}')
    found = init_json(project, DOCKER_HOST=NO_ENGINE)
    assert found == {
        "file": str(project / "codecoder.json"),
        "language": "JavaScript",
        "test_command": "npm test",
        "test_key": "run_command:npm:test",
        "environment": "@bwrap",
        "bound": False,
        "reason": "host processes in bubblewrap namespaces: protected paths read-only, secrets "
        "hidden, the network only through the egress proxy, each host asked, the default here",
        "hints": [],
    }
    check = codecoder(project, "check", "--json", DOCKER_HOST=NO_ENGINE)
    report = json.loads(check.stdout)
    assert check.returncode == 0 and report["ok"]
    assert report["diagnostics"] == []
    assert report["commands"]["environment"] == "@bwrap"
    written = json.loads((project / "codecoder.json").read_text())
    assert {k: v for k, v in written.items() if not k.startswith("//")} == {
        "allowlist": {},
        "deny": ["run_command:git:push"],
        "limits": {"timeout": 120, "max_output": 65536},
    }
    comments = " ".join(" ".join(v) for k, v in written.items() if k.startswith("//"))
    assert "Found: JavaScript (package.json); tests: `npm test`." in comments
    assert "run_command runs in @bwrap: host processes in bubblewrap namespaces" in comments
    assert (
        'To run the tests without asking (contained in @bwrap): "run_command:npm:test": '
        '"AlwaysThisProject"' in comments
    )
    assert all(len(line) <= 88 for k, v in written.items() if k.startswith("//") for line in v)


def test_init_for_a_user_who_runs_commands_on_the_host_says_a_grant_lasts_a_session(
    project: Path,
) -> None:
    """The user bound run_command to @shell and no Docker engine answers: grants for commands
    last one session at most, and the file says so; check accepts it."""
    config = Path(os.environ["XDG_CONFIG_HOME"]) / "codecoder" / "config.json"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(json.dumps({"environments": {"run_command": "@shell"}}))
    (project / "package.json").write_text('{"scripts": {"test": "node test.js"}}')
    found = init_json(project, DOCKER_HOST=NO_ENGINE)
    assert found["reason"].startswith(
        "host processes, not sandboxed: grants for commands last one session at most, because "
        f"@docker cannot run (no Docker engine answers at {NO_ENGINE} ("
    )
    assert found | {"reason": "…"} == {
        "file": str(project / "codecoder.json"),
        "language": "JavaScript",
        "test_command": "npm test",
        "test_key": "run_command:npm:test",
        "environment": "@shell",
        "bound": False,
        "reason": "…",
        "hints": ["Once @docker works, bind run_command to it to contain commands."],
    }
    check = codecoder(project, "check", "--json", DOCKER_HOST=NO_ENGINE)
    report = json.loads(check.stdout)
    assert check.returncode == 0 and report["ok"]
    assert [d for d in report["diagnostics"] if d["code"] != "docker_unavailable"] == []
    written = json.loads((project / "codecoder.json").read_text())
    assert {k: v for k, v in written.items() if not k.startswith("//")} == {
        "allowlist": {},
        "deny": ["run_command:git:push"],
        "limits": {"timeout": 120, "max_output": 65536},
    }
    comments = " ".join(" ".join(v) for k, v in written.items() if k.startswith("//"))
    assert "Found: JavaScript (package.json); tests: `npm test`." in comments
    assert "run_command runs in @shell: host processes, not sandboxed" in comments
    assert "(run_command:npm:test) lasts one session at most" in comments
    assert all(len(line) <= 88 for k, v in written.items() if k.startswith("//") for line in v)


@pytest.mark.parametrize(
    ("files", "language", "test_command"),
    [
        ({"pyproject.toml": "[tool.pytest.ini_options]\n"}, "Python", "python3 -m pytest"),
        ({"setup.py": "", "tests/test_x.py": ""}, "Python", "python3 -m pytest"),
        ({"requirements.txt": "requests\n"}, "Python", "python3 -m unittest"),
        ({"Cargo.toml": "[package]\n"}, "Rust", "cargo test"),
        ({"go.mod": "module x\n"}, "Go", "go test ./..."),
        ({"Gemfile": "", "spec/x_spec.rb": ""}, "Ruby", "bundle exec rspec"),
        ({"pom.xml": "<project/>"}, "Java", "mvn test"),
        (
            {"package.json": '{"scripts": {"test": "jest"}}', "yarn.lock": ""},
            "JavaScript",
            "yarn test",
        ),
        ({"package.json": "{}", "Makefile": "test:\n\tnode t.js\n"}, "JavaScript", "make test"),
        ({"Makefile": "all:\n\ttrue\ntest: all\n\ttrue\n"}, "a make project", "make test"),
        ({"README.md": "hello"}, None, None),
    ],
)
def test_init_finds_the_language_and_the_test_command_from_the_projects_files(
    project: Path, files: dict[str, str], language: str | None, test_command: str | None
) -> None:
    for name, text in files.items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(text)
    found = init_json(project, DOCKER_HOST=NO_ENGINE)
    assert (found["language"], found["test_command"]) == (language, test_command)
    assert load_project_file(project / "codecoder.json").usable


def test_init_never_writes_over_a_file_and_print_only_prints(project: Path) -> None:
    mine = '{"allowlist": {"run_container:cargo": "AlwaysThisProject"}}\n'
    (project / "codecoder.json").write_text(mine)
    refused = codecoder(project, "init", DOCKER_HOST=NO_ENGINE)
    assert refused.returncode == 2
    assert "exists already: init never writes over it" in refused.stderr
    printed = codecoder(project, "init", "--print", DOCKER_HOST=NO_ENGINE)
    assert printed.returncode == 0 and json.loads(printed.stdout)["deny"] == [
        "run_command:git:push"
    ]
    assert (project / "codecoder.json").read_text() == mine


def test_a_comment_that_is_not_text_is_an_error_at_its_line(project: Path) -> None:
    (project / "codecoder.json").write_text(
        '{\n  "// note": 3,\n  "//": "fine", "//": ["too"]\n}\n'
    )
    check = codecoder(project, "check", DOCKER_HOST=NO_ENGINE)
    assert check.returncode == 1
    assert check.stdout.splitlines()[0] == (
        f'{project / "codecoder.json"}:2:14: error: [schema] the comment "// note" should be '
        "a string or a list of strings (a key starting with // is a comment)"
    )


def test_call_help_gives_examples_and_every_built_in_tool(project: Path) -> None:
    shown = codecoder(project, "call", "--help")
    assert shown.returncode == 0
    # Each example's claim is run by tests/test_docs_examples.py.
    examples = shown.stdout.split("examples (in a git repository holding a README.md", 1)[1]
    assert '\n  codecoder call read_file \'{"path": "README.md"}\'  ' in examples
    listed = shown.stdout.split("tools (environment, whether a call asks;")[1].splitlines()[1:]
    rows = {line.split()[0]: line.split()[1:3] for line in listed}
    assert set(rows) == BUILTIN_TOOL_NAMES
    assert rows["run_command"] == ["@bwrap", "asks"]
    assert rows["read_file"] == ["@landlock", "never"]


# --- completion, in the shells themselves ------------------------------------------------


def _shell_env(tmp_path: Path) -> dict[str, str]:
    bin_dir = Path(sys.executable).parent
    assert (bin_dir / "codecoder").exists()
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "HOME": str(tmp_path)}


def _needs(shell: str) -> None:
    if shutil.which(shell) is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true, so the completion tests must run, but {shell} is missing")
        pytest.skip(f"{shell} is not installed (apt-get install {shell})")


def test_bash_completes_commands_tool_names_and_choices(tmp_path: Path) -> None:
    script = """
        eval "$(codecoder completion bash)"
        complete_line() {
            COMP_LINE="$1"; COMP_POINT=${#COMP_LINE}; read -ra COMP_WORDS <<< "$1"
            [[ "$1" == *" " ]] && COMP_WORDS+=("")
            COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
            _python_argcomplete codecoder; echo "${COMPREPLY[*]}"
        }
        complete_line "codecoder ini"
        complete_line "codecoder call run_c"
        complete_line "codecoder call run_command x --answer "
        complete_line "codecoder call read_file --json --ans"
        complete_line "codecoder call read_file --json --answer "
        complete_line "codecoder completion "
    """
    done = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, env=_shell_env(tmp_path), timeout=60
    )
    assert done.stdout.splitlines() == [
        "init ",
        "run_capability run_command run_container",
        "once session project deny",
        "--answer ",
        "once session project deny",
        "bash zsh fish",
    ]


def test_fish_completes_commands_and_tool_names(tmp_path: Path) -> None:
    _needs("fish")
    script = (
        "codecoder completion fish | source; "
        'complete -C "codecoder ini"; complete -C "codecoder decide git_"'
    )
    done = subprocess.run(
        ["fish", "-c", script], capture_output=True, text=True, env=_shell_env(tmp_path), timeout=60
    )
    lines = done.stdout.splitlines()
    assert lines[0].startswith("init\twrite a commented starter codecoder.json")
    assert lines[1:] == ["git_diff", "git_log", "git_status"]


def test_zsh_completes_a_command_at_a_real_prompt(tmp_path: Path) -> None:
    _needs("zsh")
    zsh = pexpect.spawn(
        "zsh",
        ["-f", "-i"],
        env={**_shell_env(tmp_path), "PS1": "ZP> ", "TERM": "dumb"},
        encoding="utf-8",
        timeout=30,
    )
    zsh.expect_exact("ZP> ")
    zsh.sendline('autoload -U compinit && compinit -u && eval "$(codecoder completion zsh)"')
    zsh.expect_exact("ZP> ")
    zsh.send("codecoder ini\t")
    zsh.expect_exact("codecoder init")
    zsh.sendcontrol("u")
    zsh.send("codecoder call run_cont\t")
    zsh.expect_exact("run_container")
    zsh.sendcontrol("u")
    zsh.sendline("exit")
    zsh.expect(pexpect.EOF)
