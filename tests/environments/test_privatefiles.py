"""The rule that finds what the host keeps private (environments.privatefiles), on a tree of the
test's own: what is private, for whom, and how the looks before each call keep the record
true as the tree changes. No bubblewrap here: tests/environments/test_bwrap_private_files.py
attacks the sandbox itself."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from codecoder.environments.privatefiles import (
    Account,
    MachinePrivateFiles,
    PrivateView,
    is_public,
    readable_roots,
)

ME = Account(uid=1000, groups=frozenset({1000, 4}))


def tree(root: Path, entries: dict[str, int]) -> None:
    """Make `entries` (path: mode; a path ending in / is a directory) under `root`, owned by
    ME's uid and group 1000."""
    for name, mode in entries.items():
        path = root / name.rstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        if name.endswith("/"):
            path.mkdir(exist_ok=True)
        else:
            path.write_text("secret\n")
        os.chown(path, 1000, 1000)
        path.chmod(mode)


def files_of(root: Path, **kwargs: object) -> MachinePrivateFiles:
    return MachinePrivateFiles(None, roots=[str(root)], skipped=[], **kwargs)  # type: ignore[arg-type]


def relative(view: PrivateView, root: Path) -> tuple[list[str], list[str]]:
    return (
        [str(p.relative_to(root)) for p in view.directories],
        [str(p.relative_to(root)) for p in view.files],
    )


@pytest.fixture
def root(tmp_path: Path) -> Path:
    if os.geteuid() != 0:
        pytest.skip("making files of another owner needs root")
    top = tmp_path / "fs"
    top.mkdir()
    return top


def test_public_means_any_account_may_read_it() -> None:
    assert is_public(0o100644) and is_public(0o040755) and is_public(0o120777)
    assert not is_public(0o100640) and not is_public(0o100600)
    assert not is_public(0o040700) and not is_public(0o040711) and not is_public(0o040754)


def test_what_the_owner_or_a_group_could_read_is_private_whatever_its_name(root: Path) -> None:
    tree(
        root,
        {
            "etc/": 0o755,
            "etc/passwd": 0o644,
            "etc/app-secret": 0o600,  # a name no list knows
            "etc/by-group": 0o640,
            "etc/write-only": 0o200,  # no one reads it without a privilege: nothing to hide
            "var/lib/service/": 0o700,
            "var/lib/service/key.pem": 0o644,  # readable, but only through its directory
            "var/lib/traversable/": 0o711,
            "var/lib/dpkg/": 0o755,
            "srv/public/": 0o755,
            "srv/public/readme": 0o644,
        },
    )
    view = files_of(root).view(ME)
    assert relative(view, root) == (
        ["var/lib/service", "var/lib/traversable"],
        ["etc/app-secret", "etc/by-group"],
    )


def test_only_what_the_account_itself_could_read_is_covered(root: Path) -> None:
    tree(root, {"srv/": 0o755, "srv/mine": 0o600, "srv/group": 0o640, "srv/dir/": 0o700})
    tree(root, {"srv/readme": 0o644})
    files = files_of(root)
    assert relative(files.view(ME), root) == (["srv/dir"], ["srv/group", "srv/mine"])
    # Another account: not the owner, in no group of the files: it cannot read them anyway.
    assert len(files.view(Account(2000, frozenset({2000})))) == 0
    # One in the group reads the group's file only.
    assert relative(files.view(Account(2000, frozenset({1000}))), root) == ([], ["srv/group"])


def test_what_a_sandbox_shows_or_hides_whole_is_left_to_it(root: Path) -> None:
    tree(root, {"work/": 0o755, "work/ws/": 0o755, "work/ws/.env": 0o600, "etc/": 0o755})
    tree(root, {"etc/secret": 0o600, "private/": 0o700})
    (root / "private" / "ws").mkdir()
    files = files_of(root)
    view = files.view(
        ME, shown=[root / "work" / "ws", root / "private" / "ws"], hidden=[root / "etc"]
    )
    # The workspace's own files are the user's; a workspace inside a private directory is
    # mounted over the directory's empty tmpfs.
    assert relative(view, root) == (["private"], [])


def test_a_directory_whose_entries_are_all_private_is_covered_whole(root: Path) -> None:
    tree(root, {f"cache/constants/{n}": 0o600 for n in "abcdef"})
    tree(root, {"cache/mixed/a": 0o600, "cache/mixed/b": 0o600, "cache/mixed/readme": 0o644})
    view = files_of(root).view(ME)
    assert relative(view, root) == (["cache/constants"], ["cache/mixed/a", "cache/mixed/b"])


