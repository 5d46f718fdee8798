"""Running git on the host (the `commit` tool) so that nothing in the workspace makes it run a
program the human did not approve.

Real git runs programs named by configuration: `core.fsmonitor` at every status refresh, clean
filters at every `git add`, hooks, external diff and textconv drivers, a signing program,
`git gc --auto`, and all of those again inside every nested repository it looks into. A
sandbox may write anywhere in the workspace except the protected paths (`foundation.protected`),
so a nested `sub/.git` or a config file included from the workspace could name any of them.
`HostGit` runs git with this, the one list of what it overrides:

    refused unless       <workspace>/.git is a real directory (not a `gitdir:` file, not a
                         symlink): otherwise git would use a repository outside the workspace,
                         or discover one above it
    git itself           looked up on PATH without the entries a sandbox can write
                         (`environments.host.path`); refused if it is found nowhere else
    environment          every inherited GIT_* variable dropped (GIT_DIR, GIT_CONFIG_PARAMETERS,
                         GIT_EXTERNAL_DIFF, GIT_SSH_COMMAND, ... would change what runs), then
                         GIT_DIR=<ws>/.git, GIT_WORK_TREE=<ws>, GIT_EDITOR=false,
                         GIT_PAGER=cat, GIT_TERMINAL_PROMPT=0
    -c core.fsmonitor=false                  no fsmonitor hook or daemon
    -c core.hooksPath=<ws>/.git/hooks        hooks only from the top-level repository, and a
                                             hook that leads out of .git/ (a symlink into the
                                             workspace) refuses the commit
    -c submodule.recurse=false               never into a nested repository: no git process
    -c diff.ignoreSubmodules=all             runs there, so its config (fsmonitor, hooks) and
    -c status.submoduleSummary=false         its work tree are never read
    -c core.pager=cat -c core.editor=false   nothing interactive, nothing to launch
    -c diff.external=                        no external diff program
    -c commit.gpgSign=false                  no signing program (commits are unsigned)
    -c commit.template=                      no template file read from a configured path
    -c gc.auto=0 -c maintenance.auto=false   no background gc or maintenance processes
    -c protocol.ext.allow=never              no transport that runs commands
    -c core.sshCommand=false                 (commit never reaches the network; if anything
    -c credential.helper=                     tried, it could not run a program)
    -c filter.<d>.clean= (smudge, process)   for every filter driver any config level defines:
    -c filter.<d>.required=false             files are committed as they are in the work tree,
                                             no clean filter runs (git-lfs included)
    -c diff.<d>.command= -c diff.<d>.textconv=   for every diff driver: no program runs
    -c merge.<d>.driver=                     for every merge driver

Every host process, not only `commit` (`environments.shell` gives each one `guarded_environ`),
also runs with `safe.bareRepository=explicit` in git's command-line configuration
(GIT_CONFIG_COUNT, which git counts as protected configuration): git never takes a directory
laid out as a bare repository (HEAD, objects/, refs/, config, all names a sandbox may write) for
a repository it discovers by itself. Without it, a `git status` granted for the session, in a
workspace or a subdirectory with no `.git`, obeyed the `core.fsmonitor` of a planted `config`.

The drivers are listed by asking git itself (`git config --get-regexp`, which runs nothing),
so includes and conditional includes are read exactly as the commit will read them. The user's
global and the system config are kept (user.name, user.email; they are the human's files, out
of every sandbox's reach), but the overrides above apply over every level.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from codecoder.environments.base import CommandRequest, CommandResult, OutputListener
from codecoder.environments.host.path import host_path, locate
from codecoder.foundation.errors import ExecutionFailed

__all__ = ["COMMIT_HOOKS", "GUARDED_CONFIG", "HostGit", "guarded_environ", "workspace_hooks"]

# The hooks `git add` and `git commit -m` may run (gc, and with it pre-auto-gc, is off).
COMMIT_HOOKS: tuple[str, ...] = (
    "pre-commit",
    "prepare-commit-msg",
    "commit-msg",
    "post-commit",
    "post-index-change",
    "reference-transaction",
)

_FIXED_OVERRIDES: tuple[tuple[str, str], ...] = (
    ("core.fsmonitor", "false"),
    ("submodule.recurse", "false"),
    ("diff.ignoreSubmodules", "all"),
    ("status.submoduleSummary", "false"),
    ("core.pager", "cat"),
    ("core.editor", "false"),
    ("diff.external", ""),
    ("commit.gpgSign", "false"),
    ("commit.template", ""),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
    ("protocol.ext.allow", "never"),
    ("core.sshCommand", "false"),
    ("credential.helper", ""),
)
# Driver keys that name a program, and what each is set to.
_DRIVER_KEYS: dict[str, tuple[tuple[str, str], ...]] = {
    "filter": (("clean", ""), ("smudge", ""), ("process", ""), ("required", "false")),
    "diff": (("command", ""), ("textconv", "")),
    "merge": (("driver", ""),),
}
_DRIVER = re.compile(r"(filter|diff|merge)\.(.+)\.[^.]+")

Run = Callable[[CommandRequest], CommandResult]

# What every git a host process starts reads as command-line configuration (see above).
GUARDED_CONFIG: tuple[tuple[str, str], ...] = (("safe.bareRepository", "explicit"),)


def guarded_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` with `GUARDED_CONFIG` added after whatever GIT_CONFIG_COUNT entries it has
    (a malformed count is replaced: git would refuse to start)."""
    env = dict(environ)
    try:
        count = int(env.get("GIT_CONFIG_COUNT", "0"))
    except ValueError:
        count = 0
    count = max(count, 0)
    for key, value in GUARDED_CONFIG:
        env[f"GIT_CONFIG_KEY_{count}"] = key
        env[f"GIT_CONFIG_VALUE_{count}"] = value
        count += 1
    env["GIT_CONFIG_COUNT"] = str(count)
    return env


