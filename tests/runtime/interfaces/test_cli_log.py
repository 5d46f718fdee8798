"""`codecoder log`: the audit log read back, as a person and a script read it. Real processes,
the real log in the state directory."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pexpect

from codecoder.foundation.state import project_state_directory
from codecoder.interfaces.cli.log import parse_when
from tests.runtime.interfaces.test_cli import codecoder


def records(proc: Any) -> list[dict[str, Any]]:
    return [json.loads(line) for line in proc.stdout.splitlines()]


def test_log_json_shows_the_call_just_made_with_the_projects_path(project: Path) -> None:
    made = codecoder("call", "run_command", "touch hi", "--answer", "once", project=project)
    assert made.returncode == 0
    proc = codecoder("log", "--json", "--last", "1", project=project)
    assert proc.returncode == 0
    (record,) = records(proc)
    assert {k: record[k] for k in ("project", "tool", "key", "environment")} == {
        "project": str(project.resolve()),
        "tool": "run_command",
        "key": "run_command:touch",
        "environment": "@bwrap",
    }
    assert (record["decision"], record["source"], record["answer"], record["outcome"]) == (
        "allow",
        "once",
        "once",
        "ok",
    )


def test_log_filters_by_tool_decision_outcome_and_time(project: Path) -> None:
    codecoder("call", "run_command", "touch one", "--answer", "once", project=project)
    codecoder("call", "run_command", "rm nothing", "--non-interactive", project=project)
    codecoder("call", "reason", '{"thought": "x"}', project=project)
    codecoder("call", "run_command", "echo two", "--non-interactive", project=project)
    log = project_state_directory(project.resolve()) / "audit.jsonl"
    old = {"ts": time.time() - 3 * 86400, "tool": "run_command", "key": "run_command:old"}
    with log.open("a") as fh:
        fh.write(json.dumps({**old, "decision": "allow", "outcome": "ok"}) + "\n")
        fh.write("a damaged line\n")

    def keys(*args: str) -> list[str | None]:
        proc = codecoder("log", "--json", *args, project=project)
        assert proc.returncode == 0, proc.stderr
        return [r["key"] for r in records(proc)]

    assert keys() == [
        "run_command:touch",
        "run_command:rm",
        None,
        "run_command:echo",
        "run_command:old",
    ]
    assert keys("--tool", "reason") == [None]
    assert keys("--tool", "reason", "--tool", "run_command", "--since", "1h") == [
        "run_command:touch",
        "run_command:rm",
        None,
        "run_command:echo",
    ]
    assert keys("--decision", "deny") == ["run_command:rm"]
    assert keys("--outcome", "ok", "--until", "1d") == ["run_command:old"]
    assert keys("--source", "once", "--last", "5") == ["run_command:touch"]
    assert keys("--source", "read-only") == ["run_command:echo"]
    text = codecoder("log", "--tool", "run_command", "--last", "3", project=project)
    lines = text.stdout.splitlines()
    assert len(lines) == 3
    assert lines[0].split("  ")[1:6] == [
        "run_command",
        "run_command:rm",
        "@bwrap",
        "deny/denied",
        "denied",
    ]
    assert lines[1].split("  ")[1:6] == [
        "run_command",
        "run_command:echo",
        "@bwrap",
        "allow/read-only",
        "ok",
    ]
    assert lines[2].split("  ")[1:3] == ["run_command", "run_command:old"]


def test_log_filters_by_every_source_a_decision_can_have() -> None:
    from codecoder.foundation.decision import Source
    from codecoder.interfaces.cli.grammar import SOURCES

    assert tuple(source.value for source in Source) == SOURCES


def test_log_shows_what_a_record_holds_harmlessly(project: Path) -> None:
    codecoder("call", "run_command", "printf 'a\x1b[2Jb'", "--non-interactive", project=project)
    text = codecoder("log", project=project).stdout
    assert "\x1b" not in text
    assert "run_command:\"printf 'a\\\\u001b[2Jb'\"" in text


def test_log_says_where_the_log_is_when_nothing_is_recorded_and_refuses_bad_times(
    project: Path,
) -> None:
    empty = codecoder("log", project=project)
    where = project_state_directory(project.resolve()) / "audit.jsonl"
    assert empty.stdout == (
        f"no call of {project.resolve()} is recorded yet (its audit log will be {where})\n"
    )
    bad = codecoder("log", "--since", "yesterday", project=project)
    assert bad.returncode == 2
    assert bad.stderr.startswith("codecoder: 'yesterday' is not a time: use 30s, 10m")


def test_times_read_as_ago_today_or_a_date() -> None:
    now = time.mktime((2026, 12, 3, 15, 0, 0, 0, 0, -1))
    assert parse_when("90s", now) == now - 90
    assert parse_when("2h", now) == now - 7200
    assert parse_when("14:05", now) == time.mktime((2026, 12, 3, 14, 5, 0, 0, 0, -1))
    assert parse_when("2026-12-01", now) == time.mktime((2026, 12, 1, 0, 0, 0, 0, 0, -1))


def test_log_follow_shows_new_calls_as_they_come_until_ctrl_c(project: Path) -> None:
    codecoder("call", "reason", '{"thought": "before"}', project=project)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    child = pexpect.spawn(
        sys.executable,
        ["-m", "codecoder", "log", "--follow", "--tool", "run_command"],
        cwd=str(project),
        env=env,
        encoding="utf-8",
        timeout=30,
        dimensions=(40, 250),
    )
    time.sleep(1.0)  # the follower has read the log as it was
    codecoder("call", "reason", '{"thought": "filtered out"}', project=project)
    codecoder("call", "run_command", "touch followed", "--answer", "once", project=project)
    child.expect(r"run_command  run_command:touch  @bwrap  allow/once  ok  \d+ ms  answered once")
    assert "reason" not in child.before
    child.sendintr()
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
