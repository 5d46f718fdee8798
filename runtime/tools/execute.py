"""The execute and git-write tools that run commands: `run_command` and `commit`.

On @shell, `run_command` keys a simple command by the program found on the host's PATH when
that program lies where a sandbox can write (`environments.host.path`), and runs the path found at
key time; compound commands get a PATH without those directories. Its question says what code
from the workspace the program runs (`runtime.permissions.programs.WORKSPACE_CODE`: a grant for `npm
test` is a grant for whatever package.json's test script is when it runs), and marks protected a
command whose words reach a protected path through a symlink (`foundation.protected`). `commit`
runs git hardened as `environments.host.git` describes.

In @bwrap, a command in a read-only form (`runtime.permissions.programs.readonly`) is
`Permission.read_only`: it runs with no question, with the whole file system read-only
(`CommandRequest.writable=False`), once the deny rules let it through. A command that would
fail contained (`git push`) carries its key on the host (`Permission.host`), which the question
offers as an explicit escalation; the dispatcher then runs that one call on @shell. An
output-filter pipeline (`npm test 2>&1 | tail -20`) is keyed as its first command and run by
bash as that argv followed by its filters (`PermissionKey.filters`). A command after harmless
assignments (`TZ=UTC pytest`, `runtime.permissions.assignments`) is keyed as the command alone and
run by bash as those assignments followed by its argv.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
from typing import Any

from pydantic import Field, ValidationInfo, field_validator

from codecoder.environments.base import CommandRequest, CommandResult
from codecoder.environments.host.git import HostGit, workspace_hooks
from codecoder.environments.host.path import host_path, locate
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.errors import ExecutionFailed
from codecoder.foundation.protected import reaches_protected
from codecoder.permissions.commandkey import key_command, textual_words
from codecoder.permissions.keys import CallSite, KeyStyle, Permission, PermissionKey
from codecoder.permissions.programs import canonical_name
from codecoder.permissions.programs.host import uses_network
from codecoder.tools.base import Category, Parameters, Tool, ToolContext, ToolResult
from codecoder.tools.containedpush import contained_fetch, contained_push
from codecoder.tools.files.paths import normalise_path, standing_of

# Where a command is a process on the host's own file system, as the human's shell would run it:
# what PATH finds there (and whether a sandbox could have put it there) is what runs.
_HOST = frozenset({EnvironmentTag.SHELL, EnvironmentTag.CONFINED})


class RunCommandParameters(Parameters):
    command: str = Field(
        description=(
            "The command line to run in the workspace. A single program with literal "
            "arguments (e.g. `git status`) is run directly and keyed by its program; anything "
            "else (pipes, `&&`, redirections, variables, ...) is run by bash and must be "
            "approved as a whole."
        ),
        min_length=1,
        max_length=100_000,
    )
    timeout: float | None = Field(
        default=None,
        gt=0,
        le=86_400,
        description="Seconds before the command is killed; the project's limit by default.",
    )

    @field_validator("command")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the command is blank")
        if "\x00" in value:
            raise ValueError("the command contains a NUL byte")
        return value


COMMAND_OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "exit_code": {"type": "integer", "description": "The command's exit code."},
        "truncated": {
            "type": "boolean",
            "description": "Whether output was cut (head and tail kept, the cut marked).",
        },
        "killed_by": {
            "type": ["string", "null"],
            "description": "The signal that killed the command, if one did.",
        },
    },
    "required": ["exit_code", "truncated", "killed_by"],
    "additionalProperties": False,
}
"""What a command's result carries beyond its text (`result_of`'s data has these and more)."""


def command_status(exit_code: int, killed_by: str | None) -> str:
    """The line that ends a command's result: `[exit code 2]`, `[exit code 137, killed by
    SIGKILL]` (a terminal that showed the output as it came shows this line after it)."""
    return f"[exit code {exit_code}" + (f", killed by {killed_by}" if killed_by else "") + "]"


def result_of(res: CommandResult) -> ToolResult:
    parts = [res.stdout]
    if res.stderr:
        parts.append(("\n" if res.stdout and not res.stdout.endswith("\n") else "") + res.stderr)
    text = "".join(parts)
    status = command_status(res.exit_code, res.killed_by)
    data: dict[str, Any] = {
        "exit_code": res.exit_code,
        "stdout": res.stdout,
        "stderr": res.stderr,
        "truncated": res.truncated,
        "killed_by": res.killed_by,
        "duration_ms": round(res.duration * 1000, 3),
    }
    return ToolResult(
        output=f"{text}{status}" if not text or text.endswith("\n") else f"{text}\n{status}",
        is_error=res.exit_code != 0,
        data=data,
    )


class RunCommand(Tool[RunCommandParameters]):
    name = "run_command"
    description = (
        "Run a command line in the project workspace and return its output and exit code. "
        "Runs in a kernel sandbox by default (@bwrap: the workspace writable, its protected "
        "paths read-only, the user's secrets hidden, each network host asked); a project may "
        "bind it to a "
        "container (@docker) or to the host (@shell)."
    )
    category = Category.EXECUTE
    environment = EnvironmentTag.BWRAP
    bindable = frozenset({EnvironmentTag.BWRAP, EnvironmentTag.SHELL, EnvironmentTag.DOCKER})
    parameters = RunCommandParameters
    key_style = KeyStyle.COMMAND
    output_schema = COMMAND_OUTPUT_SCHEMA

    def permission(self, args: RunCommandParameters) -> Permission:
        return Permission.ask(key_command(args.command).permission_key(self.name))

    def permission_in(self, args: RunCommandParameters, site: CallSite) -> Permission:
        key = self.permission(args).key
        assert key is not None
        if site.standing != ".":
            # The key is the command's, wherever it runs (as `make` is whatever Makefile is
            # there); the question says where.
            note = f"runs in {site.standing}/ (where you stand in the workspace)"
            key = dataclasses.replace(key, notes=(*key.notes, note))
        if site.environment not in _HOST:
            # In a sandbox: its own PATH, its own file system.
            if key.read_only and site.environment.confines_read_only:
                return Permission.read_only(key)
            bwrap = site.environment is EnvironmentTag.BWRAP
            pushed = (
                contained_push(key.argv, site.workspace, site.credential_hosts)
                if key.needs_host and key.argv and bwrap
                else None
            )
            if pushed is not None:
                # Contained after all: the credential broker pushes with the user's token,
                # which the sandbox never sees (environments.broker).
                note = f"runs contained: pushes to {pushed} through the credential broker"
                key = dataclasses.replace(key, needs_host="", notes=(*key.notes, note))
                return Permission.ask(key)
            fetched = (
                contained_fetch(key.argv, site.workspace)
                if key.needs_host and key.argv and bwrap
                else None
            )
            network = uses_network(key.argv) if key.argv and bwrap else None
            on_host_site = CallSite(site.workspace, EnvironmentTag.SHELL, standing=site.standing)
            if fetched is not None or (network is not None and not key.needs_host):
                # Contained first, through the egress proxy: each host it reaches is asked
                # during the call; the host is offered by a later question only.
                note = (
                    f"runs contained: fetches from {fetched} through the egress proxy"
                    if fetched is not None
                    else f"runs contained: {network} through the egress proxy"
                )
                key = dataclasses.replace(key, needs_host="", notes=(*key.notes, note))
                on_host = self.permission_in(args, on_host_site)
                return Permission.ask(key, host=on_host.key, host_after_contained=True)
            if key.needs_host and bwrap and EnvironmentTag.SHELL in self.bindable:
                on_host = self.permission_in(args, on_host_site)
                return Permission.ask(key, host=on_host.key)
            return Permission.ask(key)
        if not key.protected:
            # A word that leads to a protected path or the runtime's directories through a
            # symlink (planted by a sandbox, or cloned) is a protected command, shown as such.
            simple = key.argv is not None and not key.filters
            said = key.argv[1:] if simple and key.argv else textual_words(args.command)
            reached = reaches_protected(said, site.workspace, site.directory)
            if reached is not None:
                key = dataclasses.replace(
                    key,
                    protected=True,
                    notes=(*key.notes, f"protected: {reached} through a symlink"),
                )
        words = key.argv
        if words is None:
            return Permission.ask(key)  # compound: see execute()
        code = key_command(args.command).workspace
        if canonical_name(words[0]) == "git":
            hooks = workspace_hooks(site.workspace)
            if hooks is not None:
                code = f"the hooks in {hooks}/ (core.hooksPath)"
        if code:
            # What the grant means on the host: the code there when it runs, whoever wrote it.
            key = dataclasses.replace(
                key,
                notes=(
                    *key.notes,
                    f"runs code from the workspace: {code}; whatever may write the workspace, "
                    "sandboxed tools included, can change it",
                ),
            )
        name = words[0]
        if "/" in name:
            return Permission.ask(key)  # named by its path already: nothing is looked up
        program = locate(name, site.workspace)
        if program.path is None:
            return Permission.ask(key)  # found nowhere: it will fail as "command not found"
        argv = (program.path, *words[1:])
        if not program.writable:
            return Permission.ask(dataclasses.replace(key, argv=argv))
        # Keyed as if the command had named the program by that path, so that every level a
        # grant may record names the path too, and deny rules still see the program's name.
        # If the table makes that spelling compound, its whole-string key names the path and
        # is approved only as a whole; either way what runs is the argv found here.
        by_path = key_command(shlex.join((program.key_action, *words[1:])))
        assert by_path.argv is None or by_path.argv[1:] == words[1:]
        return Permission.ask(
            dataclasses.replace(
                by_path.permission_key(self.name),
                argv=argv,
                protected=key.protected or by_path.protected,
                subject=key.subject,
                notes=(*key.notes, f"{name} is {program.where()}"),
                filters=key.filters,
                assignments=key.assignments,
                views=key.views if key.filters else by_path.views,
            )
        )

    def execute(self, args: RunCommandParameters, ctx: ToolContext) -> ToolResult:
        key = ctx.key or self.permission_in(args, ctx.site).key
        assert key is not None
        timeout = min(args.timeout or ctx.limits.timeout, 86_400.0)
        # What runs is exactly what was keyed: the argv decided (its program as found at key
        # time) without a shell; for an output-filter pipeline that argv, re-quoted, followed
        # by the filters as read; after the harmless assignments set aside from its key, which
        # bash sets for it; for a compound command approved as a whole (or read-only), that
        # very string given to bash.
        argv: tuple[str, ...] | None = key.argv
        script: str | None = None
        if key.argv is None:
            script = args.command
        elif key.filters or key.assignments:
            words = (
                *key.assignments,
                shlex.join(key.argv),
                *([key.filters] if key.filters else []),
            )
            argv, script = None, " ".join(words)
        env = None
        if script is not None and ctx.environment_tag in _HOST:
            env = {**os.environ, "PATH": host_path(ctx.workspace)}
        request = CommandRequest(
            cwd=ctx.workspace if ctx.standing == "." else ctx.workspace / ctx.standing,
            argv=argv,
            script=script,
            timeout=timeout,
            max_output=ctx.limits.max_output,
            env=env,
            # Builds write the workspace (protected paths stay read-only); a read-only command
            # runs with the whole file system read-only, which is what let it run unasked.
            writable=not ctx.read_only,
            grant=ctx.grant,
            cancel=ctx.cancel,
            network=ctx.network,
            output=ctx.output,
            session=ctx.session_id,
        )
        if ctx.output is not None:
            ctx.output.running(self.name)
        result: CommandResult = ctx.environment.run(request)
        return result_of(result)


class CommitParameters(Parameters):
    message: str = Field(description="The commit message.", min_length=1, max_length=20_000)
    paths: list[str] = Field(
        default_factory=list,
        description="Workspace-relative paths to stage before committing (`git add -- PATHS`).",
    )
    all: bool = Field(
        default=False, description="Stage every modified tracked file (`git commit --all`)."
    )

    @field_validator("message")
    @classmethod
    def _message_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the commit message is blank")
        return value

    @field_validator("paths")
    @classmethod
    def _relative_paths(cls, value: list[str], info: ValidationInfo) -> list[str]:
        joined = []
        for path in value:
            if not path or path.startswith("/") or "\x00" in path:
                raise ValueError(f"{path!r} is not a workspace-relative path")
            try:  # read from where the caller stands (tools.files.paths)
                joined.append(normalise_path(path, allow_root=True, standing=standing_of(info)))
            except ValueError:
                raise ValueError(f"{path!r} leaves the workspace") from None
        return joined


class Commit(Tool[CommitParameters]):
    name = "commit"
    description = (
        "Create a git commit in the workspace repository with the given message, optionally "
        "staging the given paths (or all tracked changes) first."
    )
    category = Category.GIT
    environment = EnvironmentTag.BWRAP
    bindable = frozenset({EnvironmentTag.BWRAP, EnvironmentTag.SHELL})
    parameters = CommitParameters
    output_schema = COMMAND_OUTPUT_SCHEMA

    def permission(self, args: CommitParameters) -> Permission:
        return Permission.ask(PermissionKey.named(self.name, subject=_commit_summary(args)))

    def permission_in(self, args: CommitParameters, site: CallSite) -> Permission:
        try:
            hooks = HostGit.for_workspace(site.workspace).hooks
        except ExecutionFailed:
            hooks = ()  # execute() refuses, saying why
        notes = (f"runs the hooks {', '.join(hooks)} from .git/hooks",) if hooks else ()
        return Permission.ask(
            PermissionKey.named(self.name, subject=_commit_summary(args), notes=notes)
        )

    def execute(self, args: CommitParameters, ctx: ToolContext) -> ToolResult:
        git = HostGit.for_workspace(ctx.workspace).runner(
            ctx.environment.run,
            timeout=ctx.limits.timeout,
            max_output=ctx.limits.max_output,
            cancel=ctx.cancel,
            output=ctx.output,
            session=ctx.session_id,
        )
        if ctx.output is not None:
            ctx.output.running(self.name)
        if args.paths:
            staged = git("add", "--", *args.paths)
            if staged.exit_code != 0:
                return result_of(staged)
        flags = ("--all",) if args.all else ()
        # The message joined to its option: a message starting with `-` stays a message.
        return result_of(git("commit", *flags, f"--message={args.message}"))


def _commit_summary(args: CommitParameters) -> str:
    first = args.message.splitlines()[0] if args.message.strip() else ""
    staged = " --all" if args.all else ""
    paths = f" -- {' '.join(args.paths)}" if args.paths else ""
    return f"git commit{staged} -m {first!r}{paths}"


class RunContainer(RunCommand):
    """`run_command`'s sibling that always runs in the hardened container, so a project may
    grant it permanently (`run_container:cargo` AlwaysThisProject)."""

    name = "run_container"
    description = (
        "Run a command line in the project's sandbox container (no network, read-only root "
        "filesystem, no capabilities, resource limits; the workspace at /workspace) and return "
        "its output and exit code."
    )
    environment = EnvironmentTag.DOCKER
    bindable = frozenset({EnvironmentTag.DOCKER})
