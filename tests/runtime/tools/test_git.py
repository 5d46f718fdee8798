"""git_status, git_diff and git_log: real repositories, real git as the oracle where it is
installed, and a hostile .git/config whose commands must never run."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from dulwich import porcelain
from dulwich.objects import Blob

from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.decision import Answer
from codecoder.foundation.errors import ExecutionFailed, InvalidArguments
from codecoder.permissions.keys import Permission
from codecoder.session import Runtime
from codecoder.tools.base import Category
from codecoder.tools.git import GIT_TOOLS

AUTHOR = b"Ada Lovelace <ada@example.org>"
T0 = 1_700_000_000  # 2023-11-14T22:13:20Z

A_FIRST, A_SECOND, A_NOW = "one\ntwo\nthree\n", "one\ntwo\nthree\nfour\n", "one\n2\nthree\nfour\n"
B_FIRST, B_NOW, C, NEW = "b\n", "bee\n", "c\n", "fresh\n"
BINARY = b"\x00\x01binary"

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def short(content: str | bytes) -> str:
    """The abbreviated object id git prints for a file with this content."""
    data = content.encode() if isinstance(content, str) else content
    return Blob.from_string(data).id.decode()[:7]


def never_ask(request: Any) -> Answer:
    raise AssertionError(f"the runtime asked for {request.key}")


def write(root: Path, files: dict[str, str | bytes]) -> None:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


def stage(root: Path, *names: str) -> None:
    porcelain.add(str(root), paths=[str(root / name) for name in names])


def commit(root: Path, message: str, files: dict[str, str | bytes], when: int = T0) -> str:
    write(root, files)
    stage(root, *files)
    sha = porcelain.commit(
        str(root),
        message.encode(),
        author=AUTHOR,
        committer=AUTHOR,
        author_timestamp=when,
        author_timezone=0,
        commit_timestamp=when,
        commit_timezone=0,
    )
    return sha.decode()


def init(root: Path) -> Path:
    porcelain.init(str(root))
    # A branch name that does not depend on the machine's init.defaultBranch.
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    return root


def call(root: Path, tool: str, **args: Any) -> Any:
    runtime = Runtime(root, asker=never_ask, audit_log=None, tools={t.name: t for t in GIT_TOOLS})
    return runtime.session().call(tool, args)


def output(root: Path, tool: str, **args: Any) -> str:
    outcome = call(root, tool, **args)
    assert outcome.error is None, outcome.error
    text: str = outcome.result.output
    return text


@pytest.fixture
def repo(project: Path) -> Path:
    """Two commits, then: a.txt modified (unstaged), b.txt modified and staged, c.txt deleted,
    new.txt added, an untracked file and directory, an ignored file."""
    init(project)
    commit(project, "First commit", {"a.txt": A_FIRST, "b.txt": B_FIRST, "c.txt": C})
    commit(
        project,
        "Second commit\n\nWith a body\nof two lines.",
        {"a.txt": A_SECOND, ".gitignore": "*.log\nbuild/\n"},
        T0 + 3600,
    )
    write(project, {"a.txt": A_NOW, "b.txt": B_NOW, "new.txt": NEW})
    stage(project, "b.txt", "new.txt")
    (project / "c.txt").unlink()
    write(project, {"notes.md": "n\n", "scratch/x.py": "x\n", "debug.log": "l\n", "build/o": "o"})
    return project


# --- git_status ------------------------------------------------------------------------------


def test_git_status_shows_the_branch_and_each_change_like_short_status(repo: Path) -> None:
    outcome = call(repo, "git_status")

    assert outcome.result.output == (
        "## main\n M a.txt\nM  b.txt\n D c.txt\nA  new.txt\n?? notes.md\n?? scratch/"
    )
    assert outcome.result.data["changes"] == [
        {"path": "a.txt", "staged": "", "unstaged": "M"},
        {"path": "b.txt", "staged": "M", "unstaged": ""},
        {"path": "c.txt", "staged": "", "unstaged": "D"},
        {"path": "new.txt", "staged": "A", "unstaged": ""},
    ]
    assert outcome.result.data["untracked"] == ["notes.md", "scratch/"]
    assert outcome.result.data["branch"] == "main"


@needs_git
def test_git_status_agrees_with_real_git(repo: Path) -> None:
    (repo / "b.txt").write_text("bee, changed again\n")  # staged and unstaged: MM
    real = subprocess.run(
        ["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True, check=True
    ).stdout

    ours = output(repo, "git_status").split("\n")[1:]

    assert ours == real.rstrip("\n").split("\n")


def test_git_status_limits_to_the_given_paths(repo: Path) -> None:
    assert output(repo, "git_status", paths=["b.txt", "scratch"]) == (
        "## main\nM  b.txt\n?? scratch/"
    )


def test_git_status_of_a_clean_repository_and_of_one_without_commits(project: Path) -> None:
    init(project)
    assert output(project, "git_status") == (
        "## No commits yet on main\nnothing to commit, working tree clean"
    )
    sha = commit(project, "init", {"f": "f\n"})
    assert output(project, "git_status") == "## main\nnothing to commit, working tree clean"
    (project / ".git" / "HEAD").write_text(sha + "\n")
    assert output(project, "git_status") == (
        f"## HEAD (detached at {sha[:10]})\nnothing to commit, working tree clean"
    )


def test_git_status_writes_nothing_to_the_repository(repo: Path) -> None:
    def snapshot() -> dict[str, tuple[bytes, int]]:
        return {
            str(path): (path.read_bytes(), path.stat().st_mtime_ns)
            for path in sorted((repo / ".git").rglob("*"))
            if path.is_file()
        }

    before = snapshot()
    for path in repo.rglob("*.txt"):  # stat data the index does not match any more
        os.utime(path, (T0, T0))
    output(repo, "git_status")
    output(repo, "git_diff")

    assert snapshot() == before


def test_a_workspace_that_is_not_a_repository_is_a_clear_error(project: Path) -> None:
    outcome = call(project, "git_status")

    assert isinstance(outcome.error, ExecutionFailed)
    assert str(outcome.error) == (
        f"the workspace {project} is not a git repository (no .git at its root)"
    )


# --- git_diff --------------------------------------------------------------------------------


def test_git_diff_shows_the_work_tree_against_the_index(repo: Path) -> None:
    outcome = call(repo, "git_diff")

    assert outcome.result.output == (
        "diff --git a/a.txt b/a.txt\n"
        f"index {short(A_SECOND)}..{short(A_NOW)} 100644\n"
        "--- a/a.txt\n"
        "+++ b/a.txt\n"
        "@@ -1,4 +1,4 @@\n"
        " one\n"
        "-two\n"
        "+2\n"
        " three\n"
        " four\n"
        "diff --git a/c.txt b/c.txt\n"
        "deleted file mode 100644\n"
        f"index {short(C)}..0000000\n"
        "--- a/c.txt\n"
        "+++ /dev/null\n"
        "@@ -1 +0,0 @@\n"
        "-c\n"
    )
    assert outcome.result.data == {
        "files": [
            {
                "path": "a.txt",
                "status": "modified",
                "binary": False,
                "additions": 1,
                "deletions": 1,
            },
            {"path": "c.txt", "status": "deleted", "binary": False, "additions": 0, "deletions": 1},
        ],
        "truncated": False,
    }


@needs_git
@pytest.mark.parametrize("staged", [False, True], ids=["work tree", "staged"])
def test_git_diff_agrees_with_real_git(repo: Path, staged: bool) -> None:
    argv = ["git", "-c", "core.pager=cat", "diff", "--no-color", "--no-ext-diff"]
    real = subprocess.run(
        argv + (["--cached"] if staged else []),
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    ).stdout

    assert output(repo, "git_diff", staged=staged) == real


def test_git_diff_staged_shows_the_index_against_head(repo: Path) -> None:
    assert output(repo, "git_diff", staged=True, context_lines=0) == (
        "diff --git a/b.txt b/b.txt\n"
        f"index {short(B_FIRST)}..{short(B_NOW)} 100644\n"
        "--- a/b.txt\n"
        "+++ b/b.txt\n"
        "@@ -1 +1 @@\n"
        "-b\n"
        "+bee\n"
        "diff --git a/new.txt b/new.txt\n"
        "new file mode 100644\n"
        f"index 0000000..{short(NEW)}\n"
        "--- /dev/null\n"
        "+++ b/new.txt\n"
        "@@ -0,0 +1 @@\n"
        "+fresh\n"
    )


def test_git_diff_between_two_revisions(repo: Path) -> None:
    assert output(repo, "git_diff", base="HEAD~1", target="HEAD", paths=["a.txt"]) == (
        "diff --git a/a.txt b/a.txt\n"
        f"index {short(A_FIRST)}..{short(A_SECOND)} 100644\n"
        "--- a/a.txt\n"
        "+++ b/a.txt\n"
        "@@ -1,3 +1,4 @@\n"
        " one\n"
        " two\n"
        " three\n"
        "+four\n"
    )


def test_git_diff_of_a_revision_against_the_work_tree_covers_staged_and_unstaged(
    repo: Path,
) -> None:
    outcome = call(repo, "git_diff", base="HEAD")

    assert [(f["path"], f["status"]) for f in outcome.result.data["files"]] == [
        ("a.txt", "modified"),
        ("b.txt", "modified"),
        ("c.txt", "deleted"),
        ("new.txt", "added"),
    ]


def test_git_diff_marks_binary_files_and_cuts_long_diffs(repo: Path) -> None:
    write(repo, {"a.txt": "x\n" * 3000, "b.txt": BINARY})
    outcome = call(repo, "git_diff", max_chars=1000)

    text = outcome.result.output
    assert text.startswith("diff --git a/a.txt b/a.txt\n")
    assert text.endswith("; narrow it with `paths`]\n")
    assert "[diff cut: " in text
    assert outcome.result.data["truncated"] is True
    binary = call(repo, "git_diff", paths=["b.txt"]).result.output
    assert binary == (
        f"diff --git a/b.txt b/b.txt\nindex {short(B_NOW)}..{short(BINARY)} 100644\n"
        "Binary files a/b.txt and b/b.txt differ\n"
    )


def test_git_diff_with_nothing_changed_says_so(project: Path) -> None:
    init(project)
    commit(project, "init", {"f": "f\n"})

    assert output(project, "git_diff") == "(no differences)"


def test_git_diff_arguments_are_checked_before_anything_runs(repo: Path) -> None:
    escaping = call(repo, "git_diff", paths=["../outside"])
    lonely = call(repo, "git_diff", target="HEAD")
    unknown = call(repo, "git_diff", base="no-such-branch")

    assert isinstance(escaping.error, InvalidArguments)
    assert escaping.error.problems == [
        ("paths", "must stay inside the workspace (no ..): '../outside'")
    ]
    assert isinstance(lonely.error, InvalidArguments)
    assert lonely.error.problems == [("target", "needs `base`: the diff goes from base to target")]
    assert str(unknown.error) == "unknown revision 'no-such-branch'"


# --- git_log ---------------------------------------------------------------------------------


def test_git_log_lists_commits_newest_first(repo: Path) -> None:
    outcome = call(repo, "git_log")

    first, second = outcome.result.data["commits"][::-1]
    assert outcome.result.output == (
        f"{second['id'][:10]} 2023-11-14 Ada Lovelace: Second commit\n"
        f"{first['id'][:10]} 2023-11-14 Ada Lovelace: First commit"
    )
    assert second == {
        "id": second["id"],
        "author": "Ada Lovelace <ada@example.org>",
        "author_name": "Ada Lovelace",
        "date": "2023-11-14T23:13:20+00:00",
        "subject": "Second commit",
        "message": "Second commit\n\nWith a body\nof two lines.",
        "parents": [first["id"]],
    }


def test_git_log_shows_whole_messages_limits_and_filters(repo: Path) -> None:
    full = output(repo, "git_log", full=True, max_count=1)
    by_path = call(repo, "git_log", paths=["b.txt"]).result.data["commits"]
    ranged = call(repo, "git_log", revision="HEAD~1..HEAD").result.data["commits"]

    assert full.split("\n")[1:] == ["    With a body", "    of two lines."]
    assert [c["subject"] for c in by_path] == ["First commit"]
    assert [c["subject"] for c in ranged] == ["Second commit"]


def test_git_log_of_a_repository_without_commits(project: Path) -> None:
    init(project)

    assert output(project, "git_log") == "no commits yet"


# --- a hostile .git/config -------------------------------------------------------------------

HOSTILE_CONFIG = """
[core]
\tfsmonitor = sh -c 'touch {markers}/fsmonitor'
\tpager = sh -c 'touch {markers}/pager'
\thooksPath = {markers}/../hooks
\tworktree = {markers}/../elsewhere
\tsshCommand = sh -c 'touch {markers}/ssh'
\teditor = sh -c 'touch {markers}/editor'
[diff]
\texternal = sh -c 'touch {markers}/diff-external'
[diff "evil"]
\ttextconv = sh -c 'touch {markers}/textconv; cat'
\tcommand = sh -c 'touch {markers}/diff-command'
[filter "evil"]
\tclean = sh -c 'touch {markers}/filter-clean; cat'
\tsmudge = sh -c 'touch {markers}/filter-smudge; cat'
\tprocess = sh -c 'touch {markers}/filter-process'
\trequired = true
[gpg]
\tprogram = sh -c 'touch {markers}/gpg'
[credential]
\thelper = !sh -c 'touch {markers}/credential'
"""


@pytest.fixture
def hostile(repo: Path, tmp_path: Path) -> tuple[Path, Path]:
    """The repo fixture with a .git/config full of commands that leave marker files, and a
    .gitattributes that sends every file through the hostile filter and diff drivers."""
    markers = tmp_path / "markers"
    markers.mkdir()
    with (repo / ".git" / "config").open("a") as config:
        config.write(HOSTILE_CONFIG.format(markers=markers))
    (repo / ".gitattributes").write_text("* filter=evil diff=evil\n")
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    for hook in ("post-index-change", "pre-commit", "post-checkout", "reference-transaction"):
        script = hooks / hook
        script.write_text(f"#!/bin/sh\ntouch {markers}/hook-{hook}\n")
        script.chmod(0o755)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "planted.txt").write_text("not in the workspace\n")
    return repo, markers


@needs_git
def test_the_hostile_config_does_run_code_under_real_git(hostile: tuple[Path, Path]) -> None:
    # The control: without it, a marker that never appears would prove nothing.
    repo, markers = hostile
    subprocess.run(["git", "status"], cwd=repo, capture_output=True, check=False)
    subprocess.run(["git", "diff"], cwd=repo, capture_output=True, check=False)

    assert sorted(os.listdir(markers)) != []


def test_git_tools_run_nothing_a_hostile_config_names(hostile: tuple[Path, Path]) -> None:
    repo, markers = hostile

    status = output(repo, "git_status")
    diffs = [
        output(repo, "git_diff"),
        output(repo, "git_diff", staged=True),
        output(repo, "git_diff", base="HEAD~1"),
        output(repo, "git_diff", base="HEAD~1", target="HEAD"),
    ]
    log = output(repo, "git_log", full=True, paths=["a.txt"])

    assert os.listdir(markers) == []
    # The work tree is the workspace, whatever core.worktree says.
    assert status == (
        "## main\n M a.txt\nM  b.txt\n D c.txt\nA  new.txt\n"
        "?? .gitattributes\n?? notes.md\n?? scratch/"
    )
    assert "planted.txt" not in "".join(diffs)
    assert diffs[0].startswith("diff --git a/a.txt b/a.txt\n")
    assert log.endswith("Ada Lovelace: First commit")


# --- the tools themselves --------------------------------------------------------------------


def test_every_git_tool_needs_no_permission_and_runs_in_the_runtime() -> None:
    assert [
        (
            tool.name,
            tool.permission(tool.parameters.model_validate({})),
            tool.environment,
            tool.category,
        )
        for tool in GIT_TOOLS
    ] == [
        (name, Permission.none(), EnvironmentTag.RUNTIME, Category.GIT)
        for name in ("git_status", "git_diff", "git_log")
    ]
    for tool in GIT_TOOLS:
        schema = tool.parameters.model_json_schema()
        assert all(prop.get("description") for prop in schema["properties"].values()), tool.name


# --- reads never leave the workspace ---------------------------------------------------------

SECRET = "the secret outside the workspace\n"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory beside the workspace holding a secret, laid out like the workspace's `src/`."""
    directory = tmp_path / "outside"
    (directory / "src").mkdir(parents=True)
    (directory / "src" / "a.txt").write_text(SECRET)
    (directory / "a.txt").write_text(SECRET)
    (directory / ".gitignore").write_text("*\n")
    return directory


