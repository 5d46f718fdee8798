from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codecoder.permissions.commandkey import (
    CommandKey,
    key_command,
    mentions_protected_path,
)
from codecoder.permissions.keys import DenyView, GrantLevel, KeyStyle, PermissionKey

# (command, compound, raw key of a simple command or None for compound, argv or None)
CORPUS: list[tuple[str, bool, str | None, tuple[str, ...] | None]] = [
    # Ordinary simple commands.
    ("git status", False, "run_command:git:status", ("git", "status")),
    (
        "git log --oneline -n 5",
        False,
        "run_command:git:log",
        ("git", "log", "--oneline", "-n", "5"),
    ),
    ("ls -la src/", False, "run_command:ls", ("ls", "-la", "src/")),
    (
        "python3 -m pytest -q",
        False,
        "run_command:python3:-m:pytest",
        ("python3", "-m", "pytest", "-q"),
    ),
    ("cargo build --release", False, "run_command:cargo:build", ("cargo", "build", "--release")),
    (
        "git commit -m 'fix: a b'",
        False,
        "run_command:git:commit",
        ("git", "commit", "-m", "fix: a b"),
    ),
    ('grep -r "TODO" src', False, "run_command:grep", ("grep", "-r", "TODO", "src")),
    ("npm run test:unit", False, "run_command:npm:run:test[:]unit", ("npm", "run", "test:unit")),
    ("/usr/bin/git status", False, "run_command:/usr/bin/git:status", ("/usr/bin/git", "status")),
    ("./build.sh", False, "run_command:./build.sh", ("./build.sh",)),
    ("echo hello", False, "run_command:echo", ("echo", "hello")),
    ("  git status  ", False, "run_command:git:status", ("git", "status")),
    ("git\tstatus", False, "run_command:git:status", ("git", "status")),
    ("git log --format=%H%n%s", False, "run_command:git:log", ("git", "log", "--format=%H%n%s")),
    (
        "git push origin HEAD:refs/heads/main",
        False,
        "run_command:git:push",
        ("git", "push", "origin", "HEAD:refs/heads/main"),
    ),
    ("scp a.txt user@host:/tmp/", False, "run_command:scp", ("scp", "a.txt", "user@host:/tmp/")),
    ("echo a=b", False, "run_command:echo", ("echo", "a=b")),
    ("echo ''", False, "run_command:echo", ("echo", "")),
    ('echo ""', False, "run_command:echo", ("echo", "")),
    ("echo a''b", False, "run_command:echo", ("echo", "ab")),
    ("echo a'b c'\"d e\"f", False, "run_command:echo", ("echo", "ab cd ef")),
    (
        'git commit -m "#123 done"',
        False,
        "run_command:git:commit",
        ("git", "commit", "-m", "#123 done"),
    ),
    ("printf 'a$b\\n'", False, "run_command:printf", ("printf", "a$b\\n")),
    ('echo "it\'s"', False, "run_command:echo", ("echo", "it's")),
    ("echo 'say \"hi\"'", False, "run_command:echo", ("echo", 'say "hi"')),
    ("git commit -m 'café'", False, "run_command:git:commit", ("git", "commit", "-m", "café")),
    ("test -f setup.py", False, "run_command:test", ("test", "-f", "setup.py")),
    ("true", False, "run_command:true", ("true",)),
    ("pwd", False, "run_command:pwd", ("pwd",)),
    ("kill -9 1234", False, "run_command:kill", ("kill", "-9", "1234")),
    ("git log -C", False, "run_command:git:log", ("git", "log", "-C")),
    ("git grep -C 3 foo", False, "run_command:git:grep", ("git", "grep", "-C", "3", "foo")),
    ("git --no-pager log", False, "run_command:git:log", ("git", "--no-pager", "log")),
    ("git commit -c HEAD", False, "run_command:git:commit", ("git", "commit", "-c", "HEAD")),
    ("find . -name '*.py'", False, "run_command:find", ("find", ".", "-name", "*.py")),
    ("python3 -c 'print(1)'", True, None, None),
    ("make -j4 all", False, "run_command:make:all", ("make", "-j4", "all")),
    (
        "pytest tests/test_a.py::test_b",
        False,
        "run_command:pytest",
        ("pytest", "tests/test_a.py::test_b"),
    ),
    (
        "curl -sS 'https://example.com/a?b=c&d=e'",
        False,
        "run_command:curl",
        ("curl", "-sS", "https://example.com/a?b=c&d=e"),
    ),
    (
        "git checkout -- file.txt",
        False,
        "run_command:git:checkout",
        ("git", "checkout", "--", "file.txt"),
    ),
    (
        "npm install @types/node",
        False,
        "run_command:npm:install",
        ("npm", "install", "@types/node"),
    ),
    (
        "pip install 'pydantic>=2.7'",
        False,
        "run_command:pip:install",
        ("pip", "install", "pydantic>=2.7"),
    ),
    ("g++ -O2 -o a a.cc", False, "run_command:g++", ("g++", "-O2", "-o", "a", "a.cc")),
    ("GIT status", False, "run_command:GIT:status", ("GIT", "status")),
    # Pipelines and lists.
    ("git log | head", True, None, None),
    ("git log |& head", True, None, None),
    ("git status; git push", True, None, None),
    ("ls;rm -rf x", True, None, None),
    ("git status && git push", True, None, None),
    ("false || rm -rf /", True, None, None),
    ("sleep 10 &", True, None, None),
    ("git status & git push", True, None, None),
    # Newlines, as separators and trailing.
    ("git status\ngit push", True, None, None),
    ("git status\r\ngit push", True, None, None),
    ("git status\rgit push", True, None, None),
    ("git status\n", True, None, None),
    # Command and process substitution.
    ("echo $(whoami)", True, None, None),
    ("$(whoami)", True, None, None),
    ("echo `whoami`", True, None, None),
    ('echo "$(whoami)"', True, None, None),
    ('echo "`whoami`"', True, None, None),
    ("diff <(ls a) <(ls b)", True, None, None),
    ("ls | tee >(cat)", True, None, None),
    # Redirections and heredocs.
    ("ls > out.txt", True, None, None),
    ("ls >> out.txt", True, None, None),
    ("ls 2>&1", True, None, None),
    ("wc -l < in.txt", True, None, None),
    ("ls &> out.txt", True, None, None),
    ("ls >| out.txt", True, None, None),
    ("cat <<< hi", True, None, None),
    ("cat <<EOF\nhi\nEOF", True, None, None),
    ("cat <<'EOF'\nhi\nEOF\n", True, None, None),
    # Subshells and groups.
    ("(cd /tmp && rm x)", True, None, None),
    ("{ ls; }", True, None, None),
    ("{ls,rm}", True, None, None),
    # Expansions and quoting that is not plain.
    ("echo $HOME", True, None, None),
    ("echo ${HOME}", True, None, None),
    ("echo ${X:-rm}", True, None, None),
    ('echo "$HOME"', True, None, None),
    ("echo $'\\x41'", True, None, None),
    ("echo $'a'", True, None, None),
    ('echo $"hi"', True, None, None),
    ("echo $((1+2))", True, None, None),
    ("[[ -f x ]]", True, None, None),
    ("(( x = 1 ))", True, None, None),
    ('echo "a!"', True, None, None),
    ('echo "a\\b"', True, None, None),
    ('echo "a\\"b"', True, None, None),
    # Globs, brace expansion, tilde.
    ("ls *.py", True, None, None),
    ("ls ?.py", True, None, None),
    ("ls [ab].py", True, None, None),
    ("echo {a,b}", True, None, None),
    ("ls ~", True, None, None),
    ("ls ~/x", True, None, None),
    ("ls a=~/x", True, None, None),
    # Assignments.
    ("FOO=1 git", True, None, None),
    ("FOO=1 git status", True, None, None),
    ("GIT_SSH_COMMAND='rm -rf /' git fetch", True, None, None),
    ("'FOO=1' git", True, None, None),
    ("a=", True, None, None),
    # Launchers, by name and by path.
    ("env ls", True, None, None),
    ("/usr/bin/env ls", True, None, None),
    ("ENV ls", True, None, None),
    ("sudo ls", True, None, None),
    ("doas ls", True, None, None),
    ("su -c ls", True, None, None),
    ("runuser -u nobody ls", True, None, None),
    ("xargs rm", True, None, None),
    ("timeout 5 ls", True, None, None),
    ("nice ls", True, None, None),
    ("ionice ls", True, None, None),
    ("nohup ls", True, None, None),
    ("setsid ls", True, None, None),
    ("stdbuf -o0 ls", True, None, None),
    ("taskset 1 ls", True, None, None),
    ("chroot / ls", True, None, None),
    ("unshare -r ls", True, None, None),
    ("nsenter -t 1 ls", True, None, None),
    ("flock /tmp/l ls", True, None, None),
    ("watch ls", True, None, None),
    ("time ls", True, None, None),
    ("/usr/bin/time ls", True, None, None),
    ("strace ls", True, None, None),
    ("ltrace ls", True, None, None),
    ("script -c ls", True, None, None),
    ("parallel rm ::: a b", True, None, None),
    ("busybox rm x", True, None, None),
    ("bash -c 'rm -rf /'", True, None, None),
    ("bash script.sh", True, None, None),
    ("/bin/bash script.sh", True, None, None),
    ("sh -c ls", True, None, None),
    ("dash -c ls", True, None, None),
    ("zsh -c ls", True, None, None),
    ("ksh -c ls", True, None, None),
    ("fish -c ls", True, None, None),
    ("csh -c ls", True, None, None),
    ("tcsh -c ls", True, None, None),
    ("bash5.2 -c ls", True, None, None),
    ("exec ls", True, None, None),
    ("eval ls", True, None, None),
    ("command ls", True, None, None),
    ("builtin echo", True, None, None),
    ("chrt 1 ls", True, None, None),
    ("cgexec -g cpu:x ls", True, None, None),
    ("firejail ls", True, None, None),
    ("systemd-run ls", True, None, None),
    ("sg wheel ls", True, None, None),
    ("newgrp wheel", True, None, None),
    ("expect -c 'spawn ls'", True, None, None),
    ("catchsegv ls", True, None, None),
    ("valgrind ls", True, None, None),
    # Arguments that make a program a launcher.
    ("find . -exec rm '{}' ';'", True, None, None),
    ("rsync -avze 'sh -c evil' src/ host:dst/", True, None, None),
    ("rsync --rsh=evil src/ host:dst/", True, None, None),
    ("tar -xf a.tar --to-command=evil", True, None, None),
    ("tar -cIevil -f a.tar src", True, None, None),
    ("tar --checkpoint=1 --checkpoint-action=exec=evil -cf a.tar src", True, None, None),
    ("ssh -o ProxyCommand=evil host", True, None, None),
    ("scp -S evil a host:b", True, None, None),
    ("zip -TT evil a.zip f", True, None, None),
    ("rsync -av src/ dst/", False, "run_command:rsync", ("rsync", "-av", "src/", "dst/")),
    ("tar -czf a.tar.gz src", False, "run_command:tar", ("tar", "-czf", "a.tar.gz", "src")),
    ("find . -execdir rm '{}' +", True, None, None),
    ("find . -ok rm '{}' ';'", True, None, None),
    ("find . -name x -delete", True, None, None),
    ("find . -fprint .git/hooks/pre-commit", True, None, None),
    ("find . -fprintf out %p", True, None, None),
    ("find . -fls out", True, None, None),
    ("git -c core.pager=evil log", True, None, None),
    ("git -ccore.pager=evil log", True, None, None),
    ("git --config-env=core.pager=X log", True, None, None),
    ("git -C ../other status", True, None, None),
    ("git --git-dir=x status", True, None, None),
    ("git --exec-path=/tmp log", True, None, None),
    ("git --bare log", True, None, None),
    ("git --namespace n -c core.pager=evil log", True, None, None),
    ("/usr/bin/git -c core.pager=evil log", True, None, None),
    ("git fetch --upload-pack=evil origin", True, None, None),
    ("git fetch --upload=evil origin", True, None, None),
    ("git push --receive-pack evil origin", True, None, None),
    # Comments, continuations, escapes.
    ("git status # && rm -rf /", True, None, None),
    ("git status \\\n&& rm -rf /", True, None, None),
    ("g\\it status", True, None, None),
    ("git sta\\tus", True, None, None),
    # Look-alikes, invisible characters, escapes and control characters.
    ("g\u0456t status", True, None, None),  # Cyrillic і
    ("\uff47\uff49\uff54 status", True, None, None),  # fullwidth ｇｉｔ
    ("git status\u200b", True, None, None),
    ("git\u200b status", True, None, None),
    ("git commit -m 'a\u200bb'", True, None, None),
    ("git commit -m 'a\u202eb'", True, None, None),
    ("git status \u202e", True, None, None),
    ("git\u00a0status", True, None, None),
    ("echo \x1b[2K", True, None, None),
    ("echo '\x1b[2Kok'", True, None, None),
    ("git status\x00", True, None, None),
    ("git status\x00; rm x", True, None, None),
    ("echo '\x07'", True, None, None),
    ("echo 'tab\there'", True, None, None),
    ("echo 'a\nb'", True, None, None),
    ("git\x0bstatus", True, None, None),
    # Unterminated and odd quoting.
    ("git commit -m 'unterminated", True, None, None),
    ('git commit -m "unterminated', True, None, None),
    ("'' status", True, None, None),
    ('"" status', True, None, None),
    ("'git status && rm'", True, None, None),
    ("'git status'", True, None, None),
    ("'g\u0456t' status", True, None, None),
    ("'git' status", False, "run_command:git:status", ("git", "status")),
    ('"git" status', False, "run_command:git:status", ("git", "status")),
    # Reserved words.
    ("if true; then ls; fi", True, None, None),
    ("'if' x", True, None, None),
    ("! ls", True, None, None),
    ("while", True, None, None),
    ("coproc ls", True, None, None),
    ("function f", True, None, None),
    ("select x", True, None, None),
    ("done", True, None, None),
    # Builtins that change the shell or have no binary.
    ("cd /tmp", True, None, None),
    ("export X=1", True, None, None),
    ("source x.sh", True, None, None),
    (". x.sh", True, None, None),
    ("set -e", True, None, None),
    ("alias ls=rm", True, None, None),
    ("trap 'rm x' EXIT", True, None, None),
    ("ulimit -n 10", True, None, None),
    ("read x", True, None, None),
    ("'cd' /tmp", True, None, None),
    # Job specs.
    ("%1", True, None, None),
    ("%+", True, None, None),
]


