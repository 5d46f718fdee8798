"""foundation.openbeneath: reads beneath a directory never follow a symlink out of it, with openat2
and with the component-by-component walk used where openat2 is missing."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from codecoder.foundation import openbeneath
from codecoder.foundation.openbeneath import Beneath, NotBeneath, open_beneath


@pytest.fixture(params=["openat2", "walk"])
def resolution(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param == "walk":
        openbeneath._openat2_missing.set()
    else:
        openbeneath._openat2_missing.clear()
    yield request.param
    openbeneath._openat2_missing.clear()


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """ws/ holds a file, a symlink out, links that stay inside, and magic links; out/ a secret."""
    root = tmp_path / "ws"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "f.txt").write_text("inside\n")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "secret").write_text("secret\n")
    (root / "out").symlink_to("../out")
    (root / "abs").symlink_to(tmp_path / "out")
    (root / "self-root").symlink_to("/proc/self/root")
    (root / "a" / "up").symlink_to("../a")
    (root / "a" / "file-link").symlink_to("b/f.txt")
    os.mkfifo(root / "fifo")
    return root


ESCAPES = [
    "out/secret",
    "abs/secret",
    "self-root/etc/passwd",
    "../out/secret",
    "a/../../out/secret",
]


@pytest.mark.parametrize("path", ESCAPES)
def test_no_path_leads_out_whether_symlinks_are_refused_or_followed(
    tree: Path, resolution: str, path: str
) -> None:
    for symlinks in (False, True):
        with Beneath(tree, symlinks=symlinks) as beneath, pytest.raises(OSError):
            beneath.read(path)


def test_refusing_symlinks_refuses_them_even_when_they_stay_inside(
    tree: Path, resolution: str
) -> None:
    with Beneath(tree) as beneath:
        assert beneath.read("a/b/f.txt") == b"inside\n"
        with pytest.raises(OSError):
            beneath.read("a/up/b/f.txt")
        with pytest.raises(OSError):
            beneath.read("a/file-link")
        assert beneath.lstat("a/up/b/f.txt") is None  # behind a symlink: not there
        assert beneath.readlink("a/file-link") == b"b/f.txt"


def test_following_symlinks_follows_those_that_stay_beneath(tree: Path, resolution: str) -> None:
    with Beneath(tree, symlinks=True) as beneath:
        assert beneath.read("a/up/b/f.txt") == b"inside\n"
        assert beneath.read("a/file-link") == b"inside\n"


def test_a_fifo_is_refused_instead_of_hanging(tree: Path, resolution: str) -> None:
    with Beneath(tree) as beneath, pytest.raises(OSError, match="not a regular file"):
        beneath.read("fifo")


def test_escapes_are_told_apart_from_missing_files(tree: Path, resolution: str) -> None:
    fd = os.open(tree, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(NotBeneath):
            open_beneath(fd, "out/secret", os.O_RDONLY, symlinks=True)
        with pytest.raises(NotBeneath):
            open_beneath(fd, "/etc/passwd", os.O_RDONLY, symlinks=True)
        with pytest.raises(FileNotFoundError):
            open_beneath(fd, "a/missing", os.O_RDONLY)
    finally:
        os.close(fd)


def test_a_directory_held_open_stays_the_directory_it_was(tree: Path, resolution: str) -> None:
    with Beneath(tree) as beneath:
        assert beneath.scandir("a/b") == [("f.txt", beneath.lstat("a/b/f.txt"))]
        # Swapped for a symlink out after it was opened: the held descriptor still names the
        # real directory (now moved aside), never the symlink's target.
        (tree / "a" / "b").rename(tree / "moved")
        (tree / "a" / "b").symlink_to(tree.parent / "out")
        assert beneath.read("a/b/f.txt") == b"inside\n"
    with Beneath(tree) as fresh:
        assert fresh.lstat("a/b/secret") is None
        assert fresh.scandir("a/b") == []
