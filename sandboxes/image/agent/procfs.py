"""Reading the kernel's own files under /proc and /sys: one value, or a process's status table.

Nothing there is an error to the agent: a file that is absent or unreadable reads as None (or as
no fields), and the caller decides what that means.
"""

from __future__ import annotations

import contextlib


def read_text(path: str) -> str | None:
    try:
        with open(path) as file:
            return file.read().strip()
    except OSError:
        return None


def proc_status(pid: int | str) -> dict[str, str]:
    fields: dict[str, str] = {}
    with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            fields[name] = value.strip()
    return fields
