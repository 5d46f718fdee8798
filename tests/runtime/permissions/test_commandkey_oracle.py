"""A differential oracle for `key_command`: bash itself says what a simple command runs.

Whenever `key_command` calls a string simple, the *original* string is run by a real bash whose
PATH holds only recording stubs (and whose not-found handler records too). The command was
correctly keyed only if bash ran exactly one program, the keyed one, with exactly `argv[1:]`.
Globs would expand against the files of the working directory, `~` to the home directory, `$X`
to nothing, so an expansion the keyer missed shows up as a different argv.
"""

from __future__ import annotations

import itertools
import operator
import os
import shlex
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import event, example, given, settings
from hypothesis import strategies as st

from codecoder.permissions.commandkey import key_command

PROGRAMS = ("git", "ls", "cargo", "make", "npm", "find", "prog1", "prog2")

# Builtins that key_command deliberately keeps simple because a binary of the same name exists:
# bash runs the builtin, so no stub would record them.
HARMLESS_BUILTINS = frozenset({"echo", "printf", "test", "[", "true", "false", "pwd", "kill"})

# Every record is the field count, the program's name and its arguments, each NUL-terminated:
# arguments of a simple command cannot contain NUL, so the log parses one way only.
STUB = """#!/bin/sh
printf '%s\\0' "$#" "${0##*/}" "$@" >> "$LOG"
"""
NOT_FOUND_HANDLER = """() {
    printf '%s\\0' "$(($# - 1))" "$@" >> "$LOG"
    return 127
}"""

SAFE_CHARS = "abcxyzABZ0189_@%+=:,./-"
# Inside single quotes everything but a quote is literal, `$` and backslash included.
SINGLE_QUOTED_CHARS = 'abz 09-_.:;|&$`\\!*?[]{}~#()<>"=é'
# `$` is the one character here bash expands: it keeps the keyer's rule for it under test.
DOUBLE_QUOTED_CHARS = "abz 09-_.:;|&*?[]{}~#()<>'=é$"

# Shell features by class. Each word makes a command of plain words compound, and nearly every
# one makes bash run something other than the literal argv: let through, the oracle sees it.
TAMPERED_ARGUMENTS = {
    "list": [";prog2", "; prog2 x", "&& prog2", "|| prog2 y", "& prog2", "| prog2", "\nprog2 z"],
    "newline": ["\r\nprog2", "\nprog2", "\\\nprog2"],
    "parameter": ["$X", "${X}", "${X:-d}", "a$X", "$1", "$'a\\x41'", '$"a"', "$((1+1))"],
    "substitution": ["$(prog2 s)", "`prog2 t`", "<(prog2 w)", ">(prog2 x)"],
    "double quotes": ['"$X"', '"a${X}b"', '"$(prog2 u)"', '"`prog2 v`"', '"a\\\\b"', '"\\$X"'],
    "glob": ["*", "a?", "[ab]*", "?b", "a*", "[!a]2"],
    "brace": ["{a,b}", "x{1..2}", "{a,b}c", "{,x}"],
    "tilde": ["~", "~/x", "x=~/y", "~root"],
    "escape": ["\\n", "a\\ b", "\\$X", "'a'\\''b'", "g\\it"],
    "comment": ["#c", "# x y"],
    "redirection": [">out", "2>&1", "<a1", ">>out", "&>out", "<<<x", "1>&2"],
    "syntax": ["(prog2)", "{ prog2; }", "!", "((1))", "[[ x ]]"],
}
TAMPERED_PROGRAMS = {
    "assignment": ["FOO=1 ", "X=a ", "a=b=c ", "PATH=/x ", "TZ=$X ", "LANG=~ ", "TZ='a b' "],
    # Harmless assignments (runtime.permissions.assignments): simple, bash runs the same argv.
    "harmless assignment": ["TZ=UTC ", "LANG=C.UTF-8 LC_ALL=C ", "NO_COLOR= ", "TZ=Europe/Paris "],
    "builtin": ["cd ", "export ", "set ", "read ", "type ", "hash ", "alias ", "source ", ". "],
    "launcher builtin": ["eval ", "exec ", "command ", "builtin ", "local ", "declare "],
    "reserved word": ["time ", "! ", "if ", "{ ", "while ", "function ", "coproc "],
    "job spec": ["%", "%+", "%-"],
    "quoting": ["'", '"', "\\", "$", "$'"],
}
CHARACTERS = [
    *(";", "|", "&", "&&", "||", " ", "\t", "\n", "\r", "'", '"', "$", "`", "\\", "*", "?"),
    *("[", "]", "{", "}", "~", "#", "(", ")", "<", ">", "!", "=", "$X", "%", "é", "\x1b"),
    *("\x00", "\x07", "\x0b", "\u200b", "\u202e", "\u0456", "\uff47", "\u00a0"),
]

