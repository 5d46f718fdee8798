"""Where this codecoder is installed: the absolute command line that runs it again.

What codecoder writes for another program to run later (an agent's hook settings, the
`codecoder exec …` a hook rewrites a shell command into) names the codecoder that wrote it by
its absolute path, never the bare name `codecoder`: a host started without codecoder on its
PATH, or with another one first on it, would otherwise run something else, or nothing (and
an agent that treats a failed hook as "no opinion" would then run the call unjudged).

The console script `codecoder` installed beside this interpreter (a venv's, pipx's or uv's
`bin/`) is that command; where there is none (a `pip install --user`, a checkout run with
`python -m codecoder`), it is this interpreter running the package (`python -m codecoder`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

__all__ = ["codecoder_command"]


def codecoder_command() -> tuple[str, ...]:
    """The absolute command line that runs this codecoder (the script, or `python -m`)."""
    # Not resolved: a venv's `bin/python` is a link to the system interpreter, whose
    # directory holds no codecoder; the link's own directory does.
    interpreter = Path(os.path.abspath(sys.executable))
    script = interpreter.parent / "codecoder"
    if script.is_file() and os.access(script, os.X_OK):
        return (str(script),)
    return (str(interpreter), "-m", "codecoder")
