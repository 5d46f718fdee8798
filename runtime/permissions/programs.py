"""The program table: which forms of a command run only the program they name (SPEC §5, §8).

`runtime.permissions.commandkey` decides that a string is one program with literal arguments; this
module decides whether *that program, given those arguments*, can be trusted to be what the key
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

Decisions the table makes, and why:

* `sed -i` is compound, though it writes only the files it names: a grant for sed earned by
  reading (`sed -n 1,20p f`) must not cover rewriting `~/.bashrc`, and edit_file does in-place
  edits in the sandbox. sed's `e`, `s///e`, `w`, `W` and `s///w` are found by reading the script
  as GNU sed does; a script this reader cannot follow, or one read from a file (`-f`), is
  compound.
* awk is simple only when its program is in the arguments and has no `system`, `|`, `@load`/
  `@include`, network file or `print > file`; `-f`, `-i`, `-l`, `-E`, `--profile`, `-W` are
  compound (code from elsewhere, or files written that the arguments do not name).
* sqlite3 with SQL or dot-commands is compound unless `-safe` is given: `.shell`, `.system`,
  `load_extension()`, `edit()`, `ATTACH` and `.output` make reading SQL for danger a losing
  game, and `-safe` is sqlite's own switch that refuses all of them.
* make runs the project's recipes (that is what a grant for make means, as for `npm test` or
  `pytest`); recipes or makefiles from elsewhere (`-f`, `-C`, `-I`, `--eval`) and command-line
  variables (`SHELL=…`, `CC=…`, which replace any recipe's commands) are compound.
* Editors (vim, ex, emacs, nano, …) are simple only with plain file operands: any option or
  `+cmd` can run commands. `less`/`more` likewise for `+cmd` and log files.
* git: only the builtins in `_GIT_SIMPLE`; `bisect` and `submodule` are shell scripts in git
  2.39 that run what PATH finds (and `bisect run`, `submodule foreach` run commands), so they
  are compound with difftool, mergetool, filter-branch and the other `_GIT_RUNS`. `git config`
  reads are `git:config`; a write is compound, so no grant for git covers setting
  core.fsmonitor, core.pager, hooks or aliases. Global options that pick another repository,
  config or exec path (`-c`, `-C`, `--git-dir`, `--bare`, `--exec-path=`) or start a pager
  (`-p`) are compound, and so is any global option the table does not know.

Adding a program: give it the entry whose rule fits, with the options from its manual that run
programs, evaluate code or write unnamed files; a test in `tests/runtime/test_commandkey*.py`
that attacks each of them; nothing else. When in doubt, leave it out: the launcher rule is the
fail-closed default.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from codecoder.runtime.permissions.keys import DenyView

__all__ = [
    "ANY",
    "PROGRAMS",
    "Form",
    "canonical_name",
    "classify",
    "deny_view",
    "git_subcommand",
    "is_glob",
]

# A word the parser could not read literally (an expansion): in a deny view it stands for any
# word, so a deny rule is not dodged by `git $SUB`.
ANY = "\x00"


@dataclass(frozen=True, slots=True)
class Form:
    """What the table says about one command: compound (and why) or simple (and its levels).

    `levels` are the words after the program that name what it does (`("status",)`); `None`
    when the table cannot name them safely. `covers` says in words what a grant for the program
    alone covers; `workspace`, what code from the workspace a simple form runs.
    """

    compound: str | None
    levels: tuple[str, ...] | None = ()
    covers: str = ""
    workspace: str = ""  # the code in the workspace it runs (`WORKSPACE_CODE`), if any


Rule = Callable[[str, Sequence[str], str], Form]


def classify(argv: Sequence[str], search_path: str | None = None) -> Form:
    """The table's verdict on `argv` (a program and literal arguments).

    `search_path` is the PATH the launcher rule looks bare names up in (default: this process's).
    """
    program = argv[0]
    name = canonical_name(program)
    rule = PROGRAMS.get(name)
    path = os.environ.get("PATH", "") if search_path is None else search_path
    if rule is None:
        git_builtin = _git_core_builtin(program)
        if git_builtin is not None:
            # /usr/lib/git-core/git-push is `git push`, with the same forms and options.
            form = _git("git", (git_builtin, *argv[1:]), path)
            return Form(form.compound, (), form.covers)
        return _unknown(program, argv[1:], path)
    form = rule(program, argv[1:], path)
    code = WORKSPACE_CODE.get(name)
    if form.compound is None and code:
        return Form(None, form.levels, form.covers, code)
    return form


def command_depth(program: str, levels: Sequence[str]) -> int | str:
    """How many levels after `program` a simple command's key can have, or why a grant naming
    `levels` can never match (a git subcommand that is never simple)."""
    name = canonical_name(program)
    if name == "git" and levels:
        sub = levels[0]
        if sub in _GIT_RUNS:
            return f"git {sub} {_GIT_RUNS[sub]}: it is always compound"
        if sub not in _GIT_SIMPLE:
            return (
                f"git {sub} is not a git builtin: an alias or an external git-{sub} is always "
                "compound"
            )
    return DEPTHS.get(name, 1)


def canonical_name(program: str) -> str:
    """`/usr/bin/Python3.11` → `python`: the name the table and deny rules know a program by."""
    name = program.rsplit("/", 1)[-1].lower()
    if name in PROGRAMS:
        return name
    stripped = _VERSION_SUFFIX.sub("", name)
    return stripped if stripped in PROGRAMS else name


def deny_view(argv: Sequence[str], start: int = 0) -> DenyView:
    """What deny rules see of the command `argv[start:]` (argv lower-cased, `ANY` for words the
    parser could not read literally).

    A git-core binary is git with its subcommand first (`git-push origin` → `git`, `push
    origin`). The subcommand's place (git's after its global options, another program's first
    word that is not an option) holding `ANY`, or for git a word that is not a builtin (an
    alias, an external `git-foo`), makes `sub_any`: it could be the subcommand a rule names.
    """
    program = argv[start]
    git_builtin = _git_core_builtin(program) if program != ANY else None
    if git_builtin is not None:
        return DenyView("git", (git_builtin, *argv[start + 1 :]))
    name = ANY if program == ANY else canonical_name(program)
    words = argv[start + 1 :]
    if name == "git":
        found = git_subcommand(words)
        sub_any = found is not None and (found[0] == ANY or found[0] not in _GIT_KNOWN)
    else:
        first = next((word for word in words if not word.startswith("-")), None)
        sub_any = first == ANY or (first is not None and is_glob(first))
    glob = name != ANY and is_glob(name)
    return DenyView(name, tuple(argv), start + 1, sub_any, glob)


def is_glob(word: str) -> bool:
    """Whether bash could expand `word` into file names (it has `*`, `?` or `[`)."""
    return any(char in word for char in "*?[")


def git_subcommand(args: Sequence[str]) -> tuple[str, int] | None:
    """git's subcommand and its index in `args`, skipping global options; None if there is none."""
    i = 0
    while i < len(args):
        word = args[i]
        if word == ANY:
            return ANY, i
        if not word.startswith("-") or word == "-":
            return word, i
        if word == "--":
            return (args[i + 1], i + 1) if i + 1 < len(args) else None
        if word in _GIT_GLOBAL_VALUES:
            i += 2
            continue
        i += 1
    return None


