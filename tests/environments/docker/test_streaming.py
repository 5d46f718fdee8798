"""@docker streams a command's output as it comes: the agent's `output` lines, in order, for
the call that asked; a short call sends only its answer; a call killed at its deadline keeps
what it printed."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Iterator

import pytest

from codecoder.environments.base import CommandRequest, Stream
from codecoder.environments.docker.environment import DockerEnvironment, DockerSettings
from codecoder.foundation.errors import ExecutionTimeout
from tests.environments.conftest import SANDBOX_IMAGE

pytestmark = pytest.mark.docker


class Watcher:
    """Records each piece of output with the time it arrived."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.pieces: list[tuple[float, Stream, bytes]] = []

    def __call__(self, stream: Stream, data: bytes) -> None:
        self.pieces.append((time.monotonic() - self.started, stream, data))

    def text(self, stream: Stream) -> str:
        return b"".join(data for _, s, data in self.pieces if s == stream).decode()


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DockerEnvironment]:
    root = tmp_path_factory.mktemp("streaming") / "workspace"
    root.mkdir()
    root.chmod(0o755)
    os.chown(root, 10001, 10001)
    with DockerEnvironment(root, DockerSettings(image=SANDBOX_IMAGE)) as env:
        env.run(CommandRequest(cwd=root, argv=("true",)))  # warm
        yield env


def test_a_long_commands_output_arrives_while_it_runs_in_order_and_whole(
    sandbox: DockerEnvironment,
) -> None:
    watcher = Watcher()
    script = "for i in 1 2 3 4; do echo out $i; echo err $i >&2; sleep 0.4; done"
    result = sandbox.run(CommandRequest(cwd=sandbox.workspace, script=script, output=watcher))
    assert watcher.text("stdout") == result.stdout == "out 1\nout 2\nout 3\nout 4\n"
    assert watcher.text("stderr") == result.stderr == "err 1\nerr 2\nerr 3\nerr 4\n"
    first_out = next(at for at, stream, _ in watcher.pieces if stream == "stdout")
    # The first line was there long before the command's 1.6 s were up.
    assert first_out < 0.8 < result.duration


def test_a_short_commands_output_comes_once_from_its_answer(sandbox: DockerEnvironment) -> None:
    watcher = Watcher()
    result = sandbox.run(
        CommandRequest(cwd=sandbox.workspace, argv=("echo", "quick"), output=watcher)
    )
    assert [(stream, data) for _, stream, data in watcher.pieces] == [("stdout", b"quick\n")]
    assert result.stdout == "quick\n"


def test_a_flood_of_output_is_streamed_bounded_with_what_was_left_out_counted(
    sandbox: DockerEnvironment,
) -> None:
    watcher = Watcher()
    script = "head -c 3000000 /dev/zero | tr '\\0' x; sleep 0.3; echo; echo last line"
    result = sandbox.run(CommandRequest(cwd=sandbox.workspace, script=script, output=watcher))
    streamed = watcher.text("stdout")
    assert result.truncated and result.stdout.endswith("\nlast line\n")
    assert streamed.endswith("\nlast line\n")
    assert "bytes of output not streamed ...]" in streamed
    assert len(streamed) < 300_000  # pieces of at most 64 KiB, not the 3 MB


def test_a_command_killed_at_its_deadline_keeps_what_it_printed(
    sandbox: DockerEnvironment,
) -> None:
    watcher = Watcher()
    request = CommandRequest(
        cwd=sandbox.workspace, script="echo before; sleep 30", timeout=1, output=watcher
    )
    with pytest.raises(ExecutionTimeout) as raised:
        sandbox.run(request)
    assert raised.value.output == "before\n"
    assert watcher.text("stdout") == "before\n"


def test_a_program_missing_from_the_image_says_how_to_build_one_that_has_it(
    sandbox: DockerEnvironment,
) -> None:
    hint = (
        f"codecoder: the sandbox image {SANDBOX_IMAGE} has no npm. `codecoder image build "
        "--from node:20` makes a sandbox image of an image that has it (one on this engine), "
        'then set "docker": {"image": ...} in codecoder.json to use it (`codecoder check` '
        "confirms it)\n"
    )
    for request in (
        CommandRequest(cwd=sandbox.workspace, argv=("npm", "test")),
        CommandRequest(cwd=sandbox.workspace, script="npm test && echo passed"),
    ):
        watcher = Watcher()
        result = sandbox.run(dataclasses.replace(request, output=watcher))
        assert result.exit_code == 127
        assert result.stderr.endswith("npm: command not found\n" + hint)
        assert watcher.text("stderr") == result.stderr  # shown live too
    quiet = sandbox.run(CommandRequest(cwd=sandbox.workspace, script="exit 127"))
    assert (quiet.exit_code, quiet.stderr) == (127, "")
