"""Keys for shell commands: what a grant for `run_command` is a grant *for* (ADR 0036).

A command is either **simple** or **compound**, and the difference decides its key:

* A simple command is one program with literal arguments, `git log --oneline -n 5`. Its key is
  the program, `run_command:git`, and it is executed *without a shell* as exactly the argv
  computed here, so what runs is what was keyed.
* Everything else is compound and keyed by the whole string, JSON-quoted:
  `run_command:"git status && git push"`. It runs in bash, exactly as the human approved it.

The point of the split is that a grant for `git` must never cover `git status && git push`: a
simple key may only be given to a string in which nothing but that one program can run. So the
rule fails closed. A command is simple only when all of these hold, and compound otherwise:

1. Our own strict lexer accepts it: words of unquoted `[A-Za-z0-9_@%+=:,./-]`, single-quoted
   strings and double-quoted strings without `$`, backtick, backslash or `!`, separated by
   spaces and tabs, with no control or invisible character anywhere. The lexer is the reason
   the rule can be trusted: it admits a language small enough to read in one sitting, in which
   quote removal is the only transformation bash performs.
2. bashlex agrees: one CommandNode made of plain words (no expansion, assignment or redirect),
   whose words equal our argv. bashlex alone is not enough (it reads `*`, `{a,b}` and `${X}` as
   plain words and raises on `$((…))`, `[[ ]]`, `time`), and our lexer alone would have no second
   opinion; a disagreement is compound.
3. The program is a plain name (`[A-Za-z0-9_@%+,./-]`, no `=`), not a job spec (`%1`), not a bash
   reserved word, and not a builtin that changes the shell or has no binary of the same name.
4. The program is not a launcher of another program (`env`, `sudo`, `xargs`, any shell, …),
   compared by basename so that `/usr/bin/env` counts too.
5. No argument turns the program into a launcher (`find -exec`, `git -c core.pager=…`).

Keys are collision-free: a compound key's action is `json.dumps(command)`, which is injective and
always starts with `"`, a character no simple program name may contain. `ensure_ascii` turns
look-alike and invisible characters into `\\uXXXX`, so they cannot hide in a key either.

`CommandKey.protected` says the command names one of the runtime's protected paths
(`codecoder.json`, `.codecoder/`, `.git/`), which no grant beyond Once may cover.
"""

from __future__ import annotations

import functools
import json
import re
import string
import threading
import unicodedata
from dataclasses import dataclass

from runtime.protected import mentions_protected_path
from runtime.tool import KeyStyle, PermissionKey

__all__ = ["CommandKey", "key_command", "mentions_protected_path"]


@dataclass(frozen=True, slots=True)
class CommandKey:
    """What `key_command` found: simple (with the argv to exec) or compound (with why)."""

    command: str
    compound: bool
    argv: tuple[str, ...] | None
    program: str | None
    reason: str
    protected: bool

    def permission_key(self, tool: str = "run_command") -> PermissionKey:
        """The key a grant must match: the program, or the whole command JSON-quoted."""
        if self.program is not None:
            action = self.program
        else:
            action = json.dumps(self.command, ensure_ascii=True)
        return PermissionKey(
            tool=tool,
            action=action,
            raw=f"{tool}:{action}",
            style=KeyStyle.COMMAND,
            compound=self.compound,
            argv=self.argv,
            protected=self.protected,
            subject=self.command,
        )


_UNQUOTED = frozenset(string.ascii_letters + string.digits + "_@%+=:,./-")
_BLANKS = frozenset(" \t")
# Characters that keep their special meaning inside double quotes (`!` only in interactive
# shells, but the rule does not depend on how bash happens to be started).
_ACTIVE_IN_DOUBLE_QUOTES = frozenset("$`\\!")
# Control (Cc), format (Cf: zero-width, bidi overrides), line/paragraph separators, surrogates,
# private-use and unassigned characters are refused even inside quotes: they can make an argument
# look different from what runs.
_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})

# `=` is left out: a program word containing it is an assignment.
_PROGRAM_NAME = re.compile(r"[A-Za-z0-9_@%+,./-]+")