# --- option matching -----------------------------------------------------------------------


def has_option(args: Iterable[str], options: Iterable[str], values: str = "") -> str | None:
    """The first of `options` that `args` spell, or None. See `_spells`."""
    options = tuple(options)
    for word in args:
        if word == "--":
            return None
        for option in options:
            if _spells(word, option, values):
                return option
    return None


def _spells(word: str, option: str, values: str = "") -> bool:
    """Whether `word` spells `option` in any form the program's parser would accept.

    `-xVALUE` and bundles (`-avze`) for a short option: the letter anywhere in a bundle, up to
    the first letter in `values` (an option that takes the rest of the word as its value).
    `--opt=value` and unambiguous abbreviations for a long one (GNU getopt and git's
    parse-options accept them); matching an ambiguous abbreviation only makes a command
    compound, which is the safe side.
    """
    if word == option:
        return True
    if not word.startswith("-") or word == "-":
        return False
    if not option.startswith("--") and len(option) > 2:
        # A long option with one dash (`-exec`, `-fplugin`, `-toolexec`): no bundles.
        return word.startswith(option + "=")
    if option.startswith("--"):
        if not word.startswith("--"):
            return False
        name = word.split("=", 1)[0]
        return len(name) > 3 and option.startswith(name)
    if word.startswith("--") or len(option) != 2:
        return False
    for letter in word[1:]:
        if letter == option[1]:
            return True
        if letter in values:
            return False
    return False


def _options_and_operands(
    args: Sequence[str], values: Iterable[str] = (), *, stop_at_operand: bool = False
) -> tuple[list[str], list[str]]:
    """Split `args` into option words and operands; `values` take the next word as their value."""
    takes_value = frozenset(values)
    options: list[str] = []
    operands: list[str] = []
    i = 0
    while i < len(args):
        word = args[i]
        if word == "--":
            operands.extend(args[i + 1 :])
            break
        if word.startswith("-") and word != "-":
            options.append(word)
            if word in takes_value and i + 1 < len(args):
                options.append(args[i + 1])
                i += 1
        else:
            operands.append(word)
            if stop_at_operand:
                operands.extend(args[i + 1 :])
                break
        i += 1
    return options, operands


# --- the launcher rule ---------------------------------------------------------------------

_CODE_LIKE = re.compile(r"[(){}<>;|&$`!\n]")
_TOKEN_SPLIT = re.compile(r"[\s=,;:&|()<>'\"`$!@]+")
_PLAIN_LEVEL = re.compile(r"[a-z][a-z0-9._-]*")


def _unknown(program: str, args: Sequence[str], search_path: str) -> Form:
    covers = f"every simple `{program} …` command, with any arguments"
    for word in args:
        if word.startswith("-"):
            value = word.split("=", 1)[1] if "=" in word else None
            if value is None:
                continue
            word = value
        if _CODE_LIKE.search(word):
            return Form(f"{program} is not in the program table and {word!r} looks like code")
        for token in _TOKEN_SPLIT.split(word):
            if token and _names_program(token, search_path):
                return Form(
                    f"{program} is not in the program table and {token!r} names a program "
                    "it could run (the launcher rule)"
                )
    first = args[0] if args else ""
    levels = (first,) if _PLAIN_LEVEL.fullmatch(first) else ()
    return Form(
        None, levels, covers, f"whatever {program} reads there (the table does not know it)"
    )


def _names_program(token: str, search_path: str) -> bool:
    if "/" in token:
        return True  # a path may name an executable; without a file system to ask, it does
    if token in (".", ".."):
        return False
    for directory in search_path.split(os.pathsep):
        if not directory or not directory.startswith("/"):
            return True  # a relative PATH entry finds names in whatever directory it runs in
        candidate = os.path.join(directory, token)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return True
    return False


# --- rule builders -------------------------------------------------------------------------


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


# --- git -----------------------------------------------------------------------------------