safe_words = st.text(alphabet=SAFE_CHARS, min_size=1, max_size=6)
plain_words = st.one_of(
    safe_words,
    safe_words,
    st.text(alphabet=SINGLE_QUOTED_CHARS, max_size=6).map(lambda text: f"'{text}'"),
    st.text(alphabet=DOUBLE_QUOTED_CHARS, max_size=6).map(lambda text: f'"{text}"'),
    st.lists(safe_words | st.sampled_from(["''", '""', "'a b'", '"c d"']), min_size=2).map("".join),
)
separators = st.sampled_from([" ", " ", "  ", "\t"])


@st.composite
def command_families(draw: st.DrawFn) -> list[str]:
    """A command of plain words, then that command tampered with once per class of shell feature.

    One feature at a time makes that feature the only reason the variant is compound, so a keyer
    that lets a whole class through is caught on the first family whose variant bash expands. The
    last member gets random characters inserted, for what the classes do not foresee.
    """
    words = [draw(st.sampled_from(PROGRAMS)), *draw(st.lists(plain_words, max_size=4))]
    gaps = draw(st.lists(separators, min_size=1, max_size=3))

    def join(prefix: str, parts: list[str]) -> str:
        return prefix + parts[0] + "".join(map(operator.add, itertools.cycle(gaps), parts[1:]))

    family = [join("", words)]
    for feature in sorted(TAMPERED_ARGUMENTS):
        at = draw(st.integers(min_value=1, max_value=len(words)))
        tampered = draw(st.sampled_from(TAMPERED_ARGUMENTS[feature]))
        family.append(join("", [*words[:at], tampered, *words[at:]]))
    for feature in sorted(TAMPERED_PROGRAMS):
        family.append(join(draw(st.sampled_from(TAMPERED_PROGRAMS[feature])), words))
    chaos = family[0]
    for position, character in draw(
        st.lists(
            st.tuples(st.integers(min_value=0), st.sampled_from(CHARACTERS)), min_size=1, max_size=3
        )
    ):
        at = position % (len(chaos) + 1)
        chaos = chaos[:at] + character + chaos[at:]
    family.append(chaos)
    return family


@dataclass(frozen=True)
class Bash:
    """A bash that records what it runs, instead of running anything."""

    executable: str
    stubs: Path
    workdir: Path
    log: Path

    def run(self, command: str) -> list[tuple[str, ...]]:
        self.log.write_bytes(b"")
        subprocess.run(
            [self.executable, "--noprofile", "--norc", "-c", command],
            env={
                "PATH": str(self.stubs),
                "LOG": str(self.log),
                "BASH_FUNC_command_not_found_handle%%": NOT_FOUND_HANDLER,
            },
            cwd=self.workdir,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=10,
            check=False,
        )
        return parse_log(self.log.read_bytes())


def parse_log(data: bytes) -> list[tuple[str, ...]]:
    fields = [field.decode("utf-8", "surrogateescape") for field in data.split(b"\0")]
    assert fields.pop() == "", "a record was cut short"
    records: list[tuple[str, ...]] = []
    while fields:
        count = int(fields.pop(0))
        records.append(tuple(fields[: count + 1]))
        del fields[: count + 1]
    return records


@pytest.fixture(scope="module")
def bash(tmp_path_factory: pytest.TempPathFactory) -> Bash:
    executable = shutil.which("bash")
    if executable is None:
        pytest.skip("bash is not installed")
    root = tmp_path_factory.mktemp("oracle")
    stubs = root / "bin"
    stubs.mkdir()
    for program in PROGRAMS:
        stub = stubs / program
        stub.write_text(STUB)
        stub.chmod(0o755)
    workdir = root / "work"
    workdir.mkdir()
    for name in ("a1", "ab", "b2", "x=1", "{a,b}"):
        (workdir / name).write_text("")
    return Bash(executable=executable, stubs=stubs, workdir=workdir, log=root / "log")


def test_the_recording_bash_records_every_program_it_runs(bash: Bash) -> None:
    assert bash.run("prog1 'a b' \"\" c; nothere x; git status") == [
        ("prog1", "a b", "", "c"),
        ("nothere", "x"),
        ("git", "status"),
    ]


