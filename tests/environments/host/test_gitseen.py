"""Host commands that write what git runs: a granted `cp -rT fixture .` plants a hook or a
config entry, and the next granted `git status` or `git commit` would run it. Real git, real
host processes (@shell), real files: each plant leaves a marker if it runs; after the command
that planted it, host commands are refused (saying what changed and how to accept it) until
the human accepts it, and ordinary git work is never refused."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from codecoder.environments.host.gitseen import GitGuard, parse_git_config, repository_state
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.decision import Answer
from codecoder.foundation.errors import ExecutionFailed
from codecoder.interfaces.hooks import HookOptions, handle
from codecoder.permissions.prompt import fixed
from codecoder.session import Runtime
from tests.environments.bwrap_support import need_bwrap

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")

GIT_ENV = {
    **{k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_AUTHOR_NAME": "A",
    "GIT_AUTHOR_EMAIL": "a@example.org",
    "GIT_COMMITTER_NAME": "A",
    "GIT_COMMITTER_EMAIL": "a@example.org",
}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=repo, capture_output=True, text=True, check=True, env=GIT_ENV
    ).stdout


@pytest.fixture
def repo(project: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for key, value in GIT_ENV.items():
        if key.startswith("GIT_"):
            monkeypatch.setenv(key, value)
    git(project, "init", "-q", "-b", "main")
    (project / "a.txt").write_text("a\n")
    git(project, "add", "a.txt")
    git(project, "commit", "-qm", "first")
    return project


def planting(fixture: Path, marker: Path, kind: str) -> None:
    """A directory whose copy onto the workspace plants what git runs."""
    if kind in ("hook", "nested hook"):
        where = fixture / ("sub/.git" if kind == "nested hook" else ".git") / "hooks"
        where.mkdir(parents=True)
        (where / "pre-commit").write_text(f"#!/bin/sh\ntouch {marker}\n")
        (where / "pre-commit").chmod(0o755)
        if kind == "nested hook":
            (fixture / "sub" / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
            (fixture / "sub" / ".git" / "objects").mkdir()
            (fixture / "sub" / ".git" / "refs").mkdir()
    elif kind == "fsmonitor":
        (fixture / ".git").mkdir(parents=True)
        (fixture / ".git" / "config").write_text(
            "[core]\n\trepositoryformatversion = 0\n\tbare = false\n"
            f"\tfsmonitor = \"sh -c 'touch {marker}; false'\"\n"
        )


HOST = {"run_command": EnvironmentTag.SHELL, "commit": EnvironmentTag.SHELL}


class Runner:
    """A runtime on the real host (`run_command` and `commit` bound to @shell; `bindings={}`: in
    @bwrap, the default) whose human answers `once` to whatever is asked."""

    def __init__(self, project: Path, bindings: dict[str, EnvironmentTag] = HOST) -> None:
        self.runtime = Runtime(project, asker=fixed(Answer.ONCE), audit_log=None, bindings=bindings)
        self.session = self.runtime.session()

    def run(self, command: str) -> Any:
        return self.session.call("run_command", {"command": command})

    def close(self) -> None:
        self.runtime.close()


@pytest.mark.parametrize(
    ("kind", "copy", "then"),
    [
        ("hook", "cp -rT fixture .", "git commit -qm x --allow-empty"),
        ("hook", "cp -r fixture/. .", "git commit -qm x --allow-empty"),
        ("fsmonitor", "cp -rT fixture .", "git status --short"),
        ("fsmonitor", "cp -r fixture/. .", "git diff"),
        ("nested hook", "cp -r fixture/. .", "git -C sub commit -qm x --allow-empty"),
    ],
)
def test_a_granted_copy_that_plants_what_git_runs_refuses_the_next_host_command(
    repo: Path, tmp_path: Path, kind: str, copy: str, then: str
) -> None:
    marker = tmp_path / "PWNED"
    planting(repo / "fixture", marker, kind)
    runner = Runner(repo)
    try:
        assert runner.run("git status --short").ok  # the first look: nothing unseen
        copied = runner.run(copy)
        assert copied.ok, copied.error
        assert "this command changed what the workspace's git runs" in copied.result.output
        assert copied.result.data["git_unseen"]
        refused = runner.run(then)
        also = runner.session.call("commit", {"message": "x", "all": True})
    finally:
        runner.close()
    assert isinstance(refused.error, ExecutionFailed)
    assert "codecoder trust --git" in str(refused.error)
    assert isinstance(also.error, ExecutionFailed)  # the commit tool runs host git too
    assert not marker.exists()


def test_what_the_human_accepts_runs_again(repo: Path, tmp_path: Path) -> None:
    marker = tmp_path / "PWNED"
    planting(repo / "fixture", marker, "hook")
    runner = Runner(repo)
    try:
        runner.run("git status")
        runner.run("cp -rT fixture .")
        assert isinstance(runner.run("git status").error, ExecutionFailed)
        env = {k: v for k, v in os.environ.items() if k != "CI"}
        shown = subprocess.run(
            [sys.executable, "-m", "codecoder", "trust", "--git", "--show", "--json"],
            cwd=repo,
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
        assert json.loads(shown.stdout)["unseen"] == [
            ".git: hook .git/hooks/pre-commit was added "
            + f"({repository_state(repo, '.git').hooks['.git/hooks/pre-commit'][:16]}…)"
        ]
        accepted = subprocess.run(
            [sys.executable, "-m", "codecoder", "trust", "--git", "--yes"],
            cwd=repo,
            capture_output=True,
            text=True,
            env=env,
        )
        assert accepted.returncode == 0, accepted.stderr
        committed = runner.run("git commit -qm accepted --allow-empty")
    finally:
        runner.close()
    assert committed.ok, committed.error
    assert marker.exists()  # the hook the human accepted ran, as git runs it


@pytest.mark.parametrize(
    "command",
    [
        "git status",
        "git add a.txt",
        "git commit -qm again --allow-empty",
        "git config user.email b@example.org",
        "git remote add origin https://example.org/x.git",
        "git checkout -qb feature",
        "git init -q nested",
        "git clone -q . copy",
        "git branch --set-upstream-to=main feature",
        "git stash list",
    ],
)
def test_ordinary_git_work_is_never_refused(repo: Path, command: str) -> None:
    git(repo, "branch", "feature")
    runner = Runner(repo)
    try:
        first = runner.run(command)
        second = runner.run("git status --short")
    finally:
        runner.close()
    assert first.error is None, first.error
    assert "git_unseen" not in first.result.data
    assert second.ok, second.error


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ("git config core.hooksPath .husky", "config core.hookspath = '.husky' was added"),
        ("git config alias.st '!touch M'", "config alias.st = '!touch M' was added"),
        ("git config core.pager 'touch M'", "config core.pager = 'touch M' was added"),
        ("git config filter.x.clean 'touch M'", "config filter.x.clean = 'touch M' was added"),
        ("git config include.path ../inc.cfg", "config include.path = '../inc.cfg (unreadable"),
    ],
)
def test_config_that_makes_git_run_something_is_flagged(
    repo: Path, change: str, expected: str
) -> None:
    guard = GitGuard(repo)
    assert guard.unseen() == []
    subprocess.run(change, shell=True, cwd=repo, check=True, env=GIT_ENV)
    found = guard.unseen()
    assert len(found) == 1 and found[0].startswith(f".git: {expected}"), found


def test_a_hooks_path_in_the_workspace_is_watched_file_by_file(repo: Path) -> None:
    husky = repo / ".husky"
    husky.mkdir()
    (husky / "pre-commit").write_text("#!/bin/sh\nnpm test\n")
    git(repo, "config", "core.hooksPath", ".husky")
    guard = GitGuard(repo)
    assert guard.unseen() == []  # what was there at the first look
    (husky / "pre-commit").write_text("#!/bin/sh\ntouch M\n")
    assert [c.split(" (")[0] for c in guard.unseen()] == [
        ".git: hook .husky/pre-commit was changed"
    ]


def test_an_included_file_is_watched_by_its_content(repo: Path) -> None:
    (repo / "inc.cfg").write_text("[user]\n\tname = A\n")
    git(repo, "config", "include.path", "../inc.cfg")
    guard = GitGuard(repo)
    assert guard.unseen() == []
    (repo / "inc.cfg").write_text("[core]\n\tfsmonitor = touch M\n")
    unseen = guard.unseen()
    assert unseen[0].startswith(".git: config include.path = '../inc.cfg (sha256:")
    assert unseen[1:] == [".git: config core.fsmonitor = 'touch M' was added"]


def test_removing_what_was_seen_needs_no_acceptance(repo: Path) -> None:
    hooks = repo / ".git" / "hooks"
    (hooks / "pre-push").write_text("#!/bin/sh\n")
    git(repo, "config", "alias.lg", "log --oneline")
    guard = GitGuard(repo)
    assert guard.unseen() == []
    (hooks / "pre-push").unlink()
    git(repo, "config", "--unset", "alias.lg")
    assert guard.unseen() == []


def test_a_fifo_planted_as_config_or_hook_does_not_hang_the_check(repo: Path) -> None:
    guard = GitGuard(repo)
    guard.unseen()
    os.mkfifo(repo / ".git" / "hooks" / "pre-commit")
    os.unlink(repo / ".git" / "config")
    os.mkfifo(repo / ".git" / "config")
    found = guard.unseen()
    assert any("pre-commit was added" in c for c in found)
    assert any("unreadable" in c for c in found)


def test_the_claude_code_hook_denies_a_host_command_after_a_plant(
    repo: Path, tmp_path: Path
) -> None:
    # The host's own shell, on the host (`--host-shell`): what git would run there is judged.
    options = HookOptions(
        project=repo, allow=("run_command:git:status",), sandbox=None, interactive=False
    )

    def bash(command: str) -> str:
        event = {
            "session_id": "s1",
            "cwd": str(repo),
            "hook_event_name": "PreToolUse",
            "tool_name": "Bash",
            "tool_input": {"command": command},
            "tool_use_id": "t1",
        }
        return str(
            handle("claude-code", event, options)["hookSpecificOutput"]["permissionDecision"]
        )

    assert bash("git status") == "allow"
    # The host's own Bash (which codecoder does not run) plants a hook ...
    (repo / ".git" / "hooks" / "post-checkout").write_text("#!/bin/sh\ntouch M\n")
    # ... and the next host command is denied until the human accepts it.
    assert bash("git status") == "deny"
    GitGuard(repo).accept()
    assert bash("git status") == "allow"


def test_the_config_reader_fails_closed_on_what_it_cannot_read() -> None:
    text = (
        "[core]\n\tfsmonitor = \"sh -c 'x'\" # comment\n[alias] st = !evil\n"
        '[Remote "Origin"]\n\turl = u\nbroken line\n[x]\n\tk = "unterminated\n'
    )
    assert parse_git_config(text) == [
        ("core.fsmonitor", "sh -c 'x'"),
        ("alias.st", "!evil"),
        ("remote.Origin.url", "u"),
        ("unparsed", "broken line"),
        ("unparsed", '\tk = "unterminated'),
    ]


@pytest.mark.parametrize(
    "planted", [".claude/settings.json", ".mcp.json", ".vscode/tasks.json", "codecoder.json"]
)
def test_a_granted_host_command_that_creates_an_agents_settings_is_quarantined(
    project: Path, planted: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fixture = project / "fixture"
    (fixture / planted).parent.mkdir(parents=True, exist_ok=True)
    (fixture / planted).write_text('{"hooks": {}}\n')
    # A grant for `cp` (the human never saw what the fixture holds).
    runtime = Runtime(project, asker=fixed(Answer.DENY), audit_log=None, bindings=HOST)
    try:
        session = runtime.session()
        session.grant("run_command:cp")
        assert session.call("run_command", {"command": "ls"}).error is not None  # not granted
        copied = session.call("run_command", {"command": "cp -rT fixture ."})
    finally:
        runtime.close()
    assert isinstance(copied.error, ExecutionFailed)
    assert "Quarantined" in str(copied.error)
    assert not (project / planted.split("/")[0]).exists()


def test_a_command_naming_an_agents_settings_allowed_once_may_create_them(project: Path) -> None:
    runner = Runner(project)  # answers once
    try:
        made = runner.run("mkdir .claude")
    finally:
        runner.close()
    assert made.ok, made.error
    assert (project / ".claude").is_dir()


@pytest.mark.parametrize(
    ("kind", "copy", "then", "stopped"),
    [
        ("hook", "cp -rT fixture .", "git commit -qm x --allow-empty", "Read-only file system"),
        ("fsmonitor", "cp -r fixture/. .", "git diff", "Read-only file system"),
        (
            "nested hook",
            "cp -r fixture/. .",
            "git -C sub commit -qm x --allow-empty",
            "Quarantined",
        ),
    ],
)
def test_in_bwrap_the_same_copy_never_plants_what_host_git_runs(
    repo: Path, tmp_path: Path, kind: str, copy: str, then: str, stopped: str
) -> None:
    """The default environment: the workspace's .git is read-only in @bwrap, and a .git it
    creates elsewhere is quarantined; host git then has nothing unseen to refuse or run."""
    marker = tmp_path / "PWNED"
    planting(repo / "fixture", marker, kind)
    before = repository_state(repo, ".git")
    contained = Runner(repo, bindings={})
    try:
        copied = contained.run(copy)
        again = contained.run(then)
    finally:
        contained.close()
    host = Runner(repo)
    try:
        on_host = host.run(then)
    finally:
        host.close()
    assert copied.decision.environment == "@bwrap"
    said = str(copied.error) if copied.error is not None else copied.unwrap().output
    assert stopped in said, said
    assert repository_state(repo, ".git") == before
    assert not (repo / "sub" / ".git").exists()
    assert again.ok, again.error
    assert on_host.decision.environment == "@shell"
    assert on_host.ok, on_host.error
    assert not marker.exists()


def test_the_record_is_read_again_whenever_another_process_changed_it(tmp_path: Path) -> None:
    # The guard keeps the record it read (a host command looks twice); a record accepted by
    # another process, or edited in place, is what the next look reads.
    from codecoder.environments.host.gitseen import GitSeen

    workspace = tmp_path / "ws"
    workspace.mkdir()
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    ours, theirs = GitSeen(workspace), GitSeen(workspace)
    assert ours.read() is None
    state = repository_state(workspace, ".git")
    theirs.write({".git": state})
    assert ours.read() == {".git": state}
    theirs.write({})
    assert ours.read() == {}
    document = json.loads(ours.path.read_text())
    document["repositories"] = {"sub/.git": state.to_json()}
    with open(ours.path, "r+") as file:  # in place: same inode
        file.write(json.dumps(document))
        file.truncate()
    assert ours.read() == {"sub/.git": state}


SSH_COMMAND = 'printf \'[core]\\n\\tsshCommand = "sh -c \\\\"touch {marker}\\\\""\\n\''
FSMONITOR = 'printf \'[core]\\n\\tfsmonitor = "sh -c \\\\"touch {marker}\\\\""\\n\''


@pytest.mark.parametrize(
    ("layout", "edit", "then"),
    [
        # .git/config includes a file of the workspace; the sandbox edits it (issue 33).
        (
            {".git/config+": "[include]\n\tpath = ../shared.gitconfig\n", "shared.gitconfig": ""},
            SSH_COMMAND + " >> shared.gitconfig",
            "git fetch ssh://example.invalid/repo.git",
        ),
        (
            {".git/config+": "[include]\n\tpath = ../shared.gitconfig\n", "shared.gitconfig": ""},
            FSMONITOR + " >> shared.gitconfig",
            "git status --short",
        ),
        # ... which includes another (git follows includes of includes).
        (
            {
                ".git/config+": "[include]\n\tpath = ../a.gitconfig\n",
                "a.gitconfig": "[include]\n\tpath = b.gitconfig\n",
                "b.gitconfig": "",
            },
            FSMONITOR + " >> b.gitconfig",
            "git status --short",
        ),
        # A program the human's config names, kept in the workspace.
        (
            {
                ".git/config+": "[core]\n\tsshCommand = ./tools/ssh.sh\n",
                "tools/ssh.sh": "#!/bin/sh\nexit 1\n",
            },
            "printf '#!/bin/sh\\ntouch {marker}\\n' > tools/ssh.sh",
            "git fetch ssh://example.invalid/repo.git",
        ),
    ],
)
def test_what_a_first_sandboxed_call_changes_for_host_git_is_refused_whatever_the_order(
    repo: Path, tmp_path: Path, layout: dict[str, str], edit: str, then: str
) -> None:
    """No host command ran before the sandboxed call: the record of what git runs is taken
    before the first sandboxed call, not at the first host command after it."""
    need_bwrap()
    marker = tmp_path / "PWNED"
    for name, content in layout.items():
        path = repo / name.rstrip("+")
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a" if name.endswith("+") else "w") as file:
            file.write(content)
        if name.startswith("tools/"):
            path.chmod(0o755)
    contained = Runner(repo, bindings={})
    try:
        edited = contained.run(edit.format(marker=marker))
    finally:
        contained.close()
    assert edited.decision.environment == "@bwrap"
    assert edited.ok, edited.error
    host = Runner(repo)
    try:
        refused = host.run(then)
    finally:
        host.close()
    assert isinstance(refused.error, ExecutionFailed), refused
    assert "codecoder trust --git" in str(refused.error)
    assert not marker.exists()
