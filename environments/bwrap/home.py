"""What a contained command sees of the user's files outside the workspace.

`$HOME` (and the account's home directory, where that differs) is an empty tmpfs in the sandbox.
Into it come, read-only, only the *toolchains* the command needs and what a trusted
codecoder.json adds (`"bwrap": {"home": [...]}`):

* a toolchain is the directory under the home that holds a program the command may run: the
  program named by the command (as PATH finds it, before and after symlinks), the interpreter
  its `#!` line names (`/usr/bin/env node` looked up the same way), and so on a few levels
  down; for a compound command, every word that PATH resolves to a file under the home; and
  every directory of the PATH under the home, since a command runs other programs by name
  (`make test` runs the `python` of `~/.pyenv/shims`, which no word of it names). The
  directory is the first component under the home (`~/.pyenv`, `~/.nvm`, `~/.cargo`), or the
  first two under `~/.local`, `~/.config`, `~/.cache` and `~/.var`, with its companions
  (`~/.cargo` needs `~/.rustup`; `~/.local/bin` needs `~/.local/lib`);
* never the user's credentials (`CREDENTIALS`: `~/.ssh`, `~/.aws`, `~/.gnupg`, `~/.netrc`,
  `~/.git-credentials`, `~/.config/gh`, `~/.docker`, `~/.kube`, ...): a toolchain or an entry
  that is one or lies in one is left out, and one that holds one has it covered (an empty file
  or directory over it), as are the credential files tools keep inside their own directories
  (`~/.cargo/credentials.toml`, a Node prefix's `etc/npmrc`);
* nor a toolchain's own configuration (`configuration_in`): a tool keeps its settings, and the
  passwords and tokens among them, in files at the top of its directory (`~/.m2/settings.xml`
  and `settings-security.xml`, `~/.gradle/gradle.properties`, `~/.cargo/config.toml` with a
  `[registry] token`, `~/.config/pip/pip.conf`), and its caches, installed packages and
  programs in directories below (`~/.m2/repository`, `~/.gradle/caches`, `~/.cargo/registry`,
  `~/.cargo/bin`). So every file at the top of a shown directory is covered by an empty one,
  whatever its name, unless it is a program (executable: `~/.local/bin/*`), one of the few
  files a toolchain needs to run at all (`TOOLCHAIN_STATE`: rustup's default toolchain,
  pyenv's global version), or a file the user's own settings name themselves
  (`"home": ["~/.m2", "~/.m2/settings.xml"]`). An unknown tool's secrets are hidden by
  default; a setting it misses is one line in the user's file.

Outside the home, `hidden_paths` lists what is replaced by an empty tmpfs (the other homes,
`/run` with every service's socket, the runtime's state and configuration directories wherever
XDG puts them, the session bus and agent sockets' directories). The host's own secrets
(`/etc/shadow`, SSH host keys, a service's TLS keys, whatever their names) are found by a rule,
not listed here: `environments.privatefiles`.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Final

from codecoder.foundation.regularfile import open_regular
from codecoder.foundation.state import config_directory, state_directory

__all__ = [
    "CREDENTIALS",
    "TOOLCHAIN_STATE",
    "configuration_in",
    "credential_in",
    "credentials_within",
    "hidden_paths",
    "home_directories",
    "masked_in_toolchain",
    "program_words",
    "toolchains",
]

# Relative to the home: what is never visible in a sandbox.
CREDENTIALS: Final = (
    ".ssh",
    ".aws",
    ".gnupg",
    ".netrc",
    ".git-credentials",
    ".gitconfig",
    ".config/git",
    ".config/gh",
    ".config/hub",
    ".config/gcloud",
    ".config/doctl",
    ".config/op",
    ".config/codecoder",
    ".docker",
    ".kube",
    ".azure",
    ".npmrc",
    ".yarnrc",
    ".yarnrc.yml",
    ".pypirc",
    ".gem/credentials",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".terraform.d",
    ".vault-token",
    ".password-store",
    ".local/share/keyrings",
    ".local/state/codecoder",
    ".pki",
    ".mozilla",
    ".config/google-chrome",
    ".config/chromium",
    ".claude",
    ".claude.json",
    ".gemini",
    ".codex",
)
# Where tools keep credentials inside a toolchain directory (globs relative to it).
_TOOLCHAIN_CREDENTIALS: Final = (
    "credentials",
    "credentials.toml",
    ".credentials.toml",
    ".npmrc",
    "etc/npmrc",
    "versions/*/etc/npmrc",
    "versions/node/*/etc/npmrc",
    ".netrc",
    ".pypirc",
    ".git-credentials",
    "auth.json",
    "hosts.yml",
)
# Files at the top of a toolchain's directory that it needs to run, and that hold no secret:
# rustup's default toolchain, pyenv's global version (relative to the home).
TOOLCHAIN_STATE: Final = frozenset({".rustup/settings.toml", ".pyenv/version"})
# Directories under the home that hold many tools' directories: a toolchain is one level deeper.
_SHARED: Final = frozenset({".local", ".config", ".cache", ".var"})
_COMPANIONS: Final[Mapping[str, tuple[str, ...]]] = {
    ".cargo": (".rustup",),
    ".rustup": (".cargo",),
    ".local/bin": (".local/lib",),
}
_MAX_DEPTH: Final = 4  # program -> interpreter -> interpreter ...
_SHEBANG_BYTES: Final = 256


def home_directories(environ: Mapping[str, str]) -> tuple[Path, ...]:
    """`$HOME` and the account's home directory (they may differ), resolved, without `/`."""
    found: list[Path] = []
    candidates = [environ.get("HOME", "")]
    with contextlib.suppress(KeyError):
        candidates.append(pwd.getpwuid(os.getuid()).pw_dir)
    for candidate in candidates:
        if candidate and os.path.isabs(candidate):
            path = Path(os.path.realpath(candidate))
            if path != Path("/") and path not in found:
                found.append(path)
    return tuple(found)


