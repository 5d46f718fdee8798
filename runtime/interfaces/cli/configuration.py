"""The project's configuration and its trust: `check` (codecoder.json and the user's file
against the tools and the ceiling rule, and where each rule is from) and `trust` (what the
project file widens, trusted as it is now). Grants in force are `allowlist`'s (`grants`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from codecoder.foundation.errors import ConfigError
from codecoder.interfaces.cli.exit_codes import EXIT_FAILED, EXIT_OK
from codecoder.interfaces.cli.inputs import usage
from codecoder.interfaces.cli.output import print_json
from codecoder.interfaces.cli.project import project_runtime, trust_note

if TYPE_CHECKING:
    from codecoder.session import Runtime


def check(args: argparse.Namespace) -> int:
    from codecoder.config.projectfile import Diagnostic, Severity, format_diagnostic
    from codecoder.environments.docker.image import sandbox_status
    from codecoder.foundation.display import visible

    runtime = project_runtime(args)
    config = runtime.config
    docker = sandbox_status(config.docker, workspace=runtime.project_dir)
    diagnostics = list(runtime.diagnostics)
    # What stops @docker is an error where the project chose the image or the runtime (its own
    # configuration is wrong); otherwise a warning, since a project need not use @docker.
    chosen = any(name in ("image", "runtime") for name, _ in config.file.docker)
    for problem in docker.problems if docker.reachable else ():
        line, column = config.file.position_of("/docker")
        severity: Severity = "error" if chosen else "warning"
        diagnostics.append(
            Diagnostic(
                severity, "docker_unavailable", problem, key="docker", line=line, column=column
            )
        )
    for warning in docker.warnings:
        diagnostics.append(Diagnostic("warning", "docker_transport", warning, key="docker"))
    ok = not any(d.severity == "error" for d in diagnostics)
    place = args.place
    commands = _commands(runtime)
    if args.json:
        print_json(
            {
                "ok": ok,
                "project": str(runtime.project_dir),
                "found_by": place.found_by.value,
                "exists": config.file.exists,
                "file": str(runtime.project_file),
                "user_file": str(config.user_file.path) if config.user_file else None,
                "trust": config.trust.to_json(),
                "rules": [rule.to_json() for rule in config.rules],
                "diagnostics": [d.to_json() for d in diagnostics],
                "docker": docker.to_json(),
                "commands": commands,
            }
        )
        return EXIT_OK if ok else EXIT_FAILED
    for d in diagnostics:
        print(format_diagnostic(runtime.project_file, d))
    if config.rules:
        print("rules in effect:")
        for rule in config.rules:
            where = f"{rule.file}:{rule.line}" if rule.line else rule.file
            print(f"  {rule.kind:<15} {visible(rule.value)}  ({where})")
    print(visible(docker.describe()))
    if config.unreadable:
        print(
            "while the rules cannot be read, every call that needs permission is refused "
            "(calls that need none still run)"
        )
    if commands is not None:
        print(f"commands: run_command runs in {commands['environment']}: {commands['why']}")
    if not config.file.exists:
        # Never "ok" for a file that is not there: say which project this is, and how found.
        print(
            f"no codecoder.json in {visible(place.describe())}" + ("" if ok else "; errors found")
        )
    else:
        print(f"{runtime.project_file}: " + ("ok" if ok else "errors found") + trust_note(config))
    return EXIT_OK if ok else EXIT_FAILED


def trust(args: argparse.Namespace) -> int:
    from codecoder.config.trust import digest_of, forget, read_record, record_trust
    from codecoder.config.writing import exclusive_lock_of
    from codecoder.foundation.display import visible
    from codecoder.foundation.regularfile import read_regular_file

    runtime = project_runtime(args)
    project = runtime.project_dir
    if args.git:
        return _trust_git(args, runtime.project_dir)
    if args.revoke:
        removed = forget(project)
        if args.json:
            print_json({"revoked": removed})
        else:
            withdrawn = "trust withdrawn" if removed else "nothing was trusted"
            print(f"{runtime.project_file}: {withdrawn}")
        return EXIT_OK
    config = runtime.config
    widenings = config.trust.widenings
    if args.json and (args.show or not widenings):
        print_json({"file": str(runtime.project_file), **config.trust.to_json(), "recorded": False})
        return EXIT_OK
    if not args.json:
        print(f"{runtime.project_file} ({config.trust.state.value}):")
        record = read_record(project)
        for w in widenings:
            where = f"line {w.line}: " if w.line else ""
            # What the human trusted before is said as such, so what is new stands out.
            seen = " (trusted before)" if record.covers([w.setting]) else ""
            print(f"  {where}{visible(w.what)}{seen}")
            if w.never:
                print(f"      never takes effect, trusted or not: {visible(w.never)}")
        if not widenings:
            print("  it widens nothing: there is nothing to trust")
    if args.show or not widenings:
        return EXIT_OK
    if not config.file.usable:
        # What cannot be read cannot have been reviewed. (Entries that are wrong in a readable
        # file, a ceiling violation or a forbidden read root, grant nothing, trusted or not.)
        print(
            "codecoder: codecoder.json is not usable; fix it first (`codecoder check`)",
            file=sys.stderr,
        )
        return EXIT_FAILED
    if not args.yes:
        if not sys.stdin.isatty():
            usage("trust asks for confirmation on a terminal; pass --yes to trust without it")
        answer = input("trust these, for this exact file? [y/N] ").strip().lower()
        if answer not in ("y", "yes"):
            print("nothing trusted")
            return EXIT_FAILED
    data = config.file.data or b""
    try:
        with exclusive_lock_of(runtime.project_file):
            # Exactly the bytes shown: a file changed since was not what the human reviewed.
            current = read_regular_file(runtime.project_file)
            if current != data:
                print("codecoder: codecoder.json changed while it was shown; run trust again")
                return EXIT_FAILED
            record_trust(project, data, [w.what for w in widenings], [w.setting for w in widenings])
    except (OSError, ConfigError) as exc:
        print(f"codecoder: cannot record trust: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if args.json:
        print_json({"file": str(runtime.project_file), **config.trust.to_json(), "recorded": True})
    else:
        print(
            f"trusted {runtime.project_file} ({digest_of(data)[:16]}…); running servers apply "
            "it at `codecoder reload`"
        )
    return EXIT_OK


def _trust_git(args: argparse.Namespace, workspace: Path) -> int:
    """`trust --git`: what the workspace's git would run that the human has not seen, shown,
    then (unless --show) recorded as seen."""
    from codecoder.environments.host.gitseen import GitGuard
    from codecoder.foundation.display import visible

    guard = GitGuard(workspace)
    changes = guard.unseen()
    if args.json and (args.show or not changes):
        print_json({"workspace": str(workspace), "unseen": changes, "recorded": False})
        return EXIT_OK
    if not args.json:
        print(f"what git would run in {workspace} that you have not seen:")
        for change in changes:
            print(f"  {visible(change)}")
        if not changes:
            print("  nothing: host commands run")
    if args.show or not changes:
        return EXIT_OK
    if not args.yes:
        if not sys.stdin.isatty():
            usage("trust --git asks for confirmation on a terminal; pass --yes to accept")
        answer = input("accept these, so that host commands run again? [y/N] ").strip().lower()
        if answer not in ("y", "yes"):
            print("nothing accepted")
            return EXIT_FAILED
    accepted = guard.accept()
    if args.json:
        print_json({"workspace": str(workspace), "unseen": accepted, "recorded": True})
    else:
        print(f"accepted {len(accepted)} change(s); host commands run again")
    return EXIT_OK


def _commands(runtime: Runtime) -> dict[str, object] | None:
    """Where run_command runs for this project, and why: its binding, or what this machine
    offers (`environments.bwrap.probe`)."""
    from codecoder.environments.bwrap.probe import command_sandbox

    if "run_command" not in runtime.tools:
        return None
    tag = runtime.environment_of("run_command")
    bound = runtime.config.bindings.get("run_command")
    found = command_sandbox()
    why = (
        f"bound to {bound.value} by the configuration ({tag.containment})"
        if bound is not None
        else found.reason
    )
    return {
        "environment": tag.value,
        "ceiling": tag.ceiling.label,
        "why": why,
        "machine": found.to_json(),
    }
