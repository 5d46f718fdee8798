"""A grant or a revoke is one change of two files (codecoder.json and its trust record): killed at
any moment, or read while it happens, the project is trusted as it was or as it became, never
"untrusted" in between. Real processes killed by strace at each rename; real concurrent writers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from codecoder.config import trust
from codecoder.config.project import load_project
from codecoder.config.trust import TrustState
from codecoder.config.writing import add_allow_entry
from codecoder.tools.catalogue import builtin_tools
from tests.conftest import write_config
from tests.faults import killed_at, python_program

PROJECT = "AlwaysThisProject"
KEPT = "write_file:kept/**"  # granted long before, and trusted
NEW = "write_file:new/**"


def _state(root: Path) -> tuple[TrustState, set[str]]:
    config = load_project(root, builtin_tools())
    granted = {rule.value for rule in config.rules if rule.kind == "allow"}
    return config.trust.state, granted


def _change(root: Path, what: str, pattern: str) -> list[str]:
    function = "add_allow_entry" if what == "grant" else "remove_allow_entry"
    return python_program(
        "from pathlib import Path\n"
        f"from codecoder.config.writing import {function}\n"
        f"{function}(Path({str(root / 'codecoder.json')!r}), {pattern!r})\n"
    )


def _trusted_project(root: Path, *patterns: str) -> Path:
    root.mkdir()
    write_config(root, {"allowlist": dict.fromkeys(patterns, PROJECT)})
    return root.resolve()


def test_a_grant_killed_at_any_rename_leaves_the_file_trusted_old_or_new(tmp_path: Path) -> None:
    outcomes = []
    for when in range(1, 6):
        root = _trusted_project(tmp_path / f"killed-at-{when}", KEPT)

        done = killed_at("rename", when, _change(root, "grant", NEW))

        state, granted = _state(root)
        in_file = NEW in json.loads((root / "codecoder.json").read_text())["allowlist"]
        outcomes.append((when, done.returncode, state, in_file))
        # Old or new, trusted either way: the grant given long before still holds, and the new
        # one holds exactly when it reached the file.
        assert state is TrustState.TRUSTED, outcomes
        assert granted == ({KEPT, NEW} if in_file else {KEPT}), outcomes
        # The first reader settled what the killed writer left: one record, no write in flight.
        assert "pending" not in json.loads(trust.record_path(root).read_text()), outcomes
        if done.returncode == 0:
            break
    # Every rename of the grant was a moment to be killed at; it made three (the record naming
    # both files, the file, the record naming the new file alone).
    assert [o[1] for o in outcomes] == [-9, -9, -9, 0], outcomes
    assert [o[3] for o in outcomes] == [False, False, True, True], outcomes


def test_a_revoke_killed_at_any_rename_never_leaves_the_revoked_grant_trusted(
    tmp_path: Path,
) -> None:
    outcomes = []
    for when in range(1, 6):
        root = _trusted_project(tmp_path / f"killed-at-{when}", KEPT, NEW)
        original = (root / "codecoder.json").read_bytes()

        done = killed_at("rename", when, _change(root, "revoke", NEW))

        state, granted = _state(root)
        revoked = NEW not in granted
        outcomes.append((when, done.returncode, state, revoked))
        assert state is TrustState.TRUSTED, outcomes
        assert KEPT in granted, outcomes
        # Once the revoke reached the file, it is revoked for good: the human putting the very
        # same bytes back by hand brings back a widening nobody trusted since.
        if revoked:
            (root / "codecoder.json").write_bytes(original)
            state, granted = _state(root)
            assert state is TrustState.UNTRUSTED, outcomes
            assert NEW not in granted, outcomes
        if done.returncode == 0:
            break
    assert [o[3] for o in outcomes] == [False, False, True, True], outcomes


def test_a_record_left_naming_a_file_that_never_came_is_settled_to_the_old_one(
    tmp_path: Path,
) -> None:
    root = _trusted_project(tmp_path / "project", KEPT)
    killed_at("rename", 2, _change(root, "grant", NEW))  # after the record, before the file
    assert "pending" in json.loads(trust.record_path(root).read_text())

    # The human now writes, by hand, exactly what the killed grant would have: a hand edit,
    # which nothing trusted (the record left behind was settled by the first read).
    assert _state(root) == (TrustState.TRUSTED, {KEPT})
    add_allow_entry_bytes = _what_the_grant_writes(tmp_path, NEW)
    (root / "codecoder.json").write_bytes(add_allow_entry_bytes)

    assert _state(root)[0] is TrustState.UNTRUSTED


def _what_the_grant_writes(tmp_path: Path, pattern: str) -> bytes:
    other = _trusted_project(tmp_path / "other", KEPT)
    add_allow_entry(other / "codecoder.json", pattern)
    return (other / "codecoder.json").read_bytes()


def _churning(
    root: Path, tmp_path: Path, writers: int = 3
) -> tuple[list[subprocess.Popen[bytes]], Path]:
    """Processes that grant and revoke in `root`'s codecoder.json until `stop` exists; returned
    once each has made its first change."""
    stop = tmp_path / "stop"
    processes = [
        subprocess.Popen(
            python_program(
                "from pathlib import Path\n"
                "from codecoder.config.writing import add_allow_entry, remove_allow_entry\n"
                f"path, stop, n = Path({str(root / 'codecoder.json')!r}), "
                f"Path({str(stop)!r}), {n}\n"
                "i = 0\n"
                "while not stop.exists():\n"
                "    add_allow_entry(path, f'write_file:w{n}-{i}/**')\n"
                "    remove_allow_entry(path, f'write_file:w{n}-{i}/**')\n"
                "    if i == 0:\n"
                "        Path(f'{stop}.{n}').touch()\n"
                "    i += 1\n"
            ),
            env=os.environ.copy(),
        )
        for n in range(writers)
    ]
    deadline = time.monotonic() + 60
    while not all(Path(f"{stop}.{n}").exists() for n in range(writers)):
        assert time.monotonic() < deadline, "the writers did not start"
        time.sleep(0.05)
    return processes, stop


def _stopped(processes: list[subprocess.Popen[bytes]], stop: Path) -> None:
    stop.touch()
    for process in processes:
        process.wait(60)
    assert [process.returncode for process in processes] == [0] * len(processes)


def test_readers_see_the_old_state_or_the_new_never_untrusted_while_writers_work(
    tmp_path: Path,
) -> None:
    root = _trusted_project(tmp_path / "project", KEPT)
    writers, stop = _churning(root, tmp_path)
    refused: list[TrustState] = []
    try:
        for _ in range(300):
            state, granted = _state(root)
            if state is not TrustState.TRUSTED or KEPT not in granted:
                refused.append(state)
    finally:
        _stopped(writers, stop)
    assert refused == []


def test_concurrent_grants_answered_for_the_project_warn_of_no_untrusted_file(
    tmp_path: Path,
) -> None:
    root = _trusted_project(tmp_path / "project", KEPT)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    # Grants of other processes (agents in other terminals) go on all the while.
    writers, stop = _churning(root, tmp_path, writers=2)
    calls = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "codecoder",
                "call",
                "--project",
                str(root),
                "--answer",
                "project",
                "write_file",
                json.dumps({"path": f"out/{n}.txt", "content": "x"}),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for n in range(8)
    ]
    results = []
    try:
        for call in calls:
            out, err = call.communicate(timeout=180)
            results.append((call.returncode, out, err))
    finally:
        _stopped(writers, stop)
    assert [r[0] for r in results] == [0] * 8, results
    assert not [r for r in results if "not trusted" in r[1] + r[2]], results
    state, granted = _state(root)
    assert state is TrustState.TRUSTED
    assert {f"write_file:out/{n}.txt" for n in range(8)} <= granted
