"""Permanent trust for sandboxed tools, end to end: real wasmtime, real files, new processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from codecoder.foundation.decision import Answer, Source
from codecoder.foundation.errors import CeilingViolation
from codecoder.session import Runtime
from tests.conftest import RecordingAsker, write_config


def codecoder(*args: str, project: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "DOCKER_HOST")}
    # No Docker engine reachable: the file tools must not need one.
    env["DOCKER_HOST"] = "unix:///nonexistent/docker.sock"
    return subprocess.run(
        [sys.executable, "-m", "codecoder", *args],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def test_read_file_works_from_the_cli_without_a_docker_engine(project: Path) -> None:
    (project / "README.md").write_text("hello\nworld\n")
    proc = codecoder(
        "call", "read_file", '{"path": "README.md"}', "--non-interactive", "--json", project=project
    )
    result = json.loads(proc.stdout)
    assert proc.returncode == 0, proc.stderr
    assert result["decision"]["source"] == "none"
    assert result["decision"]["environment"] == "@landlock"
    assert "hello" in result["result"]["output"] and "world" in result["result"]["output"]


def test_write_file_for_the_project_is_recorded_and_trusted_by_a_new_process(
    project: Path,
) -> None:
    asker = RecordingAsker(Answer.PROJECT)
    with Runtime(project, asker=asker) as runtime:
        outcome = runtime.session().call(
            "write_file", {"path": "tests/test_a.py", "content": "a = 1\n"}
        )
        assert (outcome.ok, outcome.decision.source) == (True, Source.PROJECT)
        assert asker.requests[0].choices[2] is Answer.PROJECT
    assert json.loads((project / "codecoder.json").read_text()) == {
        "allowlist": {"write_file:tests/test_a.py": "AlwaysThisProject"}
    }
    proc = codecoder(
        "call",
        "write_file",
        '{"path": "tests/test_a.py", "content": "a = 2\\n"}',
        "--non-interactive",
        "--json",
        project=project,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["decision"]["source"] == "project"
    assert (project / "tests" / "test_a.py").read_text() == "a = 2\n"


def test_a_path_pattern_grant_covers_the_files_under_it_only(project: Path) -> None:
    write_config(project, {"allowlist": {"write_file:tests/**": "AlwaysThisProject"}})
    with Runtime(project, asker=RecordingAsker()) as runtime:
        session = runtime.session()
        inside = session.call("write_file", {"path": "tests/unit/b.py", "content": "b\n"})
        outside = session.call("write_file", {"path": "src/b.py", "content": "b\n"})
    assert inside.decision.source is Source.PROJECT
    assert outside.decision.source is Source.DENIED
    assert not (project / "src" / "b.py").exists()


def test_writing_codecoder_json_is_never_granted_beyond_once(project: Path) -> None:
    write_config(project, {"allowlist": {"write_file:**": "AlwaysThisProject"}})
    original = (project / "codecoder.json").read_text()
    evil = json.dumps({"allowlist": {"run_command:*": "AlwaysThisProject"}})
    asker = RecordingAsker(Answer.PROJECT, Answer.SESSION)
    with Runtime(project, asker=asker) as runtime:
        session = runtime.session()
        for _ in range(2):
            outcome = session.call("write_file", {"path": "codecoder.json", "content": evil})
            assert isinstance(outcome.error, CeilingViolation)
        assert [r.choices for r in asker.requests] == [(Answer.ONCE, Answer.DENY)] * 2
        hook = session.call("write_file", {"path": ".git/hooks/pre-commit", "content": "x"})
        assert hook.decision.source is Source.DENIED
    assert (project / "codecoder.json").read_text() == original
    assert not (project / ".git").exists()


def test_the_seed_example_file_yields_exactly_the_expected_diagnostics(project: Path) -> None:
    write_config(
        project,
        {
            "environments": {"run_command": "@shell"},  # as in the seed: commands on the host
            "allowlist": {
                "run_command:git": "AlwaysThisProject",
                "run_command:cargo": "AlwaysThisSession",
                "write_file:tests/**": "AlwaysThisProject",
            },
        },
    )
    runtime = Runtime(project, asker=RecordingAsker())
    assert [(d.severity, d.code, d.key) for d in runtime.diagnostics] == [
        ("error", "ceiling_violation", "run_command:git"),
        ("warning", "invalid_scope", "run_command:cargo"),
    ]
    assert "@shell" in runtime.diagnostics[0].message
    assert "AlwaysThisSession" in runtime.diagnostics[1].message


def test_a_read_root_named_in_codecoder_json_is_readable_and_never_writable(
    project: Path, tmp_path: Path
) -> None:
    docs = tmp_path / "shared-docs"
    docs.mkdir()
    (docs / "guide.md").write_text("the guide\n")
    write_config(
        project,
        {
            "read_roots": {"docs": str(docs), "gone": "../missing"},
            "allowlist": {"write_file:**": "AlwaysThisProject"},
        },
    )
    with Runtime(project, asker=RecordingAsker()) as runtime:
        assert [(d.code, d.key) for d in runtime.diagnostics] == [("read_root_missing", "gone")]
        session = runtime.session()
        read = session.call("read_file", {"path": "@docs/guide.md"})
        assert read.ok and "the guide" in read.result.output
        write = session.call("write_file", {"path": "@docs/guide.md", "content": "x"})
        assert write.error is not None
    assert (docs / "guide.md").read_text() == "the guide\n"


def test_without_a_read_root_nothing_outside_the_workspace_is_readable(project: Path) -> None:
    with Runtime(project, asker=RecordingAsker()) as runtime:
        outcome = runtime.session().call("read_file", {"path": "@docs/guide.md"})
    assert outcome.error is not None and not outcome.ok