@pytest.mark.parametrize(("command", "compound", "raw", "argv"), CORPUS)
def test_each_command_of_the_corpus_gets_its_key(
    command: str, compound: bool, raw: str | None, argv: tuple[str, ...] | None
) -> None:
    key = key_command(command)
    expected_raw = raw if raw is not None else f"run_command:{json.dumps(command)}"
    program = argv[0] if argv is not None else None
    assert (key.compound, key.argv, key.program, key.permission_key().raw) == (
        compound,
        argv,
        program,
        expected_raw,
    )


def test_the_corpus_covers_at_least_a_hundred_distinct_commands() -> None:
    commands = [row[0] for row in CORPUS]
    assert len(set(commands)) == len(commands) >= 100


@pytest.mark.parametrize(
    ("command", "reason"),
    [
        ("git status", "simple"),
        ("git log | head", "pipeline"),
        ("git status && git push", "command list"),
        ("git status; git push", "command list"),
        ("sleep 1 &", "background job"),
        ("git status\ngit push", "newline"),
        ("echo $(whoami)", "command substitution"),
        ("echo `whoami`", "command substitution"),
        ("diff <(ls a) b", "process substitution"),
        ("ls > out", "redirection"),
        ("ls &> out", "redirection"),
        ("cat <<EOF\nx\nEOF", "heredoc"),
        ("cat <<< x", "here-string"),
        ("(ls)", "subshell"),
        ("echo ${X}", "parameter expansion"),
        ("echo $'a'", "ANSI-C quoting"),
        ("echo $((1))", "arithmetic expansion"),
        ("ls *.py", "glob"),
        ("ls ~", "tilde expansion"),
        ("git status # x", "comment"),
        ("git status \\\n&& rm", "line continuation"),
        ("g\\it", "backslash escape"),
        ("FOO=1 git", "assignment"),
        ("'FOO=1' git", "assignment"),
        ("env ls", "env runs the program given in its arguments"),
        ("/usr/bin/env ls", "/usr/bin/env runs the program given in its arguments"),
        ("bash x.sh", "bash is a shell: it runs whatever its script or -c string says"),
        ("find . -exec rm '{}' ';'", "find -exec: runs a command, deletes or writes files"),
        ("git -c core.pager=evil log", "git -c: changes the repository, config or pager git uses"),
        ("cd /tmp", "shell builtin 'cd'"),
        ("'if' x", "reserved word 'if'"),
        ("%1", "job spec"),
        ("'' status", "program name ''"),
        ("g\u0456t", "non-ASCII character U+0456"),
        ("echo \x1b[2K", "control character U+001B"),
        ("echo 'a\u202eb'", "invisible character U+202E"),
        ("echo 'a", "unterminated quote"),
        ("time ls", "parse error: NotImplementedError: type = {time command}, token = {time}"),
        ("if x", "parse error: ParsingError: unexpected EOF"),
        ("then", "parse error: ParsingError: unexpected token 'then'"),
    ],
)
def test_a_compound_command_says_why(command: str, reason: str) -> None:
    assert key_command(command).reason == reason


