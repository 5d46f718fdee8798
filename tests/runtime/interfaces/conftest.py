"""Fixtures of the interface tests: a user's machine whose `codecoder` processes start (and the
test then stops) their decision servers."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.runtime.interfaces.served import Machine


@pytest.fixture
def machine(tmp_path: Path, project: Path) -> Iterator[Machine]:
    (project / "src").mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    machine = Machine(tmp_path, project)
    yield machine
    machine.stop()
