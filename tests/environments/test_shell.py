"""@shell: real host processes."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from codecoder.environments.base import CommandRequest
from codecoder.environments.shell import ShellEnvironment
from codecoder.foundation.errors import ExecutionTimeout
from tests.conftest import gone


@pytest.fixture
def shell() -> ShellEnvironment:
    return ShellEnvironment()


def test_argv_runs_without_a_shell_so_nothing_is_expanded(shell, tmp_path: Path) -> None:
    result = shell.run(CommandRequest(cwd=tmp_path, argv=("echo", "$HOME", "*", "a;b")))
    assert (result.exit_code, result.stdout, result.stderr) == (0, "$HOME * a;b\n", "")


def test_a_script_runs_in_bash_in_the_workspace(shell, tmp_path: Path) -> None:
    (tmp_path / "marker").write_text("x")
    result = shell.run(CommandRequest(cwd=tmp_path, script="ls | tr a-z A-Z; echo $((1+2))"))
    assert (result.exit_code, result.stdout) == (0, "MARKER\n3\n")


def test_the_exit_code_and_stderr_are_reported(shell, tmp_path: Path) -> None:
    result = shell.run(CommandRequest(cwd=tmp_path, script="echo oops >&2; exit 7"))
    assert (result.exit_code, result.stdout, result.stderr) == (7, "", "oops\n")


def test_a_missing_program_is_exit_code_127(shell, tmp_path: Path) -> None:
    result = shell.run(CommandRequest(cwd=tmp_path, argv=("no-such-program-xyz",)))
    assert result.exit_code == 127
    assert "no-such-program-xyz: command not found" in result.stderr


def test_stdin_is_passed_and_otherwise_empty(shell, tmp_path: Path) -> None:
    given = shell.run(CommandRequest(cwd=tmp_path, argv=("cat",), stdin=b"data"))
    empty = shell.run(CommandRequest(cwd=tmp_path, argv=("cat",)))
    assert (given.stdout, empty.stdout) == ("data", "")


def test_the_timeout_kills_the_whole_process_group(shell, tmp_path: Path) -> None:
    script = "sleep 60 & echo $! > bg.pid; sleep 60"
    started = time.monotonic()
    with pytest.raises(ExecutionTimeout, match=r"killed after 0\.5s"):
        shell.run(CommandRequest(cwd=tmp_path, script=script, timeout=0.5))
    assert time.monotonic() - started < 5
    background = int((tmp_path / "bg.pid").read_text())
    assert gone(background)


def test_a_background_job_does_not_keep_the_call_open_or_outlive_it(shell, tmp_path: Path) -> None:
    started = time.monotonic()
    result = shell.run(
        CommandRequest(cwd=tmp_path, script="sleep 60 & echo $! > bg.pid; echo done")
    )
    assert (result.exit_code, result.stdout) == (0, "done\n")
    assert time.monotonic() - started < 5
    assert gone(int((tmp_path / "bg.pid").read_text()))


def test_output_is_capped_keeping_head_and_tail(shell, tmp_path: Path) -> None:
    script = "echo FIRST; head -c 100000 /dev/zero | tr '\\0' x; echo; echo LAST"
    result = shell.run(CommandRequest(cwd=tmp_path, script=script, max_output=2000))
    assert result.truncated
    assert result.stdout.startswith("FIRST\nxxx")
    assert result.stdout.endswith("xxx\nLAST\n")
    assert "bytes of output truncated" in result.stdout
    assert len(result.stdout) < 2100


def test_a_signal_death_is_reported(shell, tmp_path: Path) -> None:
    result = shell.run(CommandRequest(cwd=tmp_path, script="kill -TERM $$"))
    assert (result.exit_code, result.killed_by) == (143, "SIGTERM")


def test_output_reaches_the_listener_as_the_command_prints_it(shell, tmp_path: Path) -> None:
    pieces: list[tuple[float, str, bytes]] = []
    started = time.monotonic()

    def listener(stream: str, data: bytes) -> None:
        pieces.append((time.monotonic() - started, stream, data))

    script = "echo one; sleep 0.5; echo two >&2; sleep 0.5; echo three"
    result = shell.run(CommandRequest(cwd=tmp_path, script=script, output=listener))
    assert [(stream, data) for _, stream, data in pieces] == [
        ("stdout", b"one\n"),
        ("stderr", b"two\n"),
        ("stdout", b"three\n"),
    ]
    assert pieces[0][0] < 0.4 and pieces[2][0] >= 0.9  # each as it came, not at the end
    assert (result.stdout, result.stderr) == ("one\nthree\n", "two\n")


def test_a_command_killed_at_its_deadline_keeps_its_output_so_far(shell, tmp_path: Path) -> None:
    request = CommandRequest(
        cwd=tmp_path, script="echo started; echo warn >&2; sleep 60", timeout=0.5
    )
    with pytest.raises(ExecutionTimeout) as raised:
        shell.run(request)
    assert raised.value.output == "started\nwarn\n"
