"""The copy-back of sync mode, fed what a compromised agent could write: every check runs on the
change set as a whole before anything is written, and what is applied is applied whole or not
at all, whatever the descriptor limit."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from codecoder.environments.docker.copyback import SyncReport, apply_changes
from codecoder.foundation.errors import ExecutionFailed
from tests.environments.docker.changesets import archive, snapshot

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (chattr, mount)")


def apply(
    workspace: Path,
    changes: bytes,
    deleted: list[str] | tuple[str, ...] = (),
    budget: int = 1 << 20,
    host_links: dict[str, str] | None = None,
) -> SyncReport:
    with tarfile.open(fileobj=io.BytesIO(changes)) as tar:
        return apply_changes(
            workspace, tar, {"deleted": list(deleted)}, budget, None, host_links or {}
        )


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    target = tmp_path / "outside"
    target.mkdir()
    (target / "secret").write_text("keep\n")
    return target


def no_staging_left(workspace: Path) -> bool:
    return not [p for p in workspace.iterdir() if p.name.startswith(".codecoder-sync-")]


# --- names, kinds, the budget -------------------------------------------------------------------


def test_a_symlink_sent_back_is_never_written_through(workspace: Path, outside: Path) -> None:
    report = apply(
        workspace,
        archive(("d", "link", str(outside)), ("d/secret", "file", b"overwritten\n")),
    )

    assert (outside / "secret").read_text() == "keep\n"
    assert (workspace / "d").is_dir() and not (workspace / "d").is_symlink()
    assert (workspace / "d" / "secret").read_text() == "overwritten\n"
    assert (report.written, report.kept) == (["d/secret"], ["d"])


def test_an_existing_symlink_on_the_host_is_replaced_not_followed(
    workspace: Path, outside: Path
) -> None:
    (workspace / "d").symlink_to(outside)
    (workspace / "f").symlink_to(outside / "secret")
    apply(workspace, archive(("d/secret", "file", b"a\n"), ("f", "file", b"b\n")))

    assert (outside / "secret").read_text() == "keep\n"
    assert (workspace / "f").read_text() == "b\n" and not (workspace / "f").is_symlink()
    assert not (workspace / "d").is_symlink()
    assert no_staging_left(workspace)


@pytest.mark.parametrize(
    "name", ["../escape", "/etc/passwd", "a/../../escape", "", ".", "a/" + "n" * 256, "x/" * 2100]
)
def test_names_the_host_cannot_hold_refuse_the_whole_archive(workspace: Path, name: str) -> None:
    with pytest.raises(ExecutionFailed, match=r"not beneath it|longer than"):
        apply(workspace, archive(("fine.txt", "file", b"x"), (name, "file", b"x")))
    assert list(workspace.iterdir()) == []


@pytest.mark.parametrize(("kind", "content"), [("hardlink", "fine.txt"), ("fifo", b"")])
def test_entries_other_than_files_directories_and_symlinks_refuse_the_archive(
    workspace: Path, kind: str, content: bytes | str
) -> None:
    with pytest.raises(ExecutionFailed, match="of a kind never copied back"):
        apply(workspace, archive(("fine.txt", "file", b"x"), ("odd", kind, content)))
    assert list(workspace.iterdir()) == []


@pytest.mark.parametrize(
    "members",
    [
        [("twice", "file", b"a"), ("twice", "file", b"b")],
        [("f", "file", b"a"), ("f/under", "file", b"b")],
        [("l", "link", "src"), ("l/under", "file", b"b")],
        [(".codecoder-sync-0123/x", "file", b"x")],
    ],
)
def test_a_change_set_no_listing_could_produce_is_refused_whole(
    workspace: Path, members: list[tuple[str, str, bytes | str]]
) -> None:
    (workspace / "src").mkdir()
    before = snapshot(workspace)

    with pytest.raises(ExecutionFailed, match=r"twice|beneath|copy-back's own"):
        apply(workspace, archive(("first", "file", b"x"), *members))
    assert snapshot(workspace) == before


def test_protected_paths_in_every_spelling_are_kept_out(workspace: Path) -> None:
    report = apply(
        workspace,
        archive(
            ("codecoder.json", "file", b"{}"),
            (".codecoder/approvals/x", "file", b"x"),
            ("a/.git/hooks/post-checkout", "file", b"id"),
            ("b/.GIT", "file", b"gitdir: /tmp"),
            ("c/GIT~1/config", "file", b"x"),
            ("d/.gitmodules", "file", b"x"),
            ("e/.git.", "dir", b""),
            ("ok", "file", b"fine"),
        ),
        deleted=[".git", "src/.git/config"],
    )

    assert [p.name for p in workspace.iterdir()] == ["ok"]
    assert report.written == ["ok"]
    assert sorted(report.kept) == [
        ".codecoder/approvals/x",
        ".git",
        "a/.git/hooks/post-checkout",
        "b/.GIT",
        "c/GIT~1/config",
        "codecoder.json",
        "d/.gitmodules",
        "e/.git.",
        "src/.git/config",
    ]


def test_a_deleted_name_outside_the_workspace_refuses_the_archive_before_any_deletion(
    workspace: Path,
) -> None:
    (workspace / "keep").write_text("x")

    with pytest.raises(ExecutionFailed, match="not beneath it"):
        apply(workspace, archive(("new", "file", b"y")), deleted=["keep", "../ws/keep"])
    assert [p.name for p in workspace.iterdir()] == ["keep"]


def test_setuid_bits_are_dropped_and_the_budget_counts_before_anything_is_written(
    workspace: Path,
) -> None:
    apply(workspace, archive(("tool", "file", b"#!/bin/sh\n")))

    with pytest.raises(ExecutionFailed, match="more than its disk budget"):
        apply(workspace, archive(("a", "file", b"x" * 600), ("b", "file", b"y" * 600)), budget=1000)
    assert (workspace / "tool").stat().st_mode & 0o7777 == 0o755
    assert not (workspace / "a").exists()


def test_zeros_sent_back_stay_holes_on_the_host(workspace: Path) -> None:
    data = b"head" + bytes(16 * 1024 * 1024) + b"tail"
    apply(workspace, archive(("image.raw", "file", data)), budget=32 * 1024 * 1024)

    written = workspace / "image.raw"
    assert written.read_bytes() == data
    assert written.stat().st_blocks * 512 <= 1024 * 1024


def test_a_directory_listed_as_deleted_and_sent_again_loses_what_was_deleted_in_it(
    workspace: Path,
) -> None:
    (workspace / "vendor").mkdir()
    (workspace / "vendor" / "gone.c").write_text("x")
    (workspace / "vendor" / "kept.c").write_text("y")
    report = apply(workspace, archive(("vendor", "dir", b"")), ["vendor", "vendor/gone.c"])

    assert report.deleted == ["vendor/gone.c"]
    assert sorted(p.name for p in (workspace / "vendor").iterdir()) == ["kept.c"]


# --- a nested repository is never taken away with its directory ----------------------------------


def nested_repository(workspace: Path, git: str = ".git") -> None:
    (workspace / "vendor" / "lib" / git).mkdir(parents=True)
    (workspace / "vendor" / "lib" / git / "config").write_text("[core]\n")
    (workspace / "vendor" / "lib" / "lib.c").write_text("int x;\n")


LIB = ["vendor/lib/lib.c", "vendor/lib/.git", "vendor/lib/.git/config"]


@pytest.mark.parametrize(
    ("members", "deleted", "problem"),
    [
        # mv vendor/lib vendor/lib2
        (
            [("vendor/lib2", "dir", b""), ("vendor/lib2/lib.c", "file", b"int x;\n")],
            ["vendor/lib", *LIB],
            "deleted or renamed vendor/lib, which holds vendor/lib/.git",
        ),
        # rm -rf vendor/lib; echo > vendor/lib
        ([("vendor/lib", "file", b"now a file\n")], LIB, "replaced vendor/lib with a file"),
        # rm -rf vendor/lib; ln -s ../elsewhere vendor/lib
        ([("vendor/lib", "link", "../src")], LIB, "replaced vendor/lib with a file or a symlink"),
        # rm -rf vendor
        ([], ["vendor", "vendor/lib", *LIB], "deleted or renamed vendor, which holds"),
        # the sandbox never saw the repository (made on the host after the last sync)
        ([("other", "file", b"x")], ["vendor/lib", "vendor/lib/lib.c"], "holds vendor/lib/.git"),
        # only the deepest paths listed as deleted: the directory is still taken
        ([], ["vendor"], "deleted or renamed vendor, which holds vendor/lib/.git"),
    ],
)
def test_a_directory_holding_a_nested_repository_is_never_deleted_renamed_or_replaced(
    workspace: Path,
    members: list[tuple[str, str, bytes | str]],
    deleted: list[str],
    problem: str,
) -> None:
    nested_repository(workspace)
    before = snapshot(workspace)

    with pytest.raises(ExecutionFailed, match=problem):
        apply(workspace, archive(("ok.txt", "file", b"written first"), *members), deleted)
    assert snapshot(workspace) == before
    assert no_staging_left(workspace)


@pytest.mark.parametrize(
    ("plant", "found"),
    [
        (lambda ws: nested_repository(ws, ".GIT"), "vendor/lib/.GIT"),
        (lambda ws: nested_repository(ws, "GIT~1"), "vendor/lib/GIT~1"),
        (
            lambda ws: (
                (ws / "vendor/lib/deep/er").mkdir(parents=True)
                or (ws / "vendor/lib/deep/er/.gitmodules").write_text("[submodule]\n")
            ),
            "vendor/lib/deep/er/.gitmodules",
        ),
        (
            lambda ws: (
                (ws / "vendor/lib/w").mkdir(parents=True)
                or (ws / "vendor/lib/w/.git").write_text("gitdir: ../../.git/modules/w\n")
            ),
            "vendor/lib/w/.git",
        ),
    ],
)
def test_a_protected_path_at_any_depth_in_any_spelling_keeps_its_directory(
    workspace: Path, plant: Any, found: str
) -> None:
    plant(workspace)
    before = snapshot(workspace)

    with pytest.raises(ExecutionFailed, match=f"which holds {found}"):
        apply(workspace, archive(("vendor/lib", "file", b"x")), ["vendor/lib/x"])
    with pytest.raises(ExecutionFailed, match=f"which holds {found}"):
        apply(workspace, archive(), ["vendor"])
    assert snapshot(workspace) == before


def test_a_directory_without_a_protected_path_is_deleted_and_replaced_as_asked(
    workspace: Path,
) -> None:
    (workspace / "build" / "obj").mkdir(parents=True)
    (workspace / "build" / "obj" / "a.o").write_text("o")
    (workspace / "dist").mkdir()
    report = apply(workspace, archive(("dist", "file", b"now a file")), ["build", "build/obj"])

    assert (report.deleted, report.written) == (["build"], ["dist"])
    assert sorted(p.name for p in workspace.iterdir()) == ["dist"]
    assert (workspace / "dist").read_text() == "now a file"


# --- symlinks are judged where they resolve ------------------------------------------------------


@pytest.mark.parametrize(
    ("members", "kept"),
    [
        ([("a", "link", "."), ("up", "link", "a/..")], ["up"]),
        ([("up", "link", "a/.."), ("a", "link", ".")], ["up"]),  # either order
        ([("b", "link", "a"), ("a", "link", "."), ("c", "link", "b/..")], ["c"]),
        ([("x", "link", "/etc"), ("y", "link", "x"), ("z", "link", "y/passwd")], ["x", "y", "z"]),
        ([("l1", "link", "l2"), ("l2", "link", "l1")], ["l1", "l2"]),
        ([("s/t/u", "link", "../../.."), ("s/t/v", "link", "../..")], ["s/t/u"]),
        ([("h", "link", ".git/hooks"), ("g", "link", "src/../.git")], ["g", "h"]),
        ([("m", "link", "sub/../.gitmodules"), ("n", "link", "m")], ["m", "n"]),
        ([("e", "link", "")], ["e"]),
        # physically beneath, though `..` counted by name alone would leave it
        ([("a/b/c", "dir", b""), ("deep", "link", "a/b/c"), ("in", "link", "deep/../../..")], []),
        ([("ok", "link", "src/file"), ("q/r/back", "link", "../../src")], []),
    ],
)
def test_a_symlink_is_kept_in_the_sandbox_when_it_resolves_out_through_the_links_beside_it(
    workspace: Path, members: list[tuple[str, str, bytes | str]], kept: list[str]
) -> None:
    (workspace / "src").mkdir()
    (workspace / "src" / "file").write_text("in\n")
    report = apply(workspace, archive(*members))

    assert sorted(report.kept) == kept
    for name in kept:
        assert not os.path.lexists(workspace / name), name
    for name, _, _ in members:
        if name not in kept:
            assert os.path.lexists(workspace / name), name


def test_a_new_symlink_is_judged_through_the_links_already_in_the_workspace(
    workspace: Path, outside: Path
) -> None:
    (workspace / "a").symlink_to(".")
    report = apply(workspace, archive(("up", "link", "a/..")), host_links={"a": "."})

    assert report.kept == ["up"]
    assert not os.path.lexists(workspace / "up")
    assert list(workspace.iterdir()) == [workspace / "a"]


@pytest.mark.parametrize(
    ("host", "members", "deleted"),
    [
        # up -> a/.. stays beneath while `a` is nothing or a directory; a -> . takes it out
        ({"up": "a/.."}, [("a", "link", ".")], []),
        ({"up": "a/.."}, [("a", "link", "b"), ("b", "link", ".")], []),
        # t -> s/../.. stays beneath only while s is the link to x/y: deleting s takes it out
        ({"s": "x/y", "t": "s/../.."}, [], ["s"]),
        # replacing s with a shallower link does too
        ({"s": "x/y", "t": "s/../.."}, [("s", "link", "x")], []),
    ],
)
def test_a_change_set_that_would_lead_an_existing_symlink_out_is_refused_whole(
    workspace: Path,
    host: dict[str, str],
    members: list[tuple[str, str, bytes | str]],
    deleted: list[str],
) -> None:
    (workspace / "x" / "y").mkdir(parents=True)
    for name, target in host.items():
        (workspace / name).symlink_to(target)
    before = snapshot(workspace)

    with pytest.raises(ExecutionFailed, match="would lead out of it"):
        apply(workspace, archive(("ok", "file", b"x"), *members), deleted, host_links=host)
    assert snapshot(workspace) == before


def test_the_users_own_symlinks_out_of_the_workspace_do_not_refuse_a_change_set(
    workspace: Path, outside: Path
) -> None:
    (workspace / "data").symlink_to(outside)
    report = apply(workspace, archive(("new", "file", b"x")), host_links={"data": str(outside)})

    assert report.written == ["new"]
    assert os.readlink(workspace / "data") == str(outside)


# --- whole or not at all -------------------------------------------------------------------------


PACKAGES = textwrap.dedent(
    """
    import io, resource, sys, tarfile
    from pathlib import Path
    from codecoder.environments.docker.copyback import apply_changes

    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
    workspace = Path(sys.argv[1])
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        for i in range(1200):
            for name in (f"pkg{i:04}", f"pkg{i:04}/src"):
                info = tarfile.TarInfo(name)
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            info = tarfile.TarInfo(f"pkg{i:04}/src/mod.py")
            info.size = 3
            tar.addfile(info, io.BytesIO(b"x=1"))
        deep = "/".join(["d"] * 600)
        info = tarfile.TarInfo(deep + "/leaf")
        info.size = 4
        tar.addfile(info, io.BytesIO(b"leaf"))
    data.seek(0)
    with tarfile.open(fileobj=data) as tar:
        report = apply_changes(workspace, tar, {"deleted": ["old"]}, 1 << 20, None)
    print(len(report.written), report.deleted)
    """
)


def test_a_change_set_of_thousands_of_directories_applies_whole_under_a_low_descriptor_limit(
    workspace: Path,
) -> None:
    old = workspace / "old"
    deep = old / "/".join(["o"] * 700)
    deep.mkdir(parents=True)
    (deep / "f").write_text("x")
    done = subprocess.run(
        [sys.executable, "-c", PACKAGES, str(workspace)],
        capture_output=True,
        text=True,
        timeout=300,
    )

    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == "3601 ['old']\n"
    assert len(list(workspace.glob("pkg*/src/mod.py"))) == 1200
    assert (workspace / "/".join(["d"] * 600) / "leaf").read_text() == "leaf"
    assert not old.exists()
    assert no_staging_left(workspace)


@pytest.fixture
def immutable() -> Iterator[list[Path]]:
    """Directories made immutable (chattr +i) by a test, made mutable again afterwards."""
    made: list[Path] = []
    yield made
    for path in made:
        subprocess.run(["chattr", "-i", str(path)], check=False)


@needs_root
def test_a_failure_half_way_puts_back_everything_already_changed(
    workspace: Path, immutable: list[Path]
) -> None:
    (workspace / "a").mkdir(mode=0o755)
    (workspace / "a" / "old.txt").write_text("old a\n")
    (workspace / "gone").mkdir()
    (workspace / "gone" / "inside").write_text("inside\n")
    (workspace / "link").symlink_to("a")
    (workspace / "m").mkdir()
    (workspace / "m" / "x").write_text("in m\n")
    (workspace / "z-frozen").mkdir()
    before = snapshot(workspace)
    subprocess.run(["chattr", "+i", str(workspace / "z-frozen")], check=True)
    immutable.append(workspace / "z-frozen")
    changes = archive(
        ("a", "dir", b""),  # its mode changes (0o755 -> 0o755 | sent as 0o755: unchanged)
        ("a/old.txt", "file", b"new a\n"),
        ("a/new", "dir", b""),
        ("a/new/file", "file", b"new\n"),
        ("link", "file", b"no longer a link\n"),
        ("m", "link", "a"),
        ("z-frozen/blocked", "file", b"cannot be written\n"),
    )

    with pytest.raises(ExecutionFailed, match=r"failed at z-frozen/blocked .*was put back"):
        apply(workspace, changes, ["gone", "gone/inside"])
    assert snapshot(workspace) == before
    assert no_staging_left(workspace)


@needs_root
def test_a_full_disk_while_staging_changes_nothing(tmp_path: Path) -> None:
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(small)], check=True)
    try:
        (small / "keep.txt").write_text("kept\n")
        before = snapshot(small)
        changes = archive(("a.txt", "file", b"a"), ("big.bin", "file", os.urandom(2 << 20)))

        with pytest.raises(ExecutionFailed, match=r"could not be staged .*nothing was copied"):
            apply(small, changes, ["keep.txt"], budget=8 << 20)
        assert snapshot(small) == before
        assert no_staging_left(small)
    finally:
        subprocess.run(["umount", str(small)], check=True)
