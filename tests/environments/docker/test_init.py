"""`codecoder init` where the Docker engine answers, for a user whose commands run on the host
(their own config binds run_command to @shell; the machine's default, @bwrap, is a sandbox
already and init keeps it): run_command is bound to @docker when the sandbox image has what the
tests need (asked of a container of it), and not when it lacks it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.docker


def init(project: Path) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    done = subprocess.run(
        [sys.executable, "-m", "codecoder", "init", "--json"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


@pytest.fixture(autouse=True)
def _commands_run_on_the_host() -> None:
    config = Path(os.environ["XDG_CONFIG_HOME"]) / "codecoder" / "config.json"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(json.dumps({"environments": {"run_command": "@shell"}}))


def test_init_binds_run_command_to_docker_when_the_image_runs_the_tests(workspace: Path) -> None:
    (workspace / "requirements.txt").write_text("requests\n")
    found = init(workspace)
    assert (found["test_command"], found["environment"], found["bound"]) == (
        "python3 -m unittest",
        "@docker",
        True,
    )
    assert found["reason"] == (
        "the Docker engine answers and the sandbox image codecoder-sandbox has python3: "
        "commands are contained, so a grant for the tests may be for the project"
    )
    written = json.loads((workspace / "codecoder.json").read_text())
    assert written["environments"] == {"run_command": "@docker"}
    assert any(
        '"run_command:python3:-m:unittest": "AlwaysThisProject"' in line
        for line in written["// allowlist"]
    )


def test_init_says_how_to_get_an_image_when_the_sandbox_lacks_the_test_program(
    workspace: Path,
) -> None:
    (workspace / "package.json").write_text('{"scripts": {"test": "node t.js"}}')
    found = init(workspace)
    assert (found["environment"], found["bound"]) == ("@shell", False)
    assert found["reason"].endswith("because the sandbox image codecoder-sandbox has no npm")
    assert found["hints"] == [
        "`codecoder image build --from IMAGE` makes a sandbox image of an image that has npm; "
        'then set "docker": {"image": ...} and bind run_command to @docker.'
    ]
