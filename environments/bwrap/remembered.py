"""What a contained call needs to know of this machine and this user, remembered between
processes, so that a fresh `codecoder call` spawns bubblewrap and the command only (not
`bwrap --version`, a trial sandbox and `git config` twice before them).

Each fact is kept in `<state dir>/machine/<name>.json` with the key it was found under, the
things it depends on (bubblewrap's binary, the kernel and its user-namespace switches, the
confine helper's digest, the boot; the files git reads the user's name from), and is believed
only while the key is the same. Only what is safe to believe when it has gone stale is kept:
that bubblewrap works here (where it no longer does, the sandbox fails to build, the fact is
forgotten and the next process probes again), never that it does not: a weaker environment is
never chosen from memory. The state directory is the user's own, out of every sandbox's reach.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

from codecoder.foundation.atomicfile import replace_atomically
from codecoder.foundation.state import state_directory

__all__ = ["forget", "recall", "remember"]


def _path(name: str) -> str:
    return os.path.join(state_directory(), "machine", f"{name}.json")


def recall(name: str, key: dict[str, Any]) -> Any:
    """The fact `name` found under exactly `key`, or None."""
    try:
        with open(_path(name), encoding="utf-8") as file:
            stored = json.load(file)
    except (OSError, ValueError):
        return None
    if not isinstance(stored, dict) or stored.get("key") != key:
        return None
    return stored.get("value")


def remember(name: str, key: dict[str, Any], value: Any) -> None:
    """Keep `value` for `name` under `key` (nothing is kept where it cannot be written).

    Only in a state directory that exists already: one made here, in the middle of a session,
    would be a new path for the sandboxes to hide, and every warm sandbox built before it would
    be thrown away (the audit log makes the directory at a session's first call)."""
    path = _path(name)
    if not os.path.isdir(state_directory()):
        return
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        data = json.dumps({"key": key, "value": value}, sort_keys=True).encode()
        replace_atomically(Path(path), data, mode=0o600)
    except (OSError, TypeError, ValueError):
        pass


def forget(name: str) -> None:
    """Forget `name`: the next process finds it out again."""
    with contextlib.suppress(OSError):
        os.unlink(_path(name))
