"""The command line's exit codes (what each means: the package's docstring), and the one a tool
call's outcome ends with."""

from __future__ import annotations

from typing import TYPE_CHECKING

from codecoder.foundation.errors import PermissionDenied, UsageError

if TYPE_CHECKING:
    from codecoder.dispatcher import CallOutcome

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_DENIED, EXIT_WOULD_ASK = 0, 1, 2, 3, 4
EXIT_INTERRUPTED, EXIT_TERMINATED = 130, 143  # 128 + SIGINT, 128 + SIGTERM
EXIT_READER_GONE = 141  # 128 + SIGPIPE: what a shell shows for a tool whose reader went away


def exit_code(outcome: CallOutcome) -> int:
    error = outcome.error
    if error is None:
        return EXIT_OK if outcome.ok else EXIT_FAILED
    if isinstance(error, PermissionDenied):
        return EXIT_DENIED
    if isinstance(error, UsageError):
        return EXIT_USAGE
    return EXIT_FAILED