@pytest.fixture
def tracked(project: Path) -> Path:
    """A repository tracking src/a.txt and top.txt, committed and clean."""
    init(project)
    commit(project, "First", {"src/a.txt": "inside\n", "top.txt": "top\n"})
    return project


def everything_the_git_tools_show(root: Path) -> str:
    calls = [
        ("git_status", {}),
        ("git_diff", {}),
        ("git_diff", {"staged": True}),
        ("git_diff", {"base": "HEAD"}),
        ("git_log", {"full": True}),
    ]
    shown = []
    for tool, args in calls:
        outcome = call(root, tool, **args)
        shown.append(outcome.result.output if outcome.result else str(outcome.error))
        shown.append(repr(outcome.result.data if outcome.result else None))
    return "\n".join(shown)


def test_a_tracked_directory_swapped_for_a_symlink_out_reveals_nothing(
    tracked: Path, outside: Path
) -> None:
    shutil.rmtree(tracked / "src")
    (tracked / "src").symlink_to(outside / "src")

    shown = everything_the_git_tools_show(tracked)

    assert "secret" not in shown
    # Like git: a path behind a symlinked directory is gone from the work tree.
    assert " D src/a.txt" in output(tracked, "git_status")
    assert "-inside" in output(tracked, "git_diff")


def test_a_tracked_file_replaced_by_a_symlink_out_shows_the_link_not_its_target(
    tracked: Path, outside: Path
) -> None:
    (tracked / "top.txt").unlink()
    (tracked / "top.txt").symlink_to(outside / "a.txt")

    diff = output(tracked, "git_diff")

    assert "secret" not in everything_the_git_tools_show(tracked)
    assert f"+{outside / 'a.txt'}" in diff  # the symlink's text, as git shows it
    assert "new mode 120000" in diff or "new file mode 120000" in diff or "120000" in diff


