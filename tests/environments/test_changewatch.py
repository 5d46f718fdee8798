"""The change watch (inotify) and the apparent-size measure on real files: what a call changed,
what it hides from used space, and the walk whenever the kernel cannot vouch for the changes."""

from __future__ import annotations

import os
import time
from pathlib import Path

from codecoder.environments.apparent import call_start, hidden_bytes, hidden_in
from codecoder.environments.changewatch import ChangeWatch

MiB = 1024 * 1024


def test_files_written_truncated_linked_or_made_in_a_new_directory_are_seen(
    tmp_path: Path,
) -> None:
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "grown.txt").write_text("x")
    (tmp_path / "seed").write_bytes(os.urandom(MiB))
    (tmp_path / "untouched").write_text("same")
    watch = ChangeWatch(tmp_path)
    watch.reset()
    os.truncate(tmp_path / "old" / "grown.txt", 8 << 30)
    (tmp_path / "new" / "deep").mkdir(parents=True)
    (tmp_path / "new" / "deep" / "made").write_text("made")
    os.link(tmp_path / "seed", tmp_path / "second")
    changed = watch.changed()
    watch.close()

    assert changed is not None
    assert changed >= {"old/grown.txt", "new/deep/made", "second"}
    assert "untouched" not in changed
    hidden = hidden_in(tmp_path, changed)
    grown = os.stat(tmp_path / "old" / "grown.txt")
    hole = grown.st_size - grown.st_blocks * 512
    assert hidden.bytes == hole + MiB  # the hole, and the second name whole
    assert {path for path, _ in hidden.files} == {"old/grown.txt", "second"}


def test_a_renamed_directory_makes_the_watch_say_it_cannot_tell_then_watch_again(
    tmp_path: Path,
) -> None:
    (tmp_path / "d").mkdir()
    watch = ChangeWatch(tmp_path)
    os.rename(tmp_path / "d", tmp_path / "e")
    told = watch.changed()
    (tmp_path / "e" / "after").write_text("x")
    again = watch.changed()
    watch.close()

    assert told is None  # the caller walks
    assert again == {"e/after"}


def test_a_link_planted_where_a_changed_file_was_is_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    with open(outside / "huge", "wb") as huge:
        huge.truncate(64 << 30)
    root = tmp_path / "ws"
    root.mkdir()
    (root / "d").symlink_to(outside)

    assert hidden_in(root, {"d/huge"}).bytes == 0


def test_the_walk_counts_only_what_changed_since_the_call_started(tmp_path: Path) -> None:
    with open(tmp_path / "before", "wb") as before:
        before.truncate(1 << 30)
    time.sleep(0.05)  # a tick of the ctime clock later
    started = call_start()
    with open(tmp_path / "during", "wb") as during:
        during.truncate(2 << 30)

    found = hidden_bytes([tmp_path], started)

    assert (found.bytes, [path for path, _ in found.files]) == (2 << 30, ["during"])