def test_bash_runs_exactly_what_a_simple_key_says(bash: Bash) -> None:
    outcomes: Counter[str] = Counter()

    @settings(max_examples=300, deadline=None)
    @given(family=command_families())
    @example(family=["prog1 a b", "git commit -m 'fix: a b'", 'prog1 "a b" c\'d\'e""'])
    @example(family=["prog1 --opt=x@y %s a:b,c +1", "prog1 '$X' '\\n' '`x`'"])
    @example(family=["prog1 a;prog2 b", "prog1 *", "prog1 {a,b}", "prog1 ~", 'prog1 "$X"'])
    @example(family=["exec prog1 a", "%prog1", "FOO=1 prog1", "'prog1' x", "nothere 'x y'"])
    @example(family=["TZ=UTC prog1 a", "LANG=C\tprog1 'b c'", "TZ=UTC;prog1", "'TZ'=UTC prog1"])
    def check(family: list[str]) -> None:
        for command in family:
            key = key_command(command)
            outcome = "compound" if key.compound else "simple"
            outcomes[outcome] += 1
            event(outcome)
            if key.argv is None or key.program in HARMLESS_BUILTINS:
                continue
            assert bash.run(command) == [key.argv], f"{command!r} was keyed as {key.argv!r}"

    check()
    assert outcomes["simple"] >= 100 and outcomes["compound"] >= 100, dict(outcomes)


# --- real programs whose options, subcommands or scripts run other programs ------------------
#
# The stubs above record a program without running it, so they cannot show a program running
# another one. Here the keyed program is the real one (behind a wrapper that records it and
# execs the binary), in a scratch git repository with two commits and files to work on, and
# everything else it could run is a recording stub: `payload`, the pager and editor names git
# and others fall back to, and `sh`/`bash` looked up on PATH. A command keyed simple must leave
# exactly one record, its own argv: anything more is a program the key did not name. (Helpers a
# program runs by its own design, such as tar -z running gzip, are left out of the vocabulary:
# what PATH resolves their names to is the execution environment's concern, not the key's.)

PAYLOAD_STUBS = ("payload", "touch", "less", "more", "vi", "vim", "ssh", "pager", "editor")
PASS_THROUGH = ("sh", "bash")

REAL_VOCABULARY: dict[str, tuple[str, ...]] = {
    "git": (
        *("status", "log", "grep", "rebase", "difftool", "config", "bisect", "clone", "help"),
        *("submodule", "diff", "show", "version", "pp", "archive", "fetch", "ls-remote"),
        *("-O", "-Opayload", "--open-files-in-pager=payload", "-x", "--exec=payload", "-c"),
        *("core.pager=payload", "core.fsmonitor=payload", "--upload-pack=payload", "-u"),
        *("ext::payload", "evil://x", "--ext-diff", "--no-pager", "-P", "-p", "run", "foreach"),
        *("payload", "HEAD", "HEAD~1", "-e", "x", "--output=out", ".", "copy", "-y", "-a"),
        *("--list", "alias.pp", "!payload", "--textconv", "-i", "--remote=.", "--exec"),
    ),
    "sed": (
        *("-n", "-e", "-i", "-E", "-s", "--sandbox", "p", "1e payload", "s/a/payload/e"),
        *("w out", "1,2p", "s/a/b/", "e payload", "s/a/b/w out2", "1!G;h;$!d", "y/ab/ba/"),
        *("f", "g", "$p", "/a/p", "s/a/b/ge", "W out3", "2q", "1r f", "-f", "f"),
    ),
    "awk": (
        *("{print}", 'BEGIN{system("payload")}', '{print | "payload"}', '{print > "out"}'),
        *("$1 > 2", '"payload" | getline', "-F", ":", "-v", "a=1", "f", "-f", "NR==1"),
        *('{printf "%s", $0 > "out"}', "{print $1}", "-W", "exec"),
    ),
    "find": (
        *(".", "-name", "*", "f", "-exec", "payload", ";", "{}", "+", "-print", "-execdir"),
        *("-ok", "-fprint", "out", "-type", "-maxdepth", "1", "-okdir", "-fls"),
    ),
    "perl": (
        *("-e", 'system "payload"', "-n", "-p", "-M", "strict;system q(payload)", "tool.pl"),
        *("-w", "-E", "-MO=Deparse", "-x", "f", "-l"),
    ),
    "make": (
        *("-f", "Makefile", "-C", ".", "SHELL=payload", "all", "--eval=x: ; payload", "-j2"),
        *("-n", "-s", "x", "MAKE=payload"),
    ),
    "tar": (
        *("-cf", "a.tar", "f", "--to-command=payload", "-xf", "-I", "payload", "-tf"),
        *("--checkpoint-action=exec=payload", "--checkpoint=1", "-O", "host:a.tar", "-v"),
    ),
    "xargs": ("payload", "-0", "-n", "1", "-I", "{}", "echo"),
    "env": ("payload", "-i", "A=1"),
    "timeout": ("5", "payload", "-s", "KILL"),
    "python3": ("-c", "import os; os.system('payload')", "tool.py", "-B", "-u", "-m", "json.tool"),
    "sqlite3": ("db.sqlite", ".shell payload", "-safe", "SELECT 1", ".system payload", "-cmd"),
    "node": ("-e", "require('child_process').execSync('payload')", "tool.js", "-p", "1"),
}

