"""Where the agent finds what it needs in its image, and the check `install.py` makes of it.

Everything of the agent lives under /opt/codecoder (`bundle.py`): these modules, the interpreter
they run on (its own loader, C library and standard library), the runas helper of each machine.
The workspace is /workspace; a capability's approved files are placed under
/opt/codecoder/capability.
"""

from __future__ import annotations

import os
import platform

WORKSPACE = "/workspace"
HOME = "/opt/codecoder"
SNAPSHOT_DIR = f"{HOME}/capability"
# Drops to the command's user and runs the command (runas.c); started with vfork, it costs a
# fraction of subprocess's own `user=`, which forks the whole interpreter.
RUNAS = f"{HOME}/runas-{platform.machine()}"
# The bundled interpreter's own loader (bundle.py): a program any image can execute, which is
# what tells that runas works.
LOADER = f"{HOME}/python/ld.so"
# Compound commands are keyed as bash parses them, so they run in bash or not at all.
BASH = "/bin/bash"


def self_check() -> str | None:
    """What the agent needs of this image, checked when the image is built (install.py)."""
    if not os.access(RUNAS, os.X_OK):
        return f"{RUNAS} is missing or not executable (only x86_64 and aarch64 are built)"
    if not os.access(LOADER, os.X_OK):
        return f"{LOADER}, the bundled interpreter's loader, is missing"
    if not os.path.exists("/proc/self/status"):
        return "/proc is not mounted while building (the agent reads it at run time)"
    try:
        b"\\040".decode("unicode_escape")  # how mount points with spaces are read
    except LookupError as exc:
        return f"the bundled standard library is incomplete: {exc}"
    return None