def test_a_simple_command_has_a_key_for_its_program_and_subcommand() -> None:
    argv = ("git", "commit", "-m", "fix: a b")
    assert key_command("git commit -m 'fix: a b'").permission_key() == PermissionKey(
        tool="run_command",
        action="git:commit",
        raw="run_command:git:commit",
        style=KeyStyle.COMMAND,
        compound=False,
        argv=argv,
        protected=False,
        subject="git commit -m 'fix: a b'",
        levels=(
            GrantLevel("run_command:git:commit", "only `git commit …` commands"),
            GrantLevel(
                "run_command:git",
                "every simple `git …` command: any subcommand (push, reset, clean …) and "
                "arguments, but never one that runs another program or writes git config",
            ),
        ),
        path=("git", "commit"),
        views=(DenyView("git", argv, 1),),
    )


def test_a_compound_command_has_a_key_for_the_whole_json_quoted_string() -> None:
    key = key_command("git status && git push").permission_key()
    assert (key.action, key.raw, key.compound, key.argv, key.subject, key.levels, key.path) == (
        '"git status && git push"',
        'run_command:"git status && git push"',
        True,
        None,
        "git status && git push",
        (GrantLevel('run_command:"git status && git push"', "exactly this command"),),
        (),
    )


def test_the_key_is_for_the_tool_it_is_asked_for() -> None:
    key = key_command("cargo test").permission_key("run_container")
    assert (key.raw, [level.entry for level in key.levels]) == (
        "run_container:cargo:test",
        ["run_container:cargo:test", "run_container:cargo"],
    )


