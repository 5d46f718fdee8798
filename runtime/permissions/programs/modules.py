"""Python's module runners: `python3 -m MODULE ARGS`, where what runs is the module's choice.

A grant for `python3 -m timeit` was read as a grant for a benchmark, but timeit runs the
statements its arguments give: `python3 -m timeit 'import os; os.system(…)'` is inline code,
like `python3 -c`. So are the profilers and debuggers (cProfile, profile, pdb, trace: the
script or module their arguments name, and pdb's `-c` commands), runpy, code, doctest, pydoc
(it imports what it is given), inspect, webbrowser … A module's arguments are judged by what
the module is (`module_problem`):

    a standard-library module known to take only data   simple (json.tool, venv, unittest,
      (`_DATA`), without its options that run or write     http.server without --cgi, …)
      elsewhere
    any other standard-library module                   compound: it may run what its
                                                        arguments say (timeit, pdb, …), and a
                                                        module the table does not know fails
                                                        closed
    a module named like a program of the table         that program's rule, on its arguments
      (pip, pytest, black, mypy …)
    any other module (the project's, a third party's)   the launcher rule on its arguments;
                                                        and a `-m` or `-c` among them (coverage,
                                                        debugpy, pyinstrument run another
                                                        module or inline code) is compound

Python's own option parser is followed to find the module (`python_module`): options bundle
(`-Im timeit`, `-mtimeit`, `-Bsm pdb`), and `-c`, `-m`, `-W`, `-X` take the rest of the word or
the next one.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence

from codecoder.permissions.programs.form import Form, Rule
from codecoder.permissions.programs.launcher_rule import _unknown
from codecoder.permissions.programs.options import has_option

__all__ = ["module_problem", "module_runner", "python_module"]

# Standard-library modules whose command line takes only data, and the options of each that
# run something or write files their arguments do not name.
_DATA: Mapping[str, tuple[str, ...]] = {
    **dict.fromkeys(
        (
            *("json.tool", "venv", "ensurepip", "unittest", "compileall", "py_compile"),
            *("zipapp", "tabnanny", "ast", "dis", "tokenize", "pyclbr", "base64", "calendar"),
            *("gzip", "uuid", "platform", "sysconfig", "site", "mimetypes", "filecmp"),
            *("quopri", "uu", "pickletools", "this", "random"),
        ),
        (),
    ),
    "http.server": ("--cgi",),  # runs the CGI scripts of the directory it serves
    # Extracting writes the files the archive names, as tar -x does.
    "zipfile": ("-e", "--extract"),
    "tarfile": ("-e", "--extract"),
}
# Why a standard-library module's arguments are code (for the reason of the key).
_CODE: Mapping[str, str] = {
    "timeit": "runs the statements its arguments give (and the -s setup code)",
    "cprofile": "runs the script or module its arguments name, profiled",
    "profile": "runs the script or module its arguments name, profiled",
    "pdb": "runs the script its arguments name, and the debugger commands of -c",
    "trace": "runs the script or module its arguments name",
    "runpy": "runs the module its arguments name",
    "code": "is an interactive interpreter",
    "asyncio": "is an interactive interpreter",
    "doctest": "runs the examples in the files it is given",
    "pydoc": "imports (runs) the modules and files it is given, or serves them",
    "inspect": "imports (runs) the module it is given",
    "webbrowser": "starts a browser",
    "antigravity": "starts a browser",
    "idlelib": "is an editor that runs code",
    "sqlite3": "runs the SQL its arguments give",
}
_STDLIB = frozenset(name.lower() for name in sys.stdlib_module_names)


def python_module(args: Sequence[str]) -> tuple[str, list[str]] | None:
    """The module `python ARGS` runs and the arguments it gets, as CPython's option parser
    reads them; None when it runs a script, inline code or nothing."""
    i = 0
    while i < len(args):
        word = args[i]
        if word in ("-", "--") or not word.startswith("-"):
            return None
        if word.startswith("--"):
            i += 2 if word == "--check-hash-based-pycs" else 1
            continue
        for j, letter in enumerate(word[1:], start=1):
            if letter not in "cmWX":
                continue
            value = word[j + 1 :]
            if not value:
                if i + 1 >= len(args):
                    return None
                i += 1
                value = args[i]
            if letter == "m":
                return value, list(args[i + 1 :])
            if letter == "c":
                return None
            break
        i += 1
    return None


def module_problem(
    module: str, args: Sequence[str], search_path: str, programs: Mapping[str, Rule]
) -> str | None:
    """Why `python -m MODULE ARGS` is compound (see the module docstring), or None."""
    name = module.lower()
    top = name.split(".", 1)[0]
    if top in _STDLIB or name in _DATA:
        dangerous = _DATA.get(name)
        if dangerous is None:
            why = _CODE.get(name) or _CODE.get(top)
            if why is not None:
                return f"{module} {why}: its arguments are code"
            return (
                f"{module} is a standard-library module the table does not know to take only "
                "data: what it runs may be its arguments' choice"
            )
        found = has_option(args, dangerous)
        return f"{module} {found} runs or writes what its arguments do not name" if found else None
    rule = programs.get(name)
    if rule is not None:
        return rule(module, args, search_path).compound
    found = has_option(args, ("-m", "-c"))
    if found is not None:
        return f"{module} {found}: it runs another module or inline code its arguments give"
    return _unknown(module, args, search_path).compound


def module_runner(interpreter: Rule, programs: Mapping[str, Rule]) -> Rule:
    """Python's rule: the interpreter's (`_interpreter`), then the module it runs judged."""

    def rule(program: str, args: Sequence[str], search_path: str) -> Form:
        form = interpreter(program, args, search_path)
        found = python_module(args) if form.compound is None else None
        if found is None:
            return form
        module, rest = found
        problem = module_problem(module, rest, search_path, programs)
        return Form(f"{program} -m {problem}") if problem else form

    return rule
