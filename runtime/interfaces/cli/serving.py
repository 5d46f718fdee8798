"""Serving other programs: `hook` (another agent's permission hook, JSON on stdin and stdout),
`serve` (the tools over MCP on stdio), `session` (an interactive session) and `reload`
(codecoder.json applied to the project's running servers)."""

from __future__ import annotations

import argparse
import json
import sys

from codecoder.foundation.errors import UsageError
from codecoder.interfaces.cli.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from codecoder.interfaces.cli.output import print_json
from codecoder.interfaces.cli.project import project_runtime
from codecoder.interfaces.interruption import interruptible


def hook(args: argparse.Namespace) -> int:
    """One hook event from the host. Whatever goes wrong blocks the call (exit 2 with the
    reason on stderr, which both hosts read as "blocked"): a hook that cannot decide must not
    let a call through."""
    from codecoder.interfaces.hooks import HookOptions, handle
    from codecoder.permissions.prompt import in_ci

    if args.host == "install":
        return install_hook(args)
    if args.agent is not None or args.user or args.yes or args.print:
        raise UsageError(
            "`hook HOST` takes no agent, --user, --yes or --print (those are for install)"
        )

    options = HookOptions(
        project=args.project,
        allow=tuple(args.allow),
        sandbox=None if args.host_shell else args.sandbox,
        mcp_server=args.mcp_server,
        interactive=not (args.non_interactive or in_ci()),
    )
    try:
        event = json.loads(sys.stdin.read())
        if not isinstance(event, dict):
            raise UsageError("the hook input is not a JSON object")
        answer = handle(args.host, event, options)
    except Exception as exc:
        print(f"codecoder hook: blocked: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if answer:
        print(json.dumps(answer, ensure_ascii=False))
    return EXIT_OK


# The MCP server and the interactive session are imported when used: the `mcp` SDK takes
# about a second to import, which every other command would pay for nothing.


def serve(args: argparse.Namespace) -> int:
    from codecoder.interfaces import mcp_server

    return mcp_server.serve(args.project, allow=tuple(args.allow))


def session(args: argparse.Namespace) -> int:
    from codecoder.interfaces.interactive import run_session

    with interruptible():
        return run_session(args.project)


def reload(args: argparse.Namespace) -> int:
    from codecoder.config.projectfile import format_diagnostic
    from codecoder.interfaces.mcp_server import signal_servers

    runtime = project_runtime(args)
    signalled = signal_servers(runtime.project_dir)
    diagnostics = runtime.diagnostics
    ok = not any(d.severity == "error" for d in diagnostics)
    if args.json:
        print_json(
            {
                "ok": ok,
                "file": str(runtime.project_file),
                "signalled": signalled,
                "diagnostics": [d.to_json() for d in diagnostics],
            }
        )
    else:
        for d in diagnostics:
            print(format_diagnostic(runtime.project_file, d))
        if runtime.config.unreadable:
            print(
                "the rules cannot be read: running servers keep their last good rules until "
                "the file is fixed and reloaded"
            )
        pids = ", ".join(str(pid) for pid in signalled)
        print(
            f"reloaded {len(signalled)} server(s) of {runtime.project_dir}: {pids}"
            if signalled
            else f"no running server of {runtime.project_dir} to reload"
        )
        print(f"{runtime.project_file}: " + ("ok" if ok else "errors found"))
    return EXIT_OK if ok else EXIT_FAILED


def install_hook(args: argparse.Namespace) -> int:
    """`hook install AGENT`: show the change to the agent's settings file, ask (or --yes),
    write it; a settings file that cannot be read is reported and left as it is. `--print`
    prints the whole file as it would be written (what the docs' recipes are) and writes
    nothing."""
    from codecoder.interfaces.hookinstall import Shell, plan_install
    from codecoder.interfaces.installation import codecoder_command

    if args.agent is None:
        raise UsageError("hook install: which agent? claude-code, gemini or codex")
    if args.user and args.project is not None:
        raise UsageError("hook install: --user or --project, not both")
    shell: Shell = "host" if args.host_shell else args.sandbox
    if args.agent == "codex" and shell != "bwrap":
        raise UsageError(
            "hook install codex: codecoder is Codex's MCP server and Codex's own shell is off; "
            "there is no agent shell to run on the host or in @docker (--host-shell, "
            "--sandbox docker)"
        )
    project = args.project.resolve() if args.project is not None else None
    plan = plan_install(args.agent, codecoder_command(), project=project, shell=shell)
    if args.print:
        if args.yes:
            raise UsageError("hook install: --print writes nothing; --yes is for writing")
        sys.stdout.write(plan.after)
        return EXIT_OK
    diff = plan.diff()
    written = False
    if plan.changed and (args.yes or _confirmed(diff, args.json)):
        plan.write()
        written = True
    if args.json:
        print_json(
            {
                "agent": args.agent,
                "file": str(plan.file),
                "changed": plan.changed,
                "written": written,
                "diff": diff,
            }
        )
    elif not plan.changed:
        print(f"{plan.file}: codecoder's hook is already there, as it would be written")
    elif written:
        if args.yes:
            sys.stdout.write(diff)
        print(f"wrote {plan.file} (`codecoder doctor` checks it)")
    else:
        print(f"{plan.file}: nothing written")
    return EXIT_OK if written or not plan.changed else EXIT_USAGE


def _confirmed(diff: str, as_json: bool) -> bool:
    """Show the diff and ask on the terminal; nobody to ask (or --json) is a no."""
    if as_json or not sys.stdin.isatty():
        if not as_json:
            sys.stdout.write(diff)
            print("not written: nobody can confirm here (run it on a terminal, or add --yes)")
        return False
    sys.stdout.write(diff)
    try:
        reply = input("write it? [y/N] ")
    except EOFError:
        return False
    return reply.strip().lower() in ("y", "yes")
