"""Keys for shell commands: what a grant for `run_command` is a grant *for* (ADR 0036).

A command is either **simple** or **compound**, and the difference decides its key:

* A simple command is one program with literal arguments, `git log --oneline -n 5`. Its key is
  the program and its levels, `run_command:git:log`, and it is executed *without a shell* as
  exactly the argv computed here, so what runs is what was keyed.
* Everything else is compound and keyed by the whole string, JSON-quoted:
  `run_command:"git status && git push"`. It runs in bash, exactly as the human approved it.

The point of the split is that a grant for `git` must never cover `git status && git push`: a
simple key may only be given to a string in which nothing but that one program can run. So the
rule fails closed. A command is simple only when all of these hold, and compound otherwise:

1. Our own strict lexer accepts it: words of unquoted `[A-Za-z0-9_@%+=:,./-]` (and `~` inside
   a word after one of those other than `=` and `:`, as in `HEAD~1`), single-quoted
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
4. The program table (`runtime.permissions.programs`) says this form of the program runs nothing but
   itself: not a launcher (`env`, `sudo`, `xargs`, any shell, `setarch` …), no option, script
   or subcommand that runs another program or writes a file the arguments do not name
   (`find -exec`, `git -c …`, `sed 'e …'`, `python3 -c`), and, for a program the table does
   not know, no argument that names a program on PATH or by path (the launcher rule).

A simple command's key names the program as written and the levels the table gives it:
`git status --short` → `run_command:git:status`, `npm run test` → `run_command:npm:run:test`,
`ls -la` → `run_command:ls`. Level words are escaped (`runtime.permissions.keys.escape_literal`), so
a script named `test:unit` or `*` is one level matched literally.

Keys are collision-free: a compound key's action is `json.dumps(command)`, which is injective and
always starts with `"`, a character no simple program name may contain. `ensure_ascii` turns
look-alike and invisible characters into `\\uXXXX`, so they cannot hide in a key either.

What deny rules see (`CommandKey.views`): for a simple command, its program's canonical name
and its words; for a compound one (`compound_views`, computed when a deny rule first needs
it), every command bashlex finds in it (after quote removal,
inside substitutions, and again inside strings handed to shells such as `bash -c '…'`), at
every word that could be a program (so `sudo git push` is seen as `git push` too), plus a
textual scan of the whole string with quotes and backslashes removed, which stands in where
bashlex cannot parse and errs towards refusal. Words bash would expand are `ANY`.

**Read-only command lines and output filters** (`runtime.permissions.commandline`,
`runtime.permissions.programs.readonly`). A simple command in a read-only form has `read_only`
set (the programs, `ls`); so does a compound command made only of read-only forms joined by
`|`, `&&`, `||`, `;` with no redirection but descriptor duplication and `/dev/null`, which
stays keyed by the whole string. A pipeline whose first command is simple and whose other
commands are output filters (`npm test 2>&1 | tail -20`) is keyed as its first command
(`run_command:npm:test`): the filters read only its output, so they add nothing a grant for it
does not cover; `filters` is what follows its argv, run by bash after it, and deny rules see
every command of the line. `needs_host` says why a command would fail contained
(`runtime.permissions.programs.host`).

**Harmless assignments first** (`runtime.permissions.assignments`): `TZ=UTC python -m pytest`
is keyed as `python -m pytest` when every assignment it starts with is harmless and the rest is
keyed by its program (simple, or an output-filter pipeline); `assignments` holds them and bash
sets them when it runs. In a read-only or filter line each part may start with them. Anything
else is keyed as before, the whole line included.

`CommandKey.protected` says the command names one of the runtime's protected paths
(`codecoder.json`, `.codecoder/`, `.git/`), the runtime's state or the user's configuration
directory, or runs the runtime's own CLI (`codecoder`): no grant beyond Once may cover it. On
the host the command's words are also followed through symlinks when it is keyed
(`foundation.protected.reaches_protected`, in `run_command`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
import shlex
import string
import threading
import unicodedata
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from codecoder.foundation.protected import (
    mentions_protected_path,
    mentions_runtime_directory,
)
from codecoder.permissions.assignments import split_assignments
from codecoder.permissions.braces import brace_expanded
from codecoder.permissions.commandline import (
    CommandLine,
    parser_agrees,
    split_command_line,
)
from codecoder.permissions.keys import (
    DenyView,
    GrantLevel,
    KeyStyle,
    PermissionKey,
    escape_literal,
)
from codecoder.permissions.programs import ANY, classify, deny_view, is_glob
from codecoder.permissions.programs.host import needs_host
from codecoder.permissions.programs.readonly import why_not_filter, why_not_read_only

__all__ = [
    "CommandKey",
    "clear_cache",
    "compound_views",
    "key_command",
    "mentions_protected_path",
    "never_simple",
    "textual_words",
]

RUNTIME_CLI = "codecoder"


@dataclass(frozen=True, slots=True)
class CommandKey:
    """What `key_command` found: simple (with the argv to exec) or compound (with why).

    `levels` are the words after the program that the key names (`("status",)`), `None` when
    the program table cannot name them (the narrowest grant is then the exact command);
    `covers` says what a grant for the program alone covers; `views` are what deny rules see
    of a simple command (of a compound one: `compound_views`).
    """

    command: str
    compound: bool
    argv: tuple[str, ...] | None
    program: str | None
    reason: str
    protected: bool
    levels: tuple[str, ...] | None = ()
    covers: str = ""
    views: tuple[DenyView, ...] = ()
    workspace: str = (
        ""  # the workspace's code it runs (`runtime.permissions.programs.WORKSPACE_CODE`)
    )
    read_only: str = ""  # the programs of a read-only command or command line (`ls, head`)
    filters: str = ""  # what follows the first command of an output-filter pipeline
    needs_host: str = ""  # why it would fail contained (`git push talks to a remote …`)
    # The harmless assignments set aside before the command keyed (`TZ=UTC`), and that command.
    assignments: tuple[str, ...] = ()
    keyed: str = ""

    def permission_key(self, tool: str = "run_command") -> PermissionKey:
        """The key a grant must match: the program and its levels, or the whole command."""
        whole = json.dumps(self.keyed or self.command, ensure_ascii=True)
        if self.program is None:
            action = whole
            levels: tuple[GrantLevel, ...] = (
                GrantLevel(f"{tool}:{whole}", "exactly this command"),
            )
            path: tuple[str, ...] = ()
        else:
            path = (self.program, *(self.levels or ()))
            action = ":".join(escape_literal(word) for word in path)
            program_wide = GrantLevel(f"{tool}:{self.program}", self.covers)
            if self.levels is None:
                narrow = GrantLevel(f"{tool}:{whole}", "exactly this command")
                levels = (narrow, program_wide)
            elif self.levels:
                shown = " ".join(path)
                levels = (
                    GrantLevel(f"{tool}:{action}", f"only `{shown} …` commands"),
                    program_wide,
                )
            else:
                levels = (program_wide,)
        return PermissionKey(
            tool=tool,
            action=action,
            raw=f"{tool}:{action}",
            style=KeyStyle.COMMAND,
            compound=self.compound,
            argv=self.argv,
            protected=self.protected,
            subject=self.command,
            levels=levels,
            path=path,
            views=self.views,
            read_only=self.read_only,
            filters=self.filters,
            needs_host=self.needs_host,
            assignments=self.assignments,
            notes=(
                (f"sets {' '.join(self.assignments)} (harmless: keyed without it)",)
                if self.assignments
                else ()
            ),
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

# A bracket expression of a glob, in the plain characters of a word (`[abc]`, `[!0-9]`).
_BRACKET_EXPRESSION = re.compile(r"\[[!^]?[A-Za-z0-9_@%+=:,./-]+\]")
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
# Words bash would expand, or that start or join other commands, in the textual scan.
# `=` and `!` too: what follows them can be a command (`--cmd=rm`, `PROMPT_COMMAND='rm x'`,
# vim's `-c '!rm x'`), and `,` separates brace alternatives (`{git,push}`).
_TEXT_SEPARATORS = re.compile(r"[\s;&|()<>{}=!,]+")
_QUOTING = re.compile(r"[\\'\"]")
# Strings given to shells are parsed again, to this depth.
_NESTING = 3

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


# A part of a command line: its harmless assignments and the text after them.
_Assigned = tuple[tuple[str, ...], str]


class _Compound(Exception):
    """Internal: the command is compound, for the reason given."""


def key_command(command: str, search_path: str | None = None) -> CommandKey:
    """Key `command` as simple or compound (see the module docstring). Blank commands are errors.

    `search_path` is the PATH the program table's launcher rule looks names up in (this
    process's by default); keys are cached per command and PATH.
    """
    return _key_command(command, os.environ.get("PATH", "") if search_path is None else search_path)


def clear_cache() -> None:
    """Forget every cached key (benchmarks measure the first keying of a command this way)."""
    _key_command.cache_clear()


@functools.lru_cache(maxsize=4096)
def _key_command(command: str, search_path: str) -> CommandKey:
    if not command.strip():
        raise ValueError("empty command")
    protected = mentions_protected_path(command) or mentions_runtime_directory(command)
    split = split_assignments(command)
    if split is not None:
        # Harmless assignments first (`TZ=UTC pytest`): keyed as the command after them when
        # that is keyed by its program; a compound rest is keyed whole, as before.
        assignments, rest = split
        after = _key_command(rest, search_path)
        if not after.compound:
            return dataclasses.replace(
                after,
                command=command,
                keyed=rest,
                assignments=assignments,
                protected=protected or after.protected,
            )
    try:
        argv = _lex(command)
        _check_parser_agrees(command, argv)
        _check_shell_words(argv)
        form = classify(argv, search_path)
        if form.compound is not None:
            raise _Compound(form.compound)
    except _Compound as compound:
        protected = protected or _runs_runtime_cli(textual_words(command))
        reason = _beyond_globs(command, search_path) if str(compound) == "glob" else str(compound)
        read = _read_line(command)
        if read is not None:
            line, argvs, globbed, assigned = read
            keyed = _command_line_key(
                command, search_path, protected, reason, line, argvs, globbed, assigned
            )
            if keyed is not None:
                return keyed
        else:
            argvs = _parsed_commands(command)
        return CommandKey(
            command=command,
            compound=True,
            argv=None,
            program=None,
            reason=reason,
            protected=protected,
            needs_host=_needs_host(argvs),
        )
    # Quote removal can reveal a name the raw text hides (`.g'i't/hooks`).
    protected = (
        protected
        or _runs_runtime_cli(argv[:1])
        or any(mentions_protected_path(w) or mentions_runtime_directory(w) for w in argv)
    )
    return CommandKey(
        command=command,
        compound=False,
        argv=argv,
        program=argv[0],
        reason="simple",
        protected=protected,
        levels=form.levels,
        covers=form.covers,
        views=(deny_view(tuple(word.lower() for word in argv)),),
        workspace=form.workspace,
        read_only="" if why_not_read_only(argv) else argv[0],
        needs_host=needs_host(argv) or "",
    )


def _beyond_globs(command: str, search_path: str) -> str:
    """Why `command`, compound for a glob, is compound besides: what the strict reading finds
    once glob patterns are words (`X=1 ls *` is an assignment, `ls * > out` a redirection); "glob"
    when nothing else does."""
    try:
        argv = _lex(command, globs=True)
        _check_parser_agrees(command, argv)
        _check_shell_words(argv)
        form = classify(argv, search_path)
    except _Compound as compound:
        return str(compound)
    return "glob" if form.compound is None else form.compound


def _read_line(
    command: str,
) -> tuple[CommandLine, list[tuple[str, ...]], bool, list[_Assigned]] | None:
    """A command line of several parts (or one with redirections or glob patterns), each
    part's words as our own lexer reads them after its harmless assignments, whether they hold
    glob patterns, and each part's assignments and the text after them; None when it is not
    one (bashlex is slow: `_command_line_key` asks it only for a line that could be read-only
    or filtered)."""
    line = split_command_line(command)
    if line is None:
        return None
    assigned = [split_assignments(part.words) or ((), part.words) for part in line.parts]
    try:
        argvs, globbed = [_lex(text) for _, text in assigned], False
    except _Compound:
        try:
            argvs, globbed = [_lex(text, globs=True) for _, text in assigned], True
        except _Compound:
            return None
    if len(line.parts) == 1 and not line.parts[0].redirects and not globbed:
        return None
    return line, argvs, globbed, assigned


def _command_line_key(
    command: str,
    search_path: str,
    protected: bool,
    reason: str,
    line: CommandLine,
    argvs: list[tuple[str, ...]],
    globbed: bool,
    assigned: list[_Assigned],
) -> CommandKey | None:
    """The key of a command line of simple commands (see the module docstring), when it is
    read-only as a whole (still compound, for `reason`) or an output-filter pipeline; None
    otherwise (it stays compound). A line with glob patterns (`globbed`) may only be read-only:
    whatever names they expand to, it runs where the kernel keeps everything read-only, and no
    grant for its first command stretches over names nobody saw."""
    # A glob stands for any number of names: judged as two, a form that counts its operands
    # (`uniq IN [OUT]` writes OUT) is not read-only with one.
    judged = [_as_many(argv) for argv in argvs] if globbed else argvs
    read_only = all(why_not_read_only(argv) is None for argv in judged)
    filtered = (
        not globbed
        and not read_only
        and line.pipeline
        and all(why_not_filter(argv) is None for argv in argvs[1:])
    )
    if not (read_only or filtered) or not _parser_agrees_on(command, line, argvs, assigned):
        return None
    if read_only:
        return CommandKey(
            command=command,
            compound=True,
            argv=None,
            program=None,
            reason=reason,
            protected=protected,
            read_only=", ".join(dict.fromkeys(argv[0] for argv in argvs)),
            needs_host=_needs_host(argvs),
        )
    head = _key_command(line.parts[0].words, search_path)
    if head.compound or head.levels is None or head.argv is None or head.assignments:
        # The first command names no grant of its own to stand under (assignments before it
        # were set aside by the caller already: a line that still has them is keyed whole).
        return None
    return CommandKey(
        command=command,
        compound=False,
        argv=head.argv,
        program=head.program,
        reason=f"{head.program} with output filters",
        protected=protected or head.protected,
        levels=head.levels,
        covers=head.covers,
        views=compound_views(command),
        workspace=head.workspace,
        filters=_filters(line, argvs, assigned),
        needs_host=head.needs_host,
    )


def _as_many(argv: tuple[str, ...]) -> tuple[str, ...]:
    """`argv` with each word bash would expand into file names given twice."""
    return tuple(w for word in argv for w in ((word, word) if is_glob(word) else (word,)))


def _parser_agrees_on(
    command: str, line: CommandLine, argvs: list[tuple[str, ...]], assigned: list[_Assigned]
) -> bool:
    """bashlex reads every part as our lexer did, and the whole line as the same parts, each
    with the assignments we set aside before its words."""
    try:
        for (_, text), argv in zip(assigned, argvs, strict=True):
            _check_parser_agrees(text, argv)
    except _Compound:
        return False
    firsts = [assignments for assignments, _ in assigned]
    return parser_agrees(command, line, argvs, _BASHLEX_LOCK, firsts)


def _filters(
    line: CommandLine, argvs: Sequence[tuple[str, ...]], assigned: Sequence[_Assigned]
) -> str:
    """What bash runs after the first command's argv: its redirections, then each operator and
    filter, re-quoted from the words read, after its harmless assignments (`2>&1 | tail -20`)."""
    pieces = list(line.parts[0].redirects)
    parts = zip(line.operators, line.parts[1:], argvs[1:], assigned[1:], strict=True)
    for operator, part, argv, (assignments, _) in parts:
        pieces += [operator, *assignments, shlex.join(argv), *part.redirects]
    return " ".join(pieces)


def _needs_host(commands: Sequence[Sequence[str]]) -> str:
    """Why one of `commands` would fail contained, or ""."""
    for argv in commands:
        if argv and ANY not in argv[:1]:
            why = needs_host(argv)
            if why is not None:
                return why
    return ""


def _runs_runtime_cli(words: Sequence[str]) -> bool:
    """Whether a word could be the runtime's own command line, `codecoder`: it trusts project
    files, revokes grants and makes calls with `--allow KEY`, so, like a protected path, no
    grant beyond Once may cover running it (a session grant for `codecoder` would otherwise
    cover `codecoder trust --yes` and `codecoder call … --allow run_command:*`)."""
    return any(word.rsplit("/", 1)[-1].lower() == RUNTIME_CLI for word in words)


def _lex(command: str, *, globs: bool = False) -> tuple[str, ...]:
    """The argv bash would build from `command`, if it is in the strict language of rule 1;
    with `globs`, unquoted glob patterns (`*`, `?`, `[!a-z]`) are words too, left as written:
    what the line looks like, not what runs (only for a read-only line: `_read_line`)."""
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
        if char in _UNQUOTED or (globs and char in "*?"):
            current.append(char)
            i += 1
        elif globs and (match := _BRACKET_EXPRESSION.match(command, i)) is not None:
            current.append(match.group())
            i = match.end()
        elif char == "~" and current and command[i - 1] in _UNQUOTED and command[i - 1] not in "=:":
            # Bash expands a tilde only at the start of a word or after `=`/`:` in an
            # assignment; `HEAD~1` is a literal tilde.
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


def _check_shell_words(argv: tuple[str, ...]) -> None:
    """Rule 3: a plain program name, not a job spec, reserved word or shell builtin."""
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


def never_simple(program: str) -> str | None:
    """Why every command of `program` is compound, whatever its arguments; None if some are not.

    A grant naming such a program (`run_command:bash`, `run_command:sudo`, `run_command:cd`)
    can never match: `codecoder check` says so.
    """
    try:
        _check_shell_words((program,))
    except _Compound as compound:
        return str(compound)
    return classify((program,), "").compound


# --- what deny rules see in a compound command ---------------------------------------------


@functools.lru_cache(maxsize=1024)
def compound_views(command: str) -> tuple[DenyView, ...]:
    """What deny rules see in a compound command (see the module docstring).

    Computed when a deny rule is first matched against the command, not when it is keyed: a
    compound key needs no parse of its own, and most projects deny nothing.
    """
    views: dict[tuple[str, int, tuple[str, ...]], DenyView] = {}
    for argv in _commands_in(command, 0):
        lowered = tuple(word.lower() for word in argv)
        for i, word in enumerate(lowered):
            # Every word that could be a program: a launcher (`sudo`, `xargs`, `find -exec`)
            # runs the words after it as a command.
            if i and word.startswith("-") and word != ANY:
                if not word.startswith("--"):
                    # A short option's value can be attached to it, after other letters of a
                    # bundle (`env -iS'rm x'`, `sh -ec'rm x'`): each tail may be the program.
                    for k in range(2, min(len(word), _BUNDLE)):
                        tail = (*lowered[:i], word[k:], *lowered[i + 1 :])
                        view = deny_view(tail, i)
                        views.setdefault((view.program, view.start, view.words), view)
                continue
            view = deny_view(lowered, i)
            views.setdefault((view.program, view.start, view.words), view)
    return tuple(views.values())


def _commands_in(command: str, depth: int) -> Iterator[tuple[str, ...]]:
    """Every command in `command`: what bashlex sees (where it can parse) and the textual scan."""
    parsed = _parsed_commands(command)
    yield from parsed
    for argv in parsed:
        expanded = brace_expanded(argv)
        if expanded != argv:
            yield expanded  # `{git,push}`, `g{i,}t push`: bash builds the words first
    yield textual_words(command)
    if depth >= _NESTING:
        return
    for argv in parsed:
        for word in argv[1:]:
            if word == ANY:
                continue
            # A string handed to a shell (`bash -c 'git push'`, `ssh host 'rm x'`).
            if " " in word or any(char in word for char in ";&|\n"):
                yield from _commands_in(word, depth + 1)
            # A value given to an option or a name (`--cmd=rm`, `alias p='git push'`).
            if "=" in word and word.split("=", 1)[1]:
                yield from _commands_in(word.split("=", 1)[1], depth + 1)


# How many letters of a short-option bundle may come before an attached program.
_BUNDLE = 10


def _parsed_commands(command: str) -> list[tuple[str, ...]]:
    import bashlex

    try:
        with _BASHLEX_LOCK:
            trees = bashlex.parse(command)
    except Exception:  # the textual scan stands in for whatever bashlex cannot parse
        return []
    found: list[tuple[str, ...]] = []
    for tree in trees:
        _walk(tree, found)
    return found


def _walk(node: Any, found: list[tuple[str, ...]]) -> None:
    if getattr(node, "kind", None) == "command":
        words = [part for part in node.parts if getattr(part, "kind", None) == "word"]
        if words:
            found.append(tuple(ANY if _expands(word) else word.word for word in words))
    for value in vars(node).values():
        children: Sequence[Any] = value if isinstance(value, list) else (value,)
        for child in children:
            if hasattr(child, "kind"):
                _walk(child, found)


def _expands(word: Any) -> bool:
    text = word.word
    return (
        bool(getattr(word, "parts", None))
        or not isinstance(text, str)
        or "$" in text
        or "`" in text
    )


def textual_words(command: str) -> tuple[str, ...]:
    """The whole string as one list of words, quotes and backslashes removed: crude on purpose.

    Removing every quote and backslash joins what quote removal would join (`pu''sh`, `pu\\sh`),
    and the separators split what could be separate commands; a word holding `$` or a backtick
    could become anything.
    """
    text = _QUOTING.sub("", command.replace("\\\n", ""))
    return tuple(
        ANY if "$" in token or "`" in token else token
        for token in _TEXT_SEPARATORS.split(text)
        if token
    )