_RESERVED_WORDS = frozenset(
    {
        *("if", "then", "else", "elif", "fi", "case", "esac", "for", "select", "while", "until"),
        *("do", "done", "in", "function", "time", "coproc", "{", "}", "[[", "]]", "!"),
    }
)
# Builtins that act on the shell itself or have no binary of the same name: run without a shell
# they would fail or do something other than what bash would have done. Harmless builtins that
# also exist as binaries (echo, printf, test, [, true, false, pwd, kill) stay simple.
_SHELL_BUILTINS = frozenset(
    {
        *("cd", "pushd", "popd", "dirs", "export", "declare", "typeset", "local", "readonly"),
        *("set", "unset", "shopt", "alias", "unalias", "enable", "hash", "ulimit", "umask"),
        *("source", ".", "exec", "eval", "builtin", "command", "trap", "read", "mapfile"),
        *("readarray", "let", "getopts", "shift", "exit", "logout", "return", "break"),
        *("continue", "wait", "jobs", "fg", "bg", "disown", "suspend", "history", "fc"),
        *("complete", "compgen", "compopt", "caller", "bind", "help", "times", "type"),
    }
)
# Programs that run another program named in their arguments: a grant for the launcher would
# cover whatever it launches.
_LAUNCHERS = frozenset(
    {
        # Shells, whatever their arguments: `bash x.sh` runs whatever x.sh says.
        *("bash", "sh", "dash", "zsh", "ksh", "mksh", "ash", "yash", "posh", "rbash", "fish"),
        *("csh", "tcsh", "pwsh", "busybox", "toybox", "exec", "eval", "command", "builtin"),
        # Another user, another root, another namespace.
        *("sudo", "sudoedit", "doas", "su", "runuser", "pkexec", "setpriv", "sg", "newgrp"),
        *("chroot", "unshare", "nsenter", "firejail", "bwrap", "proot", "fakeroot", "runcon"),
        *("capsh", "gosu", "su-exec", "chpst", "systemd-run", "cgexec"),
        # Same program, different conditions.
        *("env", "nice", "renice", "ionice", "chrt", "taskset", "numactl", "cpulimit"),
        *("prlimit", "timeout", "nohup", "setsid", "stdbuf", "unbuffer", "flock", "faketime"),
        *("eatmydata", "nocache", "torsocks", "proxychains", "proxychains4", "tini", "dumb-init"),
        *("dbus-launch", "xvfb-run", "catchsegv"),
        # Programs given as arguments, repeated, traced or fetched.
        *("xargs", "parallel", "watch", "time", "script", "expect", "strace", "ltrace"),
        *("valgrind", "gdb", "npx"),
    }
)
# `bash5.2`, `python-3` and the like: a version suffix does not make a shell something else.
_VERSION_SUFFIX = re.compile(r"[-._]?[0-9][0-9._-]*$")

# Options that make a program run another program (or write where it should not).
# `_EXEC_OPTIONS` count anywhere in the arguments; `_GLOBAL_EXEC_OPTIONS` only before the first
# operand (git's subcommand), because after it the same letters mean something else (`git log -C`).
# Every git global option that takes a separate value is listed, dangerous or not, so that the
# scan may stop at the first operand without mistaking a value for the subcommand.
_EXEC_OPTIONS: dict[str, frozenset[str]] = {
    "find": frozenset(
        {"-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprint0", "-fprintf", "-fls"}
    ),
    "git": frozenset({"--upload-pack", "--receive-pack", "--exec", "--extcmd"}),
    "rsync": frozenset({"-e", "--rsh", "--rsync-path"}),
    "tar": frozenset(
        {
            "-I",
            "-F",
            "--to-command",
            "--use-compress-program",
            "--checkpoint-action",
            "--info-script",
            "--new-volume-script",
        }
    ),
    # ProxyCommand, LocalCommand, KnownHostsCommand: options and config files run commands.
    "ssh": frozenset({"-o", "-F"}),
    "scp": frozenset({"-o", "-F", "-S"}),
    "sftp": frozenset({"-o", "-F", "-S"}),
    "zip": frozenset({"-TT", "--unzip-command"}),
}
_GLOBAL_EXEC_OPTIONS: dict[str, frozenset[str]] = {
    "git": frozenset(
        {
            "-c",
            "-C",
            "--config-env",
            "--exec-path",
            "--git-dir",
            "--work-tree",
            "--bare",
            "--namespace",
            "--super-prefix",
            "--list-cmds",
            "--attr-source",
            "--shallow-file",
        }
    ),
}

