"""Key patterns: what an allowlist entry or a deny rule covers."""

from __future__ import annotations

import pytest

from codecoder.dispatcher import validate_arguments
from codecoder.permissions.commandkey import key_command
from codecoder.permissions.keys import KeyStyle, PermissionKey
from codecoder.permissions.patterns import (
    KeyPattern,
    PatternError,
    PatternIndex,
    never_matches,
)
from codecoder.tools.catalogue import builtin_tools

TOOLS = builtin_tools()


def cmd(command: str) -> PermissionKey:
    return key_command(command).permission_key("run_command")


def path(tool: str, relpath: str) -> PermissionKey:
    return PermissionKey.named(tool, relpath, style=KeyStyle.PATH, subject=relpath)


def move(source: str, destination: str) -> PermissionKey:
    key = (
        TOOLS["move_file"]
        .permission(
            validate_arguments(TOOLS["move_file"], {"source": source, "destination": destination})
        )
        .key
    )
    assert key is not None
    return key


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
        ("run_command:git:status", "git --no-pager status", True),
        ("run_command:git:status", "git push", False),
        ("run_command:git:status", "git log status", False),
        ("run_command:git:status:short", "git status --short", False),
        ("run_command:npm:run:test", "npm run test -- --watch", True),
        ("run_command:npm:run:test", "npm run-script test", True),
        ("run_command:npm:run:test", "npm run build", False),
        ("run_command:npm:run", "npm run build", True),
        ("run_command:npm:*:test", "npm run test", True),
        ("run_command:npm:run:test[:]unit", "npm run test:unit", True),
        ("run_command:npm:run:test", "npm run test:unit", False),
        ("run_command:python3:-m:pytest", "python3 -m pytest -q", True),
        ("run_command:python3:-m:pytest", "python3 -m pip install x", False),
        ('run_command:"git status"', "git status", True),
        ('run_command:"git status"', "git status -s", False),
        ("run_command:git", "git config core.fsmonitor evil", False),
        ("run_command:git:*", "git config core.fsmonitor evil", False),
        ("run_command:*", "git config core.fsmonitor evil", False),
        ("run_command:git:config", "git config --get user.name", True),
        ("run_command:git:config", "git config user.name x", False),
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
        # After quote removal, inside every kind of compound command and launcher.
        ("run_command:git:push", "git pu''sh origin main && true", True),
        ("run_command:git:push", "git pu\\sh origin main; true", True),
        ("run_command:git:push", 'git "pu"sh origin', True),
        ("run_command:git:push", "true && g'i't push", True),
        ("run_command:git:push", "sudo git push", True),
        ("run_command:git:push", "timeout 5 git push", True),
        ("run_command:git:push", "xargs git push < /dev/null", True),
        ("run_command:git:push", "bash -c 'git push origin'", True),
        ("run_command:git:push", "sh -c \"bash -c 'git push'\"", True),
        ("run_command:git:push", "find . -exec git push ';'", True),
        ("run_command:git:push", "echo $(git push)", True),
        ("run_command:git:push", "(cd x && git push)", True),
        ("run_command:git:push", "[[ -n x ]] && git push", True),
        ("run_command:git:push", "x=$((1)); git push", True),
        # Normalised program names: paths, git-core binaries, case.
        ("run_command:git:push", "/usr/lib/git-core/git-push origin main", True),
        ("run_command:git:push", "/usr/lib/git-core/git-push origin && true", True),
        ("run_command:git:push", "GIT push", True),
        ("run_command:/usr/bin/git:push", "git push", True),
        # A subcommand the parser cannot know could be the denied one.
        ("run_command:git:push", "git pp origin", True),
        ("run_command:git:push", "git $SUB origin && true", True),
        ("run_command:git:push", "$GIT push && true", True),
        ("run_command:git:push", "git status && echo $HOME", False),
        ("run_command:git:push", "git log --oneline && true", False),
        ("run_command:npm:run:deploy", "npm run-script deploy", True),
        ("run_command:npm:run:deploy", "npm run test", False),
        # Brace expansion builds the words before anything runs.
        ("run_command:git:push", "{git,push} origin", True),
        ("run_command:git:push", "g{i,}t push", True),
        ("run_command:git:push", "{/usr/bin/git,push}", True),
        ("run_command:rm", "{r,x}m{,} x; true", True),
        ("run_command:rm", "mkdir -p src/{a,b} && cp x{,.bak}", False),
        # A program word bash expands against file names is every name it matches.
        ("run_command:git:push", "/usr/bin/gi? push", True),
        ("run_command:git:push", "[g]it push", True),
        ("run_command:git:push", "/usr/lib/git-core/git-pu?h origin", True),
        ("run_command:rm", "/bin/r? x", True),
        ("run_command:rm", "/bin/r[m] x", True),
        ("run_command:npm:publish", "npm publi?h && true", True),
        ("run_command:rm", "ls *.py | wc -l", False),
        # One pattern may expand into several names: the program and the levels after it.
        ("run_command:npm:publish", "* && true", True),
        ("run_command:npm:publish", "[np]* && true", True),
        ("run_command:npm:publish", "n* && true", False),  # `publish` does not match n*
        ("run_command:git:push", "[g]* origin && true", True),
        ("run_command:git:push", "*", True),
        ("run_command:npm:publish", "n?m test && true", False),
        # A command carried in an option's or a name's value, attached or after `=`.
        ("run_command:rm", "env -iS'rm x'", True),
        ("run_command:rm", "coreutils --coreutils-prog=rm x", True),
        ("run_command:rm", "PROMPT_COMMAND='rm x' bash -i", True),
        ("run_command:rm", "vim -c '!rm x'", True),
        ("run_command:git:push", "shopt -s expand_aliases\nalias p='git push'\np", True),
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
        ("write_file:src/[ab].c", "src/a.c", True),
        ("write_file:src/[ab].c", "src/c.c", False),
        ("write_file:src/[!ab].c", "src/c.c", True),
        ("write_file:src/[a-c]?.c", "src/bx.c", True),
        ("write_file:src/[!a]", "src//", False),
        # Escaped: the literal path only.
        ("write_file:[*][*]", "**", True),
        ("write_file:[*][*]", "a/b", False),
        ("write_file:[*][*].wat", "**.wat", True),
        ("write_file:[*][*].wat", "x.wat", False),
        ("write_file:a[?]", "a?", True),
        ("write_file:a[?]", "ab", False),
        ("write_file:[[]x[]]", "[x]", True),
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


