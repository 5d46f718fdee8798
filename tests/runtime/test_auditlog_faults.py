"""The audit log when its disk is full or its lines are damaged: a call that cannot be recorded
does not run (a clear error, no traceback), a grant that cannot be recorded is not persisted,
each record starts on a fresh line, and readers report a damaged line and go on. A real tmpfs,
filled; the real CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from codecoder.auditlog import AuditLog
from codecoder.foundation.state import project_state_directory
from tests.conftest import write_config
from tests.faults import fill, small_filesystem


def codecoder(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    return subprocess.run(
        [sys.executable, "-m", "codecoder", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=project,
    )


@pytest.fixture
def full_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The runtime's state directory on a small tmpfs (filled by the test)."""
    with small_filesystem(tmp_path / "state", "512k") as state:
        monkeypatch.setenv("XDG_STATE_HOME", str(state))
        yield state


def test_a_call_that_cannot_be_audited_does_not_run(project: Path, full_state: Path) -> None:
    write_config(project, {"allowlist": {"write_file:notes.txt": "AlwaysThisProject"}})
    fill(full_state)

    done = codecoder(project, "call", "write_file", '{"path": "notes.txt", "content": "hi"}')
    read = codecoder(project, "call", "read_file", '{"path": "codecoder.json"}')

    assert not (project / "notes.txt").exists()
    for attempt in (done, read):
        assert attempt.returncode != 0, attempt
        assert "audit log" in attempt.stderr and "No space left" in attempt.stderr, attempt
        assert "Traceback" not in attempt.stderr, attempt


def test_a_grant_that_cannot_be_recorded_is_not_written(project: Path, full_state: Path) -> None:
    write_config(project, {"allowlist": {"write_file:a.txt": "AlwaysThisProject"}})
    before = (project / "codecoder.json").read_bytes()
    fill(full_state)

    done = codecoder(
        project, "call", "--answer", "project", "write_file", '{"path": "b.txt", "content": "x"}'
    )

    assert done.returncode != 0, done
    assert "Traceback" not in done.stderr, done
    assert (project / "codecoder.json").read_bytes() == before
    assert not (project / "b.txt").exists()


def test_a_record_cut_short_by_a_full_disk_never_swallows_the_next(full_state: Path) -> None:
    from codecoder.auditlog import Damaged
    from codecoder.foundation.errors import AuditUnavailable

    log = AuditLog(full_state / "audit.jsonl")
    log.record(session="s", tool="first", decision=None, outcome="ok", duration=0.0)
    # Room for part of a record only: the page the log ends in, and no more.
    fill(full_state)
    with pytest.raises(AuditUnavailable, match=r"cut short|No space"):
        log.record(
            session="s", tool="cut", decision=None, outcome="ok", duration=0.0, error="x" * 8000
        )
    (full_state / ".filler").unlink()
    log.record(session="s", tool="after", decision=None, outcome="ok", duration=0.0)

    damaged: list[Damaged] = []
    tools = [record["tool"] for record in log.read(damaged.append)]

    assert tools == ["first", "after"]
    assert [d.line for d in damaged] == [2]


def test_readers_report_a_damaged_line_and_take_back_the_record_after_it(project: Path) -> None:
    from codecoder.auditlog import Damaged

    path = project_state_directory(project.resolve()) / "audit.jsonl"
    path.parent.mkdir(parents=True)
    first, second, third = (
        json.dumps({"ts": 1.0 + n, "tool": tool, "outcome": "ok"}) for n, tool in enumerate("abc")
    )
    # What an older writer left: a record cut short, and the next appended to the same line.
    path.write_text(f"{first}\n{second[:20]}{second}\n{third[:15]}\n{third}\n")

    damaged: list[Damaged] = []
    read = [record["tool"] for record in AuditLog(path).read(damaged.append)]
    shown = codecoder(project, "log", "--json")

    assert read == ["a", "b", "c"]
    assert [d.line for d in damaged] == [2, 3]
    assert [json.loads(line)["tool"] for line in shown.stdout.splitlines()] == ["a", "b", "c"]
    assert "line 2" in shown.stderr and "line 3" in shown.stderr and "damaged" in shown.stderr


def test_an_append_after_a_cut_line_starts_a_fresh_one(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    path.write_text('{"ts": 1.0, "tool": "a"}\n{"ts": 2.0, "to')

    AuditLog(path).record(session="s", tool="b", decision=None, outcome="ok", duration=0.0)

    lines = path.read_text().splitlines()
    assert lines[1] == '{"ts": 2.0, "to'
    assert json.loads(lines[2])["tool"] == "b"