def test_a_compound_key_shows_invisible_characters_as_escapes() -> None:
    assert key_command("git status\u200b\x1b[2K").permission_key().raw == (
        'run_command:"git status\\u200b\\u001b[2K"'
    )


def test_a_quoted_program_with_spaces_does_not_share_the_key_of_the_command_it_spells() -> None:
    quoted = key_command("'git status && rm'").permission_key().raw
    unquoted = key_command("git status && rm").permission_key().raw
    assert (quoted, unquoted) == (
        "run_command:\"'git status && rm'\"",
        'run_command:"git status && rm"',
    )


def test_a_command_key_is_the_whole_value() -> None:
    assert key_command("ls -la") == CommandKey(
        command="ls -la",
        compound=False,
        argv=("ls", "-la"),
        program="ls",
        reason="simple",
        protected=False,
        levels=(),
        covers="every simple `ls …` command, with any arguments",
        views=(DenyView("ls", ("ls", "-la"), 1),),
        read_only="ls",
    )
    compound = key_command("ls | wc")
    assert (compound.compound, compound.argv, compound.program, compound.reason) == (
        True,
        None,
        None,
        "pipeline",
    )


# Characters that matter to the key's encoding, so that collisions would be likely if possible.
_KEY_TEXT = st.text(
    alphabet=st.sampled_from(list("gits :\"'\\=|&;$ \t\nu\u0456\u200b")), max_size=12
)


