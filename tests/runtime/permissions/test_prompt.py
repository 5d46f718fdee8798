"""The terminal prompt: what a person sees, in a real pseudo-terminal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pexpect
import pytest

from codecoder.runtime.kernel.ceiling import EnvironmentTag
from codecoder.runtime.kernel.decision import Answer
from codecoder.runtime.kernel.display import for_terminal, lookalikes, renders_blank, visible
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


# Padding in every spelling that renders blank: each a payload's way off screen.
BLANK_PADDING = {
    "braille blank": ("\u2800", "[3000 × U+2800 BRAILLE PATTERN BLANK]"),
    "hangul filler": ("\u3164", "[3000 × U+3164 HANGUL FILLER]"),
    "halfwidth hangul filler": ("\uffa0", "[3000 × U+FFA0 HALFWIDTH HANGUL FILLER]"),
    "hangul choseong and jungseong fillers": (
        "\u115f\u1160",
        "[6000 blank or invisible characters]",
    ),
    "ideographic space": ("\u3000", "[3000 × U+3000 IDEOGRAPHIC SPACE]"),
    "no-break space": ("\u00a0", "[3000 × U+00A0 NO-BREAK SPACE]"),
    "zero-width space": ("\u200b", "[3000 × U+200B ZERO WIDTH SPACE]"),
    "variation selector": ("\ufe0f", "[3000 × U+FE0F VARIATION SELECTOR-16]"),
    "combining grapheme joiner": ("\u034f", "[3000 × U+034F COMBINING GRAPHEME JOINER]"),
    "tag space": ("\U000e0020", "[3000 × U+E0020 TAG SPACE]"),
    "musical null": ("\U0001d159", "[3000 × U+1D159 MUSICAL SYMBOL NULL NOTEHEAD]"),
    "nul": ("\x00", "[3000 × U+0000]"),
    "newlines": ("\n", "[3000 × U+000A]"),
    "spaces and fillers mixed": (" \u2800\u3164", "[9000 blank or invisible characters]"),
}


@pytest.mark.parametrize("padding", sorted(BLANK_PADDING))
def test_every_character_that_renders_blank_is_collapsed_so_the_payload_stays_in_view(
    padding: str,
) -> None:
    unit, marker = BLANK_PADDING[padding]
    shown = visible("echo ok" + unit * 3000 + "; touch PWNED")
    assert shown == "echo ok" + marker + "; touch PWNED"
    # One alone is shown by its code: nothing that renders blank reaches the screen raw.
    one = visible("a" + unit + "b")
    assert all(char == " " or not renders_blank(char) for char in one)


def test_a_single_blank_glyph_is_shown_by_its_code() -> None:
    assert visible("rm\u2800-rf") == "rm\\u{2800}-rf"
    assert visible("a\u3164b") == "a\\u{3164}b"
    assert visible("a\u00a0b") == "a\\xa0b"


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
    assert for_terminal("x" + "\u2800" * 200 + "y\tz") == (
        "x[200 × U+2800 BRAILLE PATTERN BLANK]y\tz"
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


@pytest.mark.parametrize(
    ("padding", "marker"),
    [
        (" ", "[3000 spaces]"),
        ("\u2800", "[3000 × U+2800 BRAILLE PATTERN BLANK]"),
        ("\u3164", "[3000 × U+3164 HANGUL FILLER]"),
    ],
)
def test_a_padded_command_shows_its_payload_in_a_real_terminal(
    project: Path, padding: str, marker: str
) -> None:
    child = spawn(project, "echo ok" + padding * 3000 + "; touch PWNED")
    child.expect(r"choice \[o/s/d\]: ")
    assert f"echo ok{marker}; touch PWNED" in child.before
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


def test_a_contained_command_offers_the_sandbox_choices_in_a_real_terminal(project: Path) -> None:
    write_config(project, {"environments": {"run_command": "@bwrap"}})
    child = spawn(project, "npm test")
    child.expect(r"choice \[o/s/a/p/w/c/d\]: ")
    screen = child.before.replace("\r\n", "\n")
    assert "environment  @bwrap (host processes in bubblewrap namespaces" in screen
    assert "  [p] always this project: only `npm test …` commands [run_command:npm:test]" in screen
    assert "  [w] always this project: every simple `npm …` command" in screen
    assert (
        "  [c] always this project: any simple command in @bwrap (one program with literal "
        "arguments; never a compound command, nor one that needs the host) [run_command:*] "
        "(writes codecoder.json)" in screen
    )
    child.sendline("c")
    child.expect(pexpect.EOF)
    child.close()
    assert json.loads((project / "codecoder.json").read_text())["allowlist"] == {
        "run_command:*": "AlwaysThisProject"
    }


def test_an_escalation_is_chosen_in_a_real_terminal_and_runs_on_the_host(
    project: Path, tmp_path: Path
) -> None:
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    write_config(project, {"environments": {"run_command": "@bwrap"}})
    child = spawn(project, f"git ls-remote {remote}")
    child.expect(r"choice \[o/s/p/h/r/d\]: ")
    screen = child.before.replace("\r\n", "\n")
    assert "  on the host  run_command:git:ls-remote (@shell, unconfined)" in screen
    assert "  [o] allow once, contained in @bwrap (it would likely fail)" in screen
    assert (
        "  [h] run it on the host, unconfined (@shell), once [run_command:git:ls-remote]" in screen
    )
    child.sendline("h")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    out = json.loads(child.before[child.before.index("{") :])
    assert (out["decision"]["environment"], out["decision"]["escalated_from"]) == (
        "@shell",
        "@bwrap",
    )
    assert out["result"]["data"]["exit_code"] == 0
