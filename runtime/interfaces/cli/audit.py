"""`codecoder audit`: the sandbox escape-attempt suite, run against the project's
configuration, reported as a table or as JSON (and as JUnit XML)."""

from __future__ import annotations

import argparse

from codecoder.interfaces.cli.exit_codes import EXIT_FAILED, EXIT_OK
from codecoder.interfaces.cli.inputs import usage
from codecoder.interfaces.cli.output import print_json


def audit(args: argparse.Namespace) -> int:
    # Imported when used, like the MCP server: the suite loads the Docker SDK and wasmtime.
    from codecoder.interfaces.escapes.corpus import LAYERS
    from codecoder.interfaces.escapes.report import table_header, table_row
    from codecoder.interfaces.escapes.runner import run_audit

    unknown = sorted(set(args.layer or ()) - set(LAYERS))
    if unknown:
        usage(f"unknown layer {', '.join(unknown)}; the layers are {', '.join(LAYERS)}")
    if not args.json:
        print(table_header(), flush=True)
    report = run_audit(
        args.project,
        args.layer,
        on_result=None if args.json else lambda result: print(table_row(result), flush=True),
    )
    if args.junit is not None:
        args.junit.write_text(report.to_junit(), encoding="utf-8")
    if args.json:
        print_json(report.to_json())
    else:
        for line in report.summary():
            print(line)
    return EXIT_OK if report.ok else EXIT_FAILED
