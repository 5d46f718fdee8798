"""The file tools, run for real: fileops.wasm in wasmtime on files in a temporary workspace.

Each tool is called the way the dispatcher calls it: arguments validated by its parameter
model, `permission()` computed from them, then `execute(args, ctx)`.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from codecoder.environments.landlock import LandlockEnvironment, unavailable_reason
from codecoder.environments.wasm.environment import WasmEnvironment
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.errors import ExecutionFailed, SandboxUnavailable
from codecoder.permissions.keys import GrantLevel, KeyStyle, Permission, PermissionKey
from codecoder.tools.base import Category, ToolContext, ToolResult
from codecoder.tools.files import FILE_TOOLS, limits, run_wasm_preopens

TOOLS = {tool.name: tool for tool in FILE_TOOLS}
FILEOPS = Path(__file__).resolve().parents[3] / "sandboxes" / "fileops" / "fileops.wasm"
SECRET = "top secret, outside the workspace\n"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WasmEnvironment]:
    environment = WasmEnvironment(cache_dir=tmp_path_factory.mktemp("cache") / "wasm")
    yield environment
    environment.close()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "secret.txt").write_text(SECRET)
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("import os\n\ndef main():\n    print('hi')\n")
    (root / "README.md").write_text("# Title\nhello world\n")
    return root


@pytest.fixture
def ctx(workspace: Path, env: WasmEnvironment) -> ToolContext:
    return ToolContext(
        workspace=workspace, environment=env, environment_tag=EnvironmentTag.WASM, session_id="t"
    )


@pytest.fixture(scope="module")
def landlock() -> Iterator[LandlockEnvironment]:
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(f"@landlock is unavailable here: {reason}")
    environment = LandlockEnvironment()
    yield environment
    environment.close()


def _read_ctx(request: pytest.FixtureRequest, workspace: Path, **extra: Any) -> ToolContext:
    tag = EnvironmentTag(getattr(request, "param", None) or request.getfixturevalue("backend"))
    env = request.getfixturevalue("landlock" if tag is EnvironmentTag.LANDLOCK else "env")
    return ToolContext(
        workspace=workspace, environment=env, environment_tag=tag, session_id="t", extra=extra
    )


READ_BACKENDS = ["@landlock", "@wasm"]


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=READ_BACKENDS)
def rctx(request: pytest.FixtureRequest, workspace: Path) -> ToolContext:
    """A context for the read tools, once on each of their environments: they must agree."""
    return _read_ctx(request, workspace)


def validate(tool: str, args: dict[str, Any]) -> Any:
    return TOOLS[tool].parameters.model_validate(args)


def call(tool: str, ctx: ToolContext, **args: Any) -> ToolResult:
    return TOOLS[tool].execute(validate(tool, args), ctx)


def key(tool: str, **args: Any) -> PermissionKey | None:
    return TOOLS[tool].permission(validate(tool, args)).key


# -- the contract with the registry ---------------------------------------------------------


def test_the_file_tools_are_the_ten_of_the_spec_reads_in_landlock_the_rest_in_wasm() -> None:
    assert {t.name: (t.category, t.asks) for t in FILE_TOOLS} == {
        "read_file": (Category.READ, False),
        "list_dir": (Category.READ, False),
        "glob": (Category.READ, False),
        "grep": (Category.READ, False),
        "diff": (Category.READ, False),
        "write_file": (Category.WRITE, True),
        "edit_file": (Category.WRITE, True),
        "move_file": (Category.WRITE, True),
        "delete_file": (Category.WRITE, True),
        "run_wasm": (Category.EXECUTE, True),
    }
    read = {"read_file", "list_dir", "glob", "grep", "diff"}
    assert {t.environment for t in FILE_TOOLS if t.name in read} == {EnvironmentTag.LANDLOCK}
    assert {t.environment for t in FILE_TOOLS if t.name not in read} == {EnvironmentTag.WASM}


def test_every_parameter_is_described_for_the_model() -> None:
    for tool in FILE_TOOLS:
        schema = tool.definition().input_schema
        for name, field in schema["properties"].items():
            assert field.get("description"), f"{tool.name}.{name} has no description"


# -- permissions ----------------------------------------------------------------------------


def test_read_tools_never_ask() -> None:
    assert TOOLS["read_file"].permission(validate("read_file", {"path": "a"})) == Permission.none()
    assert TOOLS["list_dir"].permission(validate("list_dir", {})) == Permission.none()
    assert TOOLS["glob"].permission(validate("glob", {"pattern": "**"})) == Permission.none()
    assert TOOLS["grep"].permission(validate("grep", {"pattern": "x"})) == Permission.none()
    assert (
        TOOLS["diff"].permission(validate("diff", {"path": "a", "content": ""}))
        == Permission.none()
    )


NEVER_PROTECTED = (
    "never a protected path (codecoder.json, .codecoder/, any .git or .gitmodules, the agents' "
    "settings such as .claude/): those are asked every time"
)


def test_write_file_is_keyed_by_the_normalised_workspace_path() -> None:
    assert key("write_file", path="./src//app.py", content="") == PermissionKey(
        tool="write_file",
        action="src/app.py",
        raw="write_file:src/app.py",
        style=KeyStyle.PATH,
        protected=False,
        subject="src/app.py",
        levels=(
            GrantLevel("write_file:src/app.py", "only src/app.py"),
            GrantLevel(
                "write_file:src/**", f"any file under src/, at any depth; {NEVER_PROTECTED}"
            ),
        ),
        widest=GrantLevel(
            "write_file:**",
            "any file in this workspace, written or edited (write_file and edit_file), at any "
            f"depth; {NEVER_PROTECTED}",
            also=("edit_file:**",),
        ),
    )


@pytest.mark.parametrize("tool", ["write_file", "edit_file", "delete_file"])
def test_a_write_key_offers_the_file_its_directory_and_any_file_of_its_own_tool(tool: str) -> None:
    args = {"content": ""} if tool == "write_file" else {}
    if tool == "edit_file":
        args = {"old_string": "a", "new_string": "b"}
    deep = key(tool, path="src/report/render.py", **args)
    top = key(tool, path="README.md", **args)
    assert deep is not None and top is not None
    assert [level.entry for level in (*deep.grant_levels, deep.widest)] == [
        f"{tool}:src/report/render.py",
        f"{tool}:src/report/**",
        f"{tool}:**",
    ]
    # At the top, the directory is the workspace: only the file and any file.
    assert [level.entry for level in (*top.grant_levels, top.widest)] == [
        f"{tool}:README.md",
        f"{tool}:**",
    ]


def test_a_path_with_glob_characters_is_granted_as_that_path_only() -> None:
    found = key("write_file", path="docs/**/a*b?[1].md", content="")
    assert found is not None
    assert [level.entry for level in found.grant_levels] == [
        "write_file:docs/[*][*]/a[*]b[?][[]1[]].md",
        "write_file:docs/[*][*]/**",
    ]


def test_a_path_holding_the_move_arrow_is_granted_as_that_file_not_as_a_move() -> None:
    found = key("write_file", path="notes/a -> b.txt", content="")
    assert found is not None
    assert [level.entry for level in found.grant_levels] == [
        "write_file:notes/a -[>] b.txt",
        "write_file:notes/**",
    ]
    assert found.grant_levels[0].covers == "only notes/a -> b.txt"


def test_run_wasm_and_move_file_keep_their_one_narrow_entry() -> None:
    for found in (
        key("run_wasm", path="tools/fmt.wasm"),
        key("move_file", source="src/a.py", destination="src/b.py"),
    ):
        assert found is not None
        assert (len(found.grant_levels), found.widest) == (1, None)


@pytest.mark.parametrize(
    "path",
    [
        "codecoder.json",
        ".codecoder/y",
        ".codecoder",
        ".git/hooks/x",
        ".git/config",
        ".GIT/hooks/pre-commit",
        "CodeCoder.JSON",
        "vendor/lib/.git/hooks/post-checkout",
        # At every depth: a nested repository's config, a `gitdir:` file, submodule config,
        # and the spellings lenient file systems (and git) take for them.
        "sub/.git/config",
        "sub/.git",
        ".gitmodules",
        "vendor/.gitmodules",
        "sub/.Git./config",
        "sub/.g\u200cit/hooks/pre-commit",
        "sub/GIT~1/config",
    ],
)
def test_keys_for_protected_paths_are_marked_protected(path: str) -> None:
    for tool, args in [
        ("write_file", {"path": path, "content": ""}),
        ("edit_file", {"path": path, "old_string": "a", "new_string": "b"}),
        ("delete_file", {"path": path}),
        ("move_file", {"source": "x", "destination": path}),
        ("move_file", {"source": path, "destination": "x"}),
    ]:
        found = key(tool, **args)
        assert found is not None and found.protected, (tool, args)


@pytest.mark.parametrize(
    "path",
    [
        ".gitignore",
        ".github/workflows/ci.yml",
        "src/codecoder.json",
        "codecoder.jsonx",
        ".gitattributes",
        "src/.gitmodules.bak",
        "my.git/x",
    ],
)
def test_near_misses_of_protected_paths_are_not_protected(path: str) -> None:
    found = key("write_file", path=path, content="")
    assert found is not None and not found.protected


def test_move_file_is_keyed_by_its_source_and_destination() -> None:
    found = key("move_file", source="src/a.py", destination="tests/a.py")
    assert found is not None
    assert (found.raw, found.subject, found.paths, found.protected) == (
        "move_file:src/a.py -> tests/a.py",
        "src/a.py -> tests/a.py",
        ("src/a.py", "tests/a.py"),
        False,
    )


def test_run_wasm_is_keyed_by_its_module_path() -> None:
    found = key("run_wasm", path="tools/./fmt.wasm", args=["-v"])
    assert found is not None
    assert (found.raw, found.style, found.subject) == (
        "run_wasm:tools/fmt.wasm",
        KeyStyle.PATH,
        "tools/fmt.wasm -v",
    )


# -- validation -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path", ["/etc/passwd", "../x", "a/../../x", "src/../../etc/passwd", "~/.ssh/id_rsa", "", "."]
)
def test_paths_outside_the_workspace_are_refused_before_anything_runs(path: str) -> None:
    for tool, args in [
        ("read_file", {"path": path}),
        ("write_file", {"path": path, "content": "x"}),
        ("delete_file", {"path": path}),
        ("diff", {"path": path, "content": ""}),
    ]:
        with pytest.raises(ValidationError) as raised:
            validate(tool, args)
        assert raised.value.errors()[0]["loc"] == ("path",), (tool, path)


def test_the_failing_field_is_named() -> None:
    with pytest.raises(ValidationError) as moved:
        validate("move_file", {"source": "a", "destination": "../b"})
    with pytest.raises(ValidationError) as grepped:
        validate("grep", {"pattern": "(unclosed"})
    with pytest.raises(ValidationError) as globbed:
        validate("glob", {"pattern": "/etc/*"})

    assert moved.value.errors()[0]["loc"] == ("destination",)
    assert grepped.value.errors()[0]["loc"] == ("pattern",)
    assert "not a valid regular expression" in str(grepped.value)
    assert globbed.value.errors()[0]["loc"] == ("pattern",)


def test_arguments_that_cannot_mean_anything_are_refused() -> None:
    with pytest.raises(ValidationError, match="exactly one of other_path and content"):
        validate("diff", {"path": "a", "other_path": "b", "content": "c"})
    with pytest.raises(ValidationError, match="nothing would change"):
        validate("edit_file", {"path": "a", "old_string": "x", "new_string": "x"})
    with pytest.raises(ValidationError, match=r"not a \.wasm or \.wat module"):
        validate("run_wasm", {"path": "script.sh"})
    with pytest.raises(ValidationError):
        validate("read_file", {"path": "a", "bogus": 1})


# -- read_file ------------------------------------------------------------------------------


def test_read_file_numbers_lines_like_cat_n(rctx: ToolContext) -> None:
    result = call("read_file", rctx, path="src/app.py")

    assert result.output == (
        "     1\timport os\n     2\t\n     3\tdef main():\n     4\t    print('hi')\n"
    )
    assert result.data == {
        "path": "src/app.py",
        "size": 39,
        "binary": False,
        "lines": 4,
        "start": 1,
        "end": 4,
    }


def test_read_file_pages_by_lines(rctx: ToolContext, workspace: Path) -> None:
    (workspace / "long.txt").write_text("".join(f"line {i}\n" for i in range(1, 101)))

    result = call("read_file", rctx, path="long.txt", offset=10, limit=3)

    assert result.output == (
        "    10\tline 10\n    11\tline 11\n    12\tline 12\n"
        "[lines 10-12 of 100; continue with offset=13]\n"
    )


def test_read_file_reports_a_binary_file_instead_of_dumping_it(
    rctx: ToolContext, workspace: Path
) -> None:
    (workspace / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR" + bytes(range(256)))

    result = call("read_file", rctx, path="image.png")

    assert result.output == "image.png is a binary file (272 bytes); not shown"
    assert result.data["binary"] is True


def test_read_file_of_a_missing_file_fails_clearly(rctx: ToolContext) -> None:
    with pytest.raises(ExecutionFailed, match=r"read nope\.txt: no such file or directory"):
        call("read_file", rctx, path="nope.txt")


@pytest.mark.parametrize(
    "target", ["/etc/passwd", "/proc/self/environ", "../secret.txt", "{secret}"]
)
def test_a_symlink_pointing_outside_the_workspace_cannot_be_read(
    rctx: ToolContext, workspace: Path, target: str
) -> None:
    (workspace / "link").symlink_to(target.format(secret=workspace.parent / "secret.txt"))

    with pytest.raises(ExecutionFailed, match="outside the workspace") as raised:
        call("read_file", rctx, path="link")
    assert "secret" not in str(raised.value) and "root:" not in str(raised.value)


def test_a_directory_symlink_pointing_outside_leads_nowhere(
    rctx: ToolContext, workspace: Path
) -> None:
    (workspace / "up").symlink_to("..")

    with pytest.raises(ExecutionFailed, match="outside the workspace"):
        call("read_file", rctx, path="up/secret.txt")
    with pytest.raises(ExecutionFailed, match="outside the workspace"):
        call("list_dir", rctx, path="up")


def test_a_symlink_inside_the_workspace_is_followed_for_reading(
    rctx: ToolContext, workspace: Path
) -> None:
    (workspace / "alias.py").symlink_to("src/app.py")

    assert "import os" in call("read_file", rctx, path="alias.py").output


def test_a_symlink_swapped_during_reads_never_reveals_the_outside(
    rctx: ToolContext, workspace: Path
) -> None:
    (workspace / "inside.txt").write_text("harmless\n")
    link = workspace / "flip"
    link.symlink_to("inside.txt")
    outside = str(workspace.parent / "secret.txt")
    stop = threading.Event()

    def flip() -> None:
        while not stop.is_set():
            for target in (outside, "inside.txt"):
                tmp = workspace / ".flip.tmp"
                tmp.symlink_to(target)
                os.replace(tmp, link)

    flipper = threading.Thread(target=flip)
    flipper.start()
    seen = set()
    try:
        for _ in range(150):
            try:
                seen.add(call("read_file", rctx, path="flip").output)
            except ExecutionFailed as exc:
                seen.add(f"refused: {'outside the workspace' in str(exc)}")
    finally:
        stop.set()
        flipper.join()

    assert not any("top secret" in text for text in seen)
    assert "refused: False" not in seen


@pytest.mark.parametrize("backend", READ_BACKENDS, indirect=["backend"])
def test_extra_read_roots_are_read_only_and_named(
    backend: str, request: pytest.FixtureRequest, workspace: Path, tmp_path: Path
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "guide.md").write_text("read me\n")
    ctx = _read_ctx(request, workspace, read_roots={"docs": docs})

    assert call("read_file", ctx, path="@docs/guide.md").output == "     1\tread me\n"
    assert call("glob", ctx, pattern="@docs/*.md").output == "@docs/guide.md\n"
    (docs / "out").symlink_to(tmp_path / "secret.txt")
    with pytest.raises(ExecutionFailed, match="outside the workspace"):
        call("read_file", ctx, path="@docs/out")
    with pytest.raises(ValidationError, match="read-only"):
        call("write_file", ctx, path="@docs/guide.md", content="changed\n")
    assert (docs / "guide.md").read_text() == "read me\n"
    assert not (workspace / "@docs").exists()


@pytest.mark.parametrize("backend", READ_BACKENDS, indirect=["backend"])
def test_a_read_root_swapped_for_a_symlink_after_it_was_checked_reads_nothing_outside(
    backend: str, request: pytest.FixtureRequest, workspace: Path, tmp_path: Path
) -> None:
    # A read root inside the workspace (which even an untrusted codecoder.json may name) is as
    # writable as the rest of it: a sandbox replaces it with a link out after the load.
    docs = workspace / "docs"
    docs.mkdir()
    (docs / "guide.md").write_text("read me\n")
    ctx = _read_ctx(request, workspace, read_roots={"docs": docs})
    assert call("read_file", ctx, path="@docs/guide.md").output == "     1\tread me\n"

    shutil.rmtree(docs)
    docs.symlink_to(tmp_path)  # holds secret.txt
    for tool, args in (
        ("read_file", {"path": "@docs/secret.txt"}),
        ("list_dir", {"path": "@docs"}),
        ("grep", {"pattern": "top secret", "path": "@docs"}),
        ("glob", {"pattern": "@docs/*.txt"}),
    ):
        with pytest.raises(ExecutionFailed, match=r"read root @docs .* is refused: it leads to"):
            call(tool, ctx, **args)
    # A search of the workspace: @landlock's worker would be confined to every root, so it
    # refuses; @wasm preopens the workspace alone, where the link leads nowhere.
    try:
        output = call("grep", ctx, pattern="top secret", include_ignored=True, hidden=True).output
    except ExecutionFailed as refused:
        assert "read root @docs" in str(refused)
    else:
        assert "top secret" not in output


def test_a_wasm_preopen_swapped_for_a_symlink_is_refused_not_followed(
    env: WasmEnvironment, workspace: Path, tmp_path: Path
) -> None:
    from codecoder.environments.wasm.request import Preopen, WasmRequest

    target = workspace / "src"
    shutil.rmtree(target)
    target.symlink_to(tmp_path)
    request = WasmRequest(
        module=FILEOPS,
        argv=("fileops", "read", "/workspace/secret.txt", "0", "100"),
        preopens=(Preopen(target, "/workspace", writable=False),),
    )
    with pytest.raises(ExecutionFailed, match=r"cannot preopen .*src: it leads to"):
        env.run(request)


def test_the_file_tools_need_the_wasm_environment(workspace: Path) -> None:
    from codecoder.environments.mock import MockEnvironment

    ctx = ToolContext(
        workspace=workspace,
        environment=MockEnvironment(lambda request: None),
        environment_tag=EnvironmentTag.WASM,
        session_id="t",
    )
    with pytest.raises(SandboxUnavailable, match="run in @landlock or @wasm"):
        call("read_file", ctx, path="README.md")
    with pytest.raises(SandboxUnavailable, match="run in @wasm"):
        call("write_file", ctx, path="README.md", content="")


# -- list_dir, glob, grep, diff -------------------------------------------------------------


def test_list_dir_shows_kinds_sizes_and_link_targets(rctx: ToolContext, workspace: Path) -> None:
    (workspace / "alias.py").symlink_to("src/app.py")
    (workspace / "passwd").symlink_to("/etc/passwd")

    result = call("list_dir", rctx)

    assert result.output == (
        "README.md  (20 bytes)\n"
        "alias.py -> src/app.py\n"
        "passwd -> (a target outside the workspace)\n"
        "src/\n"
    )


def test_glob_matches_recursively_and_skips_git(rctx: ToolContext, workspace: Path) -> None:
    (workspace / "src" / "pkg").mkdir()
    (workspace / "src" / "pkg" / "mod.py").write_text("")
    (workspace / ".git").mkdir()
    (workspace / ".git" / "hook.py").write_text("")
    (workspace / "setup.py").write_text("")

    assert call("glob", rctx, pattern="**/*.py").output == (
        "setup.py\nsrc/app.py\nsrc/pkg/mod.py\n"
    )
    assert call("glob", rctx, pattern="src/*").output == "src/app.py\n"  # files only
    assert call("glob", rctx, pattern="*.py", path="src").output == "src/app.py\n"
    assert call("glob", rctx, pattern="nothing/**").output == "no files match nothing/**\n"


def test_grep_prints_matches_with_line_numbers_and_context(
    rctx: ToolContext, workspace: Path
) -> None:
    (workspace / "src" / "b.py").write_text("one\ntwo\nMAIN\nthree\nfour\nfive\nmain()\n")

    result = call("grep", rctx, pattern="main", case_insensitive=True, context_before=1)

    assert result.output == (
        "src/app.py-2-\n"
        "src/app.py:3:def main():\n"
        "--\n"
        "src/b.py-2-two\n"
        "src/b.py:3:MAIN\n"
        "--\n"
        "src/b.py-6-five\n"
        "src/b.py:7:main()\n"
    )


def test_grep_filters_files_limits_results_and_skips_binaries(
    ctx: ToolContext, workspace: Path
) -> None:
    (workspace / "notes.txt").write_text("hello\n" * 5)
    (workspace / "blob.bin").write_bytes(b"hello\0world")

    only_md = call("grep", ctx, pattern="hello", glob="*.md")
    limited = call("grep", ctx, pattern="hello", max_results=2)
    files = call("grep", ctx, pattern="hello", files_with_matches=True)

    assert only_md.output == "README.md:2:hello world\n"
    assert limited.output == (
        "README.md:2:hello world\nnotes.txt:1:hello\n[4 more matching lines not shown "
        "(max_results 2); 1 binary files skipped]\n"
    )
    assert files.output == "README.md\nnotes.txt\n[1 binary files skipped]\n"


def test_grep_reads_files_in_several_batches_when_they_exceed_the_budget(
    ctx: ToolContext, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(20):
        (workspace / f"f{i:02}.txt").write_text(f"hit {i}\n" + "filler\n" * 20)
    whole = call("grep", ctx, pattern="hit").output

    monkeypatch.setattr(limits, "CAT_BATCH_BYTES", 300)  # a few files per fileops call
    batched = call("grep", ctx, pattern="hit").output

    assert batched == whole
    assert whole == "".join(f"f{i:02}.txt:1:hit {i}\n" for i in range(20))


def test_grep_skips_files_over_its_size_limit_and_says_so(
    ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits, "GREP_MAX_FILE_BYTES", 30)

    result = call("grep", ctx, pattern="o")

    assert result.output == "README.md:2:hello world\n[1 files over 30 bytes skipped]\n"


def test_grep_searches_a_single_file(rctx: ToolContext) -> None:
    assert call("grep", rctx, pattern="print", path="src/app.py").output == (
        "src/app.py:4:    print('hi')\n"
    )


def test_diff_of_two_files_and_of_a_file_and_proposed_content(
    rctx: ToolContext, workspace: Path
) -> None:
    (workspace / "src" / "new.py").write_text("import os\n\ndef main():\n    print('bye')")

    files = call("diff", rctx, path="src/app.py", other_path="src/new.py")
    proposed = call("diff", rctx, path="README.md", content="# Title\nhello world\n")

    assert files.output == (
        "--- a/src/app.py\n+++ b/src/new.py\n@@ -1,4 +1,4 @@\n import os\n \n def main():\n"
        "-    print('hi')\n+    print('bye')\n\\ No newline at end of file\n"
    )
    assert proposed.output == "no differences\n"


# -- write tools ----------------------------------------------------------------------------


def test_write_file_creates_directories_and_replaces_content(
    ctx: ToolContext, workspace: Path
) -> None:
    created = call("write_file", ctx, path="a/b/c.txt", content="héllo\n")
    replaced = call("write_file", ctx, path="a/b/c.txt", content="bye\n")

    assert created.output == "created a/b/c.txt (7 bytes)\n"
    assert replaced.output == "replaced a/b/c.txt (4 bytes)\n"
    assert (workspace / "a" / "b" / "c.txt").read_text() == "bye\n"


def test_writes_never_follow_symlinks(ctx: ToolContext, workspace: Path) -> None:
    (workspace / ".git" / "hooks").mkdir(parents=True)
    hook = workspace / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\n")
    (workspace / "src" / "hook").symlink_to("../.git/hooks/pre-commit")
    (workspace / "src" / "hooks").symlink_to("../.git/hooks")
    (workspace / "out").symlink_to(workspace.parent)

    for path in ["src/hook", "src/hooks/pre-commit", "out/secret.txt", "out/new.txt"]:
        with pytest.raises(ExecutionFailed, match="symbolic link"):
            call("write_file", ctx, path=path, content="pwned\n")

    assert hook.read_text() == "#!/bin/sh\n"
    assert (workspace.parent / "secret.txt").read_text() == SECRET
    assert not (workspace.parent / "new.txt").exists()


def test_a_directory_swapped_for_a_symlink_during_writes_never_leads_outside(
    ctx: ToolContext, workspace: Path
) -> None:
    outside = workspace.parent / "outside"
    outside.mkdir()
    real, parked = workspace / "d", workspace / "d.parked"
    real.mkdir()
    stop = threading.Event()

    link = workspace / "d.link"

    def restore() -> None:
        while parked.exists():  # write_file may have made a new `d` meanwhile (it makes parents)
            if real.is_symlink():
                real.unlink()
            elif real.exists():
                shutil.rmtree(real, ignore_errors=True)
            with contextlib.suppress(OSError):
                os.rename(parked, real)

    def swap() -> None:
        while not stop.is_set():
            try:
                os.rename(real, parked)
                link.unlink(missing_ok=True)
                link.symlink_to(outside)
                os.replace(link, real)
                real.unlink()
            except OSError:
                pass
            restore()

    swapper = threading.Thread(target=swap)
    swapper.start()
    outcomes = set()
    try:
        for i in range(150):
            try:
                call("write_file", ctx, path=f"d/f{i}.txt", content="x")
                outcomes.add("written")
            except ExecutionFailed as exc:
                outcomes.add("refused: " + str(exc).split(": ", 1)[1])
    finally:
        stop.set()
        swapper.join()

    assert list(outside.iterdir()) == []
    assert "written" in outcomes


def test_a_file_with_other_hard_links_is_not_written(ctx: ToolContext, workspace: Path) -> None:
    os.link(workspace / "README.md", workspace / "src" / "readme-link")

    with pytest.raises(ExecutionFailed, match="hard links"):
        call("write_file", ctx, path="src/readme-link", content="pwned\n")
    assert (workspace / "README.md").read_text() == "# Title\nhello world\n"


def test_edit_file_replaces_one_exact_occurrence(ctx: ToolContext, workspace: Path) -> None:
    result = call("edit_file", ctx, path="src/app.py", old_string="'hi'", new_string="'hello'")

    assert result.output == "edited src/app.py: 1 replacement, first at line 4\n"
    assert (workspace / "src" / "app.py").read_text().endswith("print('hello')\n")


def test_edit_file_fails_clearly_and_changes_nothing(ctx: ToolContext, workspace: Path) -> None:
    (workspace / "twice.txt").write_text("x = 1\nx = 1\n")

    with pytest.raises(ExecutionFailed, match="old_string was not found"):
        call("edit_file", ctx, path="twice.txt", old_string="y", new_string="z")
    with pytest.raises(ExecutionFailed, match="occurs 2 times"):
        call("edit_file", ctx, path="twice.txt", old_string="x = 1", new_string="x = 2")
    assert (workspace / "twice.txt").read_text() == "x = 1\nx = 1\n"

    result = call(
        "edit_file", ctx, path="twice.txt", old_string="x = 1", new_string="x = 2", replace_all=True
    )
    assert result.data["replacements"] == 2
    assert (workspace / "twice.txt").read_text() == "x = 2\nx = 2\n"


def test_move_file_refuses_to_overwrite_unless_asked(ctx: ToolContext, workspace: Path) -> None:
    call("move_file", ctx, source="src/app.py", destination="lib/main.py")
    (workspace / "other.py").write_text("other\n")

    with pytest.raises(ExecutionFailed, match="already exists"):
        call("move_file", ctx, source="other.py", destination="lib/main.py")
    call("move_file", ctx, source="other.py", destination="lib/main.py", overwrite=True)

    assert not (workspace / "src" / "app.py").exists()
    assert (workspace / "lib" / "main.py").read_text() == "other\n"


def test_delete_file_removes_files_links_and_empty_directories_only(
    ctx: ToolContext, workspace: Path
) -> None:
    (workspace / "empty").mkdir()
    (workspace / "alias").symlink_to("README.md")

    call("delete_file", ctx, path="alias")
    call("delete_file", ctx, path="empty")
    with pytest.raises(ExecutionFailed, match="directory not empty"):
        call("delete_file", ctx, path="src")

    assert sorted(p.name for p in workspace.iterdir()) == ["README.md", "src"]


# -- run_wasm -------------------------------------------------------------------------------

HELLO = """(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "hello from wasm\\n")
  (func (export "_start")
    (i32.store (i32.const 0) (i32.const 16))
    (i32.store (i32.const 4) (i32.const 16))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))
    (call $exit (i32.const EXIT))))