@pytest.mark.parametrize("target", ["/proc/self/root/etc", "/proc/self/cwd", "/"])
def test_magic_links_and_absolute_links_lead_nowhere(tracked: Path, target: str) -> None:
    shutil.rmtree(tracked / "src")
    (tracked / "src").symlink_to(target)

    shown = everything_the_git_tools_show(tracked)

    assert "root:" not in shown  # /etc/passwd's first line
    assert " D src/a.txt" in output(tracked, "git_status")


def test_gitignore_files_behind_or_as_symlinks_are_not_read(tracked: Path, outside: Path) -> None:
    # A .gitignore that is a symlink out would be read as patterns: its lines could be probed by
    # watching which files disappear from the untracked list.
    (tracked / ".gitignore").symlink_to(outside / ".gitignore")
    write(tracked, {"new.txt": "n\n"})

    status = output(tracked, "git_status")

    assert "?? new.txt" in status


def test_untracked_listing_does_not_descend_into_symlinked_directories(
    tracked: Path, outside: Path
) -> None:
    (tracked / "link").symlink_to(outside)

    status = call(tracked, "git_status")

    assert status.result.data["untracked"] == ["link"]


def test_a_directory_swapped_for_a_symlink_mid_call_is_never_followed(
    tracked: Path, outside: Path
) -> None:
    """A swapper flips `src` between the real directory and a symlink out while the tools
    read; whichever state each read meets, nothing outside is shown."""
    import threading

    (tracked / "src" / "a.txt").write_text("changed inside\n")
    (outside / "src" / "a.txt").write_text(SECRET * 50)
    real = tracked / "real-src"
    stop = threading.Event()

    def swap() -> None:
        while not stop.is_set():
            (tracked / "src").rename(real)
            (tracked / "src").symlink_to(outside / "src")
            (tracked / "src").unlink()
            real.rename(tracked / "src")

    swapper = threading.Thread(target=swap)
    swapper.start()
    try:
        shown = [everything_the_git_tools_show(tracked) for _ in range(20)]
    finally:
        stop.set()
        swapper.join()

    assert not any("secret" in text for text in shown)


