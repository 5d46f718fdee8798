"""Harmless assignments before a command (`TZ=UTC python -m pytest`) are keyed as the command
alone; every other assignment, and every trick around one, keeps the whole line compound."""

from __future__ import annotations

import json

import pytest

from codecoder.permissions.assignments import HARMLESS, split_assignments
from codecoder.permissions.commandkey import key_command
from codecoder.permissions.keys import PermissionKey
from codecoder.permissions.patterns import KeyPattern


def key(command: str) -> PermissionKey:
    return key_command(command).permission_key()


def whole(command: str) -> str:
    return f"run_command:{json.dumps(command)}"


def test_a_command_after_a_harmless_assignment_has_the_key_of_the_command_alone() -> None:
    prefixed = key("TZ=UTC python -m pytest -q tests/test_report.py")
    bare = key("python -m pytest -q tests/test_report.py")
    assert prefixed.raw == bare.raw == "run_command:python:-m:pytest"
    assert (prefixed.compound, prefixed.argv, prefixed.path, prefixed.views, prefixed.levels) == (
        bare.compound,
        bare.argv,
        bare.path,
        bare.views,
        bare.levels,
    )
    assert prefixed.subject == "TZ=UTC python -m pytest -q tests/test_report.py"
    assert prefixed.assignments == ("TZ=UTC",)
    assert prefixed.notes == ("sets TZ=UTC (harmless: keyed without it)",)
    assert bare.assignments == () and bare.notes == ()


@pytest.mark.parametrize("name", sorted(HARMLESS))
def test_every_listed_name_is_set_aside(name: str) -> None:
    assert key(f"{name}=1 make test").raw == "run_command:make:test"


def test_several_assignments_and_every_allowed_value_form_are_set_aside() -> None:
    command = "LANG=en_US.UTF-8 LC_ALL=C.UTF-8\tTZ=America/Argentina/Buenos_Aires NO_COLOR= make"
    found = key_command(command)
    assert (found.compound, found.argv, found.assignments, found.keyed) == (
        False,
        ("make",),
        ("LANG=en_US.UTF-8", "LC_ALL=C.UTF-8", "TZ=America/Argentina/Buenos_Aires", "NO_COLOR="),
        "make",
    )
    assert key("RUST_LOG=my_crate=debug,hyper=info cargo test").raw == "run_command:cargo:test"
    assert split_assignments("  TZ=UTC   date") == (("TZ=UTC",), "date")


