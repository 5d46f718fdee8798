"""`codecoder hook install`: the agent's settings written with the absolute codecoder, shown as a
diff first, every other setting kept, a malformed file reported (line, column) and untouched."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

from codecoder.interfaces.hookinstall import hook_command, hook_program
from codecoder.interfaces.installation import codecoder_command


def install(home: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "CLAUDE_CONFIG_DIR")}
    return subprocess.run(
        [sys.executable, "-m", "codecoder", "hook", "install", *args],
        cwd=cwd,
        env={**env, "HOME": str(home), "CODEX_HOME": str(home / ".codex")},
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def test_install_keeps_every_other_setting_and_names_this_codecoder_by_its_path(
    tmp_path: Path, project: Path
) -> None:
    settings = tmp_path / ".claude" / "settings.json"
    settings.parent.mkdir()
    mine = {"matcher": "Bash", "hooks": [{"type": "command", "command": "echo mine"}]}
    old = {"matcher": "*", "hooks": [{"type": "command", "command": "codecoder hook claude-code"}]}
    settings.write_text(
        json.dumps({"permissions": {"allow": ["Bash(ls:*)"]}, "hooks": {"PreToolUse": [old, mine]}})
    )
    asked = install(tmp_path, project, "claude-code")
    assert asked.returncode == 2  # nobody to confirm: shown, not written
    assert "+++ " in asked.stdout and "not written" in asked.stdout
    done = install(tmp_path, project, "claude-code", "--yes")
    assert done.returncode == 0, done.stderr
    written = json.loads(settings.read_text())
    command = hook_command("claude-code", codecoder_command())
    ours = {"type": "command", "command": command}
    assert written["permissions"] == {"allow": ["Bash(ls:*)"]}
    assert written["hooks"]["PreToolUse"] == [{"matcher": "*", "hooks": [ours]}, mine]
    assert written["hooks"]["SessionStart"] == [{"hooks": [ours]}]
    assert hook_program(command) == codecoder_command()
    assert os.path.isabs(codecoder_command()[0])
    again = install(tmp_path, project, "claude-code", "--yes")
    assert again.returncode == 0 and "already there" in again.stdout
    assert json.loads(settings.read_text()) == written


def test_a_malformed_settings_file_is_reported_and_left_as_it_is(
    tmp_path: Path, project: Path
) -> None:
    settings = project / ".gemini" / "settings.json"
    settings.parent.mkdir()
    settings.write_text('{\n  "theme": "dark",\n  oops\n}\n')
    done = install(tmp_path, project, "gemini", "--project", "--yes")
    assert done.returncode == 1
    assert f"{settings}:3:3: not valid JSON" in done.stderr
    assert settings.read_text() == '{\n  "theme": "dark",\n  oops\n}\n'
    codex = tmp_path / ".codex" / "config.toml"
    codex.parent.mkdir()
    codex.write_text('model = "x"\n[features\n')
    refused = install(tmp_path, project, "codex", "--yes")
    assert refused.returncode == 1 and "not valid TOML" in refused.stderr
    assert codex.read_text() == 'model = "x"\n[features\n'


def test_codex_gets_codecoder_as_a_required_mcp_server_and_its_own_shell_off(
    tmp_path: Path, project: Path
) -> None:
    codex = tmp_path / ".codex" / "config.toml"
    codex.parent.mkdir()
    codex.write_text('model = "o"\n\n[features]\nshell_tool = true\nweb = 1\n')
    done = install(tmp_path, project, "codex", "--yes")
    assert done.returncode == 0, done.stderr
    document = tomllib.loads(codex.read_text())
    assert document["model"] == "o"
    assert document["features"] == {"shell_tool": False, "web": 1}
    server = document["mcp_servers"]["codecoder"]
    program = codecoder_command()
    assert [server["command"], *server["args"]] == [*program, "serve"]
    assert server["required"] is True


def test_print_shows_the_whole_file_as_it_would_be_written_and_writes_nothing(
    tmp_path: Path, project: Path
) -> None:
    settings = tmp_path / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(json.dumps({"permissions": {"allow": ["Bash(ls:*)"]}}))
    shown = install(tmp_path, project, "claude-code", "--print")
    assert shown.returncode == 0, shown.stderr
    printed = json.loads(shown.stdout)
    assert printed["permissions"] == {"allow": ["Bash(ls:*)"]}  # the user's own, kept
    command = hook_command("claude-code", codecoder_command())
    assert printed["hooks"]["PreToolUse"] == [
        {"matcher": "*", "hooks": [{"type": "command", "command": command}]}
    ]
    assert json.loads(settings.read_text()) == {"permissions": {"allow": ["Bash(ls:*)"]}}
    codex = install(tmp_path, project, "codex", "--project", "--print")
    assert codex.returncode == 0, codex.stderr
    server = tomllib.loads(codex.stdout)["mcp_servers"]["codecoder"]
    assert server["command"] == codecoder_command()[0] and server["required"] is True
    assert not (project / ".codex").exists()
    both = install(tmp_path, project, "gemini", "--print", "--yes")
    assert both.returncode == 2 and "--print writes nothing" in both.stderr


def test_where_the_agents_shell_runs_is_written_into_the_hook_never_dropped(
    tmp_path: Path, project: Path
) -> None:
    for option, words in (
        ([], []),
        (["--sandbox", "docker"], ["--sandbox", "docker"]),
        (["--sandbox=bwrap"], []),
        (["--host-shell"], ["--host-shell"]),
    ):
        shown = install(tmp_path, project, "gemini", "--print", *option)
        assert shown.returncode == 0, shown.stderr
        (group,) = json.loads(shown.stdout)["hooks"]["BeforeTool"]
        written = group["hooks"][0]["command"]
        hook = written.split(" || ", 1)[0].split()
        assert hook[hook.index("hook") :] == ["hook", "gemini", *words], option
    for option in (["--sandbox", "docker"], ["--host-shell"]):
        refused = install(tmp_path, project, "codex", "--print", *option)
        assert refused.returncode == 2 and "Codex's own shell is off" in refused.stderr
    both = install(
        tmp_path, project, "claude-code", "--print", "--sandbox", "docker", "--host-shell"
    )
    assert both.returncode == 2  # one place for the shell, not two
