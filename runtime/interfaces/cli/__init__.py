"""The `codecoder` command line.

Exit codes: 0 success, 1 the tool failed (or `check` found an error), 2 usage, 3 permission
denied (`decide`: 0 allow, 3 deny, 4 it would ask), 130 interrupted by Ctrl-C, 141 its reader
went away (`codecoder log | head -1`: the rest is dropped quietly, as a Unix tool killed by
SIGPIPE would end), 143 ended by SIGTERM. Every command that a script would read takes
`--json`, and with `--json` an error is JSON too: `{"ok": false, "error": {"type", "message"}}`.

An interruption stops the call in progress where it is: SIGTERM is turned into `Terminated` (a
KeyboardInterrupt) in the main thread, so both unwind the same way; @shell kills the command's
whole process group, @docker removes the container the command ran in, the dispatcher writes
the call's audit record with outcome `interrupted`, and the command exits without a traceback.

Imports are made where they are used: `decide`, `hook` and `exec` run on every tool call of
another agent, and `--version` should not load the tool catalogue.

`main` is here: it runs the command that `grammar` parses and turns its errors into exit codes
(`exit_codes`). The commands' handlers are grouped by concern: running calls (`calling`: call,
exec, replay), deciding without running (`deciding`: decide, key), the tool catalogue
(`catalogue`: tools, schema), the project's configuration and trust (`configuration`: check,
trust), the grants in force (`grants`: allowlist), the audit log (`log`), serving other
programs (`serving`: hook, serve, session, reload), sandbox images (`images`) and the
escape-attempt suite (`audit`). They share `project` (the run's `Runtime` and `--allow`
grants), `inputs` (a call's arguments, files) and `output` (JSON, a call's outcome, errors).
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import select
import sys
from collections.abc import Sequence
from pathlib import Path

from codecoder.foundation.errors import CodecoderError, PermissionDenied, UsageError
from codecoder.interfaces.cli.calling import ProgressLine as ProgressLine
from codecoder.interfaces.cli.exit_codes import (
    EXIT_DENIED,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_READER_GONE,
    EXIT_TERMINATED,
    EXIT_USAGE,
)
from codecoder.interfaces.cli.grammar import _parser as _parser
from codecoder.interfaces.cli.grammar import parse
from codecoder.interfaces.interruption import Terminated


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its exit code. Whatever the command, a reader of its output that went
    away ends it quietly (`EXIT_READER_GONE`), in this process as in the decision server's
    child, which runs this same function."""
    try:
        try:
            return _command(list(sys.argv[1:] if argv is None else argv))
        finally:
            # What is still buffered is written now, so that a reader already gone is seen
            # here rather than by the interpreter's own last flush (which would say so).
            for stream in (sys.stdout, sys.stderr):
                if stream is not None:
                    stream.flush()
    except OSError as exc:
        if exc.errno not in (errno.EPIPE, errno.ECONNRESET) or not _reader_gone():
            raise
        return EXIT_READER_GONE


def _reader_gone() -> bool:
    """Whether stdout or stderr lost its reader (a pipe or socket whose other end closed);
    each such stream is pointed at /dev/null, so that nothing more is written to it, nor
    complained of. A broken pipe of anything else (a sandbox's, the Docker engine's) is not
    the command's reader going away, and is left to be reported as the error it is."""
    gone = False
    for stream in (sys.stdout, sys.stderr):
        try:
            fd = stream.fileno() if stream is not None else -1
        except (OSError, ValueError):
            continue
        if fd < 0:
            continue
        poll = select.poll()
        poll.register(fd, 0)  # POLLERR and POLLHUP are reported whatever is asked for
        if not any(events & (select.POLLERR | select.POLLHUP) for _, events in poll.poll(0)):
            continue
        gone = True
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, fd)
        finally:
            os.close(null)
    return gone


def _command(argv: list[str]) -> int:
    as_json = "--json" in argv[: argv.index("--") if "--" in argv else len(argv)]
    try:
        args = parse(argv)
        _place_project(args)
        code: int = args.handler(args)
    except KeyboardInterrupt as exc:
        terminated = isinstance(exc, Terminated)
        print(f"codecoder: {'terminated' if terminated else 'interrupted'}", file=sys.stderr)
        return EXIT_TERMINATED if terminated else EXIT_INTERRUPTED
    except (UsageError, FileNotFoundError) as exc:
        _error(exc, as_json)
        return EXIT_USAGE
    except PermissionDenied as exc:
        _error(exc, as_json)
        return EXIT_DENIED
    except CodecoderError as exc:
        _error(exc, as_json)
        return EXIT_FAILED
    return code


def _place_project(args: argparse.Namespace) -> None:
    """Fill in the project a command works on (`runtime.config.discovery`): `--project` as
    given, or found from the working directory. A hook finds it from the `cwd` its host sends,
    so it is left unset there; `bench` works on no project."""
    from codecoder.config.discovery import FoundBy, ProjectPlace, find_project

    if not hasattr(args, "project"):
        return
    if args.command == "hook":
        # `--project` may stand alone there (`hook install … --project`): the found project.
        if args.project is not None:
            given = Path(args.project) if args.project else find_project().directory
            args.project = given
            args.place = ProjectPlace(given.absolute(), FoundBy.OPTION)
        return
    if args.project is not None:
        args.place = ProjectPlace(args.project.absolute(), FoundBy.OPTION)
    elif args.command != "hook":
        args.place = find_project()
        args.project = args.place.directory


def _error(exc: BaseException, as_json: bool) -> None:
    if as_json:
        error = {"type": type(exc).__name__, "message": str(exc)}
        print(json.dumps({"ok": False, "error": error}, ensure_ascii=False))
    else:
        from codecoder.interfaces.cli.output import prefixed

        print(prefixed(str(exc)), file=sys.stderr)
