"""The commit tool runs real git on the host; a hostile top-level .git/config, a hostile nested
repository and hostile environment variables must not make it run anything but git and the
top-level hooks. Each plant leaves a marker file if it runs; the control test shows that plain
git does run them."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from codecoder.environments.host.git import HostGit
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.decision import Answer
from codecoder.foundation.errors import ExecutionFailed
from codecoder.permissions.prompt import fixed
from codecoder.session import Runtime
from tests.conftest import RecordingAsker

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def sh(markers: Path, name: str, then: str = "") -> str:
    """A config value (quoted: `;` starts a comment in git's config) running a shell command."""
    return f"\"sh -c 'touch {markers}/{name}{'; ' + then if then else ''}'\""


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *args], cwd=repo, capture_output=True, text=True, check=True, env=_plain_env()
    )
    return done.stdout


def _plain_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("GIT_")} | {
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
    }


def hostile_config(markers: Path, workspace: Path) -> str:
    return f"""
[user]
\tname = Ada
\temail = ada@example.org
[core]
\tfsmonitor = {sh(markers, "fsmonitor")}
\tpager = {sh(markers, "pager")}
\thooksPath = {workspace}/planted-hooks
\tsshCommand = {sh(markers, "ssh")}
\teditor = {sh(markers, "editor")}
[diff]
\texternal = {sh(markers, "diff-external")}
[diff "evil"]
\ttextconv = {sh(markers, "textconv", "cat")}
\tcommand = {sh(markers, "diff-command")}
[filter "evil"]
\tclean = {sh(markers, "filter-clean", "cat")}
\tsmudge = {sh(markers, "filter-smudge", "cat")}
\trequired = true
[filter "proc"]
\tprocess = {sh(markers, "filter-process")}
[merge "evil"]
\tdriver = {sh(markers, "merge-driver")}
[commit]
\tgpgSign = true
\ttemplate = /etc/passwd
[gpg]
\tprogram = {markers.parent / "gpg-program"}
[gc]
\tauto = 1
\tautoDetach = false
[include]
\tpath = {workspace}/included.gitconfig
"""