# What a character that ends the strict language usually starts, for the reason string.
_LOOKAHEAD_REASONS: tuple[tuple[str, str], ...] = (
    ("$((", "arithmetic expansion"),
    ("$(", "command substitution"),
    ("$'", "ANSI-C quoting"),
    ('$"', "locale quoting"),
    ("$", "parameter expansion"),
    ("`", "command substitution"),
    ("||", "command list"),
    ("|", "pipeline"),
    ("&&", "command list"),
    ("&>", "redirection"),
    ("&", "background job"),
    (";", "command list"),
    ("<(", "process substitution"),
    (">(", "process substitution"),
    ("<<<", "here-string"),
    ("<<", "heredoc"),
    ("<", "redirection"),
    (">", "redirection"),
    ("((", "arithmetic command"),
    ("(", "subshell"),
    (")", "subshell"),
    ("{", "brace expansion or group"),
    ("}", "brace expansion or group"),
    ("*", "glob"),
    ("?", "glob"),
    ("[", "glob"),
    ("]", "glob"),
    ("~", "tilde expansion"),
    ("#", "comment"),
    ("!", "history expansion or negation"),
    ("\\\n", "line continuation"),
    ("\\\r", "line continuation"),
    ("\\", "backslash escape"),
    ("\n", "newline"),
    ("\r", "newline"),
)

# The node kinds bashlex produces, for the reason string when it sees structure our lexer did not.
_NODE_REASONS = {
    "pipeline": "pipeline",
    "list": "command list",
    "compound": "compound command",
    "if": "compound command",
    "for": "compound command",
    "while": "compound command",
    "until": "compound command",
    "function": "function definition",
    "reservedword": "reserved word",
    "assignment": "assignment",
    "redirect": "redirection",
    "parameter": "parameter expansion",
    "tilde": "tilde expansion",
    "commandsubstitution": "command substitution",
    "processsubstitution": "process substitution",
    "heredoc": "heredoc",
}

# bashlex parses with one module-level ply parser that keeps its stacks on itself: two threads
# parsing at once would share them.
_BASHLEX_LOCK = threading.Lock()


class _Compound(Exception):
    """Internal: the command is compound, for the reason given."""


@functools.lru_cache(maxsize=4096)
def key_command(command: str) -> CommandKey:
    """Key `command` as simple or compound (see the module docstring). Blank commands are errors."""
    if not command.strip():
        raise ValueError("empty command")
    protected = mentions_protected_path(command)
    try:
        argv = _lex(command)
        _check_parser_agrees(command, argv)
        _check_program(argv)
    except _Compound as compound:
        return CommandKey(
            command=command,
            compound=True,
            argv=None,
            program=None,
            reason=str(compound),
            protected=protected,
        )
    # Quote removal can reveal a name the raw text hides (`.g'i't/hooks`).
    protected = protected or any(mentions_protected_path(word) for word in argv)
    return CommandKey(
        command=command,
        compound=False,
        argv=argv,
        program=argv[0],
        reason="simple",
        protected=protected,
    )


def _lex(command: str) -> tuple[str, ...]:
    """The argv bash would build from `command`, if it is in the strict language of rule 1."""
    words: list[str] = []
    current: list[str] | None = None
    i = 0
    while i < len(command):
        char = command[i]
        if char in _BLANKS:
            if current is not None:
                words.append("".join(current))
                current = None
            i += 1
            continue
        if current is None:
            current = []
        if char in _UNQUOTED:
            current.append(char)
            i += 1
        elif char in "'\"":
            end = command.find(char, i + 1)
            if end < 0:
                raise _Compound("unterminated quote")
            for j in range(i + 1, end):
                inner = command[j]
                if _is_invisible(inner) or (char == '"' and inner in _ACTIVE_IN_DOUBLE_QUOTES):
                    raise _Compound(_describe(command, j))
            current.append(command[i + 1 : end])
            i = end + 1
        else:
            raise _Compound(_describe(command, i))
    if current is not None:
        words.append("".join(current))
    return tuple(words)