def credential_in(path: Path, home: Path) -> str | None:
    """The credential path `path` is or lies in (relative to `home`), or None; the home itself
    counts (it holds them all)."""
    try:
        relative = path.relative_to(home)
    except ValueError:
        return None
    if str(relative) == ".":
        return "the home directory itself"
    for credential in CREDENTIALS:
        inner = Path(credential)
        if relative == inner or inner in relative.parents:
            return f"~/{credential}"
    return None


def credentials_within(path: Path, home: Path) -> list[Path]:
    """The credential paths that exist strictly inside `path`, to be covered when it is shown."""
    found = []
    for credential in CREDENTIALS:
        inner = home / credential
        if path in inner.parents and os.path.lexists(inner):
            found.append(inner)
    return found


def _toolchain_root(path: Path, home: Path) -> Path | None:
    try:
        parts = path.relative_to(home).parts
    except ValueError:
        return None
    if not parts:
        return None
    depth = 2 if parts[0] in _SHARED and len(parts) > 2 else 1
    if len(parts) <= depth:
        return None  # a file directly in the home (or in ~/.local): no directory to bind
    return home.joinpath(*parts[:depth])


def _which(name: str, path: str, cwd: Path) -> Path | None:
    if "/" in name:
        candidate = Path(name) if name.startswith("/") else cwd / name
        return candidate if os.access(candidate, os.X_OK) and candidate.is_file() else None
    for directory in path.split(os.pathsep):
        base = Path(directory) if directory.startswith("/") else cwd / (directory or ".")
        candidate = base / name
        if os.access(candidate, os.X_OK) and candidate.is_file():
            return candidate
    return None


def _interpreter(program: Path, path: str, cwd: Path) -> Path | None:
    """The program a `#!` line names (through `env`), or None."""
    try:
        with os.fdopen(open_regular(program), "rb") as handle:
            head = handle.read(_SHEBANG_BYTES)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    words = head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").split()
    if not words:
        return None
    if os.path.basename(words[0]) == "env":
        names = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
        return _which(names[0], path, cwd) if names else None
    return Path(words[0])