# Builtins (and git-core scripts) a key may name: each does what git documents, and the forms
# of them that run programs are listed below. Anything else after `git` is an alias (which can
# be `!cmd`), an external `git-foo` found on PATH, or an internal helper: compound.
_GIT_SIMPLE = frozenset(
    {
        *("add", "am", "annotate", "apply", "archive", "blame", "branch", "bundle"),
        *("cat-file", "check-attr", "check-ignore", "check-mailmap", "check-ref-format"),
        *("checkout", "checkout-index", "cherry", "cherry-pick", "clean", "clone", "column"),
        *("commit", "commit-graph", "commit-tree", "config", "count-objects", "describe", "diff"),
        *("diff-files", "diff-index", "diff-tree", "fast-export", "fast-import", "fetch"),
        *("fetch-pack", "fmt-merge-msg", "for-each-ref", "format-patch", "fsck", "fsck-objects"),
        *("gc", "get-tar-commit-id", "grep", "hash-object", "help", "index-pack", "init"),
        *("init-db", "interpret-trailers", "log", "ls-files", "ls-remote", "ls-tree"),
        *("mailinfo", "mailsplit", "merge", "merge-base", "merge-file", "merge-tree", "mktag"),
        *("mktree", "multi-pack-index", "mv", "name-rev", "notes", "pack-objects"),
        *("pack-redundant", "pack-refs", "patch-id", "prune", "prune-packed", "pull", "push"),
        *("range-diff", "read-tree", "rebase", "reflog", "remote", "repack", "replace", "rerere"),
        *("reset", "restore", "rev-list", "rev-parse", "revert", "rm", "send-pack", "shortlog"),
        *("show", "show-branch", "show-index", "show-ref", "sparse-checkout", "stage", "stash"),
        *("status", "stripspace", "switch", "symbolic-ref", "tag", "unpack-file"),
        *("unpack-objects", "update-index", "update-ref", "update-server-info", "var"),
        *("verify-commit", "verify-pack", "verify-tag", "version", "whatchanged", "worktree"),
        *("write-tree",),
    }
)
# Builtins that are compound in every form, with why.
_GIT_RUNS = {
    "difftool": "runs a diff tool (`-x`/`--extcmd`, `difftool.<tool>.cmd`)",
    "mergetool": "runs a merge tool (`mergetool.<tool>.cmd`)",
    "filter-branch": "runs the shell filters it is given",
    "bisect": (
        "runs `bisect run` commands, and is a shell script (git 2.39) that runs what PATH finds"
    ),
    "submodule": (
        "runs `submodule foreach` commands, and is a shell script (git 2.39) that runs what "
        "PATH finds"
    ),
    "hook": "runs the repository's hooks",
    "maintenance": "schedules and runs background jobs",
    "for-each-repo": "runs git commands in the repositories a config lists",
    "merge-index": "runs the merge program it is given",
    "merge-one-file": "runs merge programs",
    "credential": "runs credential helpers and prints credentials",
    "credential-cache": "runs a credential daemon",
    "credential-store": "prints stored credentials",
    "daemon": "serves repositories and runs hooks",
    "instaweb": "starts a web server and a browser",
    "web--browse": "starts a browser",
    "upload-pack": "runs the hooks and config of the repository it is given",
    "receive-pack": "runs the hooks of the repository it is given",
    "upload-archive": "runs the config of the repository it is given",
    "shell": "runs commands from its arguments",
    "remote-ext": "runs the command in an ext:: URL",
    "remote-fd": "talks to inherited file descriptors",
    "send-email": "runs a mail program",
    "imap-send": "runs an IMAP tunnel command",
    "bugreport": "writes a report file it does not name",
    "diagnose": "writes an archive it does not name",
    "fsmonitor--daemon": "starts a daemon",
}
_GIT_KNOWN = _GIT_SIMPLE | frozenset(_GIT_RUNS)

# Global options (before the subcommand) that take a separate value.
_GIT_GLOBAL_VALUES = frozenset(
    {
        *("-C", "-c", "--git-dir", "--work-tree", "--namespace", "--super-prefix"),
        *("--config-env", "--list-cmds", "--attr-source", "--shallow-file"),
    }
)
# Global options that change which repository, configuration or programs git uses, or start a
# pager: compound (a bare repository or config elsewhere can name core.fsmonitor, core.pager).
_GIT_GLOBAL_COMPOUND = (
    *("-c", "-C", "--config-env", "--git-dir", "--work-tree", "--bare", "--namespace"),
    *("--super-prefix", "--list-cmds", "--attr-source", "--shallow-file", "-p", "--paginate"),
)
_GIT_GLOBAL_FLAGS = frozenset(
    {
        *("--version", "--help", "-h", "--html-path", "--man-path", "--info-path", "-P"),
        *("--no-pager", "--no-replace-objects", "--no-lazy-fetch", "--literal-pathspecs"),
        *("--glob-pathspecs", "--noglob-pathspecs", "--icase-pathspecs", "--no-optional-locks"),
        *("--no-advice", "--exec-path"),
    }
)
# Options that run a program (or write a file the human did not ask for) in any subcommand that
# has them; short ones only where they mean that.
_GIT_RUNS_ANYWHERE = (
    *("--upload-pack", "--receive-pack", "--exec", "--extcmd", "--ext-diff", "--textconv"),
    *("--output", "--open-files-in-pager", "--template", "--config", "--unsafe-paths"),
)
_GIT_RUNS_SHORT = {
    "grep": ("-O",),
    "rebase": ("-x",),
    "clone": ("-u", "-c"),
    "difftool": ("-x",),
}
_GIT_CONFIG_WRITES = (
    *("--add", "--replace-all", "--unset", "--unset-all", "--rename-section"),
    *("--remove-section", "--edit", "-e"),
)
_GIT_CONFIG_READS = (
    *("--get", "--get-all", "--get-regexp", "--get-urlmatch", "--get-color"),
    *("--get-colorbool", "--list", "-l"),
)
_GIT_CONFIG_VALUES = ("-f", "--file", "--blob", "--type", "--default", "--comment")
# Transports git hands to a program: `ext::cmd`, `fd::`, any `<helper>::address` (git runs
# git-remote-<helper>), and `scheme://` URLs whose scheme git has no built-in support for.
_GIT_TRANSPORT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9+.-]*::")
_GIT_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_GIT_SCHEMES = frozenset(
    {"http", "https", "ftp", "ftps", "ssh", "git", "file", "git+ssh", "ssh+git"}
)
_GIT_CORE = re.compile(r"git-([a-z][a-z0-9-]*)")


def _git_core_builtin(program: str) -> str | None:
    """`push` for `/usr/lib/git-core/git-push` (or `git-push` on PATH): a builtin's own binary."""
    match = _GIT_CORE.fullmatch(program.rsplit("/", 1)[-1].lower())
    if match is None or match.group(1) not in _GIT_KNOWN:
        return None
    return match.group(1)