def _is_invisible(char: str) -> bool:
    return unicodedata.category(char) in _INVISIBLE_CATEGORIES


def _describe(command: str, index: int) -> str:
    for start, reason in _LOOKAHEAD_REASONS:
        if command.startswith(start, index):
            return reason
    char = command[index]
    category = unicodedata.category(char)
    if category == "Cc":
        return f"control character U+{ord(char):04X}"
    if category in _INVISIBLE_CATEGORIES:
        return f"invisible character U+{ord(char):04X}"
    if not char.isascii():
        return f"non-ASCII character U+{ord(char):04X}"
    return f"character {char!r}"


def _check_parser_agrees(command: str, argv: tuple[str, ...]) -> None:
    # Imported here: building bashlex's parser tables costs ~0.1 s, which a process that only
    # reads files, or whose commands our own lexer already found compound, need not pay.
    import bashlex

    try:
        with _BASHLEX_LOCK:
            trees = bashlex.parse(command)
    except Exception as exc:  # bashlex raises far more than ParsingError; all of it is "no"
        # Not str(exc): a ParsingError at EOF reports the position in whichever command first hit
        # EOF in this process (ply caches the lexer on bashlex's shared EOF token).
        message = getattr(exc, "message", None) or str(exc)
        raise _Compound(f"parse error: {type(exc).__name__}: {message}") from None
    if len(trees) != 1:
        raise _Compound("several commands")
    (tree,) = trees
    if tree.kind != "command":
        raise _Compound(_NODE_REASONS.get(tree.kind, "parser disagreement"))
    words: list[str] = []
    for part in tree.parts:
        if part.kind != "word":
            raise _Compound(_NODE_REASONS.get(part.kind, "parser disagreement"))
        inner = getattr(part, "parts", None)
        if inner:
            raise _Compound(_NODE_REASONS.get(inner[0].kind, "parser disagreement"))
        word = part.word
        if not isinstance(word, str):
            raise _Compound("parser disagreement")
        words.append(word)
    if tuple(words) != argv:
        raise _Compound("parser disagreement")


def _check_program(argv: tuple[str, ...]) -> None:
    program = argv[0]
    if "=" in program:
        raise _Compound("assignment")
    if not _PROGRAM_NAME.fullmatch(program):
        raise _Compound(f"program name {program!r}")
    if program.startswith("%"):
        raise _Compound("job spec")  # bash runs `%1` as `fg %1`
    # Lower-cased because case-insensitive file systems run `/usr/bin/ENV` as env.
    name = program.rsplit("/", 1)[-1].lower()
    if name in _RESERVED_WORDS:
        raise _Compound(f"reserved word {name!r}")
    if name in _SHELL_BUILTINS:
        raise _Compound(f"shell builtin {name!r}")
    if name in _LAUNCHERS or _VERSION_SUFFIX.sub("", name) in _LAUNCHERS:
        raise _Compound(f"launcher {name!r}")
    args = argv[1:]
    for option in _EXEC_OPTIONS.get(name, frozenset()):
        if any(_is_option(word, option) for word in args):
            raise _Compound(f"{name} {option}")
    for option in _GLOBAL_EXEC_OPTIONS.get(name, frozenset()):
        for word in args:
            if not word.startswith("-"):
                break
            if _is_option(word, option):
                raise _Compound(f"{name} {option}")


def _is_option(word: str, option: str) -> bool:
    """Whether `word` spells `option`, including the spellings parsers accept besides the name.

    `-cvalue` for a short option; `--opt=value` and unambiguous abbreviations (`--upload=…`,
    which git's parse-options accepts) for a long one. Matching an ambiguous abbreviation too is
    fine: the program would refuse it, and here it only makes the command compound.
    """
    if word == option:
        return True
    if not option.startswith("--"):
        if len(option) != 2:
            return False
        # Short options bundle (`rsync -avze CMD`): the letter anywhere in a bundle counts.
        return word.startswith("-") and not word.startswith("--") and option[1] in word[1:]
    name = word.split("=", 1)[0]
    return len(name) > 2 and option.startswith(name)
