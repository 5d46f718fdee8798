"""git's read-only forms: the subcommands that only read the repository, and the options each
may use (an allowlist, like the rest of the read-only table: `readonly_options`).

Read-only: status, log, show, diff, blame, shortlog, describe, rev-parse, rev-list, ls-files,
ls-tree, cat-file, show-ref, merge-base, for-each-ref, count-objects, grep, branch and tag when
they only list, remote with nothing or `-v`, config when it only reads, `stash list|show`,
`worktree list`, `reflog [show]`, `version`. Left out on purpose: `--output` (writes a file),
`--ext-diff`, `--textconv` and `cat-file --filters` (run the programs a config names),
`--show-signature` and the signature placeholders of `--format` (`%G?`: they run gpg),
`grep -O` (runs a pager), `--recurse-submodules` and `--submodule` (read nested
repositories' configuration), and every global option but `--no-pager`, `-P`,
`--no-optional-locks` and `--no-advice` (`-c`, `-C`, `--git-dir` … change which repository or
configuration git uses). A form that names a new branch or tag, deletes, renames or sets
upstreams, or writes config, is not a read.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from codecoder.permissions.programs.git import _git_config_writes
from codecoder.permissions.programs.readonly_options import (
    NotReadOnly,
    Options,
    Takes,
    flags,
    parse_options,
)

__all__ = ["git_read_only"]

N, V, F, OPT, LAST = Takes.NUMBER, Takes.VALUE, Takes.FILE, Takes.OPTIONAL, Takes.NEXT_IF_ANY

# Format placeholders that verify signatures, which runs gpg (`%G?`, `%GS`, `%(signature)`).
_SIGNATURE = re.compile(r"%[-+ ]?G|%\(\*?signature")

_GLOBALS = frozenset({"--no-pager", "-P", "--no-optional-locks", "--no-advice"})

# Options of git's diff machinery (diff, show, log -p, stash show).
_DIFF = {
    **flags("-p -u --patch -s --no-patch --raw --patch-with-raw --patch-with-stat"),
    **flags("--numstat --shortstat --summary --name-only --name-status --compact-summary"),
    **flags("--full-index --binary --no-ext-diff --no-textconv -a --text -R --no-renames"),
    **flags("--rename-empty --no-rename-empty --find-copies-harder -D --irreversible-delete"),
    **flags("--minimal --patience --histogram --indent-heuristic --no-indent-heuristic -w"),
    **flags("--ignore-all-space -b --ignore-space-change --ignore-space-at-eol"),
    **flags("--ignore-cr-at-eol --ignore-blank-lines -W --function-context --exit-code"),
    **flags("--quiet --no-color --no-color-moved --no-prefix --default-prefix -z"),
    **flags("--ita-invisible-in-index --ita-visible-in-index --check --cumulative"),
    **flags("--no-relative --pickaxe-all --pickaxe-regex -t"),
    **flags("-U --unified --inter-hunk-context -l --stat-width --stat-name-width", N),
    **flags("--stat-count --stat-graph-width", N),
    **flags("--diff-algorithm --diff-filter --word-diff-regex --src-prefix --dst-prefix", V),
    **flags("--line-prefix --anchored --ws-error-highlight --color-moved-ws -S -G", V),
    **flags("--ignore-matching-lines -I --skip-to --rotate-to --output-indicator-new", V),
    **flags("--output-indicator-old --output-indicator-context", V),
    **flags("-O", F),
    **flags("--stat --dirstat --color --word-diff --color-words --color-moved", OPT),
    **flags("--find-renames --find-copies --break-rewrites --relative --abbrev -M -C -B", OPT),
    **flags("-X --dirstat-by-file", OPT),
}
# Options of git's revision walk (log, show, shortlog, rev-list, whatchanged, reflog).
_WALK = {
    **flags("--oneline --graph --no-decorate --abbrev-commit --no-abbrev-commit --all"),
    **flags("--merges --no-merges --first-parent --reverse --follow --relative-date"),
    **flags("--all-match --invert-grep -i --regexp-ignore-case -E --extended-regexp -F"),
    **flags("--fixed-strings --basic-regexp --perl-regexp --full-diff --topo-order"),
    **flags("--date-order --author-date-order --left-right --cherry-pick --cherry-mark"),
    **flags("--cherry --boundary --ancestry-path --simplify-by-decoration --full-history"),
    **flags("--dense --sparse --simplify-merges --left-only --right-only --mailmap"),
    **flags("--use-mailmap --no-mailmap --no-use-mailmap --log-size --parents --children"),
    **flags("--source --no-walk --do-walk --not --count --objects --objects-edge"),
    **flags("--no-expand-tabs --no-notes --show-notes-by-default --cc -c -m --no-diff-merges"),
    **flags("--in-commit-order --timestamp --show-pulls --single-worktree"),
    **flags("--reflog -g --walk-reflogs --bisect --stdin --no-min-parents --no-max-parents"),
    **flags("-n --max-count --skip --min-parents --max-parents --max-age --min-age", N),
    **flags("--since --after --until --before --author --committer --grep --date", V),
    **flags("--format --pretty --exclude --glob --decorate-refs --decorate-refs-exclude", V),
    **flags("--diff-merges -L --since-as-filter --exclude-hidden --encoding", V),
    **flags("--decorate --branches --tags --remotes --expand-tabs --notes", OPT),
    **flags("--clear-decorations --exclude-first-parent-only"),
}


def _form(spec: dict[str, Takes], *, digits: bool = False) -> Options:
    return Options({**spec, **flags("-h --help")}, digits=digits)


_STATUS = _form(
    {
        **flags("-s --short -b --branch --long -v --verbose --no-column --ahead-behind"),
        **flags("--no-ahead-behind --renames --no-renames -z --null --show-stash"),
        **flags("--porcelain -u --untracked-files --ignored --ignore-submodules --column", OPT),
        **flags("--find-renames -M", OPT),
    }
)
_LOG = _form({**_DIFF, **_WALK}, digits=True)
_DIFF_ONLY = _form(
    {
        **_DIFF,
        **flags("--cached --staged --merge-base --no-index --ours --theirs --base -1 -2 -3"),
        **flags("--no-color-moved-ws"),
    }
)
_BLAME = _form(
    {
        **flags("-l -t -p --porcelain --line-porcelain --incremental --root --show-stats -f"),
        **flags("--show-name -n --show-number -s -e --show-email -w -c -b --reverse"),
        **flags("--first-parent --color-lines --color-by-age --minimal --no-progress"),
        **flags("-L --date --ignore-rev", V),
        **flags("--ignore-revs-file --contents -S", F),
        **flags("-M -C --abbrev", OPT),
    }
)
_SHORTLOG = _form(
    {
        **_WALK,
        **flags("-n --numbered -s --summary -e --email -c --committer"),
        **flags("--group", V),
        **flags("-w", OPT),
    },
    digits=True,
)
_DESCRIBE = _form(
    {
        **flags("--tags --all --long --always --exact-match --first-parent --contains"),
        **flags("--match --exclude", V),
        **flags("--candidates", N),
        **flags("--abbrev --dirty --broken", OPT),
    }
)
_REV_PARSE = _form(
    {
        **flags("--verify -q --quiet --symbolic --symbolic-full-name --show-toplevel"),
        **flags("--show-cdup --show-prefix --git-dir --git-common-dir --absolute-git-dir"),
        **flags("--is-inside-work-tree --is-inside-git-dir --is-bare-repository"),
        **flags("--is-shallow-repository --all --revs-only --no-revs --flags --no-flags"),
        **flags("--show-superproject-working-tree --show-toplevel --local-env-vars --sq"),
        **flags("--show-object-format --show-ref-format --not --sq-quote"),
        **flags("--default --git-path --since --after --until --before --prefix", V),
        **flags("--short --abbrev-ref --branches --tags --remotes --glob --path-format", OPT),
        **flags("--disambiguate --exclude --object-format", OPT),
    }
)
_LS_FILES = _form(
    {
        **flags("-c --cached -d --deleted -m --modified -o --others -i --ignored -s --stage"),
        **flags("-k --killed -u --unmerged --directory --no-empty-directory --eol"),
        **flags("--full-name --debug -z -t -v -f --exclude-standard --error-unmatch"),
        **flags("--deduplicate --sparse --resolve-undo"),
        **flags("-x --exclude --exclude-per-directory --format --with-tree", V),
        **flags("-X --exclude-from", F),
        **flags("--abbrev", OPT),
    }
)
_LS_TREE = _form(
    {
        **flags("-d -r -t -l --long -z --name-only --name-status --object-only"),
        **flags("--full-name --full-tree"),
        **flags("--format", V),
        **flags("--abbrev", OPT),
    }
)
_CAT_FILE = _form(
    {
        **flags("-t -s -p -e --batch-all-objects --buffer --unordered --follow-symlinks -Z"),
        **flags("--allow-unknown-type --use-mailmap --no-use-mailmap"),
        **flags("--batch --batch-check --batch-command", OPT),
    }
)
_SHOW_REF = _form(
    {
        **flags("--head --heads --tags --branches -d --dereference -s --verify -q --quiet"),
        **flags("--exists"),
        **flags("--hash --abbrev", OPT),
    }
)
_MERGE_BASE = _form(flags("-a --all --is-ancestor --fork-point --octopus --independent"))
_FOR_EACH_REF = _form(
    {
        **flags("--shell --perl --python --tcl --ignore-case --omit-empty --stdin"),
        **flags("--format --sort --points-at --exclude", V),
        **flags("--count", N),
        **flags("--color", OPT),
        **flags("--merged --no-merged --contains --no-contains", LAST),
    }
)
_COUNT = _form(flags("-v --verbose -H --human-readable"))
# git grep: not -O/--open-files-in-pager (runs a pager), --recurse-submodules, --ext-grep.
_GREP = _form(
    {
        **flags("-n --line-number -i --ignore-case -w --word-regexp -v --invert-match -l"),
        **flags("--files-with-matches --name-only -L --files-without-match -c --count -E"),
        **flags("--extended-regexp -F --fixed-strings -G --basic-regexp -P --perl-regexp"),
        **flags("-h -H --full-name -I -a --text -r --recursive"),
        **flags("--no-recursive -W --function-context -p --show-function --heading --break"),
        **flags("--no-color --cached --untracked --no-index --exclude-standard"),
        **flags("--no-exclude-standard -o --only-matching -q --quiet --and --or --not"),
        **flags("--all-match --column -z --null --no-textconv"),
        **flags("-e", V),
        **flags("-f", F),
        **flags("-A --after-context -B --before-context -C --context --max-depth", N),
        **flags("--threads -m --max-count", N),
        **flags("--color", OPT),
    },
    digits=True,
)
_BRANCH = _form(
    {
        **flags("-l --list -a --all -r --remotes -v -vv --verbose --no-color --no-column"),
        **flags("--no-abbrev --show-current -i --ignore-case --omit-empty"),
        **flags("--points-at --sort --format", V),
        **flags("--color --column --abbrev", OPT),
        **flags("--merged --no-merged --contains --no-contains", LAST),
    }
)
_TAG = _form(
    {
        **flags("-l --list -i --ignore-case --no-column --omit-empty"),
        **flags("--points-at --sort --format", V),
        **flags("-n --color --column", OPT),
        **flags("--merged --no-merged --contains --no-contains", LAST),
    }
)
_REMOTE = _form(flags("-v --verbose"))
_REMOTE_SHOW = _form(flags("-n"))
_REMOTE_GET_URL = _form(flags("--push --all"))
_CONFIG = _form(
    {
        **flags("--get --get-all --get-regexp --get-urlmatch --list -l --local --global"),
        **flags("--system --worktree --show-origin --show-scope --name-only -z --null"),
        **flags("--bool --int --bool-or-int --path --expiry-date --includes --no-includes"),
        **flags("--all --regexp --fixed-value"),
        **flags("--type --default --url --blob", V),
        **flags("-f --file", F),
    }
)
_VERSION = _form(flags("--build-options"))
_WORKTREE_LIST = _form(flags("--porcelain -v --verbose -z"))

_SIMPLE = {
    "status": _STATUS,
    "log": _LOG,
    "show": _LOG,
    "whatchanged": _LOG,
    "diff": _DIFF_ONLY,
    "blame": _BLAME,
    "annotate": _BLAME,
    "shortlog": _SHORTLOG,
    "describe": _DESCRIBE,
    "rev-parse": _REV_PARSE,
    "rev-list": _LOG,
    "ls-files": _LS_FILES,
    "ls-tree": _LS_TREE,
    "cat-file": _CAT_FILE,
    "show-ref": _SHOW_REF,
    "merge-base": _MERGE_BASE,
    "for-each-ref": _FOR_EACH_REF,
    "count-objects": _COUNT,
    "grep": _GREP,
    "version": _VERSION,
}


def git_read_only(program: str, args: Sequence[str]) -> None:
    """Raise NotReadOnly unless `git ARGS` is one of git's read-only forms."""
    args = list(args)
    i = 0
    while i < len(args) and args[i].startswith("-"):
        if args[i] not in _GLOBALS:
            raise NotReadOnly(f"git {args[i]}: a global option of no read-only form")
        i += 1
    if i >= len(args):
        return  # `git` alone prints its usage
    sub, rest = args[i], args[i + 1 :]
    shown = f"git {sub}"
    form = _SIMPLE.get(sub)
    if form is not None:
        parsed = parse_options(shown, rest, form)
        for value in parsed.values("--format", "--pretty"):
            if _SIGNATURE.search(value):
                raise NotReadOnly(f"{shown} {value!r}: a signature placeholder runs gpg")
        return
    if sub == "branch":
        _listing(shown, rest, _BRANCH, "creates, renames or deletes a branch")
    elif sub == "tag":
        _listing(shown, rest, _TAG, "creates or deletes a tag")
    elif sub == "remote":
        _remote(rest)
    elif sub == "config":
        parsed = parse_options(shown, rest, _CONFIG)
        if _git_config_writes(rest) or (parsed.operands[:1] and parsed.operands[0] == "set"):
            raise NotReadOnly("git config writes configuration")
    elif sub == "stash":
        if not rest or rest[0] not in ("list", "show"):
            raise NotReadOnly("git stash (other than list and show) changes the work tree")
        parse_options(f"git stash {rest[0]}", rest[1:], _LOG)
    elif sub == "worktree":
        if not rest or rest[0] != "list":
            raise NotReadOnly("git worktree (other than list) adds, moves or removes worktrees")
        parse_options("git worktree list", rest[1:], _WORKTREE_LIST)
    elif sub == "reflog":
        tail = rest[1:] if rest[:1] == ["show"] else rest
        parsed = parse_options("git reflog", tail, _LOG)
        if parsed.operands[:1] and parsed.operands[0] in ("expire", "delete", "drop", "write"):
            raise NotReadOnly(f"git reflog {parsed.operands[0]} changes the reflog")
    else:
        raise NotReadOnly(f"{shown}: not a read-only git subcommand")


def _listing(shown: str, args: Sequence[str], options: Options, otherwise: str) -> None:
    """`git branch` and `git tag` only list when they are given a listing option, or no name."""
    parsed = parse_options(shown, args, options)
    if parsed.operands and not parsed.has("-l", "--list"):
        raise NotReadOnly(f"{shown} {parsed.operands[0]}: {otherwise}")


def _remote(args: Sequence[str]) -> None:
    if args[:1] == ["show"]:
        parsed = parse_options("git remote show", args[1:], _REMOTE_SHOW)
        if not parsed.has("-n"):
            raise NotReadOnly("git remote show without -n asks the remote over the network")
        return
    if args[:1] == ["get-url"]:
        parse_options("git remote get-url", args[1:], _REMOTE_GET_URL)
        return
    parsed = parse_options("git remote", args, _REMOTE)
    if parsed.operands:
        raise NotReadOnly(f"git remote {parsed.operands[0]}: changes the remotes")