def _git(program: str, args: Sequence[str], search_path: str) -> Form:
    covers = (
        f"every simple `{program} …` command: any subcommand (push, reset, clean …) and "
        "arguments, but never one that runs another program or writes git config"
    )
    found = git_subcommand(args)
    for word in args[: found[1] if found else len(args)]:
        option = has_option((word,), _GIT_GLOBAL_COMPOUND)
        if option is not None:
            return Form(f"{program} {option}: changes the repository, config or pager git uses")
        if word.startswith("--exec-path="):
            return Form(f"{program} --exec-path: runs git commands from another directory")
        if word.startswith("-") and word not in _GIT_GLOBAL_FLAGS:
            return Form(f"{program} {word}: a global option the table does not know")
    if found is None:
        return Form(None, (), covers)
    sub, at = found
    rest = args[at + 1 :]
    if sub in _GIT_RUNS:
        return Form(f"{program} {sub} {_GIT_RUNS[sub]}")
    if sub not in _GIT_SIMPLE:
        return Form(
            f"{program} {sub}: not a git builtin (an alias or an external git-{sub} program, "
            "either of which can run anything)"
        )
    option = has_option(rest, (*_GIT_RUNS_ANYWHERE, *_GIT_RUNS_SHORT.get(sub, ())))
    if option is not None:
        return Form(f"{program} {sub} {option}: runs another program or writes elsewhere")
    for word in rest:
        if word.startswith("-"):
            word = word.split("=", 1)[1] if "=" in word else ""
        if _GIT_TRANSPORT.match(word):
            return Form(f"{program} {sub} {word!r}: a transport that runs a program")
        url = _GIT_URL.match(word)
        if url and url.group(1).lower() not in _GIT_SCHEMES:
            return Form(
                f"{program} {sub} {word!r}: git runs git-remote-{url.group(1)} for this URL"
            )
    _, operands = _options_and_operands(rest)
    if sub in ("push", "send-pack") and operands and _local_repository(operands[0]):
        return Form(
            f"{program} {sub} {operands[0]!r}: pushing into a repository on this machine runs "
            "its hooks"
        )
    if sub == "help" and (operands or has_option(rest, ("--web", "-w", "--info", "-i"))):
        return Form(f"{program} help: starts a manual viewer or a browser")
    if sub == "config" and _git_config_writes(rest):
        return Form(
            f"{program} config: writes git config, which can make later git commands run "
            "programs (core.fsmonitor, core.pager, aliases, hooks)"
        )
    return Form(None, (sub,), covers)


def _local_repository(remote: str) -> bool:
    """Whether a push destination may be a path on this machine: anything but a plain remote
    name (`origin`) or a URL (`https://…`, `git@host:path`). A plain name that is not a
    configured remote but a directory is a path too; telling them apart needs the repository's
    config, which keying does not read."""
    if remote.startswith(("/", ".", "~", "file:")):
        return True
    head = remote.split("/", 1)[0]
    return ("/" in remote or "." in remote) and ":" not in head and "@" not in head


def _git_config_writes(args: Sequence[str]) -> bool:
    if has_option(args, _GIT_CONFIG_WRITES) is not None:
        return True
    _, operands = _options_and_operands(args, _GIT_CONFIG_VALUES)
    if operands[:1] and operands[0] in ("set", "unset", "rename-section", "remove-section", "edit"):
        return True
    if has_option(args, _GIT_CONFIG_READS) is not None or operands[:1] in (["get"], ["list"]):
        return False
    return len(operands) != 1  # `git config name` reads; `git config name value` writes


# --- sed -----------------------------------------------------------------------------------

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


def sed_script_problem(script: str) -> str | None:
    """Why a sed script is not plain (it runs, writes or cannot be read), or None.

    Reads the script as GNU sed does: addresses, then one command; `e` and `s///e` run
    commands, `w`, `W` and `s///w` write files. Anything this reader does not recognise is
    reported too, so an unreadable script is never called plain.
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


# --- awk -----------------------------------------------------------------------------------

_AWK_VALUES = frozenset({"-F", "-v", "--field-separator", "--assign"})
_AWK_FLAGS = frozenset(
    {
        *("-b", "--characters-as-bytes", "-c", "--traditional", "-C", "--copyright", "-g"),
        *("-h", "--help", "-L", "--lint", "-M", "--bignum", "-n", "--non-decimal-data"),
        *("-N", "--use-lc-numeric", "-O", "--optimize", "-P", "--posix", "-r", "--re-interval"),
        *("-s", "--no-optimize", "-S", "--sandbox", "-t", "--lint-old", "-V", "--version"),
        "--csv",
    }
)
_AWK_PRINT = re.compile(r"\bprintf?\b")


def _awk(program: str, args: Sequence[str], search_path: str) -> Form:
    covers = f"every simple `{program} …` command whose program only reads and prints"
    programs: list[str] = []
    operands: list[str] = []
    i = 0
    while i < len(args):
        word = args[i]
        if word == "--":
            operands.extend(args[i + 1 :])
            break
        if not word.startswith("-") or word == "-":
            operands.append(word)
        elif word in _AWK_VALUES and i + 1 < len(args):
            i += 1
        elif word[:2] in ("-F", "-v") or word.split("=", 1)[0] in _AWK_VALUES:
            pass
        elif word in ("-e", "--source") and i + 1 < len(args):
            programs.append(args[i + 1])
            i += 1
        elif word.startswith("--source="):
            programs.append(word.split("=", 1)[1])
        elif word not in _AWK_FLAGS:
            return Form(
                f"{program} {word}: loads, includes or runs code from elsewhere, writes a "
                "profile or dump, or is an option the table does not know"
            )
        i += 1
    if not programs:
        if not operands:
            return Form(None, (), covers)
        programs.append(operands[0])
    problem = awk_program_problem("\n".join(programs))
    if problem is not None:
        return Form(f"{program} program: {problem}")
    return Form(None, (), covers)


def awk_program_problem(text: str) -> str | None:
    """Why an awk program is not plain, or None: `system()`, pipes to or from commands,
    output redirected to a file, gawk's `@load`/`@include` and network files."""
    if "system" in text:
        return "system() runs a command"
    if "|" in text:
        return "a pipe runs a command (print | cmd, cmd | getline)"
    if "@" in text:
        return "@load and @include run code from elsewhere"
    if "/inet" in text:
        return "a network special file"
    for statement in re.split(r"[;{}\n]", text):
        match = _AWK_PRINT.search(statement)
        if match and ">" in statement[match.end() :]:
            return "print > file writes a file"
    return None


# --- find, make, tar, sqlite3, editors -----------------------------------------------------

_FIND_RUNS = (
    *("-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprint0", "-fprintf"),
    "-fls",
)


