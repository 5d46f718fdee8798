"""Read-only commands with glob patterns, run for real in @bwrap through the runtime (issue 22
follow-up, point 2): whatever names a glob expands to (`-o`, `--output=x`, `-delete`), the
command runs with no question only with the whole file system read-only, so nothing is written;
the user's secrets stay hidden whatever path a glob names.

Each attack is shown to be real first: the same line run by bash on a copy, unconfined, writes.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.decision import Answer, Source
from codecoder.foundation.errors import DeniedByUser
from codecoder.session import Runtime
from tests.conftest import RecordingAsker, write_config
from tests.environments.bwrap_support import git, need_bwrap, tree


def never_ask(request: Any) -> Any:
    raise AssertionError(f"the runtime asked for {request.key}")


def contained_call(project: Path, command: str) -> Any:
    with Runtime(project, asker=never_ask, audit_log=None) as runtime, runtime.session() as s:
        assert runtime.environment_of("run_command") is EnvironmentTag.BWRAP
        return s.call("run_command", {"command": command})


def unconfined(project: Path, command: str, scratch: Path) -> dict[str, bytes]:
    """The files of a copy of `project` after bash ran `command` there, unconfined."""
    copy = scratch / "unconfined"
    shutil.copytree(project, copy, symlinks=True)
    subprocess.run(["bash", "-c", command], cwd=copy, stdin=subprocess.DEVNULL, timeout=30)
    return tree(copy)


@pytest.mark.parametrize(
    ("files", "command", "program"),
    [
        # sort -o victim: sort writes its (empty) input over victim.
        ({"-o": "", "victim": "keep me\n"}, "sort *", "sort"),
        # sort --output=leak data: a new file.
        ({"--output=leak": "", "data": "b\na\n"}, "sort *", "sort"),
        # find -delete: everything below the working directory, the dotfile included.
        ({"-delete": "", ".victim": "keep me\n"}, "find *", "find"),
        # The same inside a pipeline of read-only forms.
        ({"-o": "", "victim": "keep me\n"}, "sort * | wc -l", "sort, wc"),
    ],
)
def test_a_glob_expanding_to_option_like_names_writes_nothing_in_bwrap(
    tmp_path: Path, files: dict[str, str], command: str, program: str
) -> None:
    need_bwrap()
    project = tmp_path / "project"
    project.mkdir()
    for name, content in files.items():
        (project / name).write_text(content)
    before = tree(project)
    assert unconfined(project, command, tmp_path) != before  # the attack is real
    outcome = contained_call(project, command)
    decision = outcome.decision
    assert (decision.source, decision.environment, decision.key) == (
        Source.READ_ONLY,
        EnvironmentTag.BWRAP,
        f'run_command:"{command}"',
    )
    assert decision.reason.startswith(f"a read-only command ({program}), run confined read-only")
    assert tree(project) == before
    assert "Read-only file system" in outcome.unwrap().output


def test_git_log_with_a_glob_expanding_to_output_writes_nothing(tmp_path: Path) -> None:
    need_bwrap()
    project = tmp_path / "project"
    project.mkdir()
    git(project, "init", "-q", "-b", "main")
    (project / "README.md").write_text("hello\n")
    git(project, "add", "README.md")
    git(project, "commit", "-q", "-m", "first")
    (project / "--output=leak").write_text("")
    before = tree(project)
    after = unconfined(project, "git log *", tmp_path)
    assert "leak" in after and "leak" not in before  # the attack is real
    outcome = contained_call(project, "git log *")
    assert outcome.decision.source is Source.READ_ONLY
    assert tree(project) == before


def test_a_glob_reaching_for_the_users_secrets_finds_an_empty_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    need_bwrap()
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("SECRET-KEY-MATERIAL\n")
    (home / ".aws").mkdir()
    (home / ".aws" / "credentials").write_text("SECRET-KEY-MATERIAL\n")
    monkeypatch.setenv("HOME", str(home))
    project = tmp_path / "project"
    project.mkdir()
    for command in (f"cat {home}/.ssh/*", f"grep -r KEY {home}/.[a-z]*", f"head {home}/*/*"):
        outcome = contained_call(project, command)
        assert outcome.decision.source is Source.READ_ONLY, command
        assert "SECRET" not in outcome.unwrap().output, command


@pytest.mark.parametrize("command", ["sort *", "wc -l src/*.rs", "ls -- [a-z]*.md | wc -l"])
def test_the_same_line_on_the_host_is_asked_and_a_refusal_runs_nothing(
    tmp_path: Path, command: str
) -> None:
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    (project / "-o").write_text("")
    (project / "victim").write_text("keep me\n")
    write_config(project, {"environments": {"run_command": "@shell"}})
    before = tree(project)
    asker = RecordingAsker(Answer.DENY)
    with Runtime(project, asker=asker, audit_log=None) as runtime, runtime.session() as s:
        outcome = s.call("run_command", {"command": command})
    assert isinstance(outcome.error, DeniedByUser)
    assert [(r.key, r.environment) for r in asker.requests] == [
        (f'run_command:"{command}"', EnvironmentTag.SHELL)
    ]
    assert tree(project) == before