@dataclass(frozen=True, slots=True)
class HostGit:
    """git for one workspace, hardened as the module docstring says."""

    workspace: Path
    git: str
    env: dict[str, str]
    hooks: tuple[str, ...]  # the commit hooks present in .git/hooks

    @classmethod
    def for_workspace(cls, workspace: Path, environ: Mapping[str, str] | None = None) -> HostGit:
        """Check the workspace's repository and find git; ExecutionFailed saying why not."""
        environ = os.environ if environ is None else environ
        git_dir = workspace / ".git"
        try:
            info = os.lstat(git_dir)
        except FileNotFoundError:
            raise ExecutionFailed(
                f"the workspace {workspace} is not a git repository (no .git at its root); "
                "commit does not use a repository found above it"
            ) from None
        if not stat.S_ISDIR(info.st_mode):
            kind = "a symlink" if stat.S_ISLNK(info.st_mode) else "a file (a gitdir: pointer)"
            raise ExecutionFailed(
                f"the workspace's .git is {kind}: commit runs git only on a repository whose "
                ".git directory is in the workspace; commit with run_command instead"
            )
        program = locate("git", workspace, {"PATH": host_path(workspace, environ)})
        if program.path is None:
            raise ExecutionFailed(
                "git was not found on PATH outside the directories a sandbox can write"
            )
        env = {k: v for k, v in environ.items() if not k.startswith("GIT_")}
        env.update(
            PATH=host_path(workspace, environ),
            GIT_DIR=str(git_dir),
            GIT_WORK_TREE=str(workspace),
            GIT_EDITOR="false",
            GIT_PAGER="cat",
            GIT_TERMINAL_PROMPT="0",
        )
        return cls(workspace, str(program.path), env, _hooks(git_dir))

    def overrides(self, config_names: list[str] | None = None) -> list[str]:
        """The `-c` options: the fixed ones, and one set per driver in `config_names`."""
        pairs = [*_FIXED_OVERRIDES, ("core.hooksPath", str(self.workspace / ".git" / "hooks"))]
        drivers: dict[tuple[str, str], None] = {}
        for name in config_names or ():
            match = _DRIVER.fullmatch(name)
            if match:
                drivers[(match.group(1).lower(), match.group(2))] = None
        for section, driver in drivers:
            pairs += [(f"{section}.{driver}.{key}", value) for key, value in _DRIVER_KEYS[section]]
        options: list[str] = []
        for key, value in pairs:
            options += ["-c", f"{key}={value}"]
        return options

    def runner(
        self,
        run: Run,
        *,
        timeout: float,
        max_output: int,
        cancel: threading.Event | None = None,
        output: OutputListener | None = None,
        session: str | None = None,
    ) -> Callable[..., CommandResult]:
        """`git(*args)` for this workspace: first lists the drivers, then runs each command
        with every override (its output passed to `output` as it comes), as calls of
        `session`. Refuses a hook that leads out of .git/."""
        self._check_hooks()

        def request(
            args: tuple[str, ...], overrides: list[str], listener: OutputListener | None = None
        ) -> CommandRequest:
            argv = (self.git, *overrides, *args)
            return CommandRequest(
                cwd=self.workspace,
                argv=argv,
                env=self.env,
                timeout=timeout,
                max_output=max_output,
                writable=True,  # in a sandbox (@bwrap): the index, objects and refs it writes
                cancel=cancel,
                output=listener,
                session=session,
            )

        listing = ("config", "--null", "--name-only", "--get-regexp", r"^(filter|diff|merge)\.")
        listed = run(request(listing, self.overrides()))
        if listed.exit_code not in (0, 1):  # 1: no such keys
            raise ExecutionFailed(f"git could not read its configuration: {listed.stderr.strip()}")
        full = self.overrides([name.strip() for name in listed.stdout.split("\0") if name.strip()])

        def git(*args: str) -> CommandResult:
            return run(request(args, full, output))

        return git

    def _check_hooks(self) -> None:
        hooks = self.workspace / ".git" / "hooks"
        git_dir = (self.workspace / ".git").resolve()
        for name in self.hooks:
            real = (hooks / name).resolve()
            if git_dir not in real.parents:
                raise ExecutionFailed(
                    f"the hook .git/hooks/{name} runs {real}, outside .git/ where a sandbox "
                    "can write it: commit does not run it. Commit with run_command, or make the "
                    "hook a file inside .git/hooks"
                )


