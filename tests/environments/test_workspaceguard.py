"""Finding protected paths at every depth, cheaply and without being fooled, and quarantining them
so that a failure is never silent: real files, FIFOs, another filesystem, the @shell refusal."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest

from codecoder.environments import workspaceguard
from codecoder.environments.workspaceguard import (
    ProtectedChanges,
    ProtectedScan,
    quarantine,
    quarantine_marker,
    unresolved_quarantine,
)
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.decision import Answer
from codecoder.foundation.errors import ExecutionFailed
from codecoder.session import Runtime
from tests.conftest import RecordingAsker


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return tmp_path / "state" / "codecoder"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "workspace"
    for directory in ("src/deep/er", "vendor/lib/.git/hooks", "docs"):
        (root / directory).mkdir(parents=True)
    (root / "vendor" / ".gitmodules").write_text("[submodule]\n")
    (root / "src" / "deep" / "er" / "main.c").write_text("int main;\n")
    (root / "codecoder.json").write_text("{}\n")
    (root / "src" / "codecoder.json").write_text("{}\n")  # only the top one is protected
    return root


def test_a_scan_finds_protected_paths_at_every_depth_and_nothing_else(tree: Path) -> None:
    assert ProtectedScan(tree).entries == {
        "codecoder.json",
        "vendor/.gitmodules",
        "vendor/lib/.git",
    }


@pytest.mark.parametrize(
    ("plant", "found"),
    [
        (lambda r: (r / "src/deep/er/.git").mkdir(), "src/deep/er/.git"),
        (lambda r: (r / "src/deep/.git").write_text("gitdir: /x\n"), "src/deep/.git"),
        (lambda r: (r / "docs/.git").symlink_to("/etc"), "docs/.git"),
        (lambda r: (r / "src/.GITMODULES").write_text(""), "src/.GITMODULES"),
        (lambda r: (r / ".codecoder").mkdir(), ".codecoder"),
        (lambda r: (r / "new/a/b/.git").mkdir(parents=True), "new/a/b/.git"),
    ],
)
def test_changes_name_what_appeared_at_any_depth(tree: Path, plant: object, found: str) -> None:
    scan = ProtectedScan(tree)
    assert scan.changes() == ProtectedChanges()

    plant(tree)  # type: ignore[operator]

    assert scan.changes() == ProtectedChanges(appeared=(found,))
    assert scan.changes() == ProtectedChanges()


def test_a_change_in_the_same_clock_tick_as_the_last_look_is_not_missed(tree: Path) -> None:
    # Created right after a look, within the coarse ctime granularity: the directory's ctime
    # may not move, so a directory changed that recently is listed again next time.
    for _ in range(20):
        scan = ProtectedScan(tree)
        (tree / "src" / "deep" / "er" / ".git").mkdir()
        assert scan.changes().appeared == ("src/deep/er/.git",)
        (tree / "src" / "deep" / "er" / ".git").rmdir()


def test_setting_times_back_does_not_hide_a_plant(tree: Path) -> None:
    scan = ProtectedScan(tree)
    (tree / "docs" / ".git").mkdir()
    os.utime(tree / "docs", (0, 0))  # `touch -d 1970-01-01 docs`: mtime, never ctime
    os.utime(tree, (0, 0))

    assert scan.changes().appeared == ("docs/.git",)


def test_moving_and_removing_are_changes_too(tree: Path) -> None:
    scan = ProtectedScan(tree)
    (tree / "vendor" / "lib").rename(tree / "vendor" / "moved")
    (tree / "vendor" / ".gitmodules").unlink()

    assert scan.changes() == ProtectedChanges(
        appeared=("vendor/moved/.git",), vanished=("vendor/.gitmodules", "vendor/lib/.git")
    )


def test_a_directory_replaced_by_another_of_the_same_name_is_looked_into(tree: Path) -> None:
    scan = ProtectedScan(tree)
    (tree / "src").rename(tree / "old-src")
    (tree / "src" / "x" / ".git").mkdir(parents=True)

    assert scan.changes().appeared == ("src/x/.git",)


def test_a_directory_made_unreadable_after_a_change_is_reported(tree: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root reads every directory")
    scan = ProtectedScan(tree)
    (tree / "docs" / ".git").mkdir()
    (tree / "docs").chmod(0)
    try:
        assert scan.changes().unreadable == ("docs",)
    finally:
        (tree / "docs").chmod(0o755)


def test_a_later_look_costs_one_stat_per_directory(tree: Path) -> None:
    for i in range(200):
        (tree / "many" / f"d{i}").mkdir(parents=True)
        for j in range(20):
            (tree / "many" / f"d{i}" / f"f{j}").write_text("")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(workspaceguard, "RACY_NS", -(10**18))  # as if every change were old
        scan = ProtectedScan(tree)
    listed: list[str] = []
    original = os.scandir

    def counting(path: object) -> object:
        listed.append(str(path))
        return original(path)  # type: ignore[call-overload]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(workspaceguard.os, "scandir", counting)
        (tree / "many" / "d7" / ".git").mkdir()
        changes = scan.changes()

    assert changes.appeared == ("many/d7/.git",)
    assert listed == [str(tree / "many" / "d7")]


# --- quarantine --------------------------------------------------------------------------------


def test_quarantine_moves_each_path_out_under_a_unique_name(tree: Path, state: Path) -> None:
    (tree / "src" / ".git" / "hooks").mkdir(parents=True)
    (tree / "src" / ".git" / "hooks" / "pre-commit").write_text("id\n")
    os.mkfifo(tree / "src" / ".git" / "fifo")
    (tree / "docs" / ".git").write_text("gitdir: /x\n")

    first = quarantine(tree, ["src/.git", "docs/.git"], "test")
    (tree / "docs" / ".git").mkdir()  # the same plant again, in the same second
    second = quarantine(tree, ["docs/.git"], "test")

    places = sorted((state / "quarantine").iterdir())
    assert len(places) == 2
    assert not (tree / "src" / ".git").exists() and not (tree / "docs" / ".git").exists()
    assert sorted(p.name for p in places[0].iterdir() if p.name != "quarantine.json") in (
        ["0-.git", "1-.git"],
        ["0-.git"],
    )
    assert "src/.git -> " in first and "docs/.git -> " in second
    assert unresolved_quarantine(tree) is None


def test_quarantine_across_filesystems_leaves_the_plant_inert_in_place(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm to put the state directory on another filesystem")
    with tempfile.TemporaryDirectory(dir="/dev/shm") as other:
        monkeypatch.setenv("XDG_STATE_HOME", other)
        if os.stat(other).st_dev == os.stat(tree).st_dev:
            pytest.skip("/dev/shm is on the workspace's filesystem here")
        (tree / "src" / ".git").mkdir()
        os.mkfifo(tree / "src" / ".git" / "fifo")  # a copy would block or fail on it

        where = quarantine(tree, ["src/.git"], "test")

        inert = [p for p in (tree / "src").iterdir() if p.name.startswith(".codecoder-quar")]
        assert not (tree / "src" / ".git").exists()
        assert [p.name for p in inert[0].iterdir()] == ["fifo"]
        assert where == f"src/.git -> {inert[0]}"
        assert unresolved_quarantine(tree) is None


def test_a_failed_quarantine_says_so_and_keeps_host_tools_from_running(
    tree: Path, state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tree / "src" / ".git").mkdir()
    real_rename = os.rename

    def refuse(source: object, target: object) -> None:
        if str(source).endswith("src/.git"):
            raise PermissionError(13, "Permission denied")
        real_rename(source, target)  # type: ignore[arg-type]

    monkeypatch.setattr(workspaceguard.os, "rename", refuse)
    with pytest.raises(ExecutionFailed, match="cannot rename it in place: Permission denied"):
        quarantine(tree, ["src/.git"], "a test plant")
    monkeypatch.setattr(workspaceguard.os, "rename", real_rename)

    marker = quarantine_marker(tree)
    record = json.loads(marker.read_text())
    assert (record["why"], record["paths"]) == ("a test plant", {"src/.git": "still in place"})
    on_host = {"run_command": EnvironmentTag.SHELL}
    with Runtime(tree, asker=RecordingAsker(Answer.ONCE, Answer.ONCE), bindings=on_host) as runtime:
        refused = runtime.session().call("run_command", {"command": "echo hi"})
        marker.unlink()  # the human looked
        allowed = runtime.session().call("run_command", {"command": "echo hi"})

    assert isinstance(refused.error, ExecutionFailed)
    assert "host tools are refused until you have looked" in str(refused.error)
    assert str(marker) in str(refused.error)
    assert allowed.unwrap().data["stdout"] == "hi\n"
