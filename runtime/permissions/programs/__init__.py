"""The program table: which forms of a command run only the program they name (SPEC §5, §8).

`runtime.permissions.commandkey` decides that a string is one program with literal arguments; this
package decides whether *that program, given those arguments*, can be trusted to be what the key
says. A command is **simple** only when the table says its form cannot run another program chosen in
its arguments, run code written in its arguments, or write a file that its arguments do not
name. Every other form is compound: keyed by the whole string and approved only as a whole. So
a grant for `git status` can never cover `git grep -O'sh -c …'`, and a grant for `sed` never
covers `sed 'e rm -rf ~'`.

What "run only what it names" means. A program keeps the meaning the human granted when what it
runs follows from its own documented function and from inputs the human can see: `make` runs
the project's recipes, `npm test` the project's test script, `python3 tool.py` the named
script, `pytest` the project's tests. What the human cannot see from a grant is code or a
program *carried in the arguments* (`-c CODE`, `-exec CMD`, `--pager=CMD`, `VAR=value` for
make, `ext::` URLs for git), a configuration change that makes *later* commands run something
(`git config core.fsmonitor …`, `npm config set script-shell …`), or a write to a place
neither the arguments nor the working directory say (`sed 'w /etc/…'`, `tar -P`). Those forms
are compound.

The table (`PROGRAMS`) has one entry per program, written as a small rule:

* `_launcher(why)`: runs another program named in its arguments, whatever they are (shells,
  `env`, `sudo`, `xargs`, `timeout`, `setarch`, `docker`, `ssh` …): always compound.
* `_plain(about, runs=…)`: its operands are data. The options in `runs` (matched however the
  program's parser accepts them: `-xVALUE`, bundled `-abx`, `--opt=value`, unambiguous
  abbreviations `--exe`) make it run something or write elsewhere.
* `_interpreter(...)`: runs the script or module it names (which becomes a level of the key,
  `run_command:python3:tool.py`); inline code (`-c`, `-e`, …) is compound.
* a function for programs whose forms need reading: git (subcommands, global options, config
  writes, transport URLs), sed and awk (their scripts), find, make, tar, sqlite3, editors,
  npm-like package managers, cargo, go.

Programs the table does not name are judged by the **launcher rule**: a command is compound
when any of its operands or option values (or a word inside one: `--cmd="make install"`) could
name a program: a word containing `/` (a path: `./evil`, `/bin/sh`), or a bare name found on
PATH (`touch`, `sh`). Why this rule: a program can only run another program if something tells
it which, and in a command with literal words that something is in the arguments; an executable
is named either by a path or by a name that `execvp` finds on PATH. An unknown launcher
(`setarch x86_64 touch M`, `perf stat touch M`, a stub that execs its argument) therefore fails
closed, while `mytool build --fast` stays simple. The rule also makes an argument that looks
like code (one holding `(){}<>;|&$`` ` or a newline) compound, so an unknown interpreter's inline
code fails closed too. The table's `_plain` entries exist so that programs whose operands are
data (`grep test src`, `cat ./run.sh`) are not caught by it. Program names are compared by
basename, lower-cased and without a version suffix (`/usr/bin/python3.11` is `python`), so a
path or a case-insensitive file system does not slip past the table.

A simple command's **levels** are the words after the program that say what it does, the
narrowest grant the human can give: git's subcommand (`git:status`), npm's `run` and script
(`npm:run:test`), a make target, an interpreter's script. A program whose table entry names no
levels, or a program the table does not know whose first argument is a plain word
(`mytool build`), gets that word or none. `None` means the table cannot name the levels safely
(an interpreter with an option it does not know): the narrowest grant is then the exact command.

Where each part lives: `form` (what a rule returns: `Form`, and `ANY`), `options` (an option
spelled however the program's parser accepts it), `rules` (the rule builders above and
`_subcommand_tool`), `launcher_rule` (programs the table does not know), one module for each
program whose forms need reading, which also says why its forms are what they are (`git`, `sed`,
`awk`, `find`, `make`, `archives` for tar and unzip, `sqlite`, `editors` for editors and pagers,
`compilers`, `package_managers` for npm-like package managers, cargo, pip and go), `table`
(`PROGRAMS`: which program gets which rule; `DEPTHS`; `WORKSPACE_CODE`; `canonical_name`),
`classify` (the table's verdict on a command, and how deep its key can go) and `deny` (what
deny rules see of a command).

Adding a program: give it the entry whose rule fits, with the options from its manual that run
programs, evaluate code or write unnamed files; a test in
`tests/runtime/permissions/test_commandkey*.py` that attacks each of them; nothing else. When in
doubt, leave it out: the launcher rule is the fail-closed default.
"""

from __future__ import annotations

from codecoder.permissions.programs.awk import awk_program_problem
from codecoder.permissions.programs.classify import classify, command_depth
from codecoder.permissions.programs.deny import deny_view, is_glob
from codecoder.permissions.programs.form import ANY, Form, Rule
from codecoder.permissions.programs.git import git_subcommand
from codecoder.permissions.programs.options import has_option
from codecoder.permissions.programs.sed import sed_script_problem
from codecoder.permissions.programs.table import (
    DEPTHS,
    PROGRAMS,
    WORKSPACE_CODE,
    canonical_name,
)

__all__ = [
    "ANY",
    "DEPTHS",
    "PROGRAMS",
    "WORKSPACE_CODE",
    "Form",
    "Rule",
    "awk_program_problem",
    "canonical_name",
    "classify",
    "command_depth",
    "deny_view",
    "git_subcommand",
    "has_option",
    "is_glob",
    "sed_script_problem",
]