def test_what_appears_near_the_top_or_beside_a_secret_is_found_by_the_next_call(
    root: Path,
) -> None:
    tree(root, {"etc/passwd": 0o644, "etc/old-secret": 0o600, "srv/a/b/c/": 0o755})
    files = files_of(root)
    assert len(files.view(ME)) == 1
    walks = files.walks
    # Added at the top, and in a directory that already held a private entry: looked at by
    # every call, listed again, without a new walk.
    tree(root, {"new-secret": 0o600, "etc/new-secret": 0o600, "var/lib/x/": 0o700})
    view = files.view(ME)
    assert relative(view, root) == (
        ["var/lib/x"],
        ["etc/new-secret", "etc/old-secret", "new-secret"],
    )
    assert files.walks == walks


def test_deeper_changes_are_found_by_the_look_at_every_directory(root: Path) -> None:
    tree(root, {"srv/a/b/c/": 0o755, "srv/a/b/c/readme": 0o644})
    files = files_of(root)
    assert len(files.view(ME)) == 0
    tree(root, {"srv/a/b/c/key": 0o600, "srv/a/b/c/new/deeper/": 0o755})
    tree(root, {"srv/a/b/c/new/deeper/key": 0o600})
    files.look_everywhere()
    assert relative(files.view(ME), root) == (
        [],
        ["srv/a/b/c/key", "srv/a/b/c/new/deeper/key"],
    )
    assert files.walks == 1


def test_a_directory_made_private_removed_or_replaced_is_seen(root: Path) -> None:
    tree(root, {"srv/app/": 0o755, "srv/app/inner/": 0o755, "srv/app/inner/key": 0o600})
    tree(root, {"srv/gone/": 0o755, "srv/gone/key": 0o600})
    files = files_of(root)
    assert relative(files.view(ME), root)[1] == ["srv/app/inner/key", "srv/gone/key"]
    (root / "srv" / "app").chmod(0o700)
    (root / "srv" / "gone" / "key").unlink()
    (root / "srv" / "gone").rmdir()
    files.look_everywhere()
    assert relative(files.view(ME), root) == (["srv/app"], [])
    (root / "srv" / "app").chmod(0o755)
    files.look_everywhere()
    assert relative(files.view(ME), root) == ([], ["srv/app/inner/key"])


def test_the_record_is_kept_for_the_next_process_and_a_bad_one_walked_again(
    root: Path, tmp_path: Path
) -> None:
    tree(root, {"etc/passwd": 0o644, "etc/secret": 0o600, "srv/a/b/c/readme": 0o644})
    tree(root, {"srv/a/b/c/key": 0o600})
    cache = tmp_path / "state" / "private-entries.json"
    first = MachinePrivateFiles(cache, roots=[str(root)], skipped=[])
    expected = first.view(ME)
    assert cache.is_file() and cache.with_name("private-directories.json").is_file()
    assert oct(cache.stat().st_mode & 0o777) == "0o600"
    second = MachinePrivateFiles(cache, roots=[str(root)], skipped=[])
    assert second.view(ME) == expected and second.walks == 0
    # The next process knows only the directories a call looks at until it looks at all.
    tree(root, {"srv/a/b/c/new": 0o600})
    second.look_everywhere()
    assert second.walks == 0
    assert relative(second.view(ME), root)[1] == ["etc/secret", "srv/a/b/c/key", "srv/a/b/c/new"]
    cache.write_text("{not json")
    third = MachinePrivateFiles(cache, roots=[str(root)], skipped=[])
    assert third.view(ME) == second.view(ME) and third.walks == 1
    data = json.loads(cache.read_text())
    data["roots"] = ["/elsewhere"]
    cache.write_text(json.dumps(data))
    fourth = MachinePrivateFiles(cache, roots=[str(root)], skipped=[])
    assert fourth.view(ME) == second.view(ME) and fourth.walks == 1


def test_landlock_roots_are_split_around_what_is_covered(root: Path) -> None:
    tree(root, {"etc/passwd": 0o644, "etc/ssl/certs/ca.pem": 0o644, "etc/ssl/private/": 0o700})
    tree(root, {"etc/shadow": 0o640, "usr/bin/tool": 0o755})
    view = files_of(root).view(ME)
    split = sorted(
        str(p.relative_to(root)) for p in readable_roots([root / "etc", root / "usr"], view)
    )
    assert split == ["etc/passwd", "etc/ssl/certs", "usr"]