def _find(program: str, args: Sequence[str], search_path: str) -> Form:
    for word in args:
        if word in _FIND_RUNS:
            return Form(f"{program} {word}: runs a command, deletes or writes files")
    return Form(None, (), f"every simple `{program} …` command that only lists")


_MAKE_RUNS = (
    *("-f", "--file", "--makefile", "-C", "--directory", "--eval", "-E", "-I"),
    *("--include-dir",),
)
_MAKE_VALUES = "fCEIjlOW"


def _make(program: str, args: Sequence[str], search_path: str) -> Form:
    covers = f"every simple `{program} …` command: any target of the project's makefile"
    found = has_option(args, _MAKE_RUNS, _MAKE_VALUES)
    if found is not None:
        return Form(f"{program} {found}: recipes or makefiles from outside the project's own")
    _, operands = _options_and_operands(args, ("-j", "-l", "-o", "-W", "--jobs", "--load-average"))
    for word in operands:
        if "=" in word:
            return Form(
                f"{program} {word}: a variable given on the command line can replace any "
                "recipe's commands (SHELL, CC, …)"
            )
    return Form(None, tuple(operands[:1]), covers)


_TAR_RUNS = (
    *("--to-command", "--use-compress-program", "--checkpoint-action", "--info-script"),
    *("--new-volume-script", "--rsh-command", "--rmt-command", "--absolute-names", "-I"),
    *("-F", "-P"),
)


def _tar(program: str, args: Sequence[str], search_path: str) -> Form:
    covers = f"every simple `{program} …` command, extracting only below its directory"
    words = list(args)
    if words and not words[0].startswith("-"):
        words[0] = "-" + words[0]  # `tar xzf a.tar`: the first word is a bundle of options
    found = has_option(words, _TAR_RUNS, "fCTXbgHKLNVK")
    if found is not None:
        return Form(f"{program} {found}: runs a program or writes outside its directory")
    found = has_option(words, ("-x", "--extract", "--get"), "fCTXbgHKLNVK")
    if found is not None:
        return Form(
            f"{program} {found}: extracts files the archive names, not the arguments (an "
            "archive can hold .git/hooks/…)"
        )
    if "--force-local" not in args and any(":" in word for word in args):
        return Form(f"{program}: an archive name with a colon is reached through rsh or ssh")
    return Form(None, (), covers)


def _unzip(program: str, args: Sequence[str], search_path: str) -> Form:
    covers = f"every simple `{program} …` command that lists or tests an archive"
    if has_option(args, ("-l", "-t", "-v", "-Z", "-z", "-p"), "dxP") is None:
        return Form(
            f"{program}: extracts files the archive names, not the arguments (an archive can "
            "hold .git/hooks/…)"
        )
    if has_option(args, ("-:",), "dxP") is not None:
        return Form(f"{program} -:: writes outside its directory")
    return Form(None, (), covers)


_SQLITE_FLAGS = frozenset(
    {
        *("-append", "-ascii", "-bail", "-batch", "-box", "-column", "-csv", "-echo"),
        *("-header", "-noheader", "-html", "-interactive", "-json", "-line", "-list"),
        *("-markdown", "-memtrace", "-nofollow", "-quote", "-readonly", "-safe", "-stats"),
        *("-table", "-version", "-help"),
    }
)
_SQLITE_VALUES = frozenset({"-separator", "-newline", "-nullvalue", "-maxsize", "-mmap", "-vfs"})


def _sqlite(program: str, args: Sequence[str], search_path: str) -> Form:
    covers = f"every simple `{program} …` command in safe mode"
    operands: list[str] = []
    safe = False
    i = 0
    while i < len(args):
        word = args[i]
        option = "-" + word.lstrip("-") if word.startswith("-") else None
        if option is None or word == "-":
            operands.append(word)
        elif option in _SQLITE_VALUES:
            i += 1
        elif option in _SQLITE_FLAGS:
            safe = safe or option == "-safe"
        else:
            return Form(f"{program} {word}: runs commands, reads them from a file, or is unknown")
        i += 1
    if len(operands) > 1 and not safe:
        return Form(
            f"{program}: SQL and dot-commands can run programs (.shell, .system, "
            "load_extension(), edit()) and write files; only -safe mode keeps them out"
        )
    return Form(None, (), covers)


def _editor(program: str, args: Sequence[str], search_path: str) -> Form:
    for word in args:
        if word.startswith(("-", "+")):
            return Form(f"{program} {word}: an editor given commands or options can run anything")
    return Form(None, (), f"every simple `{program} …` command that opens files")


def _pager(program: str, args: Sequence[str], search_path: str) -> Form:
    for word in args:
        if word.startswith("+") or has_option((word,), ("-o", "-O", "--log-file", "--LOG-FILE")):
            return Form(f"{program} {word}: runs pager commands or writes a log file")
    return Form(None, (), f"every simple `{program} …` command")


_COMPILER_RUNS = ("-wrapper", "-B", "-fplugin", "-specs", "--specs", "-fuse-ld", "--ld-path")


def _compiler(program: str, args: Sequence[str], search_path: str) -> Form:
    for word in args:
        if word.startswith("@"):
            return Form(f"{program} {word}: options from a file the table cannot read")
    found = has_option(args, _COMPILER_RUNS, "DUIoLlWfmOgxu")
    if found is not None:
        return Form(f"{program} {found}: runs the programs or plugins it is given")
    return Form(None, (), f"every simple `{program} …` command")


# --- package managers and build tools ------------------------------------------------------


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


