"""sed's forms, read from its options and its script.

`sed -i` is compound, though it writes only the files it names: a grant for sed earned by
reading (`sed -n 1,20p f`) must not cover rewriting `~/.bashrc`, and edit_file does in-place
edits in the sandbox. sed's `e`, `s///e`, `w`, `W` and `s///w` are found by reading the script
as GNU sed does; a script this reader cannot follow, or one read from a file (`-f`), is
compound.
"""

from __future__ import annotations

from collections.abc import Sequence

from codecoder.permissions.programs.form import Form
from codecoder.permissions.programs.options import _spells

_SED_FLAGS = frozenset(
    {
        *("-n", "--quiet", "--silent", "-E", "-r", "--regexp-extended", "-s", "--separate"),
        *("-z", "--null-data", "-u", "--unbuffered", "--posix", "--debug", "--sandbox"),
        *("--follow-symlinks", "-b", "--binary"),
    }
)


def _sed(program: str, args: Sequence[str], search_path: str) -> Form:
    covers = f"every simple `{program} …` command that only reads and prints"
    scripts: list[str] = []
    operands: list[str] = []
    i = 0
    while i < len(args):
        word = args[i]
        if word == "--":
            operands.extend(args[i + 1 :])
            break
        if not word.startswith("-") or word == "-":
            operands.append(word)
        elif word in ("-e", "--expression") and i + 1 < len(args):
            scripts.append(args[i + 1])
            i += 1
        elif word.startswith("--expression="):
            scripts.append(word.split("=", 1)[1])
        elif word.startswith("-e") and len(word) > 2:
            scripts.append(word[2:])
        elif _spells(word, "-i") or _spells(word, "--in-place"):
            return Form(
                f"{program} -i: edits files in place (a grant for sed that reads must not "
                "cover one that writes; edit_file does this in the sandbox)"
            )
        elif _spells(word, "-f") or _spells(word, "--file"):
            return Form(f"{program} -f: a script from a file the table cannot read")
        elif word in ("-l", "--line-length") and i + 1 < len(args):
            i += 1
        elif word not in _SED_FLAGS and not word.startswith("--line-length="):
            bundle = word[1:] if not word.startswith("--") else ""
            if not bundle or any(f"-{letter}" not in _SED_FLAGS for letter in bundle):
                return Form(f"{program} {word}: an option the table does not know")
        i += 1
    if not scripts:
        if not operands:
            return Form(None, (), covers)
        scripts.append(operands[0])
    problem = sed_script_problem("\n".join(scripts))
    if problem is not None:
        return Form(f"{program} script: {problem}")
    return Form(None, (), covers)


_SED_PLAIN_COMMANDS = frozenset("=dDgGhHnNpPxzF")


def sed_script_problem(script: str, *, reads: bool = True) -> str | None:
    """Why a sed script is not plain (it runs, writes or cannot be read), or None.

    Reads the script as GNU sed does: addresses, then one command; `e` and `s///e` run
    commands, `w`, `W` and `s///w` write files. Anything this reader does not recognise is
    reported too, so an unreadable script is never called plain. With `reads=False` the `r`
    and `R` commands, which read a file, are reported as well (an output filter reads only its
    input: `runtime.permissions.programs.readonly`).
    """
    i, n = 0, len(script)

    def skip_blanks(at: int) -> int:
        while at < n and script[at] in " \t":
            at += 1
        return at

    def regex_end(at: int, delimiter: str) -> int:
        """The index of the closing delimiter of a regex or replacement starting at `at`."""
        while at < n:
            char = script[at]
            if char == "\\":
                at += 2
                continue
            if char == delimiter:
                return at
            if char == "\n":
                raise _Unreadable("a newline inside a regular expression")
            at += 1
        raise _Unreadable("an unterminated regular expression")

    def address(at: int) -> int:
        if at < n and script[at].isdigit():
            while at < n and (script[at].isdigit() or script[at] == "~"):
                at += 1
            return at
        if at < n and script[at] == "$":
            return at + 1
        if at < n and script[at] in "/\\":
            delimiter = "/"
            if script[at] == "\\":
                if at + 1 >= n:
                    raise _Unreadable("a backslash at the end")
                delimiter = script[at + 1]
                at += 1
            at = regex_end(at + 1, delimiter) + 1
            while at < n and script[at] in "IM":
                at += 1
            return at
        return at

    try:
        while i < n:
            i = skip_blanks(i)
            if i >= n:
                break
            if script[i] in ";\n":
                i += 1
                continue
            if script[i] == "#":
                end = script.find("\n", i)
                i = n if end < 0 else end
                continue
            start = i
            i = address(i)
            if i > start:
                i = skip_blanks(i)
                if i < n and script[i] == ",":
                    i = skip_blanks(i + 1)
                    if i < n and script[i] in "+~":
                        i += 1
                        while i < n and script[i].isdigit():
                            i += 1
                    else:
                        i = address(i)
                i = skip_blanks(i)
            while i < n and script[i] == "!":
                i = skip_blanks(i + 1)
            if i >= n:
                raise _Unreadable("an address without a command")
            command = script[i]
            i += 1
            if command in _SED_PLAIN_COMMANDS or command in "{}":
                continue
            if command in "qQlL":
                i = skip_blanks(i)
                while i < n and script[i].isdigit():
                    i += 1
                continue
            if command in ":btTv":
                while i < n and script[i] not in ";\n":
                    i += 1
                continue
            if command in "aic":
                end = script.find("\n", i)
                while end > 0 and script[end - 1] == "\\":
                    end = script.find("\n", end + 1)
                i = n if end < 0 else end
                continue
            if command in "rR":
                if not reads:
                    return f"the {command} command reads a file"
                end = script.find("\n", i)
                i = n if end < 0 else end
                continue
            if command == "e":
                return "the e command runs a shell command"
            if command in "wW":
                return f"the {command} command writes a file"
            if command == "y":
                if i >= n:
                    raise _Unreadable("y without its strings")
                delimiter = script[i]
                i = regex_end(i + 1, delimiter)
                i = regex_end(i + 1, delimiter) + 1
                continue
            if command == "s":
                if i >= n or script[i] in "\\\n":
                    raise _Unreadable("s without a delimiter")
                delimiter = script[i]
                i = regex_end(i + 1, delimiter)
                i = regex_end(i + 1, delimiter) + 1
                while i < n and script[i] not in ";\n}#":
                    flag = script[i]
                    if flag == "e":
                        return "the s///e flag runs the pattern space as a command"
                    if flag == "w":
                        return "the s///w flag writes a file"
                    if flag not in "gpiImM0123456789 \t":
                        raise _Unreadable(f"the s flag {flag!r}")
                    i += 1
                continue
            raise _Unreadable(f"the command {command!r}")
    except _Unreadable as unreadable:
        return f"a script the table cannot read ({unreadable})"
    return None


class _Unreadable(Exception):
    """Internal: a sed script this reader does not understand."""
