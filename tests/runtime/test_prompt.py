"""The terminal prompt: what a person sees, in a real pseudo-terminal."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pexpect

from runtime.ceiling import EnvironmentTag
from runtime.decision import Answer
from runtime.prompt import AskRequest, lookalikes, render, visible


def test_visible_makes_escapes_and_invisible_characters_visible() -> None:
    assert visible("git status\x1b[2K\rrm -rf /") == "git status\\e[2K\\rrm -rf /"
    assert visible("ls\u202e/txt.exe") == "ls\\u{202e}/txt.exe"
    assert visible("a\u200bb\x00c\nd\te") == "a\\u{200b}b\\x00c\\nd\\te"
    assert visible("plain `text` $HOME") == "plain `text` $HOME"
    assert visible("a\\e") == "a\\\\e"


def test_lookalike_letters_are_named() -> None:
    assert lookalikes("gіt status") == ["U+0456 CYRILLIC SMALL LETTER BYELORUSSIAN-UKRAINIAN I"]
    assert lookalikes("git status") == []


def test_the_prompt_shows_tool_environment_key_command_and_why_project_is_missing() -> None:
    request = AskRequest(
        tool="run_command",
        environment=EnvironmentTag.SHELL,
        key="run_command:git",
        subject="git push\x1b[8m --force",
        choices=(Answer.ONCE, Answer.SESSION, Answer.DENY),
        why_not_project="run_command:git runs in @shell",
    )
    assert render(request).splitlines() == [
        "codecoder: permission required",
        "  tool         run_command",
        "  environment  @shell (host processes, not sandboxed)",
        "  key          run_command:git",
        "  runs         git push\\e[8m --force",
        "",
        "  [o] allow once",
        "  [s] always this session",
        "  [d] deny",
        "  (always this project is not offered: run_command:git runs in @shell)",
    ]


def spawn(project: Path, command: str) -> pexpect.spawn:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    args = ["-m", "runtime", "call", "run_command", json.dumps({"command": command}), "--json"]
    return pexpect.spawn(
        sys.executable,
        args,
        cwd=str(project),
        env=env,
        encoding="utf-8",
        timeout=30,
        dimensions=(40, 200),
    )


def test_a_person_answers_in_a_real_terminal(project: Path) -> None:
    child = spawn(project, "printf 'ok\\n'")
    child.expect("permission required")
    child.expect(r"choice \[o/s/d\]: ")
    screen = child.before
    assert "environment  @shell (host processes, not sandboxed)" in screen
    assert "always this project is not offered" in screen
    assert "ceiling is AlwaysThisSession" in screen
    assert "[p]" not in screen
    child.sendline("x")
    child.expect("please answer one of o/s/d")
    child.sendline("o")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert '"source": "once"' in child.before


def test_escape_codes_in_a_command_are_shown_harmlessly(project: Path) -> None:
    hidden = "echo safe\x1b[2K\x1b[1A\rrm -rf ~ # \u202eevil"
    child = spawn(project, hidden)
    child.expect(r"choice \[o/s/d\]: ")
    screen = child.before
    assert "\x1b" not in screen.replace("\x1b[?1034h", "")
    assert "echo safe\\e[2K\\e[1A\\rrm -rf ~ # \\u{202e}evil" in screen
    child.sendline("d")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 3


def test_end_of_input_at_the_prompt_denies(project: Path) -> None:
    child = spawn(project, "echo hi")
    child.expect(r"choice \[o/s/d\]: ")
    child.sendeof()
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 3
