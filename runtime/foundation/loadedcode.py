"""What code a long-lived process runs: the modification time and size of every module file it
has loaded, so that it notices an upgrade under it (the decision server, the pool server)."""

from __future__ import annotations

import os
import sys

__all__ = ["loaded_code"]


def loaded_code() -> dict[str, tuple[int, int]]:
    """The modification time and size of every module file loaded; (-1, -1) for one gone."""
    snapshot: dict[str, tuple[int, int]] = {}
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if not isinstance(path, str):
            continue
        try:
            info = os.stat(path)
        except OSError:
            snapshot[path] = (-1, -1)
            continue
        snapshot[path] = (info.st_mtime_ns, info.st_size)
    return snapshot