"""


def write_attempts(attempts: list[tuple[int, str]]) -> str:
    """A module that opens each (preopened fd, path) for writing (create, truncate), following
    symlinks, and writes `pwned`; it exits with the number of opens that succeeded."""
    data, calls, offset = [], [], 1024
    for fd, path in attempts:
        data.append(f'(data (i32.const {offset}) "{path}")')
        calls.append(
            f"""(if (i32.eqz (call $open (i32.const {fd}) (i32.const 1) (i32.const {offset})
                  (i32.const {len(path)}) (i32.const 9) (i64.const 64) (i64.const 64)
                  (i32.const 0) (i32.const 8)))
              (then (local.set $ok (i32.add (local.get $ok) (i32.const 1)))
                (drop (call $write (i32.load (i32.const 8)) (i32.const 16) (i32.const 1)
                                   (i32.const 24)))))"""
        )
        offset += len(path) + 8
    return f"""(module
  (import "wasi_snapshot_preview1" "path_open"
    (func $open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (data (i32.const 512) "pwned")
  {" ".join(data)}
  (func (export "_start")
    (local $ok i32)
    (i32.store (i32.const 16) (i32.const 512))
    (i32.store (i32.const 20) (i32.const 5))
    {" ".join(calls)}
    (call $exit (local.get $ok))))
"""


@pytest.fixture
def protected(workspace: Path) -> dict[Path, str]:
    files = {
        workspace / "codecoder.json": '{"allowlist": {}}\n',
        workspace / ".codecoder" / "state.json": "{}\n",
        workspace / ".git" / "hooks" / "pre-commit": "#!/bin/sh\n",
        workspace / ".git" / "config": "[core]\n",
    }
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return files


def test_run_wasm_runs_a_workspace_module(ctx: ToolContext, workspace: Path) -> None:
    (workspace / "hello.wat").write_text(HELLO.replace("EXIT", "0"))
    (workspace / "fails.wat").write_text(HELLO.replace("EXIT", "3"))

    ok = call("run_wasm", ctx, path="hello.wat")
    failed = call("run_wasm", ctx, path="fails.wat")

    assert (ok.output, ok.is_error) == ("hello from wasm\n[exit code 0]", False)
    assert (failed.is_error, failed.data["exit_code"]) == (True, 3)


def test_a_read_only_run_wasm_module_cannot_write_anything(
    ctx: ToolContext, workspace: Path, protected: dict[Path, str]
) -> None:
    (workspace / "attack.wat").write_text(
        write_attempts([(3, "codecoder.json"), (3, "src/app.py"), (3, "new.txt")])
    )

    result = call("run_wasm", ctx, path="attack.wat")

    assert result.data["exit_code"] == 0
    assert not (workspace / "new.txt").exists()
    assert all(path.read_text() == text for path, text in protected.items())


def test_a_writable_run_wasm_module_cannot_write_protected_paths(
    ctx: ToolContext, workspace: Path, protected: dict[Path, str]
) -> None:
    root, src = 3, 4  # the preopened directories, in order
    attempts = [
        (root, "codecoder.json"),
        (root, ".codecoder/state.json"),
        (root, ".git/hooks/pre-commit"),
        (root, ".git/config"),
        (root, "README.md"),
        (root, "src/../codecoder.json"),
        (src, "../codecoder.json"),
        (src, "../.git/hooks/pre-commit"),
        (src, "../.codecoder/state.json"),
    ]
    preopens = run_wasm_preopens(workspace, writable=True)
    (workspace / "attack.wat").write_text(write_attempts(attempts))

    result = call("run_wasm", ctx, path="attack.wat", writable=True)

    assert [p.guest for p in preopens] == ["/workspace", "/workspace/src"]
    assert result.data["exit_code"] == 0
    assert all(path.read_text() == text for path, text in protected.items())


def test_a_writable_run_wasm_module_can_write_ordinary_directories(
    ctx: ToolContext, workspace: Path
) -> None:
    (workspace / "attack.wat").write_text(write_attempts([(4, "new.txt")]))

    result = call("run_wasm", ctx, path="attack.wat", writable=True)

    assert result.data["exit_code"] == 1
    assert (workspace / "src" / "new.txt").read_text() == "pwned"


def test_fileops_run_by_run_wasm_cannot_write_codecoder_json(
    ctx: ToolContext, workspace: Path, protected: dict[Path, str]
) -> None:
    shutil.copy(FILEOPS, workspace / "fileops.wasm")

    for path in ["/workspace/codecoder.json", "/workspace/src/../codecoder.json"]:
        result = call(
            "run_wasm", ctx, path="fileops.wasm", args=["write", path], stdin="{}", writable=True
        )
        assert result.is_error, path
    written = call(
        "run_wasm", ctx, path="fileops.wasm", args=["write", "/workspace/src/x"], writable=True
    )

    assert (written.is_error, (workspace / "src" / "x").exists()) == (False, True)
    assert all(path.read_text() == text for path, text in protected.items())


def test_run_wasm_refuses_a_module_linked_from_outside(ctx: ToolContext, workspace: Path) -> None:
    outside = workspace.parent / "evil.wat"
    outside.write_text(HELLO.replace("EXIT", "0"))
    (workspace / "evil.wat").symlink_to(outside)

    with pytest.raises(ExecutionFailed, match="outside the workspace"):
        call("run_wasm", ctx, path="evil.wat")


# -- glob and grep against a straightforward reference ---------------------------------------


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A generated tree of about two thousand files: text, binary, hidden, nested, and .git.

    Shared by the read-only tests below (writing it takes a while)."""
    root = tmp_path_factory.mktemp("tree")
    for i in range(2000):
        folder = root / f"pkg{i % 7}" / f"sub{i % 5}" / ("deep" if i % 3 else "")
        folder.mkdir(parents=True, exist_ok=True)
        suffix = [".py", ".txt", ".md", ".bin"][i % 4]
        name = folder / (f".hidden{i}{suffix}" if i % 50 == 0 else f"file{i}{suffix}")
        if suffix == ".bin":
            name.write_bytes(b"needle\0" * (i % 4 + 1))
        else:
            lines = [f"line {n} of file {i}" for n in range(i % 40)]
            if i % 9 == 0:
                lines.insert(i % 7, f"the Needle {i} is here")
            name.write_text("\n".join(lines) + ("\n" if i % 2 else ""))
    (root / ".git" / "objects").mkdir(parents=True)
    (root / ".git" / "objects" / "needle.py").write_text("needle\n")
    return root


@pytest.fixture(params=READ_BACKENDS)
def tree_ctx(request: pytest.FixtureRequest, tree: Path) -> ToolContext:
    return _read_ctx(request, tree)


def _hidden(rel: str) -> bool:
    return any(part.startswith(".") for part in rel.split("/"))


def _reference_glob(root: Path, pattern: str) -> list[str]:
    """Files only, hidden ones (and .git) skipped: what the glob tool lists by default."""
    found = []
    for path in root.glob(pattern):
        rel = path.relative_to(root).as_posix()
        if path.is_file() and not _hidden(rel):
            found.append(rel)
    return sorted(found)


def _reference_grep(root: Path, regex: re.Pattern[str]) -> list[tuple[str, int, str]]:
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in files:
            path = Path(folder, name)
            data = path.read_bytes()
            if b"\0" in data[:8000]:
                continue
            lines = data.decode("utf-8", errors="replace").split("\n")
            if lines[-1] == "":
                lines.pop()
            rel = path.relative_to(root).as_posix()
            if _hidden(rel):
                continue
            found += [(rel, n + 1, line) for n, line in enumerate(lines) if regex.search(line)]
    return sorted(found)


@pytest.mark.parametrize(
    "pattern", ["**/*.py", "pkg3/**/*", "pkg1/sub2/*", "**/deep/file1??.md", "*/sub[0-2]/*.txt"]
)
def test_glob_agrees_with_a_python_reference(
    tree_ctx: ToolContext, tree: Path, pattern: str
) -> None:
    result = call("glob", tree_ctx, pattern=pattern, max_results=100_000)

    assert result.output.splitlines() == _reference_glob(tree, pattern)


@pytest.mark.parametrize(
    ("pattern", "flags"), [("needle", re.IGNORECASE), (r"^line 3\d of", 0), (r"\d{3} is", 0)]
)
def test_grep_agrees_with_a_python_reference(
    tree_ctx: ToolContext, tree: Path, pattern: str, flags: int
) -> None:
    result = call(
        "grep",
        tree_ctx,
        pattern=pattern,
        case_insensitive=bool(flags),
        max_results=100_000,
    )

    found = [(m["path"], m["line"], m["text"]) for m in result.data["matches"]]
    assert found == _reference_grep(tree, re.compile(pattern, flags))
    assert found
