"""Key patterns: what an allowlist entry or a deny rule covers."""

from __future__ import annotations

import pytest

from runtime.commandkey import key_command
from runtime.patterns import KeyPattern, PatternError, PatternIndex
from runtime.tool import KeyStyle, PermissionKey


def cmd(command: str) -> PermissionKey:
    return key_command(command).permission_key("run_command")


def path(tool: str, relpath: str) -> PermissionKey:
    return PermissionKey.named(tool, relpath, style=KeyStyle.PATH, subject=relpath)


def allows(pattern: str, key: PermissionKey) -> bool:
    return KeyPattern.parse(pattern).matches(key)


def denies(pattern: str, key: PermissionKey) -> bool:
    return KeyPattern.parse(pattern).matches(key, deny=True)


@pytest.mark.parametrize(
    ("pattern", "command", "expected"),
    [
        ("run_command:git", "git status", True),
        ("run_command:git", "git push --force", True),
        ("run_command:git:*", "git push", True),
        ("run_command:*", "cargo build", True),
        ("run_command:git:status", "git status -s", True),
        ("run_command:git:status", "git push", False),
        ("run_command:git:status", "git log status", False),
        ("run_command:git", "gitk", False),
        ("run_command:git", "/usr/bin/git status", False),
        ("run_command:/usr/bin/git", "/usr/bin/git status", True),
        ("run_command:git", "git status && git push", False),
        ("run_command:git:*", "git status && git push", False),
        ("run_command:*", "git status && git push", False),
        ("run_command:*", "ls | wc -l", False),
        ("run_command:cargo", "git status", False),
        ("write_file:*", "git status", False),
        ('run_command:"git status && git push"', "git status && git push", True),
        ('run_command:"git status && git push"', "git status && git push ", False),
        ('run_command:"git status && git push"', "git status", False),
    ],
)
def test_grant_patterns_for_commands(pattern: str, command: str, expected: bool) -> None:
    assert allows(pattern, cmd(command)) is expected


@pytest.mark.parametrize(
    ("pattern", "command", "expected"),
    [
        ("run_command:git:push", "git push", True),
        ("run_command:git:push", "git -C repo push --force", True),
        ("run_command:git:push", "/usr/bin/git push", True),
        ("run_command:git:push", "git status && git push", True),
        ("run_command:git:push", "git status; /usr/bin/git push origin", True),
        ("run_command:git:push", "git status", False),
        ("run_command:rm", "ls; rm -rf /", True),
        ("run_command:rm", "echo $(rm -rf /)", True),
        ("run_command:rm", "ls -la", False),
        ("run_command:*", "ls | wc", True),
    ],
)
def test_deny_patterns_match_eagerly(pattern: str, command: str, expected: bool) -> None:
    assert denies(pattern, cmd(command)) is expected


@pytest.mark.parametrize(
    ("pattern", "relpath", "expected"),
    [
        ("write_file:tests/**", "tests/a.py", True),
        ("write_file:tests/**", "tests/unit/deep/b.py", True),
        ("write_file:tests/**", "tests2/a.py", False),
        ("write_file:tests/**", "src/tests/a.py", False),
        ("write_file:*.py", "a.py", True),
        ("write_file:*.py", "src/a.py", False),
        ("write_file:**/*.py", "a.py", True),
        ("write_file:**/*.py", "src/deep/a.py", True),
        ("write_file:src/?.c", "src/a.c", True),
        ("write_file:src/?.c", "src/ab.c", False),
        ("write_file:*", "src/a.py", True),
        ("write_file:src/app.py", "src/app.py", True),
        ("write_file:src/app.py", "src/app.pyc", False),
        ("write_file:a+b(1).txt", "a+b(1).txt", True),
        ("edit_file:tests/**", "tests/a.py", False),
    ],
)
def test_path_patterns_are_globs_over_the_relative_path(
    pattern: str, relpath: str, expected: bool
) -> None:
    assert allows(pattern, path("write_file", relpath)) is expected


@pytest.mark.parametrize("raw", ["", " run_command:git", "run_command:git\n", ":git", "a\x1bb"])
def test_malformed_patterns_are_refused(raw: str) -> None:
    with pytest.raises(PatternError):
        KeyPattern.parse(raw)


def test_a_command_pattern_has_at_most_a_program_and_a_subcommand() -> None:
    with pytest.raises(PatternError, match="tool:program:subcommand"):
        KeyPattern.parse("run_command:git:remote:add").check(KeyStyle.COMMAND)
    with pytest.raises(PatternError, match="not valid JSON"):
        KeyPattern.parse('run_command:"unterminated').check(KeyStyle.COMMAND)


def test_the_index_finds_the_same_matches_as_a_full_scan() -> None:
    patterns = [
        "run_command:git",
        "run_command:git:push",
        "run_command:*",
        "run_command:ls",
        'run_command:"a && b"',
        "write_file:tests/**",
        "write_file:*.md",
        "write_file:src/app.py",
        "write_file:**/*.py",
        "commit",
    ]
    styles = {"run_command": KeyStyle.COMMAND, "write_file": KeyStyle.PATH, "commit": KeyStyle.NAME}
    index: PatternIndex[str] = PatternIndex()
    parsed = [KeyPattern.parse(p) for p in patterns]
    for p in parsed:
        index.add(p, p.raw, styles[p.tool])
    keys = [
        cmd("git push"),
        cmd("ls -l"),
        cmd("a && b"),
        cmd("cargo x"),
        cmd("/bin/ls"),
        path("write_file", "tests/x.py"),
        path("write_file", "README.md"),
        path("write_file", "src/app.py"),
        PermissionKey.named("commit"),
    ]
    for key in keys:
        for deny in (False, True):
            scanned = sorted(p.raw for p in parsed if p.matches(key, deny=deny))
            found = sorted(raw for _, raw in index.find(key, deny=deny))
            assert found == scanned, (key.raw, deny)


def test_a_decision_among_ten_thousand_entries_tests_only_a_handful() -> None:
    index: PatternIndex[int] = PatternIndex()
    for i in range(5000):
        index.add(KeyPattern.parse(f"run_command:prog{i}"), i, KeyStyle.COMMAND)
        index.add(KeyPattern.parse(f"write_file:dir{i}/**"), i, KeyStyle.PATH)
    assert len(index) == 10_000
    key = cmd("prog4321 --flag")
    assert [raw for _, raw in index.find(key)] == [4321]
    assert len(list(index.candidates(key))) <= 2
    file_key = path("write_file", "dir17/a/b.txt")
    assert [raw for _, raw in index.find(file_key)] == [17]
    assert len(list(index.candidates(file_key))) <= 2


def test_path_grants_sharing_a_first_directory_are_told_apart_by_their_whole_prefix() -> None:
    index: PatternIndex[int] = PatternIndex()
    for i in range(2000):
        index.add(KeyPattern.parse(f"write_file:src/mod{i}/**"), i, KeyStyle.PATH)
    index.add(KeyPattern.parse("write_file:src/app.py"), -1, KeyStyle.PATH)
    deep = path("write_file", "src/mod1234/pkg/a.py")
    assert [raw for _, raw in index.find(deep)] == [1234]
    assert len(list(index.candidates(deep))) == 1
    assert [raw for _, raw in index.find(path("write_file", "src/app.py"))] == [-1]
