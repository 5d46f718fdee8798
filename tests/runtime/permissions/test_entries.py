"""The one check of an entry, wherever one is accepted: an entry that can never match a call is
an error that says what was meant."""

from __future__ import annotations

from pathlib import Path

import pytest

from codecoder.permissions.entries import check_entry
from codecoder.permissions.spellings import close_names
from codecoder.tools.catalogue import builtin_tools

TOOLS = builtin_tools()


@pytest.mark.parametrize(
    ("raw", "code", "meant"),
    [
        ("run_comand:ls", "unknown_tool", "run_command:ls"),
        ("wirte_file:src/**", "unknown_tool", "write_file:src/**"),
        ("run_command:npm test", "never_matches", "run_command:npm:test"),
        ("write_file:./x", "never_matches", "write_file:x"),
        ("run_command:gti", "unknown_program", "run_command:git"),
        ("run_command:gti:push", "unknown_program", "run_command:git:push"),
        ("run_command:git:stauts", "never_matches", "run_command:git:status"),
        ("run_command", "matches_nothing", "run_command:*"),
        ("read_file:README.md", "never_matches", None),
        ("run_command:git:a[b", "invalid_pattern", None),
    ],
)
@pytest.mark.parametrize("deny", [False, True], ids=["allow", "deny"])
def test_an_entry_that_can_never_match_is_a_problem_that_names_what_was_meant(
    raw: str, code: str, meant: str | None, deny: bool
) -> None:
    checked = check_entry(raw, TOOLS, deny=deny)
    if deny and code == "never_matches" and raw == "run_command:git:stauts":
        # A deny rule matches more eagerly: `git stauts` (an alias, say) is denied as named.
        assert checked.problem is None
        return
    assert checked.problem is not None
    assert (checked.problem.code, checked.problem.meant) == (code, meant)


def test_the_problem_is_said_for_a_file_and_for_an_option() -> None:
    problem = check_entry("run_command:gti", TOOLS, deny=False).problem
    assert problem is not None
    assert problem.describe("run_command:gti") == (
        "run_command:gti: this entry can never match a call: gti is no program on this PATH, "
        "nor one codecoder knows; to mean that, write run_command:git"
    )
    assert problem.as_option("--allow", "run_command:gti") == (
        "--allow 'run_command:gti' can never match a call: gti is no program on this PATH, nor "
        "one codecoder knows; did you mean --allow 'run_command:git'?"
    )
    unknown = check_entry("run_comand:ls", TOOLS, deny=True).problem
    assert unknown is not None
    assert unknown.describe("run_comand:ls", "deny rule").startswith(
        "run_comand:ls: there is no tool named 'run_comand' (did you mean run_command?); known "
        "tools: agent, commit,"
    )


@pytest.mark.parametrize(
    "raw",
    [
        "run_command:terraform:apply",  # not installed here, but no misspelling either
        "run_command:mytool:build",
        "run_command:git:status",
        "run_command:*",
        "write_file:tests/**",
        'run_command:"gti && git push"',
    ],
)
def test_an_entry_that_can_match_is_fine(raw: str) -> None:
    assert check_entry(raw, TOOLS, deny=False).problem is None
    assert check_entry(raw, TOOLS, deny=True).problem is None


def test_a_program_that_is_installed_is_no_misspelling_however_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gti = tmp_path / "gti"  # Debian's `gti` exists: a car drives across the terminal
    gti.write_text("#!/bin/sh\n")
    gti.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    assert check_entry("run_command:gti", TOOLS, deny=False).problem is None


@pytest.mark.parametrize(
    ("typed", "meant"),
    [("gti", "git"), ("mkae", "make"), ("limts", "limits"), ("run_comand", "run_command")],
)
def test_close_names_find_one_keystroke_slips(typed: str, meant: str) -> None:
    assert close_names(typed, ["git", "make", "limits", "run_command", "npm"])[0] == meant
