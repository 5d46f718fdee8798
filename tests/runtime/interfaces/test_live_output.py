"""A command's output while it runs, in a real terminal (pexpect) and through pipes: shown as it
comes, bounded, neutralised; kept when Ctrl-C, SIGTERM or the deadline stops the command."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pexpect

from codecoder.foundation.state import project_state_directory

TICKS = "for i in $(seq 1 40); do echo tick $i; echo $i > ticks; sleep 0.25; done"


ONCE_JSON = ("--answer", "once", "--json")


def spawn(project: Path, *args: str) -> pexpect.spawn:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    return pexpect.spawn(
        sys.executable,
        ["-m", "codecoder", *args, "--project", str(project)],
        cwd=str(project),
        env=env,
        encoding="utf-8",
        timeout=30,
        dimensions=(40, 200),
    )


def audit(project: Path) -> list[dict[str, Any]]:
    path = project_state_directory(project.resolve()) / "audit.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def call_args(command: str, *more: str) -> list[str]:
    return ["call", "run_command", json.dumps({"command": command}), "--answer", "once", *more]


def test_a_call_shows_the_commands_output_as_it_comes_then_only_its_status(
    project: Path,
) -> None:
    command = "echo first; sleep 1.5; printf 'red \\033[31mtext\\n'; echo oops >&2; exit 3"
    terminal = spawn(project, *call_args(command))
    terminal.expect_exact("first\r\n")
    shown_at = time.monotonic()
    terminal.expect(pexpect.EOF)
    ended_at = time.monotonic()
    terminal.close()
    assert ended_at - shown_at > 1.0  # the first line was on screen while the command slept
    # Red is a colour that hides nothing: shown as red, reset before the line ends.
    assert terminal.before == "red \x1b[31mtext\x1b[0m\r\noops\r\n[exit code 3]\r\n"
    assert terminal.exitstatus == 1


def test_a_flood_of_output_shows_its_head_as_it_comes_and_its_end_when_it_ends(
    project: Path,
) -> None:
    command = "seq 1 200000; echo the end"
    terminal = spawn(project, *call_args(command))
    terminal.expect(pexpect.EOF)
    terminal.close()
    text = terminal.before.replace("\r\n", "\n")
    head, _, rest = text.partition(
        "[... the output goes on; its end is shown when the command ends ...]\n"
    )
    assert head.startswith("1\n2\n3\n") and len(head) <= 32 * 1024 + 10
    marker, _, tail = rest.partition(" bytes of output not shown ...]\n")
    assert marker.startswith("[... ") and int(marker[5:]) > 1_000_000
    assert tail.endswith("199999\n200000\nthe end\n[exit code 0]\n")
    assert len(tail) <= 32 * 1024 + 100


def test_ctrl_c_stops_the_command_and_keeps_its_output_on_screen_and_in_the_audit_log(
    project: Path,
) -> None:
    terminal = spawn(project, *call_args(TICKS))
    terminal.expect_exact("tick 3\r\n")
    terminal.sendintr()
    terminal.expect(pexpect.EOF)
    terminal.close()
    assert terminal.exitstatus == 130
    assert terminal.before.rstrip().endswith("codecoder: interrupted")
    (record,) = audit(project)
    assert record["outcome"] == "interrupted"
    assert record["output"].startswith("tick 1\ntick 2\ntick 3\n")


def test_interrupted_with_its_output_in_a_pipe_the_output_so_far_is_still_written(
    project: Path,
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    for as_json in (False, True):
        (project / "ticks").unlink(missing_ok=True)
        proc = subprocess.Popen(
            [sys.executable, "-m", "codecoder", *call_args(TICKS)]
            + (["--json"] if as_json else []),
            cwd=project,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        _wait_for_ticks(project / "ticks", 3)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
        assert proc.returncode == 130
        assert stderr.splitlines()[-1] == "codecoder: interrupted"
        printed = json.loads(stdout)["error"]["output"] if as_json else stdout
        # Three ticks were in the file; the last may still be in the pipe, not yet read, when
        # the interrupt comes on a loaded machine: what was read is written, in order.
        assert printed.startswith("tick 1\ntick 2\n") and printed.endswith("\n")
        if as_json:
            assert json.loads(stdout) == {
                "tool": "run_command",
                "ok": False,
                "error": {
                    "type": "Interrupted",
                    "message": "run_command was interrupted; what it started was stopped",
                    "output": printed,
                },
            }


def _wait_for_ticks(path: Path, count: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        text = path.read_text().strip() if path.exists() else ""
        if text.isdigit() and int(text) >= count:
            return
        time.sleep(0.05)
    raise AssertionError(f"{path} never counted {count}")


def test_a_command_killed_at_its_deadline_prints_its_output_so_far_before_the_error(
    project: Path,
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    command = json.dumps({"command": "echo started; sleep 30", "timeout": 1})
    proc = subprocess.run(
        [sys.executable, "-m", "codecoder", "call", "run_command", command, *ONCE_JSON],
        cwd=project,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    error = json.loads(proc.stdout)["error"]
    assert error == {
        "type": "ExecutionTimeout",
        "message": "command killed after 1s (its whole process group)",
        "output": "started\n",
    }
    assert audit(project)[-1]["output"] == "started\n"


def test_with_json_on_a_terminal_the_progress_line_shows_the_latest_line(project: Path) -> None:
    terminal = spawn(project, *call_args("echo one; sleep 1.6; echo two; sleep 1", "--json"))
    terminal.expect_exact("run_command: ")
    terminal.expect_exact(", latest output: one")
    terminal.expect(pexpect.EOF)
    terminal.close()
    document = json.loads(terminal.before[terminal.before.index("{") :])
    assert document["result"]["output"] == "one\ntwo\n[exit code 0]"


def test_the_interactive_session_shows_output_as_it_comes_and_ctrl_c_keeps_it(
    project: Path,
) -> None:
    terminal = spawn(project, "session")
    terminal.expect_exact("codecoder> ")
    terminal.sendline("run_command " + TICKS)
    terminal.expect(r"choice \[")
    terminal.sendline("o")
    terminal.expect_exact("tick 2\r\n")
    terminal.expect_exact("tick 3\r\n")
    terminal.sendintr()
    terminal.expect_exact("(interrupted)")
    terminal.expect_exact("codecoder> ")
    terminal.sendline("run_command mkdir -v done")
    terminal.expect(r"choice \[")
    terminal.sendline("o")
    terminal.expect_exact("codecoder> ")
    # Shown once, as it came, then the status and the call's line.
    assert terminal.before.count("created directory 'done'\r\n") == 1
    assert "[exit code 0]\r\n[ok · run_command:mkdir" in terminal.before
    terminal.sendline("/quit")
    terminal.expect(pexpect.EOF)
    assert audit(project)[0]["output"].startswith("tick 1\ntick 2\ntick 3\n")
