"""The tool catalogue: `tools` lists the tools (category, environment, permission), `schema`
exports their definitions for an LLM API."""

from __future__ import annotations

import argparse

from codecoder.interfaces.cli.exit_codes import EXIT_OK
from codecoder.interfaces.cli.output import print_json
from codecoder.interfaces.cli.project import project_runtime


def tools(args: argparse.Namespace) -> int:
    from codecoder.tools.catalogue import CHILD_TOOLSET

    runtime = project_runtime(args)
    rows = [
        {
            "name": d.name,
            "category": d.category.value,
            "environment": d.environment.value,
            "permission": "ask" if d.needs_permission else "none",
            "description": d.description,
            "child": d.name in CHILD_TOOLSET,
        }
        for d in runtime.definitions()
    ]
    if args.json:
        print_json(rows)
    else:
        for row in rows:
            print(
                f"{row['name']:<18} {row['category']:<8} {row['environment']:<9} "
                f"{row['permission']:<5} {row['description']}"
            )
    return EXIT_OK


def schema(args: argparse.Namespace) -> int:
    from codecoder.interfaces.schemas import export

    print_json(export(project_runtime(args).definitions(), args.format, strict=args.strict))
    return EXIT_OK
