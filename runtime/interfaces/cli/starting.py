"""Starting with codecoder: `init` (a commented starter codecoder.json for the project found)
and `completion` (the shell code that completes `codecoder` in bash, zsh and fish).

`init` reads the project's files (runtime.config.starter), then decides where `run_command`
should run and says why: the default environment when it is a sandbox; else @docker when the
engine answers and the sandbox image has the program the tests need (asked of a container of
it: `command -v`); else the default, with what would make @docker work. It never overwrites a
file (the user's grants are never lost), and trusts the file it wrote (a file the runtime
creates is trusted). `--print` only prints it.

Completion is argcomplete's: the shell runs `codecoder` with `_ARGCOMPLETE` set, and
runtime/__main__.py hands such a run to `grammar.complete()` before anything else is imported.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from codecoder.interfaces.cli.exit_codes import EXIT_FAILED, EXIT_OK
from codecoder.interfaces.cli.inputs import usage
from codecoder.interfaces.cli.output import print_json

if TYPE_CHECKING:
    from codecoder.config.starter import Placement, Project
    from codecoder.session import Runtime

SHELLS = ("bash", "zsh", "fish")


def init(args: argparse.Namespace) -> int:
    from codecoder.config.starter import detect, starter_text
    from codecoder.config.trust import record_trust
    from codecoder.config.writing import exclusive_lock_of
    from codecoder.foundation.atomicfile import replace_atomically
    from codecoder.permissions.commandkey import key_command
    from codecoder.permissions.prompt import non_interactive
    from codecoder.session import Runtime

    directory = args.project.resolve()
    if not directory.is_dir():
        usage(f"{args.project} is not a directory")
    path = directory / "codecoder.json"
    if path.exists() and not args.print:
        usage(
            f"{path} exists already: init never writes over it (`codecoder check` reviews it; "
            "`codecoder init --print` shows what init would write)"
        )
    project = detect(directory)
    with Runtime(directory, asker=non_interactive) as runtime:
        placement = _placement(runtime, project)
    test_key = None
    if project.test_command is not None:
        test_key = key_command(project.test_command).permission_key("run_command").raw
    limits = runtime.config.limits  # as they are now: the starter file changes nothing
    text = starter_text(project, placement, test_key, (limits.timeout, limits.max_output))
    if args.print:
        sys.stdout.write(text)
        return EXIT_OK
    with exclusive_lock_of(path):
        if path.exists():
            usage(f"{path} appeared while init looked at the project; it is left as it is")
        replace_atomically(path, text.encode())
        # A file the runtime writes is trusted: what it widens (a binding) is init's choice.
        with Runtime(directory, asker=non_interactive) as written:
            widenings = [w.what for w in written.config.trust.widenings]
        record_trust(directory, text.encode(), widenings)
    if args.json:
        print_json(
            {
                "file": str(path),
                "language": project.language,
                "test_command": project.test_command,
                "test_key": test_key,
                "environment": placement.environment.value,
                "bound": placement.bind,
                "reason": placement.reason,
                "hints": list(placement.hints),
            }
        )
        return EXIT_OK
    print(f"wrote {path}")
    print(f"  project:      {project.describe()}")
    print(f"  run_command:  {placement.environment.value}, {placement.reason}")
    for hint in placement.hints:
        print(f"                {hint}")
    print("next: `codecoder check`, then `codecoder call run_command '{\"command\": ...}'`;")
    print("      shell completion: `codecoder completion --help`")
    return EXIT_OK


def _placement(runtime: Runtime, project: Project) -> Placement:
    from codecoder.config.starter import Placement
    from codecoder.environments.docker.image import sandbox_status
    from codecoder.foundation.ceiling import EnvironmentTag, Scope

    default = runtime.environment_of("run_command")
    if default.allows(Scope.PROJECT):
        return Placement(default, f"{default.containment}, the default here")
    docker = sandbox_status(runtime.config.docker, workspace=runtime.project_dir)
    image = runtime.config.docker.image
    shell_note = f"{default.containment}: grants for commands last one session at most"
    if docker.problems:
        return Placement(
            default,
            f"{shell_note}, because @docker cannot run ({docker.problems[0]})",
            hints=("Once @docker works, bind run_command to it to contain commands.",),
        )
    program, probe = project.program, project.probe_script()
    if program is None or probe is None:
        return Placement(
            EnvironmentTag.DOCKER,
            f"the Docker engine answers and has the sandbox image {image}: commands are "
            "contained, so a grant for one may be for the project",
            bind=True,
        )
    if _image_runs(runtime, probe):
        return Placement(
            EnvironmentTag.DOCKER,
            f"the Docker engine answers and the sandbox image {image} has {program}: commands "
            "are contained, so a grant for the tests may be for the project",
            bind=True,
        )
    return Placement(
        default,
        f"{shell_note}, because the sandbox image {image} has no {program}",
        hints=(
            f"`codecoder image build --from IMAGE` makes a sandbox image of an image that has "
            f'{program}; then set "docker": {{"image": ...}} and bind run_command to @docker.',
        ),
    )


def _image_runs(runtime: Runtime, probe: str) -> bool:
    """Whether `probe` succeeds in the sandbox (a read-only container of the project's image):
    whether what the tests need is there."""
    from codecoder.environments.base import CommandRequest, CommandResult
    from codecoder.foundation.ceiling import EnvironmentTag
    from codecoder.foundation.errors import ToolError

    environment = runtime.environment(EnvironmentTag.DOCKER)
    request = CommandRequest(cwd=runtime.project_dir, script=probe, timeout=30)
    try:
        result: CommandResult = environment.run(request)
    except ToolError:
        return False
    return result.exit_code == 0


def completion(args: argparse.Namespace) -> int:
    """Print the shell code that completes `codecoder` (argcomplete's, for this shell)."""
    from argcomplete.shell_integration import shellcode

    sys.stdout.write(shellcode(["codecoder"], shell=args.shell))
    return EXIT_OK


def completion_epilog() -> str:
    return "\n".join(
        [
            "install, for your shell:",
            '  bash: eval "$(codecoder completion bash)"          (in ~/.bashrc)',
            '  zsh:  eval "$(codecoder completion zsh)"           (in ~/.zshrc, after compinit)',
            "  fish: codecoder completion fish > ~/.config/fish/completions/codecoder.fish",
        ]
    )


def doctor(args: argparse.Namespace) -> int:
    """`codecoder doctor`: each check on one line, with its fix; exit 1 when one failed."""
    from codecoder.interfaces.doctor import as_json, diagnose, report

    checks = diagnose(args.project)
    if args.json:
        print_json(as_json(checks))
    else:
        print(report(checks))
    return EXIT_FAILED if any(check.status == "FAIL" for check in checks) else EXIT_OK
