"""The subcommands of package managers and build tools (npm, pnpm, yarn, bun, cargo, pip, go):
which are keyed by name, which run a program or write configuration later commands use, and
their aliases; and go's rule, which also reads the options that run a program.
"""

from __future__ import annotations

from collections.abc import Sequence

from codecoder.permissions.programs.form import Form
from codecoder.permissions.programs.options import _options_and_operands, has_option
from codecoder.permissions.programs.rules import _subcommand_tool

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