_NODE_PM_RUNS = {
    "exec": "runs the program it is given",
    "x": "runs the program it is given",
    "dlx": "downloads and runs a package",
    "explore": "runs a command in a package's directory",
    "init": "runs a package's initializer",
    "create": "runs a package's initializer",
    "edit": "starts an editor",
    "config": "writes configuration that can set the shell scripts run in",
    "set": "writes configuration that can set the shell scripts run in",
}
_NODE_PM_OPTIONS = (
    *("--script-shell", "--node-options", "--shell", "--editor", "--call", "--userconfig"),
    *("--globalconfig", "--browser", "--prefix", "-c"),
)
_NPM_SIMPLE = (
    *("access", "adduser", "audit", "bugs", "cache", "ci", "completion", "dedupe", "deprecate"),
    *("diff", "dist-tag", "docs", "doctor", "fund", "help", "help-search", "install"),
    *("install-ci-test", "install-test", "link", "ll", "login", "logout", "ls", "list", "org"),
    *("outdated", "owner", "pack", "ping", "pkg", "prefix", "profile", "prune", "publish"),
    *("query", "rebuild", "repo", "restart", "root", "search", "shrinkwrap", "star", "stars"),
    *("start", "stop", "team", "test", "token", "uninstall", "unpublish", "unstar", "update"),
    *("version", "view", "whoami", "add", "remove", "why", "upgrade", "info", "outdated"),
)
_NPM_ALIASES = {
    **dict.fromkeys(("run-script", "rum", "urn"), "run"),
    **dict.fromkeys(("t", "tst"), "test"),
    **dict.fromkeys(("i", "in", "ins", "inst", "insta", "instal", "isnt", "isnta"), "install"),
    **dict.fromkeys(("isntal", "isntall"), "install"),
    **dict.fromkeys(("un", "unlink", "rm", "r"), "uninstall"),
    **dict.fromkeys(("clean-install", "ic", "install-clean", "isntall-clean"), "ci"),
    "c": "config",
    "up": "update",
    "ln": "link",
}

_CARGO_SIMPLE = (
    *("bench", "build", "check", "clean", "doc", "fetch", "fix", "generate-lockfile", "help"),
    *("init", "install", "locate-project", "login", "logout", "metadata", "new", "owner"),
    *("package", "pkgid", "publish", "read-manifest", "remove", "report", "run", "rustc"),
    *("rustdoc", "search", "test", "tree", "uninstall", "update", "vendor", "verify-project"),
    *("version", "yank", "add", "fmt", "clippy", "info"),
)
_CARGO_ALIASES = {"b": "build", "c": "check", "d": "doc", "r": "run", "t": "test", "rm": "remove"}

_GO_SIMPLE = (
    *("build", "test", "run", "vet", "fmt", "mod", "get", "install", "list", "version", "doc"),
    *("fix", "generate", "clean", "work", "help", "env"),
)

_PIP_SIMPLE = (
    *("install", "download", "uninstall", "freeze", "inspect", "list", "show", "check", "wheel"),
    *("hash", "completion", "debug", "help", "cache", "index"),
)


def _go(program: str, args: Sequence[str], search_path: str) -> Form:
    found = has_option(args, ("-toolexec", "-exec", "-C", "--toolexec", "--exec"))
    if found is not None or any("extld" in word for word in args):
        return Form(f"{program} {found or '-ldflags -extld'}: runs the program it is given")
    _, operands = _options_and_operands(args)
    if operands[:1] == ["env"] and has_option(args, ("-w", "-u")):
        return Form(f"{program} env -w: writes settings (GOFLAGS, CC …) later commands use")
    return _GO_RULE(program, args, search_path)


_GO_RULE = _subcommand_tool(
    simple=_GO_SIMPLE,
    runs={"tool": "runs the tool it is given", "bug": "starts a browser"},
)


# --- the table -----------------------------------------------------------------------------

# `bash5.2`, `python3.11`: a version suffix does not make a program something else.
_VERSION_SUFFIX = re.compile(r"[-._]?[0-9][0-9._-]*$")

_SHELL = "is a shell: it runs whatever its script or -c string says"
_RUNS_ARGUMENT = "runs the program given in its arguments"