@settings(max_examples=500, deadline=None)
@given(first=_KEY_TEXT, second=_KEY_TEXT)
def test_a_compound_key_is_never_shared_with_another_command(first: str, second: str) -> None:
    if first == second or not first.strip() or not second.strip():
        return
    one, other = key_command(first), key_command(second)
    if one.compound or other.compound:
        assert one.permission_key().raw != other.permission_key().raw


@pytest.mark.parametrize("command", ["", " ", "\t", "  \n "])
def test_a_blank_command_is_an_error(command: str) -> None:
    with pytest.raises(ValueError, match="empty command"):
        key_command(command)


def test_keys_are_cached() -> None:
    assert key_command("git status --short") is key_command("git status --short")


@pytest.mark.parametrize(
    ("text", "protected"),
    [
        ("codecoder.json", True),
        ("cat codecoder.json", True),
        ("cp x ./codecoder.json", True),
        ("--file=codecoder.json", True),
        ("'codecoder.json'", True),
        ("CODECODER.JSON", True),
        (".codecoder", True),
        ("rm -rf .codecoder/capabilities/x", True),
        ("sub/.codecoder/x", True),
        (".git/hooks/pre-commit", True),
        ("echo x > .git/config", True),
        ("cp -r evil/. .git", True),
        ("vendor/lib/.git/hooks/post-checkout", True),
        (".GIT/hooks/pre-commit", True),
        ("ls .git*", True),
        ("mycodecoder.jsonx", False),
        ("codecoder.json.bak", False),
        ("xcodecoder.json", False),
        (".codecoderrc", False),
        ("my.codecoder", False),
        (".gitignore", False),
        (".github/workflows/ci.yml", False),
        (".gitmodules", True),
        ("repo.git/config", False),
        ("git status", False),
        ("src/codecoder/json.py", False),
    ],
)
def test_protected_paths_are_matched_as_path_components(text: str, protected: bool) -> None:
    assert mentions_protected_path(text) is protected