def test_a_command_pattern_is_read_level_by_level() -> None:
    assert KeyPattern.parse("run_command:npm:run:test[:]unit").levels == (
        "npm",
        "run",
        "test:unit",
    )
    KeyPattern.parse("run_command:npm:run:test").check(KeyStyle.COMMAND)
    with pytest.raises(PatternError, match="brackets only escape one character"):
        KeyPattern.parse("run_command:git:[ab]").check(KeyStyle.COMMAND)
    with pytest.raises(PatternError, match="empty level"):
        KeyPattern.parse("run_command:git::push").check(KeyStyle.COMMAND)
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
        "run_command:git:status",
        "run_command:/usr/bin/git:push",
        'run_command:"git status"',
        "move_file:secrets/**",
        "move_file:src/** -> lib/**",
        "move_file:vault/keys/*.pem",
    ]
    styles = {
        "run_command": KeyStyle.COMMAND,
        "write_file": KeyStyle.PATH,
        "move_file": KeyStyle.PATH,
        "commit": KeyStyle.NAME,
    }
    parsed = [KeyPattern.parse(p) for p in patterns]
    indexes: dict[bool, PatternIndex[str]] = {False: PatternIndex(), True: PatternIndex(deny=True)}
    for p in parsed:
        for index in indexes.values():
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
        cmd("git status"),
        cmd("sudo git push"),
        cmd("/usr/bin/git status"),
        move("secrets/key", "public/key"),
        move("src/a.py", "lib/a.py"),
        move("secrets/a", "secrets/b"),
        move("vault", "public"),
        move("secrets", "public"),
    ]
    for key in keys:
        for deny, index in indexes.items():
            scanned = sorted(p.raw for p in parsed if p.matches(key, deny=deny))
            found = sorted(raw for _, raw in index.find(key))
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


