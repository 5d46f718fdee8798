"""Forms that need the host (`needs_host`): commands that cannot work contained.

A contained command (@bwrap) has no network and does not see the user's credentials (`~/.ssh`,
`~/.git-credentials`, `~/.npmrc`, `~/.config/gh` …). Some forms exist only to use them: `git
push`, `git fetch` and `git pull` talk to a remote, `npm publish` and `cargo publish` to a
registry with the user's token, `gh` to GitHub, `ssh` to another machine. Contained, they fail.
So do `git init` and `git clone` (even of a local repository): the `.git` they create holds a
config and hooks, protected paths that no sandbox may create (the environment quarantines them).

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

__all__ = ["needs_host"]

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
        **dict.fromkeys(
            (
                *("install", "i", "ci", "add", "update", "up", "upgrade", "audit"),
                *("outdated", "view", "info", "search", "dlx", "create"),
            ),
            _NETWORK,
        ),
    }
)
_PIP: Mapping[str, str] = MappingProxyType(
    dict.fromkeys(("install", "download", "index", "search"), _NETWORK)
)
# Package managers: what each subcommand needs of the host.
_PACKAGES: dict[str, Mapping[str, str]] = {
    **dict.fromkeys(("npm", "pnpm", "yarn", "bun"), _NODE),
    "cargo": {
        **dict.fromkeys(("publish", "login", "logout", "owner", "yank"), _REGISTRY),
        **dict.fromkeys(("install", "search", "fetch", "update", "add"), _NETWORK),
    },
    **dict.fromkeys(("pip", "pip3"), _PIP),
    "poetry": {
        **dict.fromkeys(("publish",), _REGISTRY),
        **dict.fromkeys(("install", "add", "update", "lock", "search"), _NETWORK),
    },
    "uv": {
        **dict.fromkeys(("publish",), _REGISTRY),
        **dict.fromkeys(("sync", "add", "lock", "pip", "tool"), _NETWORK),
    },
    "gem": {
        **dict.fromkeys(("push", "owner", "yank", "signin", "signout"), _REGISTRY),
        **dict.fromkeys(("install", "update", "fetch"), _NETWORK),
    },
    "go": {**dict.fromkeys(("get", "install"), _NETWORK), "mod": _NETWORK},
    "twine": {"upload": _REGISTRY, "register": _REGISTRY},
    "docker": dict.fromkeys(("push", "pull", "login", "logout", "build", "run"), _REGISTRY),
}
# Programs whose every form talks to another machine or service with your credentials.
_ALWAYS = {
    **dict.fromkeys(("gh", "glab", "hub", "tea"), "talks to a code host with your token"),
    **dict.fromkeys(
        ("ssh", "scp", "sftp", "slogin", "mosh", "telnet", "ftp", "rsync"),
        "connects to another machine with your keys",
    ),
    **dict.fromkeys(("curl", "wget", "http", "https", "xh"), "fetches from the network"),
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