@pytest.mark.parametrize(
    ("command", "protected"),
    [
        ("cat codecoder.json", True),
        ("echo x > .git/hooks/pre-commit", True),
        ("cp x .g'i't/hooks/pre-commit", True),  # the name appears only after quote removal
        ('cp x ".codecoder"/grants', True),
        ("git status", False),
        ("cat .gitignore", False),
    ],
)
def test_a_command_naming_a_protected_path_is_protected(command: str, protected: bool) -> None:
    assert key_command(command).protected is protected


# --- the program table and the launcher rule -----------------------------------------------

ORDINARY = [
    ("git log --oneline -n 5", "run_command:git:log"),
    ("git diff HEAD~1 -- README.md", "run_command:git:diff"),
    ("git status --short", "run_command:git:status"),
    ("ls -la src", "run_command:ls"),
    ("pytest -q tests/test_x.py", "run_command:pytest"),
    ("sed -n 1,20p f", "run_command:sed"),
    ("grep -rn foo src", "run_command:grep"),
    ("grep -rn test src", "run_command:grep"),
    ("npm test", "run_command:npm:test"),
    ("npm run test", "run_command:npm:run:test"),
    ("cargo build --release", "run_command:cargo:build"),
    ("make -j4", "run_command:make"),
    ("make test", "run_command:make:test"),
    ("python3 -m pytest -q", "run_command:python3:-m:pytest"),
    ("python3 tool.py --fast", "run_command:python3:tool.py"),
    ("awk '{print $1}' f", "run_command:awk"),
    ("find . -name '*.py'", "run_command:find"),
    ("go test ./...", "run_command:go:test"),
    ("git config --get user.name", "run_command:git:config"),
    ("tar -czf a.tar.gz src", "run_command:tar"),
    ("rg -n TODO src", "run_command:rg"),
    ("git push origin main", "run_command:git:push"),
    ("git push -u origin feature/x", "run_command:git:push"),
    ("git push git@github.com:a/b.git main", "run_command:git:push"),
    ("tar -tzf deps.tgz", "run_command:tar"),
    ("unzip -l deps.zip", "run_command:unzip"),
    ("curl -sSO https://example.com/a.txt", "run_command:curl"),
]


@pytest.mark.parametrize(("command", "raw"), ORDINARY)
def test_ordinary_agent_commands_stay_simple_and_grantable(command: str, raw: str) -> None:
    keyed = key_command(command)
    assert (keyed.compound, keyed.permission_key().raw) == (False, raw)


