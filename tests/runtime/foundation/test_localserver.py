"""The local servers' identities: one interpreter, whatever name started it, is one server."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

IDENTITIES = (
    "from codecoder.environments.docker.pool import wire;"
    "from codecoder.interfaces.forkserver import protocol;"
    "print(repr((wire.identity(), protocol.identity('the same context'))))"
)


def _identities(executable: Path) -> str:
    done = subprocess.run(
        [str(executable), "-c", IDENTITIES], capture_output=True, text=True, check=True
    )
    return done.stdout


def test_python_and_python3_of_one_environment_share_their_servers() -> None:
    """The `codecoder` script runs on `bin/python3`, a program built on the runtime on
    `bin/python`: two names of one interpreter once made two decision servers and two warm
    pools, and a new `codecoder call` process never claimed what a session had warmed."""
    here = Path(sys.executable)
    names = [here.parent / name for name in ("python", "python3") if (here.parent / name).exists()]
    if len(names) < 2:
        pytest.skip(f"{here.parent} has not both python and python3")
    assert _identities(names[0]) == _identities(names[1])