@pytest.mark.parametrize(
    ("command", "reason"),
    [
        # Names not on the list, and names next to it.
        ("PATH=/tmp/evil make test", "assignment"),
        ("LD_PRELOAD=./x.so make test", "assignment"),
        ("LD_LIBRARY_PATH=. make test", "assignment"),
        ("PYTHONPATH=. python -m pytest", "assignment"),
        ("PYTHONSTARTUP=x.py python", "assignment"),
        ("PYTHONHOME=/tmp python -m pytest", "assignment"),
        ("PYTHONWARNINGS=error::evil.W python -m pytest", "assignment"),
        ("NODE_OPTIONS=--require=./evil.js npm test", "assignment"),
        ("NODE_ENV=x NODE_OPTIONS=--require=./evil.js npm test", "assignment"),
        ("PERL5OPT=-Mevil make", "assignment"),
        ("RUBYOPT=-revil rake", "assignment"),
        ("GIT_DIR=/tmp/x git status", "assignment"),
        ("GIT_CONFIG_COUNT=1 git status", "assignment"),
        ("PAGER=./evil git log", "assignment"),
        ("EDITOR=./evil git commit", "assignment"),
        ("BROWSER=./evil make", "assignment"),
        ("SHELL=./evil make", "assignment"),
        ("BASH_ENV=./evil.sh make", "assignment"),
        ("ENV=./evil.sh make", "assignment"),
        ("HTTPS_PROXY=http://x make", "assignment"),
        ("http_proxy=http://x make", "assignment"),
        ("HOME=/tmp make", "assignment"),
        ("IFS=/ make", "assignment"),
        ("PS4=x make", "assignment"),
        ("PROMPT_COMMAND=id make", "assignment"),
        ("PYTEST_ADDOPTS=-p=evil python -m pytest", "assignment"),
        ("MAKEFLAGS=-j2 make", "assignment"),
        ("CARGO_BUILD_RUSTFLAGS=x cargo build", "assignment"),
        ("JAVA_TOOL_OPTIONS=-javaagent:x java", "assignment"),
        ("GOOS=js GOARCH=wasm go test", "assignment"),
        ("LC_ALL_X=C make", "assignment"),
        ("LC_=C make", "assignment"),
        ("TZDIR=/tmp make", "assignment"),
        ("LOCPATH=/tmp make", "assignment"),
        ("tz=UTC make", "assignment"),
        ("Tz=UTC make", "assignment"),
        ("TZ=UTC LANG=C PATH=/x make", "assignment"),
        # Values that are not plain words.
        ("LANG=$(id) make", "command substitution"),
        ("LANG=`id` make", "command substitution"),
        ("TZ=$HOME make", "parameter expansion"),
        ('TZ="$HOME" rm -rf build', "parameter expansion"),
        ("TZ=${X:-UTC} make", "parameter expansion"),
        ("TZ=~/zone make", "tilde expansion"),
        ("TZ=UTC:~/x make", "tilde expansion"),
        ("TZ='UTC' make", "assignment"),
        ('LANG="C" make', "assignment"),
        ("TZ=a\\ b make", "backslash escape"),
        ("TZ=* make", "assignment"),
        ("TZ={a,b} make", "brace expansion or group"),
        ("TZ=/etc/passwd date", "assignment"),
        ("TZ=:/etc/passwd date", "assignment"),
        ("TZ=:UTC date", "assignment"),
        ("TZ=../../../etc/shadow date", "assignment"),
        ("TZ=Europe/../../x date", "assignment"),
        ("TZ=Europe//Paris date", "assignment"),
        ("LANG=/tmp/locale make", "assignment"),
        ("LANG=..  make", "assignment"),
        ("TERM=../x make", "assignment"),
        ("TZ==ls make", "assignment"),
        ("LANGUAGE=en:=ls make", "assignment"),
        ("TZ=UTC\u200b make", "invisible character U+200B"),
        ("TZ=UTCé make", "non-ASCII character U+00E9"),
        # Separators after the assignment: another command, not a prefix.
        ("TZ=UTC;rm -rf .", "command list"),
        ("TZ=UTC; rm -rf .", "command list"),
        ("TZ=UTC\nrm -rf .", "newline"),
        ("TZ=UTC\rrm -rf .", "newline"),
        ("TZ=UTC && rm -rf .", "command list"),
        ("TZ=UTC | rm -rf .", "pipeline"),
        ("TZ=UTC & rm -rf .", "background job"),
        ("TZ=UTC\\\nrm -rf .", "line continuation"),
        ("TZ=UTC>out make", "redirection"),
        # Quoted names are no assignments: bash runs a program called `TZ=UTC`.
        ("'TZ'=UTC make", "assignment"),
        ('"TZ"=UTC make', "assignment"),
        ("T\\Z=UTC make", "backslash escape"),
        # Not a prefix: through a launcher or a builtin, or alone; and when what follows is
        # compound, the whole line is keyed as it always was (the reason: its assignment).
        ("env TZ=UTC make", "env runs the program given in its arguments"),
        ("env PATH=/x TZ=UTC make", "env runs the program given in its arguments"),
        ("export TZ=UTC", "shell builtin 'export'"),
        ("TZ=UTC export X=1", "assignment"),
        ("TZ=UTC", "assignment"),
        ("TZ=UTC LANG=C", "assignment"),
        ("TZ=UTC  ", "assignment"),
        ("TZ+=x make", "assignment"),
        ("TZ[0]=x make", "assignment"),
        ("TZ=UTC cd /", "assignment"),
        ("TZ=UTC exec make", "assignment"),
        ("TZ=UTC time make", "assignment"),
        ("TZ=UTC bash -c 'make'", "assignment"),
        ("TZ=UTC make && rm -rf .", "command list"),
    ],
)
def test_anything_but_harmless_plain_assignments_first_keeps_the_whole_line(
    command: str, reason: str
) -> None:
    found = key_command(command)
    assert (found.compound, found.argv, found.assignments) == (True, None, ())
    assert found.permission_key().raw == whole(command)
    assert found.reason == reason


