"""Where a `git push` in a workspace would push to, read on the host with git's own config reading
(`git config --list`: includes and conditional includes count as they will when git runs, and
reading runs nothing), for the credential broker's question: may this push run contained?

A repository's configuration is the attacker's, so the answer fails closed: None (unknown) when
any `url.<base>.insteadOf` or `pushInsteadOf` is in effect, when the remote is not a plain name
configured as `remote.<name>.url`, when it names a remote helper (`remote.<name>.vcs`) or a
program of its own (`receivepack`, `uploadpack`), when a legacy `.git/remotes` or
`.git/branches` file could name it, or when git cannot say."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from codecoder.environments.host.git import guarded_environ
from codecoder.environments.host.path import host_path, locate

__all__ = ["fetch_urls", "push_urls"]

_REMOTE_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_REWRITES: Final = re.compile(r"url\..*\.(insteadof|pushinsteadof)")
_OWN_PROGRAMS: Final = ("vcs", "receivepack", "uploadpack", "proxy")


def push_urls(
    workspace: Path, remote: str | None, environ: Mapping[str, str] | None = None
) -> tuple[str, ...] | None:
    """The URLs `git push [remote]` in `workspace` pushes to, as configured (no rewriting in
    effect), or None when that cannot be known for sure (see the module docstring)."""
    return _remote_urls(workspace, remote, environ, pushing=True)


def fetch_urls(
    workspace: Path, remote: str | None, environ: Mapping[str, str] | None = None
) -> tuple[str, ...] | None:
    """The URL `git fetch [remote]` (or `git pull`) in `workspace` fetches from, as configured,
    or None when that cannot be known for sure, as for `push_urls`."""
    return _remote_urls(workspace, remote, environ, pushing=False)


def _remote_urls(
    workspace: Path, remote: str | None, environ: Mapping[str, str] | None, *, pushing: bool
) -> tuple[str, ...] | None:
    environ = os.environ if environ is None else environ
    program = locate("git", workspace, {"PATH": host_path(workspace, environ)})
    if program.path is None:
        return None
    git = program.path
    listed = _git(git, workspace, environ, "config", "-z", "--list")
    dirs = _git(git, workspace, environ, "rev-parse", "--git-dir", "--git-common-dir")
    if listed is None or dirs is None:
        return None
    config: dict[str, list[str]] = {}
    for item in listed.split("\0"):
        if not item:
            continue
        key, _, value = item.partition("\n")
        config.setdefault(_normal_key(key), []).append(value)
    if any(_REWRITES.fullmatch(key) for key in config):
        return None
    if remote is None:
        branch = _git(git, workspace, environ, "symbolic-ref", "-q", "--short", "HEAD")
        remote = _default_remote(config, branch.strip() if branch else None, pushing=pushing)
    if remote is None or not _REMOTE_NAME.fullmatch(remote):
        return None
    for directory in dirs.splitlines():
        base = Path(workspace, directory)
        for legacy in ("remotes", "branches"):
            if os.path.lexists(base / legacy / remote):
                return None
    section = f"remote.{remote}."
    if any(config.get(section + name) for name in _OWN_PROGRAMS):
        return None
    pushed = config.get(section + "pushurl") if pushing else None
    urls = pushed or config.get(section + "url") or []
    return tuple(urls) or None


def _default_remote(
    config: Mapping[str, list[str]], branch: str | None, *, pushing: bool = True
) -> str | None:
    """The remote a bare `git push` pushes to: the branch's pushRemote, remote.pushDefault,
    the branch's remote, else origin (git's order); a bare `git fetch`, the branch's remote,
    else origin."""
    keys = (
        (f"branch.{branch}.pushremote" if branch else None, "remote.pushdefault") if pushing else ()
    )
    for key in (*keys, f"branch.{branch}.remote" if branch else None):
        values = config.get(key) if key else None
        if values:
            return values[-1]
    return "origin"


def _normal_key(key: str) -> str:
    """A config key as git compares it: section and name case-insensitive, the subsection as
    written."""
    section, _, rest = key.partition(".")
    subsection, dot, name = rest.rpartition(".")
    if not dot:
        return f"{section.lower()}.{rest.lower()}"
    return f"{section.lower()}.{subsection}.{name.lower()}"


def _git(git: str, workspace: Path, environ: Mapping[str, str], *args: str) -> str | None:
    try:
        done = subprocess.run(
            [git, *args],
            cwd=workspace,
            env=guarded_environ(environ),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None
