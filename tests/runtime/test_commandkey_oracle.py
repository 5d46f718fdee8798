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
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import event, example, given, settings
from hypothesis import strategies as st

from runtime.commandkey import key_command

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
    "assignment": ["FOO=1 ", "X=a ", "a=b=c ", "PATH=/x "],
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
