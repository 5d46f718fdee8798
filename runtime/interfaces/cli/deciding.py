"""What the permission chain makes of a call, without running or recording it: `key` (the
permission key of a command or of any tool call, and the grants that would cover it) and
`decide` (the decision, where it came from and what matched: exit 0 allow, 3 deny, 4 ask)."""

from __future__ import annotations

import argparse
from typing import Any

from codecoder.interfaces.cli.exit_codes import EXIT_DENIED, EXIT_OK, EXIT_WOULD_ASK
from codecoder.interfaces.cli.inputs import call_arguments, usage
from codecoder.interfaces.cli.output import print_json
from codecoder.interfaces.cli.project import granted, project_runtime
from codecoder.interfaces.shorthand import parse_json


def key(args: argparse.Namespace) -> int:
    from codecoder.dispatcher import validate_arguments
    from codecoder.permissions.commandkey import key_command
    from codecoder.permissions.keys import CallSite

    if args.tool is None:
        keyed = key_command(args.input) if args.input.strip() else usage("the command is blank")
        command_key = keyed.permission_key("run_command")
        data: dict[str, Any] = {
            "tool": "run_command",
            "key": command_key.raw,
            "compound": keyed.compound,
            "argv": list(keyed.argv) if keyed.argv is not None else None,
            "reason": keyed.reason,
            "assignments": list(keyed.assignments),
            "protected": keyed.protected,
            "grants": [
                {"entry": level.entry, "covers": level.covers} for level in command_key.levels
            ],
        }
    else:
        runtime = project_runtime(args)
        tool = runtime.tools.get(args.tool) or usage(f"unknown tool {args.tool!r}")
        standing = runtime.standing_in()
        params = validate_arguments(tool, parse_json(args.input), standing)
        site = CallSite(
            runtime.project_dir,
            runtime.environment_of(tool.name),
            runtime.config.credential_hosts,
            standing,
        )
        key = tool.permission_in(params, site).key
        data = {
            "tool": tool.name,
            "permission": "ask" if key else "none",
            "key": key.raw if key else None,
            "compound": key.compound if key else False,
            "argv": list(key.argv) if key and key.argv is not None else None,
            "assignments": list(key.assignments) if key else [],
            "protected": key.protected if key else False,
            "environment": runtime.environment_of(tool.name).value,
            "grants": [
                {"entry": level.entry, "covers": level.covers}
                for level in (key.grant_levels if key else ())
            ],
        }
    if args.json:
        print_json(data)
    else:
        print(data["key"] if data["key"] is not None else "(no permission needed)")
    return EXIT_OK


def decide(args: argparse.Namespace) -> int:
    from codecoder.evaluation import evaluate
    from codecoder.foundation.display import visible
    from codecoder.permissions.prompt import key_for_person

    with project_runtime(args) as runtime:
        payload = call_arguments(args.arguments, args.tool, runtime.tools.get(args.tool))
        session = granted(runtime.session(standing=runtime.standing_in()), args)
        verdict = evaluate(session, args.tool, payload)
    if args.json:
        print_json(verdict.to_json())
    else:
        key = key_for_person(verdict.key) if verdict.key else "(no permission needed)"
        print(f"{verdict.decision}  {key}  {verdict.environment.value}")
        print(f"  {visible(verdict.reason)}")
        if verdict.matched:
            print(f"  matched: {visible(verdict.matched)}")
        for violation in verdict.violations:
            print(f"  {visible(violation)}")
        for choice in verdict.question.options() if verdict.question else ():
            print(f"  [{choice.letter}] {visible(choice.title)}")
    return {"allow": EXIT_OK, "deny": EXIT_DENIED, "ask": EXIT_WOULD_ASK}[verdict.decision]
