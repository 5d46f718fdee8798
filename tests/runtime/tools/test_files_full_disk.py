"""The write tools on a full disk: the file they could not replace is kept whole, and a new file
they could not write is not left behind. A real tmpfs, filled; the real fileops.wasm."""

from __future__ import annotations

import os
from pathlib import Path

from codecoder.foundation.decision import Answer
from codecoder.session import Runtime
from tests.conftest import RecordingAsker
from tests.faults import fill, small_filesystem

SIZE = 420 * 1024


def _text(seed: str) -> str:
    line = f"{seed} " + "the quick brown fox jumps over the lazy dog " * 2 + "\n"
    return (line * (SIZE // len(line) + 1))[:SIZE]


def test_a_write_on_a_full_disk_keeps_the_file_it_could_not_replace(tmp_path: Path) -> None:
    with small_filesystem(tmp_path / "disk", "2m") as disk:
        project = disk / "project"
        project.mkdir()
        original = _text("old")
        (project / "big.txt").write_text(original)
        (project / "run.sh").write_text("#!/bin/sh\necho hi\n")
        os.chmod(project / "run.sh", 0o750)
        asker = RecordingAsker(*[Answer.ONCE] * 8)
        runtime = Runtime(project, asker=asker, audit_log=None)
        session = runtime.session()
        fill(disk)

        write = session.call(
            "write_file", {"path": "big.txt", "content": _text("new") + "x" * 4096}
        )
        edit = session.call(
            "edit_file",
            {
                "path": "big.txt",
                "old_string": "old the",
                "new_string": "a longer text: the",
                "replace_all": True,
            },
        )
        new = session.call("write_file", {"path": "new.txt", "content": _text("new")})

        for outcome in (write, edit, new):
            assert not outcome.ok
            assert "no space left" in str(outcome.error)
        assert (project / "big.txt").read_text() == original
        assert not (project / "new.txt").exists()
        assert sorted(p.name for p in project.iterdir()) == ["big.txt", "run.sh"]

        # What needs no more room is written whole, and the file keeps its mode.
        shorter = session.call("write_file", {"path": "run.sh", "content": "#!/bin/sh\n"})
        assert shorter.ok, shorter.error
        assert (project / "run.sh").read_text() == "#!/bin/sh\n"
        assert os.stat(project / "run.sh").st_mode & 0o777 == 0o750
        runtime.close()