def hook(path: Path, marker: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\ntouch {marker}\n")
    path.chmod(0o755)


@pytest.fixture
def hostile(project: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A repository whose .git/config, included workspace file, .gitattributes and nested
    repository `sub/` name programs that leave markers; `sub` is committed as a gitlink and
    changed since, so `commit --all` has reason to look into it."""
    markers = tmp_path / "markers"
    markers.mkdir()
    git(project, "init", "-q", "-b", "main")
    (project / "a.txt").write_text("one\n")
    (project / "b.bin").write_text("filtered\n")
    (project / ".gitattributes").write_text("* diff=evil merge=evil\n*.bin filter=evil\n")
    sub = project / "sub"
    git(sub.parent, "init", "-q", "-b", "main", "sub")
    (sub / "s.txt").write_text("s\n")
    git(sub, "-c", "user.name=A", "-c", "user.email=a@b", "add", "s.txt")
    git(sub, "-c", "user.name=A", "-c", "user.email=a@b", "commit", "-qm", "sub")
    with (sub / ".git" / "config").open("a") as config:
        config.write(f"[core]\n\tfsmonitor = {sh(markers, 'nested-fsmonitor')}\n")
    for name in ("pre-commit", "post-commit", "post-index-change"):
        hook(sub / ".git" / "hooks" / name, markers / f"nested-hook-{name}")
    git(project, "-c", "user.name=A", "-c", "user.email=a@b", "add", "a.txt", ".gitattributes")
    git(project, "-c", "user.name=A", "-c", "user.email=a@b", "add", "sub")
    git(project, "-c", "user.name=A", "-c", "user.email=a@b", "commit", "-qm", "first")
    (sub / "s.txt").write_text("changed in the nested repository\n")
    (project / "a.txt").write_text("two\n")
    # Written last: git itself would have run them while the fixture was being built.
    with (project / ".git" / "config").open("a") as config:
        config.write(hostile_config(markers, project))
    (project / "included.gitconfig").write_text(
        f"[core]\n\tfsmonitor = {sh(markers, 'included-fsmonitor')}\n"
    )
    for name in ("pre-commit", "commit-msg", "post-commit", "post-index-change", "pre-auto-gc"):
        hook(project / "planted-hooks" / name, markers / f"planted-hook-{name}")
    hook(markers.parent / "gpg-program", markers / "gpg")
    return project, markers


def commit(project: Path, asker: Any = None, **args: Any) -> Any:
    """The commit tool on the host (@shell): git's hardening there is what is tested."""
    on_host = {"commit": EnvironmentTag.SHELL}
    with Runtime(
        project, asker=asker or fixed(Answer.ONCE), audit_log=None, bindings=on_host
    ) as runtime:
        return runtime.session().call("commit", {"message": "by the tool", **args})


def test_the_plants_do_run_under_plain_git(hostile: tuple[Path, Path]) -> None:
    # The control: without it, markers that never appear would prove nothing.
    project, markers = hostile
    for argv in (["add", "b.bin"], ["diff"], ["commit", "--all", "-m", "plain"]):
        subprocess.run(["git", *argv], cwd=project, capture_output=True, check=False)

    assert {
        "included-fsmonitor",
        "filter-clean",
        "gpg",
        "nested-fsmonitor",
        "planted-hook-pre-commit",
        "diff-command",
    } <= set(os.listdir(markers))


def test_commit_runs_nothing_the_config_the_workspace_or_a_nested_repository_names(
    hostile: tuple[Path, Path],
) -> None:
    project, markers = hostile

    staged = commit(project, paths=["b.bin"])
    everything = commit(project, all=True)

    assert staged.ok, staged.result.output if staged.result else staged.error
    assert everything.ok, everything.result.output if everything.result else everything.error
    assert os.listdir(markers) == []
    # Committed as it is in the work tree (no clean filter), and the commit is unsigned.
    assert git(project, "show", "HEAD~1:b.bin") == "filtered\n"
    assert "gpgsig" not in git(project, "cat-file", "commit", "HEAD")
    assert git(project, "log", "--format=%s", "-2").split() == ["by", "the", "tool"] * 2


def test_top_level_hooks_run_and_the_prompt_names_them(hostile: tuple[Path, Path]) -> None:
    project, markers = hostile
    top = markers / "top-pre-commit"
    hook(project / ".git" / "hooks" / "pre-commit", top)
    asker = RecordingAsker(Answer.ONCE)

    outcome = commit(project, asker, all=True)

    assert outcome.ok
    assert os.listdir(markers) == ["top-pre-commit"]
    assert (asker.requests[0].subject, asker.requests[0].notes) == (
        "git commit --all -m 'by the tool'",
        ("runs the hooks pre-commit from .git/hooks",),
    )


def test_a_hook_that_leads_into_the_workspace_refuses_the_commit(
    hostile: tuple[Path, Path],
) -> None:
    project, markers = hostile
    hook(project / "scripts" / "pre-commit", markers / "workspace-hook")
    (project / ".git" / "hooks").mkdir(exist_ok=True)
    (project / ".git" / "hooks" / "pre-commit").symlink_to(project / "scripts" / "pre-commit")
    head = git(project, "rev-parse", "HEAD")

    outcome = commit(project, all=True)

    assert isinstance(outcome.error, ExecutionFailed)
    assert "outside .git/ where a sandbox can write it" in str(outcome.error)
    assert os.listdir(markers) == []
    assert git(project, "rev-parse", "HEAD") == head


def test_inherited_git_variables_do_not_redirect_or_configure_the_commit(
    hostile: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project, markers = hostile
    elsewhere = tmp_path / "elsewhere"
    git(tmp_path, "init", "-q", "elsewhere")
    monkeypatch.setenv("GIT_DIR", str(elsewhere / ".git"))
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "core.fsmonitor")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", sh(markers, "env-fsmonitor"))
    monkeypatch.setenv("GIT_EXTERNAL_DIFF", sh(markers, "env-diff"))

    outcome = commit(project, all=True)

    assert outcome.ok
    assert os.listdir(markers) == []
    monkeypatch.delenv("GIT_DIR")
    assert git(project, "log", "-1", "--format=%s") == "by the tool\n"


def test_a_git_planted_on_path_in_the_workspace_is_not_the_git_that_runs(
    hostile: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    project, markers = hostile
    hook(project / ".venv" / "bin" / "git", markers / "planted-git")
    monkeypatch.setenv("PATH", f"{project / '.venv' / 'bin'}:.:{os.environ['PATH']}")

    outcome = commit(project, all=True)

    assert outcome.ok
    assert os.listdir(markers) == []


@pytest.mark.parametrize("kind", ["gitdir file", "symlink", "missing"])
def test_commit_refuses_a_repository_that_is_not_the_workspaces_own(
    project: Path, tmp_path: Path, kind: str
) -> None:
    parent = tmp_path  # a repository above the workspace, which git would otherwise discover
    git(parent, "init", "-q")
    other = tmp_path / "other"
    git(tmp_path, "init", "-q", "other")
    if kind == "gitdir file":
        (project / ".git").write_text(f"gitdir: {other / '.git'}\n")
    elif kind == "symlink":
        (project / ".git").symlink_to(other / ".git")

    outcome = commit(project, all=True)

    assert isinstance(outcome.error, ExecutionFailed)
    assert "commit" in str(outcome.error)


def test_every_override_is_in_the_one_list() -> None:
    host = HostGit(Path("/w"), "/usr/bin/git", {}, ())

    options = host.overrides(["filter.lfs.clean", "filter.lfs.smudge", "diff.pdf.textconv"])

    pairs = dict(o.split("=", 1) for o in options[1::2])
    assert options[0::2] == ["-c"] * len(pairs)
    assert pairs["core.hooksPath"] == "/w/.git/hooks"
    assert pairs["filter.lfs.clean"] == "" and pairs["filter.lfs.required"] == "false"
    assert pairs["diff.pdf.textconv"] == "" and pairs["diff.pdf.command"] == ""
    assert pairs["core.fsmonitor"] == "false" and pairs["submodule.recurse"] == "false"


def _bare_plant(directory: Path, markers: Path) -> None:
    """What a sandbox can write anywhere outside the protected paths: HEAD, objects/, refs/ and
    a config that gives the "bare" repository a work tree and an fsmonitor."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "HEAD").write_text("ref: refs/heads/main\n")
    for sub in ("objects", "refs/heads"):
        (directory / sub).mkdir(parents=True, exist_ok=True)
    (directory / "config").write_text(
        "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = .\n"
        f"\tfsmonitor = {sh(markers, 'bare-fsmonitor')}\n"
    )


@pytest.mark.parametrize(
    ("where", "command"),
    [(".", "git status"), ("sub/dir", "cd sub/dir && git status")],
    ids=["workspace", "subdirectory"],
)
def test_host_git_never_takes_a_planted_bare_layout_for_a_repository(
    tmp_path: Path, where: str, command: str
) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    workspace = tmp_path / "ws"
    _bare_plant(workspace / where, markers)
    # The control: git on its own discovers the layout as a repository and runs the plant.
    subprocess.run(["git", "status"], cwd=workspace / where, env=_plain_env(), capture_output=True)
    assert (markers / "bare-fsmonitor").exists()
    (markers / "bare-fsmonitor").unlink()

    # On the host (@shell, granted for the session) ...
    shell = {"run_command": EnvironmentTag.SHELL}
    with Runtime(workspace, bindings=shell) as runtime, runtime.session() as session:
        session.grant(f"run_command:{_key(command)}")
        outcome = session.call("run_command", {"command": command})
    assert (outcome.decision.environment, outcome.decision.source) == ("@shell", "session")
    assert "safe.bareRepository" in outcome.unwrap().output
    assert not (markers / "bare-fsmonitor").exists()
    # ... and in @bwrap, where `git status` runs read-only without a question.
    with Runtime(workspace) as runtime, runtime.session() as session:
        outcome = session.call("run_command", {"command": command})
    assert (outcome.decision.environment, outcome.decision.source) == ("@bwrap", "read-only")
    assert "safe.bareRepository" in outcome.unwrap().output
    assert not (markers / "bare-fsmonitor").exists()


def _key(command: str) -> str:
    from codecoder.permissions.commandkey import key_command

    return key_command(command).permission_key().action


def test_the_host_guard_keeps_the_callers_own_git_config_entries() -> None:
    from codecoder.environments.host.git import guarded_environ

    env = guarded_environ(
        {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "user.name", "GIT_CONFIG_VALUE_0": "Ada"}
    )
    assert env["GIT_CONFIG_COUNT"] == "2"
    assert (env["GIT_CONFIG_KEY_0"], env["GIT_CONFIG_VALUE_0"]) == ("user.name", "Ada")
    assert (env["GIT_CONFIG_KEY_1"], env["GIT_CONFIG_VALUE_1"]) == (
        "safe.bareRepository",
        "explicit",
    )


def test_a_git_command_says_when_its_hooks_come_from_the_workspace(tmp_path: Path) -> None:
    # husky's set-up: hooks in a workspace directory any sandbox that writes the workspace can
    # change, which a granted `git commit` on the host then runs.
    from codecoder.foundation.ceiling import EnvironmentTag
    from codecoder.permissions.keys import CallSite
    from codecoder.tools.execute import RunCommand, RunCommandParameters

    workspace = tmp_path / "ws"
    workspace.mkdir()
    subprocess.run(["git", "init", "-q", str(workspace)], check=True, env=_plain_env())
    site = CallSite(workspace.resolve(), EnvironmentTag.SHELL)

    def said(command: str) -> tuple[str, tuple[str, ...]]:
        key = RunCommand().permission_in(RunCommandParameters(command=command), site).key
        assert key is not None
        return key.subject, key.notes

    assert said("git commit -m x") == ("git commit -m x", ())
    git(workspace, "config", "core.hooksPath", ".husky/_")
    assert said("git commit -m x") == (
        "git commit -m x",
        (
            "runs code from the workspace: the hooks in .husky/_/ (core.hooksPath); whatever "
            "may write the workspace, sandboxed tools included, can change it",
        ),
    )
    git(workspace, "config", "core.hooksPath", ".git/hooks")
    assert said("git commit -m x") == ("git commit -m x", ())
