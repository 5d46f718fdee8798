"""git's forms: which subcommands are builtins a key may name, which run programs in every form,
and the global options, subcommand options, config writes and transport URLs that make a form
compound; also git's subcommand after its global options, and a git-core binary's builtin.

Only the builtins in `_GIT_SIMPLE` are simple; `bisect` and `submodule` are shell scripts in git
2.39 that run what PATH finds (and `bisect run`, `submodule foreach` run commands), so they
are compound with difftool, mergetool, filter-branch and the other `_GIT_RUNS`. `git config`
reads are `git:config`; a write is compound, so no grant for git covers setting
core.fsmonitor, core.pager, hooks or aliases. Global options that pick another repository,
config or exec path (`-c`, `-C`, `--git-dir`, `--bare`, `--exec-path=`) or start a pager
(`-p`) are compound, and so is any global option the table does not know.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from codecoder.permissions.programs.form import ANY, Form
from codecoder.permissions.programs.options import _options_and_operands, has_option


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
# What a grant may name after `git` (`run_command:git:status`): a "did you mean" chooses among them.
GIT_BUILTINS = _GIT_SIMPLE
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