def toolchains(
    programs: Iterable[str],
    homes: tuple[Path, ...],
    path: str,
    cwd: Path,
    workspace: Path | None = None,
) -> tuple[Path, ...]:
    """The toolchain directories (see the module docstring) that `programs` need, given the
    PATH and working directory they run with; none that is or holds a credential, and none that
    holds the workspace (a program in the workspace is visible already; the directory above it
    would show every project beside it)."""
    roots: list[Path] = []

    def add(root: Path, home: Path) -> None:
        if root in roots or credential_in(root, home) is not None or not root.is_dir():
            return
        if workspace is not None and (workspace == root or root in workspace.parents):
            return
        if any(other == root or root in other.parents for other in homes if other != home):
            return  # it holds the other home ($HOME inside the account's): shown by its own
        roots.append(root)
        relative = str(root.relative_to(home))
        for companion in _COMPANIONS.get(relative, ()):
            add(home / companion, home)

    def note(found: Path) -> None:
        for candidate in (found, Path(os.path.realpath(found))):
            for home in homes:
                root = _toolchain_root(candidate, home)
                if root is not None:
                    add(root, home)

    for name in programs:
        program = _which(name, path, cwd)
        for _ in range(_MAX_DEPTH):
            if program is None:
                break
            note(program)
            program = _interpreter(Path(os.path.realpath(program)), path, cwd)
    # What the command runs by name, directly or not: the PATH's directories under the home
    # (each as if it held a program, so that its toolchain directory is what is shown).
    for directory in path.split(os.pathsep):
        if directory.startswith("/") and os.path.isdir(directory):
            note(Path(directory) / "program")
    return tuple(roots)


def masked_in_toolchain(root: Path, homes: tuple[Path, ...] = ()) -> list[Path]:
    """The credential files and directories inside a directory shown to the sandbox, to be
    covered: the home's credential paths within it, and the files tools keep there."""
    candidates: list[Path] = [p for home in homes for p in credentials_within(root, home)]
    for pattern in _TOOLCHAIN_CREDENTIALS:
        candidates += [Path(m) for m in glob.glob(glob.escape(str(root)) + "/" + pattern)]
    found: list[Path] = []
    for candidate in candidates:
        # A mount lands where a link leads: cover the file itself, where it is shown.
        real = Path(os.path.realpath(candidate))
        if (real == root or root in real.parents) and real.exists() and real not in found:
            found.append(real)
    return found


def configuration_in(root: Path, homes: tuple[Path, ...], named: Iterable[Path] = ()) -> list[Path]:
    """The files at the top of a shown directory to cover as its configuration (see the module
    docstring): every regular file there but programs, `TOOLCHAIN_STATE` and the files in
    `named` (what the user's settings name themselves)."""
    keep = {Path(os.path.realpath(p)) for p in named}
    for home in homes:
        keep.update(home / state for state in TOOLCHAIN_STATE)
    found: list[Path] = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return found
    for entry in entries:
        path = Path(entry.path)
        try:
            if not entry.is_file(follow_symlinks=True):
                continue
            real = Path(os.path.realpath(path))
            if not (real == root or root in real.parents) or real in keep or path in keep:
                continue  # a link out of the directory is mounted where it leads, if at all
            if os.access(real, os.X_OK):
                continue  # a program, not a setting
        except OSError:
            continue
        if real not in found:
            found.append(real)
    return sorted(found)


def program_words(script: str) -> list[str]:
    """The words of a compound command that could name a program (the runtime keyed and showed
    the whole string; here only the toolchains it may need are looked for)."""
    words: list[str] = []
    for token in script.replace("\n", " ").split():
        for part in _split_operators(token):
            part = part.strip("'\"(){}")
            if part and "=" not in part and not part.startswith(("-", "$")):
                words.append(part)
    return list(dict.fromkeys(words))


def _split_operators(token: str) -> list[str]:
    for operator in ("&&", "||", "|", ";", "&", "`", "$(", "<(", ">(", ">", "<"):
        token = token.replace(operator, " ")
    return token.split()


def hidden_paths(environ: Mapping[str, str], homes: tuple[Path, ...]) -> list[Path]:
    """The directories replaced by an empty tmpfs, outermost first: every home, `/run` (and
    what links there), the runtime's state and configuration directories, the runtime
    directory of the session; those that exist."""
    candidates: list[Path] = [*homes, Path("/root"), Path("/home"), Path("/run"), Path("/var/run")]
    candidates += [state_directory(environ), config_directory(environ)]
    for name in ("XDG_RUNTIME_DIR", "XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_DATA_HOME"):
        value = environ.get(name, "")
        if value and os.path.isabs(value):
            candidates.append(Path(value))
    found: list[Path] = []
    for candidate in candidates:
        real = Path(os.path.realpath(candidate))
        if real != Path("/") and real.is_dir() and real not in found:
            found.append(real)
    found.sort(key=lambda p: len(p.parts))
    # One inside another is hidden with it (but kept: the workspace may be bound in between).
    return found
