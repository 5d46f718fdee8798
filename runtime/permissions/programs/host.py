"""Forms that need the host (`needs_host`): commands that cannot work contained; and forms that
use the network (`uses_network`), which may.

A contained command (@bwrap) reaches the network only through the egress proxy, each host asked
(`network:<host>`), and does not see the user's credentials (`~/.ssh`, `~/.git-credentials`,
`~/.npmrc`, `~/.config/gh` …). Some forms exist only to use those: `git push` and `git fetch`
of a remote over ssh, `npm publish` and `cargo publish` to a registry with the user's token,
`gh` to GitHub, `ssh` to another machine. Contained, they fail. So do `git init` and `git clone`
(even of a local repository): the `.git` they create holds a config and hooks, protected paths
that no sandbox may create (the environment quarantines them).

Package installs, `curl`, `wget` and the like only need the network (`uses_network`): they run
contained, their hosts asked during the call; their question offers the host only once the
contained route was offered (`Permission.host_after_contained`). So does `git fetch`, `pull` or
`ls-remote` of an https remote (`runtime.tools.containedpush.contained_fetch`, which reads the
workspace's remotes).

Such a command is never retried on the host behind the human's back. Its question says that it
would run contained and would likely fail, and offers running it on the host, unconfined, as an
explicit choice at the @shell ceiling (`permissions.chain`); the model cannot ask for
it. This table only says which forms those are, and why; a form it misses still runs contained
(and fails there), and a form it names wrongly only gets one more choice in its question.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType

from codecoder.permissions.programs.git import (
    _git_core_builtin,
    _local_repository,
    git_subcommand,
)
from codecoder.permissions.programs.options import _options_and_operands
from codecoder.permissions.programs.table import canonical_name

__all__ = ["needs_host", "uses_network"]

_REMOTE = "talks to a remote repository, with your network and credentials"
_REGISTRY = "talks to a package registry, with your network and token"
_NETWORK = "fetches packages from the network"
# A new repository's .git/config and hooks are protected paths: no sandbox may create them.
_NEW_REPOSITORY = "creates a repository, whose .git/config and hooks only the host may write"

_GIT = {
    "push": _REMOTE,
    "fetch": _REMOTE,
    "pull": _REMOTE,
    "ls-remote": _REMOTE,
    "clone": _REMOTE,
    "send-email": "sends mail",
    "request-pull": _REMOTE,
}
_NODE: Mapping[str, str] = MappingProxyType(
    {
        **dict.fromkeys(
            (
                *("publish", "unpublish", "deprecate", "login", "logout", "adduser"),
                *("whoami", "owner", "access", "token", "dist-tag", "team", "org"),
                *("profile", "star", "unstar", "hook"),
            ),
            _REGISTRY,
        ),
    }
)
# Package managers: what each subcommand needs of the host.
_PACKAGES: dict[str, Mapping[str, str]] = {
    **dict.fromkeys(("npm", "pnpm", "yarn", "bun"), _NODE),
    "cargo": dict.fromkeys(("publish", "login", "logout", "owner", "yank"), _REGISTRY),
    "poetry": {"publish": _REGISTRY},
    "uv": {"publish": _REGISTRY},
    "gem": dict.fromkeys(("push", "owner", "yank", "signin", "signout"), _REGISTRY),
    "twine": {"upload": _REGISTRY, "register": _REGISTRY},
    # The engine's socket, which no sandbox sees.
    "docker": dict.fromkeys(("push", "pull", "login", "logout", "build", "run"), _REGISTRY),
}
# What only needs the network: run contained, through the egress proxy.
_FETCHING: dict[str, Mapping[str, str]] = {
    **dict.fromkeys(
        ("npm", "pnpm", "yarn", "bun"),
        dict.fromkeys(
            (
                *("install", "i", "ci", "add", "update", "up", "upgrade", "audit"),
                *("outdated", "view", "info", "search", "dlx", "create"),
            ),
            _NETWORK,
        ),
    ),
    "cargo": dict.fromkeys(("install", "search", "fetch", "update", "add", "build"), _NETWORK),
    **dict.fromkeys(
        ("pip", "pip3"), dict.fromkeys(("install", "download", "index", "search"), _NETWORK)
    ),
    "poetry": dict.fromkeys(("install", "add", "update", "lock", "search"), _NETWORK),
    "uv": dict.fromkeys(("sync", "add", "lock", "pip", "tool", "run"), _NETWORK),
    "gem": dict.fromkeys(("install", "update", "fetch"), _NETWORK),
    "go": dict.fromkeys(("get", "install", "mod", "build", "test"), _NETWORK),
}
# Programs whose every form talks to another machine or service with your credentials.
_ALWAYS = {
    **dict.fromkeys(("gh", "glab", "hub", "tea"), "talks to a code host with your token"),
    **dict.fromkeys(
        ("ssh", "scp", "sftp", "slogin", "mosh", "telnet", "ftp", "rsync"),
        "connects to another machine with your keys",
    ),
    **dict.fromkeys(
        (
            *("aws", "gcloud", "gsutil", "az", "kubectl", "helm", "heroku", "fly", "flyctl"),
            *("vercel", "netlify", "firebase", "doctl", "terraform", "pulumi", "wrangler"),
        ),
        "talks to a cloud service with your credentials",
    ),
}


def needs_host(argv: Sequence[str]) -> str | None:
    """Why the command `argv` would fail contained (it needs the network or the user's
    credentials, which a contained command never has), or None."""
    if not argv:
        return None
    name = canonical_name(argv[0])
    args = argv[1:]
    builtin = _git_core_builtin(argv[0])
    if builtin is not None:  # /usr/lib/git-core/git-push is `git push`
        name, args = "git", (builtin, *args)
    why = _ALWAYS.get(name)
    if why is not None:
        return f"{name} {why}"
    if name == "git":
        return _git(args)
    subcommands = _PACKAGES.get(name)
    if subcommands is None:
        return None
    _, operands = _options_and_operands(args)
    if not operands:
        return None
    why = subcommands.get(operands[0])
    return f"{name} {operands[0]} {why}" if why is not None else None


_FETCHERS = dict.fromkeys(
    ("curl", "wget", "http", "https", "xh", "npx", "pnpx", "bunx"), "fetches from the network"
)


def uses_network(argv: Sequence[str]) -> str | None:
    """Why the command `argv` may need the network (it fetches packages, a URL), though it may
    well work contained through the egress proxy; None when it is not known to."""
    if not argv:
        return None
    name = canonical_name(argv[0])
    why = _FETCHERS.get(name)
    if why is not None:
        return f"{name} {why}"
    args = argv[1:]
    if name.startswith("python") and len(args) >= 2 and args[0] == "-m":
        name, args = args[1], args[2:]
    subcommands = _FETCHING.get(name)
    if subcommands is None:
        return None
    _, operands = _options_and_operands(args)
    if not operands or operands[0] not in subcommands:
        return None
    return f"{name} {operands[0]} {subcommands[operands[0]]}"


def _git(args: Sequence[str]) -> str | None:
    found = git_subcommand(args)
    if found is None:
        return None
    sub, at = found
    rest = args[at + 1 :]
    if sub == "remote":
        _, operands = _options_and_operands(rest)
        if operands[:1] in (["update"], ["prune"]) or (
            operands[:1] == ["show"] and "-n" not in rest
        ):
            return f"git remote {operands[0]} {_REMOTE}"
        return None
    if sub == "submodule":
        return f"git submodule {_REMOTE}" if "update" in rest or "sync" in rest else None
    if sub == "init" or (sub == "clone" and _clones_locally(rest)):
        if "--bare" in rest or "--mirror" in rest:
            return None  # no `.git` of its own: nothing protected is made
        return f"git {sub} {_NEW_REPOSITORY}"
    why = _GIT.get(sub)
    return f"git {sub} {why}" if why is not None else None


def _clones_locally(rest: Sequence[str]) -> bool:
    _, operands = _options_and_operands(rest)
    return bool(operands) and _local_repository(operands[0])
