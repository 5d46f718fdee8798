"""Where the runtime keeps what must stay out of the workspace's reach.

The state directory (`$XDG_STATE_HOME/codecoder`, by default `~/.local/state/codecoder`) holds
what the tools a runtime runs must not be able to change: per-project notes, records of trust,
the audit log, quarantined plants. Each project has its own subdirectory, named by a digest of
its resolved path, never inside the project itself.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path

__all__ = ["project_state_directory", "state_directory"]


def state_directory(environ: Mapping[str, str] | None = None) -> Path:
    """`$XDG_STATE_HOME/codecoder`, by default `~/.local/state/codecoder`. A relative
    XDG_STATE_HOME is ignored, as the XDG spec says."""
    environ = os.environ if environ is None else environ
    base = environ.get("XDG_STATE_HOME", "")
    root = Path(base) if base and os.path.isabs(base) else Path.home() / ".local" / "state"
    return root / "codecoder"


def project_state_directory(project: Path, environ: Mapping[str, str] | None = None) -> Path:
    """The state of one project: named by a digest of its path, not inside it."""
    digest = hashlib.sha256(str(project).encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return state_directory(environ) / "projects" / digest
