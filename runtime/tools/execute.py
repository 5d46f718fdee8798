"""The execute and git-write tools that run commands: `run_command` and `commit`."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from environments.base import CommandRequest, CommandResult
from runtime.ceiling import EnvironmentTag
from runtime.commandkey import key_command
from runtime.tool import (
    Category,
    KeyStyle,
    Parameters,
    Permission,
    PermissionKey,
    Tool,
    ToolContext,
    ToolResult,
)


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


def result_of(res: CommandResult) -> ToolResult:
    parts = [res.stdout]
    if res.stderr:
        parts.append(("\n" if res.stdout and not res.stdout.endswith("\n") else "") + res.stderr)
    text = "".join(parts)
    status = (
        f"[exit code {res.exit_code}"
        + (f", killed by {res.killed_by}" if res.killed_by else "")
        + "]"
    )
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
        "Runs on the host by default (@shell); a project may bind it to a container (@docker)."
    )
    category = Category.EXECUTE
    environment = EnvironmentTag.SHELL
    bindable = frozenset({EnvironmentTag.SHELL, EnvironmentTag.DOCKER})
    parameters = RunCommandParameters
    key_style = KeyStyle.COMMAND
    output_schema = COMMAND_OUTPUT_SCHEMA

    def permission(self, args: RunCommandParameters) -> Permission:
        return Permission.ask(key_command(args.command).permission_key(self.name))

    def execute(self, args: RunCommandParameters, ctx: ToolContext) -> ToolResult:
        keyed = key_command(args.command)
        timeout = min(args.timeout or ctx.limits.timeout, 86_400.0)
        # What runs is exactly what was keyed: the parsed argv without a shell, or, for a
        # compound command approved as a whole, that very string given to bash.
        request = CommandRequest(
            cwd=ctx.workspace,
            argv=keyed.argv,
            script=None if keyed.argv is not None else keyed.command,
            timeout=timeout,
            max_output=ctx.limits.max_output,
            writable=True,  # builds write the workspace; protected paths stay read-only
            cancel=ctx.cancel,
        )
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
    def _relative_paths(cls, value: list[str]) -> list[str]:
        for path in value:
            if not path or path.startswith("/") or "\x00" in path:
                raise ValueError(f"{path!r} is not a workspace-relative path")
            if ".." in path.split("/"):
                raise ValueError(f"{path!r} leaves the workspace")
        return value


class Commit(Tool[CommitParameters]):
    name = "commit"
    description = (
        "Create a git commit in the workspace repository with the given message, optionally "
        "staging the given paths (or all tracked changes) first."
    )
    category = Category.GIT
    environment = EnvironmentTag.SHELL
    bindable = frozenset({EnvironmentTag.SHELL})
    parameters = CommitParameters
    output_schema = COMMAND_OUTPUT_SCHEMA

    def permission(self, args: CommitParameters) -> Permission:
        return Permission.ask(PermissionKey.named(self.name, subject=_commit_summary(args)))

    def execute(self, args: CommitParameters, ctx: ToolContext) -> ToolResult:
        def git(*argv: str) -> CommandResult:
            result: CommandResult = ctx.environment.run(
                CommandRequest(
                    cwd=ctx.workspace,
                    argv=("git", *argv),
                    timeout=ctx.limits.timeout,
                    max_output=ctx.limits.max_output,
                    cancel=ctx.cancel,
                )
            )
            return result

        if args.paths:
            staged = git("add", "--", *args.paths)
            if staged.exit_code != 0:
                return result_of(staged)
        flags = ("--all",) if args.all else ()
        return result_of(git("commit", *flags, "-m", args.message))


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
