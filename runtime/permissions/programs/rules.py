"""The rule builders most table entries are written with: `_launcher(why)` (always compound),
`_plain(about, runs=…)` (operands are data; the options in `runs` run or write something else),
`_interpreter(...)` (the script or module it runs is its level; inline code is compound) and
`_subcommand_tool(...)` (a program with subcommands: package managers, cargo, deno, go).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from codecoder.permissions.programs.form import Form, Rule
from codecoder.permissions.programs.options import (
    _options_and_operands,
    _spells,
    has_option,
)


def _launcher(why: str) -> Rule:
    def rule(program: str, args: Sequence[str], search_path: str) -> Form:
        return Form(f"{program} {why}")

    return rule


def _plain(about: str = "", runs: Iterable[str] = (), values: str = "") -> Rule:
    """Operands are data; `runs` are the options that make it run or write something else."""
    dangerous = tuple(runs)

    def rule(program: str, args: Sequence[str], search_path: str) -> Form:
        found = has_option(args, dangerous, values)
        if found is not None:
            return Form(f"{program} {found}: {about or 'runs another program'}")
        return Form(None, (), f"every simple `{program} …` command, with any arguments")

    return rule


def _interpreter(
    inline: Iterable[str],
    *,
    flags: Iterable[str] = (),
    values: Iterable[str] = (),
    module: str | None = None,
    compound: Iterable[str] = (),
    bundles: str = "",
    loads: Iterable[str] = (),
) -> Rule:
    """An interpreter: inline code (and `compound` options) is compound; the script or module
    it runs is its level. An option it does not know leaves the levels unnamed (None).

    `loads` are options that load more code before the script (node's `-r`/`--import`/
    `--loader`, ruby's `-r`, python's `-W` whose category names a module): a grant naming only
    the script must not cover them, so they leave the levels unnamed too, and a value that is
    code rather than a name (`data:text/javascript,…`, an `http:` URL) is inline code.
    """
    inline_options = tuple(inline)
    other = tuple(compound)
    loading = tuple(loads)
    known_flags = frozenset(flags)
    takes_value = frozenset(values) | frozenset(loading) | ({module} if module else set())

    def rule(program: str, args: Sequence[str], search_path: str) -> Form:
        covers = f"every simple `{program} …` command: any script or code file it is given"
        found = has_option(args, inline_options, bundles)
        if found is not None:
            return Form(f"{program} {found}: inline code")
        found = has_option(args, other, bundles)
        if found is not None:
            return Form(f"{program} {found}: runs code the arguments carry")
        loaded = _loaded(args, loading, bundles)
        if loaded is not None and _URL_CODE.match(loaded):
            return Form(f"{program} {loaded!r}: inline code, or code fetched from a URL")
        i = 0
        while i < len(args):
            word = args[i]
            if word == "--":
                rest = args[i + 1 :]
                script: tuple[str, ...] = (rest[0],) if rest else ()
                return Form(None, None if loaded is not None else script, covers)
            if not word.startswith("-") or word == "-":
                return Form(None, None if loaded is not None else (word,), covers)
            if module is not None and word == module and i + 1 < len(args):
                named = (module, args[i + 1])
                return Form(None, None if loaded is not None else named, covers)
            if word in takes_value:
                i += 2
                continue
            name = word.split("=", 1)[0]
            if word not in known_flags and name not in takes_value and name[:2] not in loading:
                return Form(None, None, covers)
            i += 1
        return Form(None, None if loaded is not None else (), covers)

    return rule


# A value of a code-loading option that is code, not a name: `data:…`, `http(s):…`, `file:…`.
_URL_CODE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]+:(?!:)")


def _loaded(args: Sequence[str], options: Sequence[str], bundles: str) -> str | None:
    """The value of the first option in `options` that `args` spell (`-r X`, `-rX`,
    `--import=X`), or None when there is none."""
    for i, word in enumerate(args):
        if word == "--":
            return None
        for option in options:
            if not _spells(word, option, bundles):
                continue
            if word == option:
                return args[i + 1] if i + 1 < len(args) else ""
            if "=" in word:
                return word.split("=", 1)[1]
            return word[word.index(option[1]) + 1 :] if not option.startswith("--") else ""
    return None


def _subcommand_tool(
    *,
    simple: Iterable[str],
    runs: Mapping[str, str],
    options: Iterable[str] = (),
    values: Iterable[str] = (),
    aliases: Mapping[str, str] | None = None,
    scripts: Iterable[str] = (),
    unknown_is_script: bool = False,
    config_reads: Iterable[str] = (),
) -> Rule:
    """A program with subcommands: `simple` are keyed by name (canonical after `aliases`);
    `runs` are compound (with why); `scripts` take a script name as a second level; `options`
    anywhere are compound; an unknown subcommand is compound unless `unknown_is_script`."""
    known = frozenset(simple)
    compound_options = tuple(options)
    takes_value = tuple(values)
    names = dict(aliases or {})
    script_runners = frozenset(scripts)
    config_read_words = frozenset(config_reads)

    def rule(program: str, args: Sequence[str], search_path: str) -> Form:
        covers = (
            f"every simple `{program} …` command: any subcommand (install, publish …) and "
            "arguments, which run the project's scripts and what they install"
        )
        found = has_option(args, compound_options)
        if found is not None:
            return Form(f"{program} {found}: runs a program or sets what later commands run")
        for word in args:
            if any(marker in word for marker in ("script-shell", "node-options", "linker=")):
                return Form(f"{program} {word}: sets a program that later steps run")
        _, operands = _options_and_operands(args, takes_value)
        operands = [word for word in operands if not word.startswith("+")]  # `+toolchain`
        if not operands:
            return Form(None, (), covers)
        sub = names.get(operands[0], operands[0])
        if sub in runs:
            if sub == "config" and operands[1:2] and operands[1] in config_read_words:
                return Form(None, (sub, operands[1]), covers)
            return Form(f"{program} {sub}: {runs[sub]}")
        if sub in script_runners:
            return Form(None, (sub, *operands[1:2]), covers)
        if sub in known:
            return Form(None, (sub,), covers)
        if unknown_is_script:
            return Form(None, ("run", sub), covers)
        return Form(
            f"{program} {sub}: not a subcommand the table knows (an external {program}-{sub} "
            "or an alias can run anything)"
        )

    return rule