def _table() -> tuple[dict[str, Rule], dict[str, int], dict[str, str]]:
    table: dict[str, Rule] = {}
    depths: dict[str, int] = {}
    code: dict[str, str] = {}

    def add(names: Iterable[str], rule: Rule, depth: int = 0, workspace: str = "") -> None:
        for name in names:
            table[name] = rule
            depths[name] = depth
            if workspace:
                code[name] = workspace

    # Shells, whatever their arguments.
    add(
        (
            *("bash", "sh", "dash", "zsh", "ksh", "mksh", "ash", "yash", "posh", "rbash"),
            *("fish", "csh", "tcsh", "pwsh", "busybox", "toybox", "nu", "xonsh", "elvish"),
        ),
        _launcher(_SHELL),
    )
    # Launchers: the program to run is an argument.
    add(
        (
            *("sudo", "sudoedit", "doas", "su", "runuser", "pkexec", "setpriv", "sg", "newgrp"),
            *("chroot", "unshare", "nsenter", "firejail", "bwrap", "proot", "fakeroot"),
            *("runcon", "capsh", "gosu", "su-exec", "chpst", "systemd-run", "cgexec", "env"),
            *("nice", "renice", "ionice", "chrt", "taskset", "numactl", "cpulimit", "prlimit"),
            *("timeout", "nohup", "setsid", "stdbuf", "unbuffer", "flock", "faketime"),
            *("eatmydata", "nocache", "torsocks", "proxychains", "proxychains4", "tini"),
            *("dumb-init", "dbus-launch", "dbus-run-session", "xvfb-run", "catchsegv"),
            *("setarch", "linux32", "linux64", "i386", "x86_64", "aarch64", "arm64", "uname26"),
            *("ssh-agent", "logsave", "perf", "script", "expect", "strace", "ltrace"),
            *("valgrind", "gdb", "lldb", "npx", "pnpx", "bunx", "uvx", "pipx", "xargs"),
            *("parallel", "sem", "watch", "time", "exec", "eval", "command", "builtin"),
            *("entr", "run-parts", "start-stop-daemon", "daemonize", "screen", "tmux"),
            *("rlwrap", "chronic", "ifne", "pee", "vipe", "lckdo", "mispipe", "ld.so"),
            *("ld-linux.so.2", "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1"),
        ),
        _launcher(_RUNS_ARGUMENT),
    )
    add(("at", "batch", "crontab"), _launcher("schedules commands to run later"))
    add(("systemctl", "service"), _launcher("starts services, which run programs"))
    add(
        ("xdg-open", "open", "sensible-browser", "sensible-editor", "sensible-pager"),
        _launcher("runs whichever program is configured for what it opens"),
    )
    add(("x-www-browser", "www-browser"), _launcher("runs a browser"))
    add(("patch",), _launcher("hands ed-style patches to ed, which runs `!` commands"))
    # Container and cluster clients run programs (and, through the Docker socket, as root).
    add(
        ("docker", "podman", "nerdctl", "kubectl", "lxc", "vagrant", "nix", "nix-shell"),
        _launcher("runs programs in containers, machines or environments it manages"),
    )
    add(("ssh", "slogin"), _launcher("runs a command on another host"))
    # Interpreters: the script they name is their level; inline code is compound.
    add(
        ("python", "pypy", "python3m"),
        _interpreter(
            ("-c",),
            flags=(
                *("-b", "-bb", "-B", "-d", "-E", "-h", "-i", "-I", "-O", "-OO", "-P", "-q"),
                *("-s", "-S", "-u", "-v", "-V", "-x", "--version", "--help", "-R"),
            ),
            values=("-X", "--check-hash-based-pycs"),
            module="-m",
            bundles="WX",
            loads=("-W",),  # a warning category names a module, which is imported
        ),
        depth=2,
    )
    add(
        ("node", "nodejs"),
        _interpreter(
            ("-e", "--eval", "-p", "--print"),
            compound=("--inspect", "--inspect-brk", "--inspect-port", "--inspect-wait"),
            flags=("--version", "-v", "--help", "-h", "--check", "-c", "--no-warnings"),
            values=("-C",),
            loads=("-r", "--require", "--import", "--loader", "--experimental-loader"),
        ),
        depth=1,
    )
    add(
        ("perl",),
        _interpreter(
            ("-e", "-E"),
            compound=("-M", "-m", "-d", "-x"),
            flags=("-w", "-W", "-X", "-c", "-n", "-p", "-a", "-l", "-s", "-T", "-t", "-v"),
            values=("-I",),
            bundles="IiFlC0",
        ),
        depth=1,
    )
    add(
        ("ruby",),
        _interpreter(
            ("-e",),
            compound=("-x",),
            flags=("-w", "-W", "-c", "-n", "-p", "-a", "-l", "-s", "-v", "--version"),
            values=("-I",),
            bundles="rIFCEKTx0",
            loads=("-r",),
        ),
        depth=1,
    )
    add(
        ("php",),
        _interpreter(
            ("-r", "-R", "-B", "-E"),
            compound=("-d", "-a", "-S", "-t", "-z", "-c"),
            flags=("-n", "-l", "-v", "-i", "-m", "-q", "-h", "-H", "-w", "-s"),
            values=("-f",),
            bundles="rRBEFdcft",
        ),
        depth=1,
    )
    add(
        ("lua", "luajit"),
        _interpreter(("-e",), flags=("-i", "-v", "-W", "-E"), values=("-l",)),
        depth=1,
    )
    add(("rscript",), _interpreter(("-e", "--expr"), flags=("--vanilla", "--verbose")), depth=1)
    add(("r",), _interpreter(("-e",), compound=("CMD",), flags=("--vanilla", "--no-save")), depth=1)
    add(
        ("julia",),
        _interpreter(("-e", "--eval", "-E", "--print"), values=("-L", "--load")),
        depth=1,
    )
    add(("osascript", "jshell", "groovy", "scala"), _interpreter(("-e",)), depth=1)
    add(("tclsh", "wish"), _interpreter(()), depth=1)
    add(
        ("deno",),
        _subcommand_tool(
            simple=("fmt", "lint", "test", "check", "info", "doc", "bench", "cache"),
            runs={
                "eval": "runs inline code",
                "repl": "starts a REPL",
                "task": "runs a task's shell command",
                "install": "installs a script as a command",
            },
            scripts=("run",),
        ),
        depth=2,
    )
    # Stream editors and text processors that read their program from the arguments.
    add(("sed", "gsed"), _sed)
    add(("awk", "gawk", "mawk", "nawk"), _awk)
    add(("find", "gfind"), _find)
    add(("make", "gmake"), _make, depth=1)
    add(("tar", "gtar", "bsdtar"), _tar)
    add(("sqlite3",), _sqlite)
    add(
        (
            *("vim", "vi", "nvim", "ex", "view", "gvim", "rvim", "rview", "vimdiff", "evim"),
            *("emacs", "emacsclient", "nano", "pico", "micro", "joe", "mg", "kak", "hx"),
        ),
        _editor,
    )
    add(("less", "more", "most"), _pager)
    add(("git",), _git, depth=1)
    add(
        ("npm",),
        _subcommand_tool(
            simple=_NPM_SIMPLE,
            runs=_NODE_PM_RUNS,
            options=_NODE_PM_OPTIONS,
            aliases=_NPM_ALIASES,
            scripts=("run",),
            config_reads=("get", "list", "ls"),
        ),
        depth=2,
    )
    add(
        ("pnpm", "yarn", "bun"),
        _subcommand_tool(
            simple=(*_NPM_SIMPLE, "why", "import", "store", "patch-commit", "workspaces"),
            runs={**_NODE_PM_RUNS, "node": "runs node with the arguments it is given"},
            options=(*_NODE_PM_OPTIONS, "-e", "--eval"),
            aliases=_NPM_ALIASES,
            scripts=("run",),
            unknown_is_script=True,
            config_reads=("get", "list"),
        ),
        depth=2,
    )
    add(
        ("cargo",),
        _subcommand_tool(
            simple=_CARGO_SIMPLE,
            runs={"config": "writes configuration (runners, linkers) later commands use"},
            options=("--config", "-Z"),
            values=("--manifest-path", "--target-dir", "-p", "--package", "-j", "--jobs"),
            aliases=_CARGO_ALIASES,
        ),
        depth=1,
    )
    add(("go",), _go, depth=1)
    add(
        ("pip", "pip3"),
        _subcommand_tool(
            simple=_PIP_SIMPLE,
            runs={"config": "writes configuration later commands use"},
            values=("--python", "--log", "--cache-dir", "--proxy", "--cert", "--client-cert"),
            config_reads=("get", "list", "debug"),
        ),
        depth=2,
    )
    # Programs whose operands are data; the options that run or write something else.
    add(
        (
            *("ls", "cat", "head", "tail", "wc", "grep", "egrep", "fgrep", "cut", "tr", "uniq"),
            *("diff", "cmp", "comm", "file", "stat", "du", "df", "pwd", "echo", "printf", "true"),
            *("false", "test", "[", "basename", "dirname", "realpath", "readlink", "mkdir"),
            *("rmdir", "touch", "cp", "mv", "rm", "ln", "chmod", "tee", "cal", "whoami", "id"),
            *("uname", "hostname", "which", "tree", "jq", "nl", "tac", "rev", "seq", "yes"),
            *("sleep", "expr", "base64", "md5sum", "sha1sum", "sha256sum", "sha512sum", "xxd"),
            *("od", "hexdump", "strings", "column", "fmt", "fold", "paste", "join", "split"),
            *("csplit", "shuf", "kill", "date", "nproc", "free", "uptime", "ps", "printenv"),
            *("locale", "truncate", "dd", "mktemp", "sum", "cksum", "b2sum", "numfmt", "tsort"),
            *("unexpand", "expand", "pr", "look", "gzip", "gunzip", "zcat", "bzip2", "bunzip2"),
            *("xz", "unxz", "zstd", "pytest", "py.test", "black", "isort", "flake8", "ruff"),
            *("tsc", "eslint", "prettier", "jest", "vitest", "rustfmt", "gofmt", "clang-format"),
            *("shellcheck", "yamllint", "tokei", "chown", "chgrp", "sync", "getconf", "tput"),
        ),
        _plain(),
    )
    table["pylint"] = _plain("runs inline Python", ("--init-hook",))
    table["split"] = _plain("runs a shell command for each piece", ("--filter",))
    table["install"] = _plain("runs a strip program", ("--strip-program",))
    for name in ("diff3", "sdiff"):
        table[name] = _plain("runs the diff program it is given", ("--diff-program",))
    for name in ("fd", "fdfind"):
        table[name] = _plain("runs a command", ("-x", "--exec", "-X", "--exec-batch"), "edEtScj")
    for name in ("ag", "ack"):
        table[name] = _plain("runs a pager", ("--pager",))
    table["mypy"] = _plain("runs the Python it is given", ("--python-executable",))
    table["rg"] = _plain(
        "runs a preprocessor or decompressor",
        ("--pre", "--hostname-bin", "--search-zip", "-z"),
        "egmtTAfBCMrEj",
    )
    table["sort"] = _plain("runs a compressor", ("--compress-program",))
    table["rsync"] = _plain(
        "runs a remote shell or command",
        ("-e", "--rsh", "--rsync-path", "--config", "--daemon", "-M", "--remote-option"),
        "eBfT",
    )
    for name in ("scp", "sftp"):
        table[name] = _plain(
            "runs a program through ssh options", ("-o", "-F", "-S", "-D"), "oFSDiPlJc"
        )
    table["zip"] = _plain("runs an unzip command", ("-TT", "--unzip-command"), "bnt")
    table["unzip"] = _unzip
    table["curl"] = _plain(
        "reads options from a file, loads an engine or lets the server name the file",
        ("-K", "--config", "--engine", "-J", "--remote-header-name"),
        "odeHuxAbcCDEKrTwXYyz",
    )
    table["wget"] = _plain(
        "runs commands or a program, or writes files the server names",
        (
            *("-e", "--execute", "--use-askpass", "--config", "-r", "--recursive", "-m"),
            *("--mirror", "-i", "--input-file", "--content-disposition", "--trust-server-names"),
        ),
        "oOaeiPUAIDX",
    )
    for name in ("gzip", "gunzip"):
        table[name] = _plain("writes a file named inside the archive", ("-N", "--name"))
    add(
        ("cpio", "pax", "7z", "7za", "7zr", "unrar", "ar", "bsdcpio"),
        _launcher("extracts archives, whose members name the files it writes"),
    )
    add(("gcc", "cc", "clang", "g++", "c++", "clang++"), _compiler)
    for name in table:
        depths.setdefault(name, 0)
    # What each program that runs the project's code runs of it: build tools, package
    # managers, interpreters (their script), and programs whose operands are data but that run
    # code their configuration in the workspace names (plugins, hooks, JavaScript configs).
    script = "the script it is given and whatever that loads"
    code.update(
        {
            **dict.fromkeys(
                (
                    *("python", "pypy", "python3m", "node", "nodejs", "perl", "ruby", "php"),
                    *("lua", "luajit", "rscript", "r", "julia", "osascript", "jshell"),
                    *("groovy", "scala", "tclsh", "wish", "deno"),
                ),
                script,
            ),
            **dict.fromkeys(("make", "gmake"), "the recipes of the makefile in the workspace"),
            **dict.fromkeys(
                ("npm", "pnpm", "yarn", "bun"),
                "package.json's scripts (and the install scripts of what it installs), .npmrc",
            ),
            "cargo": "build.rs, procedural macros and the runners .cargo/config.toml names",
            "go": "tests, go:generate lines and cgo directives of the packages it builds",
            **dict.fromkeys(("pip", "pip3"), "the build scripts of local packages it installs"),
            **dict.fromkeys(
                ("pytest", "py.test"),
                "conftest.py, the tests and the plugins its configuration names",
            ),
            **dict.fromkeys(("jest", "vitest"), "its JavaScript configuration and the tests"),
            **dict.fromkeys(("eslint", "prettier"), "its JavaScript configuration and plugins"),
            "pylint": "the init-hook and plugins its rc file names",
            "flake8": "the local plugins its configuration names",
            "mypy": "the plugins its configuration names",
        }
    )
    return table, depths, code


PROGRAMS: Mapping[str, Rule]
"""Every program the table knows, by canonical name, with the rule for its forms."""
DEPTHS: Mapping[str, int]
"""How many levels after the program its keys can have (a program the table does not know: 1)."""
WORKSPACE_CODE: Mapping[str, str]
"""What code from the workspace a program runs in its simple forms (the Makefile's recipes,
package.json's scripts, conftest.py …), for the programs the table knows to do so. Anything
that may write the workspace (a sandboxed tool, a write grant) can change that code, so the
prompt says it for a command that runs on the host; a program the table does not know is said
to run whatever it reads there."""
PROGRAMS, DEPTHS, WORKSPACE_CODE = _table()