@pytest.mark.parametrize(
    "command",
    [
        # git: options, subcommands and URLs that run programs; config writes; aliases.
        "git grep -O'sh -c x' -e a",
        "git grep --open-files-in-pager=vim a",
        "git grep -nOvim a",
        "git rebase -x 'make test' HEAD~3",
        "git rebase --exec='make test' HEAD~3",
        "git rebase --exe=x HEAD~1",
        "git difftool -x meld HEAD",
        "git mergetool",
        "git clone -u evil . x",
        "git clone --upload-pack=evil . x",
        "git clone 'ext::sh -c evil' x",
        "git clone fd::3 x",
        "git fetch evil://host/x",
        "git ls-remote foo::bar",
        "git clone --template=/tmp/t . x",
        "git clone -c core.fsmonitor=evil . x",
        "git clone --config core.hooksPath=h . x",
        "git init --template=/tmp/t",
        "git bisect run make",
        "git bisect start",
        "git filter-branch --msg-filter evil HEAD",
        "git submodule foreach evil",
        "git submodule update",
        "git config core.fsmonitor evil",
        "git config --global core.pager evil",
        "git config alias.pp push",
        "git config --add x.y z",
        "git config set core.pager evil",
        "git config --unset user.name",
        "git config -e",
        "git pp",
        "git st",
        "git lfs pull",
        "git hook run pre-commit",
        "git credential fill",
        "git -p log",
        "git --paginate log",
        "git log --ext-diff",
        "git diff --output=/tmp/x",
        "git archive --exec=evil --remote=x HEAD",
        "git help status",
        "git help -w status",
        "git --exec-path=. status",
        "/usr/lib/git-core/git-grep -Oevil x",
        "git archive --remote=ext::sh HEAD",
        "git push ../evil.git main",
        "git push ./bare main",
        "git push evil.git main",
        "git push file:///tmp/x main",
        "git push /tmp/repo main",
        # Archives and downloads that write files the arguments do not name.
        "tar -xzf deps.tgz",
        "tar xf deps.tar",
        "tar --extract -f deps.tar",
        "unzip deps.zip",
        "wget -r http://example.com/",
        "wget --mirror http://example.com/",
        "curl -OJ http://example.com/x",
        "gunzip -N x.gz",
        "cpio -i -F a.cpio",
        "7z x a.7z",
        # Interpreters given inline code.
        "python3 -c 'import os'",
        "python3 -Bc 'import os'",
        "python -c x",
        "/usr/bin/python3.11 -c x",
        "perl -e 'system 1'",
        "perl -ne print f",
        "perl -E say",
        "perl '-Mstrict;system q(x)' f",
        "node -e x",
        "node --eval=x",
        "node -p 1",
        "node --inspect tool.js",
        "node --import 'data:text/javascript,require(1)' tool.js",
        "node --loader=data:text/javascript,x tool.js",
        "node -r https://example.com/x.js tool.js",
        "ruby -e x",
        "php -r x",
        "php -d auto_prepend_file=x f.php",
        "lua -e x",
        "Rscript -e x",
        "julia -e x",
        # sed, awk, sqlite3, editors, make, tar, find, rg, …
        "sed e",
        "sed '1e touch x' f",
        "sed 's/a/b/e' f",
        "sed 's|a|b|e' f",
        "sed 's/a/b/w out' f",
        "sed -n 'w out' f",
        "sed '/x/W out' f",
        "sed -e p -e 'e id' f",
        "sed --expression='1e id' f",
        "sed -i s/a/b/ f",
        "sed --in-place s/a/b/ f",
        "sed -ni p f",
        "sed -f script.sed f",
        "sed 's/a/b/' -z --unknown f",
        "sed 's/a' f",
        "awk 'BEGIN{system(\"x\")}'",
        "awk '{print | \"sh\"}' f",
        "awk '\"id\" | getline' f",
        "awk '{print > \"out\"}' f",
        "awk -f prog.awk f",
        "gawk -l ext '{}' f",
        "gawk -i inc.awk '{}' f",
        "gawk '@load \"x\"' f",
        "mawk -W exec prog f",
        "sqlite3 db 'select 1'",
        "sqlite3 db .shell",
        "sqlite3 -cmd '.shell id' db",
        "sqlite3 -init x db",
        "vim -c '!id' f",
        "vim +'!id' f",
        "ex -s f",
        "nvim --cmd x",
        "emacs --batch --eval x",
        "less '+!id' f",
        "make -f /tmp/evil.mk",
        "make -C ../other",
        "make SHELL=/tmp/x",
        "make CC=evil all",
        "make --eval='x: ; id'",
        "tar -xPf a.tar",
        "tar xPf a.tar",
        "tar -xf host:a.tar",
        "tar -cf - --use-compress-program=evil src",
        "find . -fprint0 out",
        "rg --pre evil x",
        "rg --pre=evil x",
        "rg -z x",
        "sort --compress-program=evil f",
        "split --filter=evil f",
        "fd -x evil",
        "curl -K cfg",
        "wget -e 'x=y' u",
        "gcc -wrapper evil a.c",
        "gcc -fplugin=evil.so a.c",
        "gcc @opts a.c",
        "npm exec evil",
        "npm x evil",
        "npm init evil",
        "npm config set script-shell /tmp/x",
        "npm --script-shell=/tmp/x test",
        "npm explore x -- evil",
        "yarn dlx evil",
        "pnpm exec evil",
        "cargo --config 'target.x.runner=\"evil\"' run",
        "cargo foo",
        "go test -exec evil ./...",
        "go build -toolexec=evil",
        "go env -w CC=evil",
        "pip config set global.x y",
        # Launchers, known and unknown.
        "setarch x86_64 touch M",
        "linux32 touch M",
        "linux64 touch M",
        "ssh-agent touch M",
        "logsave /dev/null touch M",
        "perf stat touch M",
        "dbus-run-session touch M",
        "ssh host id",
        "docker run img id",
        "kubectl exec pod -- id",
        "patch -p1 -i x.patch",
        "systemctl start x",
        "crontab f",
        "xdg-open f",
        "runwith touch M",
        "runwith ./evil",
        "runwith /bin/sh",
        "runwith --exec=touch",
        "runwith 'import os; os.system(1)'",
        "runwith '(system \"id\")'",
        "runwith '!id'",
    ],
)
def test_a_form_that_runs_another_program_is_compound(command: str) -> None:
    assert key_command(command).compound, key_command(command).reason