REAL_BINARIES = {
    "python3": sys.executable,
    **{name: shutil.which(name) for name in REAL_VOCABULARY if name != "python3"},
}
REAL_PROGRAMS = tuple(sorted(name for name, found in REAL_BINARIES.items() if found))

WRAPPER = """#!/bin/sh
printf '%s\\0' "$#" "${{0##*/}}" "$@" >> "$LOG"
exec {binary} "$@"
"""


@dataclass(frozen=True)
class RealBash:
    """A bash whose PATH has the real programs (recorded) and recording stubs for the rest."""

    executable: str
    path: str
    template: Path
    root: Path

    def run(self, command: str) -> list[tuple[str, ...]]:
        workdir = self.root / "work"
        if workdir.exists():
            shutil.rmtree(workdir)
        shutil.copytree(self.template, workdir, symlinks=True)
        log = self.root / "log"
        log.write_bytes(b"")
        subprocess.run(
            [self.executable, "--noprofile", "--norc", "-c", command],
            env={
                "PATH": self.path,
                "LOG": str(log),
                "HOME": str(self.root / "home"),
                "GIT_CONFIG_NOSYSTEM": "1",
                "GIT_TERMINAL_PROMPT": "0",
                "BASH_FUNC_command_not_found_handle%%": NOT_FOUND_HANDLER,
            },
            cwd=workdir,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=20,
            check=False,
        )
        return parse_log(log.read_bytes())


@pytest.fixture(scope="module")
def real_bash(tmp_path_factory: pytest.TempPathFactory) -> RealBash:
    executable = shutil.which("bash")
    if executable is None or shutil.which("git") is None:
        pytest.skip("bash and git are needed")
    root = tmp_path_factory.mktemp("real-oracle")
    real, stubs, home = root / "real", root / "stubs", root / "home"
    for directory in (real, stubs, home):
        directory.mkdir()
    for name in REAL_PROGRAMS:
        wrapper = real / name
        wrapper.write_text(WRAPPER.format(binary=REAL_BINARIES[name]))
        wrapper.chmod(0o755)
    for name in PAYLOAD_STUBS:
        (stubs / name).write_text(STUB)
        (stubs / name).chmod(0o755)
    for name in PASS_THROUGH:
        (stubs / name).write_text(WRAPPER.format(binary=f"/bin/{name}"))
        (stubs / name).chmod(0o755)
    template = root / "template"
    template.mkdir()
    for name, text in {
        "f": "a b\nb a\n",
        "tool.py": "pass\n",
        "tool.pl": "1;\n",
        "tool.js": "\n",
        "Makefile": "all:\n\t@:\nx:\n\t@:\n",
    }.items():
        (template / name).write_text(text)
    plain = {"PATH": "/usr/bin:/bin", "HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1"}

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=template, env=plain, check=True, capture_output=True)

    git("init", "-q")
    git("-c", "user.name=t", "-c", "user.email=t@t", "add", "f")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    (template / "f").write_text("a b\nc d\n")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "two")
    (template / "f").write_text("changed\n")
    return RealBash(executable, f"{real}:{stubs}", template, root)


@st.composite
def real_commands(draw: st.DrawFn) -> str:
    program = draw(st.sampled_from(REAL_PROGRAMS))
    vocabulary = REAL_VOCABULARY[program]
    words = draw(st.lists(st.sampled_from(vocabulary), min_size=1, max_size=4))
    return " ".join([program, *(shlex.quote(word) for word in words)])


def test_the_real_oracle_sees_a_program_run_by_another(real_bash: RealBash) -> None:
    assert real_bash.run("git grep -Opayload -e a") == [
        ("git", "grep", "-Opayload", "-e", "a"),
        ("payload", "f"),
    ]
    assert real_bash.run("sed -n '1e payload' f")[1:] == [("payload",)]


def test_a_simple_command_runs_only_the_program_it_is_keyed_by(real_bash: RealBash) -> None:
    outcomes: Counter[str] = Counter()
    search_path = real_bash.path

    @settings(max_examples=int(os.environ.get("ORACLE_EXAMPLES", "400")), deadline=None)
    @given(command=real_commands())
    @example(command="git status --short")
    @example(command="git log --oneline -n 1")
    @example(command="git diff HEAD~1 -- f")
    @example(command="sed -n 1,2p f")
    @example(command="awk '{print $1}' f")
    @example(command="find . -name f")
    @example(command="make -j2")
    @example(command="python3 tool.py")
    def check(command: str) -> None:
        key = key_command(command, search_path)
        outcomes["compound" if key.compound else "simple"] += 1
        event(f"{command.split()[0]} {'compound' if key.compound else 'simple'}")
        if key.argv is None:
            return
        assert real_bash.run(command) == [key.argv], f"{command!r} was keyed {key.reason}"

    check()
    assert outcomes["simple"] >= 40 and outcomes["compound"] >= 100, dict(outcomes)
