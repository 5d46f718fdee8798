"""Whether a `git push` can run contained, through the credential broker
(`environments.broker`), instead of needing the host; and whether a `git fetch`, `pull` or
`ls-remote` reaches only https remotes, so that it may run contained through the egress proxy
(`contained_fetch`: contained first, the host offered only by a later question).

It can when the user's own configuration routes the host's credential (`"credentials"`), the
project's egress allowlist admits that host, and the push is a plain one whose every pushed URL
is `https://<routed host>/<path>`, read on the host from the workspace's configuration
(`environments.host.pushremote`). Everything else stays as it was, a needs-host command: an ssh
or http:// remote, another host, a URL with a user or password in it, `insteadOf` or
`pushInsteadOf` rewriting in effect, a URL or a path given on the command line, global options
(`-c`, `-C`, `--git-dir` …), `--repo`, `--receive-pack`/`--exec`, an option this module does not
know, or a compound command line. So a wrong answer here can only make a push run contained
(where a remote it cannot reach fails), never give a grant to the host."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

from codecoder.environments.host.pushremote import fetch_urls, push_urls
from codecoder.permissions.programs.table import canonical_name

__all__ = ["contained_fetch", "contained_push"]

_OPTIONS: Final = frozenset(
    {
        *("-u", "--set-upstream", "-q", "--quiet", "-v", "--verbose", "--progress"),
        *("--no-progress", "--tags", "--follow-tags", "--no-follow-tags", "-f", "--force"),
        *("--force-with-lease", "--no-force-with-lease", "--force-if-includes"),
        *("--no-force-if-includes", "-d", "--delete", "-n", "--dry-run", "--atomic"),
        *("--no-atomic", "--porcelain", "--no-verify", "--verify", "--all", "--branches"),
        "--prune",
    }
)
_PATH: Final = re.compile(r"/[A-Za-z0-9._~/+@-]+")


def contained_push(
    argv: Sequence[str], workspace: Path, routes: Sequence[tuple[str, int]]
) -> str | None:
    """The URL the `git push` of `argv` pushes to when it may run contained through the
    credential broker (every pushed URL on a routed host of `routes`), else None."""
    if not routes or len(argv) < 2 or canonical_name(argv[0]) != "git" or argv[1] != "push":
        return None
    operands: list[str] = []
    words = list(argv[2:])
    for at, word in enumerate(words):
        if word == "--":
            operands += words[at + 1 :]
            break
        if word.startswith("-"):
            if word in _OPTIONS or word.startswith("--force-with-lease="):
                continue
            return None
        operands.append(word)
    remote = operands[0] if operands else None
    urls = push_urls(workspace, remote)
    if not urls or not all(_routed(url, routes) for url in urls):
        return None
    return urls[0]


def _routed(url: str, routes: Sequence[tuple[str, int]]) -> bool:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return False
    if parts.scheme != "https" or parts.username is not None or parts.password is not None:
        return False
    if parts.query or parts.fragment or not _PATH.fullmatch(parts.path):
        return False
    host = parts.hostname or ""
    if parts.netloc != (host if port is None else f"{host}:{port}"):
        return False  # a netloc spelled any other way (case, brackets, an empty port)
    return (host, 443 if port is None else port) in routes


_FETCH_OPTIONS: Final = frozenset(
    {
        *("-q", "--quiet", "-v", "--verbose", "--progress", "--no-progress", "-p", "--prune"),
        *("-t", "--tags", "--no-tags", "--unshallow", "--ff-only", "--ff", "--no-ff"),
        *("--rebase", "--no-rebase", "-r", "--heads", "--refs", "--exit-code", "--dry-run"),
        *("--no-recurse-submodules", "--no-edit", "--autostash", "--no-autostash"),
    }
)
_FETCHING: Final = frozenset({"fetch", "pull", "ls-remote"})


def contained_fetch(argv: Sequence[str], workspace: Path) -> str | None:
    """The URL a `git fetch`, `pull` or `ls-remote` of `argv` reaches when it may run contained
    (every URL it reaches is `https://` with no user or password in it: the egress proxy
    carries it, and each host is asked), else None (an ssh remote needs the user's keys: the
    host, as before). Options from a known list only (`--depth=N` too); the first operand is
    a remote's name or an https URL."""
    if len(argv) < 2 or canonical_name(argv[0]) != "git" or argv[1] not in _FETCHING:
        return None
    operands: list[str] = []
    words = list(argv[2:])
    for at, word in enumerate(words):
        if word == "--":
            operands += words[at + 1 :]
            break
        if word.startswith("-"):
            if word in _FETCH_OPTIONS or word.startswith(("--depth=", "--deepen=")):
                continue
            return None
        operands.append(word)
    first = operands[0] if operands else None
    if first is not None and "://" in first:
        urls: tuple[str, ...] | None = (first,)
    else:
        urls = fetch_urls(workspace, first)
    if not urls or not all(_over_https(url) for url in urls):
        return None
    return urls[0]


def _over_https(url: str) -> bool:
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    return (
        parts.scheme == "https"
        and bool(parts.hostname)
        and parts.username is None
        and parts.password is None
    )