def test_hard_links_inside_the_workspace_show_their_own_content(tracked: Path) -> None:
    # A sandbox can link only files already in the workspace (the mount and the WASI preopen
    # stop links from outside; see foundation.openbeneath): what a link shows was already visible.
    (tracked / "top.txt").unlink()
    os.link(tracked / "src" / "a.txt", tracked / "top.txt")

    assert "+inside" in output(tracked, "git_diff")


def test_git_tools_refuse_a_git_file_or_symlink_pointing_out_of_the_workspace(
    tracked: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    init(elsewhere)
    commit(elsewhere, "Secret history", {"secret.txt": SECRET})
    shutil.rmtree(tracked / ".git")
    (tracked / ".git").write_text(f"gitdir: {elsewhere / '.git'}\n")

    as_file = call(tracked, "git_log")
    (tracked / ".git").unlink()
    (tracked / ".git").symlink_to(elsewhere / ".git")
    as_link = call(tracked, "git_log")

    for outcome in (as_file, as_link):
        assert isinstance(outcome.error, ExecutionFailed)
        assert "Secret history" not in str(outcome.error)
    assert "not a directory" in str(as_file.error)
    assert "a symlink" in str(as_link.error)


# --- a repository that borrows objects from outside the workspace ------------------------------

SECRET = "codecoder-secret-in-another-repository"


@pytest.fixture
def borrowing(tmp_path: Path, project: Path) -> Path:
    """A workspace repository whose commits live in a repository outside it, reached through
    `objects/info/alternates` (what `git clone --shared` writes)."""
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    porcelain.init(str(outside))
    commit(outside, "secret", {"secret.txt": f"{SECRET}\n"})
    porcelain.init(str(project))
    info = project / ".git" / "objects" / "info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "alternates").write_text(f"{outside / '.git' / 'objects'}\n")
    head = (outside / ".git" / "refs" / "heads" / "master").read_text()
    (project / ".git" / "refs" / "heads" / "master").write_text(head)
    return project


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("git_log", {"full": True}),
        ("git_diff", {"base": "HEAD"}),
        ("git_diff", {"base": "HEAD", "path": "secret.txt"}),
        ("git_status", {}),
    ],
)
def test_objects_borrowed_from_outside_the_workspace_are_never_read(
    borrowing: Path, tool: str, args: dict[str, Any]
) -> None:
    with Runtime(borrowing, asker=never_ask, audit_log=None) as runtime:
        outcome = runtime.session().call(tool, args)
    shown = str(outcome.to_json())
    assert SECRET not in shown, shown