def test_an_assignment_after_the_program_name_is_an_argument() -> None:
    found = key_command("ls TZ=UTC")
    assert (found.argv, found.assignments, found.read_only) == (("ls", "TZ=UTC"), (), "ls")
    assert key_command("make TZ=UTC test").compound  # make's own variables: the table says so


def test_a_grant_for_the_bare_command_covers_it_and_a_grant_for_the_line_does_not_widen() -> None:
    grant = KeyPattern.parse("run_command:python:-m:pytest")
    assert grant.matches(key("TZ=UTC python -m pytest -q"))
    assert grant.matches(key("LANG=C LC_ALL=C python -m pytest tests/"))
    assert not grant.matches(key("PYTHONPATH=. python -m pytest -q"))
    assert not grant.matches(key("TZ=$(id) python -m pytest -q"))
    every_simple = KeyPattern.parse("run_command:*")
    assert every_simple.matches(key("NO_COLOR=1 cargo test"))
    assert not every_simple.matches(key("NO_COLOR=1 cargo test && rm -rf ."))


@pytest.mark.parametrize(
    "command",
    [
        "TZ=UTC git push --force",
        "LANG=C LC_ALL=C git push",
        "NO_COLOR=1 git -C . push",
        "TZ=UTC git push 2>&1 | tail -5",
    ],
)
def test_a_deny_rule_for_the_bare_command_still_refuses_it(command: str) -> None:
    deny = KeyPattern.parse("run_command:git:push")
    assert deny.matches(key(command), deny=True)


def test_a_protected_path_after_the_assignments_stays_protected() -> None:
    assert key("TZ=UTC cp evil .git/hooks/pre-commit").protected
    assert key("LANG=C codecoder trust --yes").protected


def test_read_only_commands_stay_read_only_after_harmless_assignments() -> None:
    assert key("LANG=C ls -la").read_only == "ls"
    assert key("TZ=UTC date").read_only == "date"
    line = key("LC_ALL=C grep -rn x . | wc -l")
    assert (line.compound, line.read_only, line.raw) == (
        True,
        "grep, wc",
        whole("LC_ALL=C grep -rn x . | wc -l"),
    )
    assert key("grep -rn x . | LC_ALL=C sort | NO_COLOR=1 head -3").read_only == "grep, sort, head"
    # Not harmless, or not first in its part: not read-only.
    assert key("PATH=/tmp ls").read_only == ""
    assert key("grep -rn x . | LD_PRELOAD=./x.so wc -l").read_only == ""
    assert key("LANG=$(id) grep x f | wc -l").read_only == ""


def test_an_output_filter_pipeline_after_assignments_is_keyed_as_its_first_command() -> None:
    found = key_command("TZ=UTC npm test 2>&1 | LC_ALL=C tail -20")
    assert (found.compound, found.argv, found.assignments, found.filters) == (
        False,
        ("npm", "test"),
        ("TZ=UTC",),
        "2>&1 | LC_ALL=C tail -20",
    )
    assert found.permission_key().raw == "run_command:npm:test"
    # A filter with an assignment that is not harmless is no filter: the line is compound.
    assert key_command("npm test 2>&1 | PAGER=x tail -20").compound