def workspace_hooks(workspace: Path, environ: Mapping[str, str] | None = None) -> str | None:
    """Where the host's git, run in `workspace` with the human's configuration, takes its hooks
    from when that is a directory of the workspace outside `.git` (`core.hooksPath`, as husky
    sets it: `.husky/_`), as a workspace-relative path; None otherwise.

    Such hooks are files any tool that writes the workspace can change, so `run_command` says
    so when it asks for a git command on the host. Asked of git itself (`git config`, which
    runs nothing), so includes and conditional includes count as they will when git runs.
    """
    environ = os.environ if environ is None else environ
    program = locate("git", workspace, {"PATH": host_path(workspace, environ)})
    if program.path is None:
        return None
    try:
        done = subprocess.run(
            [program.path, "config", "--get", "core.hooksPath"],
            cwd=workspace,
            env=guarded_environ(environ),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=5,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    value = done.stdout.strip()
    if done.returncode != 0 or not value:
        return None
    real = os.path.realpath(os.path.join(workspace, os.path.expanduser(value)))
    root = str(workspace)
    if not real.startswith(root + "/"):
        return None
    relative = os.path.relpath(real, root)
    return None if relative.split("/", 1)[0] == ".git" else relative


def _hooks(git_dir: Path) -> tuple[str, ...]:
    found = []
    for name in COMMIT_HOOKS:
        path = git_dir / "hooks" / name
        if os.path.lexists(path) and (not path.exists() or os.access(path, os.X_OK)):
            found.append(name)
    return tuple(found)