@pytest.mark.parametrize("link", ["objects", "objects/pack", "index", "loose object"])
def test_a_link_inside_git_to_another_repository_is_refused(
    tmp_path: Path, project: Path, link: str
) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    porcelain.init(str(outside))
    commit(outside, "secret", {"secret.txt": f"{SECRET}\n"})
    porcelain.init(str(project))
    head = (outside / ".git" / "refs" / "heads" / "master").read_text().strip()
    (project / ".git" / "refs" / "heads" / "master").write_text(head + "\n")
    theirs, ours = outside / ".git", project / ".git"
    if link == "loose object":
        for obj in (theirs / "objects").glob("??/*"):
            (ours / "objects" / obj.parent.name).mkdir(exist_ok=True)
            (ours / "objects" / obj.parent.name / obj.name).symlink_to(obj)
    else:
        target = ours / link
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
        target.symlink_to(theirs / link if (theirs / link).exists() else theirs / "objects")
    with Runtime(project, asker=never_ask, audit_log=None) as runtime:
        outcomes = [
            runtime.session().call(tool, args)
            for tool, args in (("git_log", {"full": True}), ("git_diff", {"base": "HEAD"}))
        ]
    for outcome in outcomes:
        assert SECRET not in str(outcome.to_json())
        assert isinstance(outcome.error, ExecutionFailed), outcome.to_json()
