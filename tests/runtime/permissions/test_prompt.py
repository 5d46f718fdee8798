"""The terminal prompt: what a person sees, in a real pseudo-terminal."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pexpect

from codecoder.runtime.kernel.ceiling import EnvironmentTag
from codecoder.runtime.kernel.decision import Answer
from codecoder.runtime.kernel.display import for_terminal, lookalikes, visible
from codecoder.runtime.permissions.keys import GrantLevel
from codecoder.runtime.permissions.prompt import AskRequest, render
from tests.conftest import write_config


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
    """`codecoder call run_command` in a terminal, run_command bound to @shell: the prompt of a
    tool on the host (a contained command's is tested in test_interactive.py)."""
    write_config(project, {"environments": {"run_command": "@shell"}})
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    args = [
        "-m",
        "codecoder.runtime",
        "call",
        "run_command",
        json.dumps({"command": command}),
        "--json",
    ]
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


def test_visible_shows_a_long_run_of_spaces_as_a_marker_with_its_length() -> None:
    assert visible("ls" + " " * 4000 + "; rm -rf ~") == "ls[4000 spaces]; rm -rf ~"
    assert visible("a       b") == "a       b"  # seven: still text
    assert visible("a" + " " * 8 + "b") == "a[8 spaces]b"


def test_for_terminal_keeps_lines_and_neutralises_escapes_and_padding() -> None:
    text = (
        "ok\x1b[8mhidden\x1b[0m\r\nnext\tcol\x1b(0qqq\x9b2J"
        + " " * 200
        + "tail"
        + "\n" * 30
        + "end"
    )
    assert for_terminal(text) == (
        "ok\\e[8mhidden\\e[0m\nnext\tcol\\e(0qqq\\x9b2J[200 spaces]tail\n[29 blank lines]\nend"
    )
    assert for_terminal("  indented\n\n\nthree blank lines kept\n") == (
        "  indented\n\n\nthree blank lines kept\n"
    )


def test_the_prompt_offers_the_narrow_key_and_the_program_wide_one_and_says_what_each_covers() -> (
    None
):
    narrow = GrantLevel("run_command:git:status", "only `git status …` commands")
    wide = GrantLevel("run_command:git", "every simple `git …` command: any subcommand")
    request = AskRequest(
        tool="run_command",
        environment=EnvironmentTag.SHELL,
        key="run_command:git:status",
        subject="git status --short",
        choices=(Answer.ONCE, Answer.SESSION, Answer.SESSION_PROGRAM, Answer.DENY),
        grants=((Answer.SESSION, narrow), (Answer.SESSION_PROGRAM, wide)),
    )
    assert render(request).splitlines()[-4:] == [
        "  [o] allow once",
        "  [s] always this session: only `git status …` commands [run_command:git:status]",
        "  [a] always this session: every simple `git …` command: any subcommand [run_command:git]",
        "  [d] deny",
    ]


def test_a_padded_command_shows_its_payload_in_a_real_terminal(project: Path) -> None:
    child = spawn(project, "echo ok" + " " * 3000 + "; touch PWNED")
    child.expect(r"choice \[o/s/d\]: ")
    assert "echo ok[3000 spaces]; touch PWNED" in child.before
    child.sendline("d")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 3 and not (project / "PWNED").exists()


def test_call_output_on_a_terminal_cannot_restyle_or_hide_what_follows(project: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    command = "printf 'visible\\033[8mhidden\\033(0qq\\033[0m\\n'"
    args = ["-m", "codecoder.runtime", "call", "run_command", json.dumps({"command": command})]
    child = pexpect.spawn(
        sys.executable,
        [*args, "--answer", "once"],
        cwd=str(project),
        env=env,
        encoding="utf-8",
        timeout=30,
    )
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert "visible\\e[8mhidden\\e(0qq\\e[0m" in child.before
    assert "\x1b" not in child.before.replace("\x1b[?1034h", "")


def test_the_mcp_form_titles_say_what_the_program_wide_choice_covers() -> None:
    from codecoder.runtime.interfaces.mcp_server import elicitation_schema
    from codecoder.runtime.permissions.commandkey import key_command

    key = key_command("git status").permission_key()
    narrow, wide = key.levels
    request = AskRequest(
        tool="run_command",
        environment=EnvironmentTag.SHELL,
        key=key.raw,
        subject=key.subject,
        choices=(Answer.ONCE, Answer.SESSION, Answer.SESSION_PROGRAM, Answer.DENY),
        grants=((Answer.SESSION, narrow), (Answer.SESSION_PROGRAM, wide)),
    )
    field = elicitation_schema(request, "2025-11-25")["properties"]["decision"]
    titles = {choice["const"]: choice["title"] for choice in field["oneOf"]}
    assert titles["session"].endswith("only `git status …` commands [run_command:git:status]")
    assert "every simple `git …` command" in titles["session-program"]
    assert titles["session-program"].endswith("[run_command:git]")