@pytest.mark.parametrize(
    ("pattern", "source", "destination", "granted", "denied"),
    [
        ("move_file:secrets/**", "secrets/key", "public/key", False, True),
        ("move_file:secrets/**", "public/key", "secrets/key", False, True),
        ("move_file:secrets/**", "secrets/a", "secrets/b", True, True),
        ("move_file:src/** -> lib/**", "src/a.py", "lib/a.py", True, True),
        ("move_file:src/** -> lib/**", "lib/a.py", "src/a.py", False, False),
        ("move_file:src/a -[>] b -> c", "src/a -> b", "c", True, True),
        # A directory moved whole carries what a deny rule covers inside it.
        ("move_file:secrets/**", "secrets", "public", False, True),
        ("move_file:secrets/keys/*.pem", "secrets", "public", False, True),
        ("move_file:secrets/**", "public", "secrets", False, True),
        ("move_file:secrets/**", "secretsx", "public", False, False),
        ("move_file:**/*.pem", "certs", "public", False, True),
    ],
)
def test_a_move_is_matched_on_its_source_and_its_destination(
    pattern: str, source: str, destination: str, granted: bool, denied: bool
) -> None:
    key = move(source, destination)
    assert (allows(pattern, key), denies(pattern, key)) == (granted, denied)


def test_a_move_grant_recorded_from_an_answer_covers_that_move_only() -> None:
    key = move("a*/x", "b -> c")
    (level,) = key.grant_levels
    assert level.entry == "move_file:a[*]/x -> b -[>] c"
    assert allows(level.entry, key)
    assert not allows(level.entry, move("ab/x", "b -> c"))


@pytest.mark.parametrize(
    ("tool", "raw", "deny", "reason", "suggestion"),
    [
        ("run_command", "run_command:git push", True, "whitespace", "run_command:git:push"),
        ("run_command", "run_command: rm", True, "whitespace", "run_command:rm"),
        ("run_command", "run_command:bash", False, "always compound", None),
        ("run_command", "run_command:sudo", False, "always compound", None),
        ("run_command", "run_command:cd", False, "always compound", None),
        ("run_command", "run_command:git:pp", False, "not a git builtin", None),
        ("run_command", "run_command:git:difftool", False, "always compound", None),
        ("run_command", "run_command:git:stash:list", False, "at most 1", "run_command:git:stash"),
        ("run_command", "run_command:ls:-la", False, "at most 0", "run_command:ls"),
        ("read_file", "read_file:.env", True, "Permission::None", None),
        ("web_fetch", "web_fetch:*", False, "Permission::None", None),
        ("write_file", "write_file:./x", True, "normalised", "write_file:x"),
        ("write_file", "write_file:a//b", False, "normalised", "write_file:a/b"),
        ("write_file", "write_file:/abs", True, "never absolute", "write_file:abs"),
        ("write_file", "write_file:dir/", True, "never ends with", "write_file:dir/**"),
        ("write_file", "write_file:../x", True, "never leave", None),
        ("write_file", "write_file:~/x", True, "not expanded", None),
        ("move_file", "move_file:a -> ./b", True, "normalised", "move_file:a -> b"),
    ],
)
def test_an_entry_that_can_never_match_says_why_and_how_to_spell_it(
    tool: str, raw: str, deny: bool, reason: str, suggestion: str | None
) -> None:
    found = never_matches(
        KeyPattern.parse(raw), TOOLS[tool].key_style, asks=TOOLS[tool].asks, deny=deny
    )
    assert found is not None and reason in found.reason
    assert found.suggestion == suggestion


@pytest.mark.parametrize(
    ("tool", "raw", "deny"),
    [
        ("run_command", "run_command:git:push", True),
        ("run_command", "run_command:git:status", False),
        ("run_command", "run_command:npm:run:test", False),
        ("run_command", "run_command:bash", True),
        ("run_command", "run_command:mytool:build", False),
        ("run_command", 'run_command:"git status && git push"', False),
        ("run_command", "run_command:*", False),
        ("write_file", "write_file:tests/**", False),
        ("write_file", "write_file:[*][*]", False),
        ("move_file", "move_file:src/** -> lib/**", False),
    ],
)
def test_an_entry_that_can_match_is_not_reported(tool: str, raw: str, deny: bool) -> None:
    pattern = KeyPattern.parse(raw)
    assert never_matches(pattern, TOOLS[tool].key_style, asks=True, deny=deny) is None
