"""`codecoder bench [--quick] [--only AREA ...] [--json FILE]`: run, print the table.

The Markdown table goes to stdout, progress to stderr, the JSON to `--json FILE` (`-` for
stdout instead of the table). Exit status: 0, or 1 when an area failed with an error (a missed
target is a result, not a failure; `--strict` makes it one).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from codecoder.benchmarks import AREAS, run_areas


def main(argv: Sequence[str] | None = None) -> int:
    names = [area.name for area in AREAS]
    parser = argparse.ArgumentParser(
        prog="codecoder bench",
        description="Benchmarks of the codecoder runtime against the alternatives.",
    )
    parser.add_argument("--quick", action="store_true", help="small counts (CI, smoke tests)")
    parser.add_argument(
        "--only", nargs="+", metavar="AREA", choices=names, help=f"areas to run: {', '.join(names)}"
    )
    parser.add_argument("--json", metavar="FILE", help="write the JSON report here (- = stdout)")
    parser.add_argument(
        "--no-profile", action="store_true", help="do not profile the figures that miss"
    )
    parser.add_argument("--strict", action="store_true", help="exit 2 when a target is missed")
    args = parser.parse_args(argv)

    report = run_areas(
        AREAS,
        only=args.only,
        quick=args.quick,
        profile_misses=not args.no_profile,
        progress=sys.stderr,
    )
    document = json.dumps(report.to_json(), indent=2, ensure_ascii=False) + "\n"
    if args.json == "-":
        sys.stdout.write(document)
    else:
        if args.json:
            with open(args.json, "w", encoding="utf-8") as out:
                out.write(document)
        print(report.table())
        summary = report.summary()
        machine = report.machine
        print(
            "\n" + ", ".join(f"{count} {status}" for status, count in summary.items() if count),
            f"in {report.duration:.0f} s; Python {machine['python']}, {machine['cpus']} CPUs, "
            f"load average {machine['load_before']} before, {machine['load_after']} after",
        )
    summary = report.summary()
    if summary["error"]:
        return 1
    if args.strict and summary["miss"]:
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
