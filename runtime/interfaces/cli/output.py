"""What the commands print: JSON documents, and a call's outcome (on a terminal, with no escape
sequence of the tool's output reaching it)."""

from __future__ import annotations

import json
import shutil
import sys
import textwrap
from typing import TYPE_CHECKING, Any, TextIO

from codecoder.foundation.errors import PermissionDenied, ToolError

if TYPE_CHECKING:
    from codecoder.dispatcher import CallOutcome


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, ensure_ascii=False))


def prefixed(message: str, kind: str = "") -> str:
    """An error as a person reads it on stderr, `codecoder: KIND: message`, with codecoder
    and the kind said once (a message that already starts with them is not prefixed again),
    its lines kept as lines and neutralised (`visible_message`); on a terminal, its first line
    (the sentence; what follows is a command's output, kept as it is) wrapped at word
    boundaries to the terminal's width."""
    from codecoder.foundation.display import visible_message

    text = visible_message(message).removeprefix("codecoder: ")
    if kind:
        text = text.removeprefix(f"{kind}: ")
    elif text.startswith("codecoder "):  # `codecoder call: argument …` names itself
        return _wrapped_for(sys.stderr, text)
    return _wrapped_for(sys.stderr, f"codecoder: {kind + ': ' if kind else ''}{text}")


def _wrapped_for(stream: TextIO, text: str) -> str:
    """`text`'s first line wrapped at spaces to `stream`'s width when it is a terminal."""
    try:
        if not stream.isatty():
            return text
        width = shutil.get_terminal_size((80, 24)).columns
    except (AttributeError, ValueError, OSError):
        return text
    first, newline, rest = text.partition("\n")
    lines = textwrap.wrap(
        first, width, subsequent_indent="    ", break_long_words=False, break_on_hyphens=False
    )
    return "\n".join(lines or [first]) + newline + rest


def print_outcome(outcome: CallOutcome, as_json: bool, *, shown: bool = False) -> None:
    """One call's outcome on stdout (errors on stderr). On a terminal, tool output goes through
    `for_terminal()` (its harmless colours shown as colours unless NO_COLOR is set, every other
    escape made visible) and JSON is ASCII-escaped, so no escape sequence that could hide or
    rewrite what is shown reaches the terminal. `shown`: the command's output is on the
    terminal already (it was shown as it came), so only the line that ends a command's result
    follows it. A command that failed before it ended (killed at its deadline) has its output
    so far written before the error."""
    from codecoder.foundation.display import colours_for, for_terminal

    if as_json:
        print(json.dumps(outcome.to_json(), ensure_ascii=not is_terminal()))
        return
    decision = outcome.decision
    for violation in decision.violations if decision else ():
        if str(outcome.error).endswith(violation):
            continue
        print(prefixed(violation), file=sys.stderr)
    if outcome.result is not None:
        output = outcome.result.output
        data = outcome.result.data
        if shown and isinstance(data.get("exit_code"), int):
            from codecoder.tools.execute import command_status

            killed_by = data.get("killed_by")
            output = command_status(data["exit_code"], killed_by if killed_by else None)
        if is_terminal():
            output = for_terminal(output, colours_for(sys.stdout))
        sys.stdout.write(output)
        if not output.endswith("\n"):
            sys.stdout.write("\n")
    so_far = outcome.error.output if isinstance(outcome.error, ToolError) else ""
    if so_far and not shown:
        sys.stdout.write(for_terminal(so_far, colours_for(sys.stdout)) if is_terminal() else so_far)
        if not so_far.endswith("\n"):
            sys.stdout.write("\n")
    if outcome.error is not None:
        sys.stdout.flush()  # what came before the error stays before it
        kind = (
            "permission denied"
            if isinstance(outcome.error, PermissionDenied)
            else "tool error"
            if isinstance(outcome.error, ToolError)
            else "error"
        )
        print(prefixed(str(outcome.error), kind), file=sys.stderr)


def is_terminal() -> bool:
    return sys.stdout.isatty()
