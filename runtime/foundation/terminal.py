"""The controlling terminal: where a question is asked when stdin carries data.

A process opens its controlling terminal as `/dev/tty`. A command the decision server runs for a
client (`interfaces.forkserver.protocol`) is a child of the server, which has no terminal: the
client opens its own `/dev/tty` and hands the descriptor over, and `hand_over` makes it what
`open_terminal` opens in that child, so a question reaches the human's terminal exactly as in a
process of its own.
"""

from __future__ import annotations

import os

__all__ = ["hand_over", "open_terminal"]

_handed: int | None = None  # the client's terminal, in a command run for a client
_served = False  # a command run for a client: /dev/tty is the server's, never the client's


def open_terminal() -> int:
    """A new read-write descriptor for this process's terminal (the caller closes it);
    OSError when it has none."""
    if _served:
        if _handed is None:
            raise OSError("the client has no controlling terminal")
        return os.dup(_handed)
    return os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)


def hand_over(fd: int | None) -> None:
    """In a command run for a client: `fd` is the client's terminal (None: it has none)."""
    global _handed, _served
    _handed, _served = fd, True