def test_an_unknown_launcher_on_path_fails_closed(tmp_path: Path) -> None:
    """A launcher the table has never heard of, installed on PATH, that execs its argument."""
    launcher = tmp_path / "bin" / "obscure-launcher"
    launcher.parent.mkdir()
    launcher.write_text('#!/bin/sh\nexec "$@"\n')
    launcher.chmod(0o755)
    search_path = f"{launcher.parent}:/usr/bin:/bin"
    for command in (
        "obscure-launcher touch M",
        "obscure-launcher -x 5 touch M",
        "obscure-launcher /usr/bin/touch M",
        "obscure-launcher ./payload",
        "obscure-launcher --run=touch M",
        "obscure-launcher 'touch M'",
    ):
        keyed = key_command(command, search_path)
        assert keyed.compound and "launcher rule" in keyed.reason, command
    # Its own plain uses stay simple: nothing in them names a program.
    assert not key_command("obscure-launcher --help", search_path).compound
    assert not key_command("obscure-launcher status", search_path).compound


def test_a_relative_path_entry_makes_every_bare_name_a_program(tmp_path: Path) -> None:
    assert key_command("mytool status", "/nonexistent").compound is False
    assert key_command("mytool status", ".:/usr/bin").compound is True


def test_a_tilde_inside_a_word_is_literal_but_not_after_an_equals_sign() -> None:
    assert key_command("git diff HEAD~1 -- README.md").argv == (
        "git",
        "diff",
        "HEAD~1",
        "--",
        "README.md",
    )
    for command in ("ls ~", "ls ~/x", "echo a=~/x", "echo x:~/y", "git log --since=~1"):
        assert key_command(command).compound, command


@pytest.mark.parametrize(
    ("command", "program"),
    [
        ("git push origin", "git"),
        ("/usr/bin/git push", "git"),
        ("/usr/lib/git-core/git-push origin", "git"),
        ("Python3.11 tool.py", "python"),
        ("/usr/bin/PYTHON3 x.py", "python"),
    ],
)
def test_deny_rules_see_a_program_by_its_canonical_name(command: str, program: str) -> None:
    (view,) = key_command(command).views
    assert view.program == program


@pytest.mark.parametrize(
    "command",
    [
        "node -r ./other.js tool.js",
        "node --require=/tmp/x.js tool.js",
        "node --import ./hook.mjs tool.js",
        "ruby -r ./other tool.rb",
        "ruby -r./other tool.rb",
        "python3 -W ignore::evil.Warning tool.py",
    ],
)
def test_an_option_that_loads_more_code_is_not_covered_by_a_grant_for_the_script(
    command: str,
) -> None:
    # `run_command:node:tool.js` says "only `node tool.js …`": the code a preload brings in is
    # not named there, so the narrowest grant for such a call is the exact command.
    key = key_command(command).permission_key()
    program = command.split()[0]
    assert (key.raw, key.levels[0].entry) == (
        f"run_command:{program}",
        f"run_command:{json.dumps(command)}",
    )
