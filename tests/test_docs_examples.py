"""Every shell, JSON, TOML and Python example of README.md and docs/ is run or validated.

A page's shell blocks run in order, line by line, in one fresh git repository (one test per
page), as a reader following the page would; every other block is a test of its own (its id is
`page:line`). All run the real `codecoder` of this checkout, served by one decision server for
the module. A line's comment is checked where it claims an outcome (docs/writing-docs.md):

    # exit 3 ...            the exit code
    # says `TEXT` ...       TEXT is in what it printed (stdout and stderr)
    # asks ...              run on a terminal: it shows a question; answered Deny, it exits 3
    # never asks ...        run without a terminal it still exits 0: nothing needed a question
    # would ask ...         exit 4 (`codecoder decide`)
    # ... denied / refused  exit 3

A comment that uses an outcome word (asks, refused, denied, allowed, exit, fails) in any other
way fails the test: an outcome the test cannot check must not be claimed. A line without a
claim must exit 0. A `codecoder.json` block is validated against the schema and by
`codecoder check` (as written, then trusted); a `user config` block the same as the user's file.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pexpect
import pytest
from pydantic import ValidationError

from codecoder.config.schema import ProjectFileModel
from tests.conftest import trust_project
from tests.docsblocks import LANGUAGES, REPO, Block, blocks, every_block, the_one_above
from tests.runtime.interfaces.served import Machine

BLOCKS = every_block()
KINDS = ("", "no-run", "recipe", "set-up", "codecoder.json", "user config", "run", "output")
# Errors `codecoder check` reports of a trusted example because of this machine, not the file:
# an image the example names that this engine does not have, a directory it reads from.
MACHINE_DEPENDENT = {"docker_unavailable", "read_root_missing"}
TIMEOUT = 120
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _ids(blocks: list[Block]) -> list[str]:
    return [b.where for b in blocks]


def of(language: str, *kinds: str) -> list[Block]:
    return [b for b in BLOCKS if b.language == language and b.kind in kinds]


# --- what each block says it is -----------------------------------------------------------


@pytest.mark.parametrize("block", BLOCKS, ids=_ids(BLOCKS))
def test_every_block_says_what_it_is(block: Block) -> None:
    assert block.language in LANGUAGES, (
        f"{block.where}: ```{block.language}: use one of {LANGUAGES}"
    )
    assert block.kind in KINDS, f"{block.where}: unknown marker <!-- {block.marker} -->"
    if block.kind == "no-run":
        assert block.argument, f"{block.where}: no-run needs a reason"
    if block.language == "json":
        assert block.kind in ("no-run", "recipe", "codecoder.json", "user config"), (
            f"{block.where}: say what this JSON is (<!-- codecoder.json -->, <!-- user config -->, "
            "<!-- recipe: NAME --> or <!-- no-run: REASON -->)"
        )
    if block.kind in ("codecoder.json", "user config"):
        assert block.language == "json", f"{block.where}: a {block.kind} block is JSON"
    if block.kind == "run":
        assert block.language == "sh" and " above" in block.argument, block.where
    if block.kind == "output":
        assert block.language == "text" and block.argument, block.where


# --- shell ----------------------------------------------------------------------------------


@dataclass
class Claim:
    exit_code: int | None = 0
    says: list[str] = field(default_factory=list)
    asks: bool = False


_OUTCOME_WORDS = re.compile(
    r"\b(asks?|asked|refused?|refuses|denied|deny|denies|allowed|allows|exit|exits|fails?)\b", re.I
)


def claim(comment: str) -> Claim:
    """What a line's comment claims about its outcome (module docstring)."""
    result = Claim()
    recognised = False
    if m := re.search(r"\bexit (\d+)\b", comment):
        result.exit_code, recognised = int(m[1]), True
    result.says = re.findall(r"\bsays `([^`]+)`", comment)
    if re.search(r"\bnever asks\b", comment):
        recognised = True
    elif re.search(r"\bwould ask\b", comment):
        recognised = True
        if not m:
            result.exit_code = 4
    elif re.search(r"\basks\b", comment):
        result.asks, recognised = True, True
        if not m:
            result.exit_code = 3  # answered Deny
    if re.search(r"\b(denied|refused)\b", comment):
        recognised = True
        if not m:
            result.exit_code = 3
    if _OUTCOME_WORDS.search(comment) and not recognised:
        raise AssertionError(f"an outcome the test cannot check: # {comment}")
    return result


def split_comment(line: str) -> tuple[str, str]:
    """A shell line's command and its trailing comment (a `#` after a blank, outside quotes)."""
    quote = ""
    for i, char in enumerate(line):
        if quote:
            if char == quote:
                quote = ""
            elif char == "\\" and quote == '"':
                continue
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i].rstrip(), line[i + 1 :].strip()
    return line.rstrip(), ""


def commands(text: str) -> list[tuple[str, str]]:
    """The block's commands with their comments; a line ending in `\\` goes on."""
    found: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = pending + raw
        if line.rstrip().endswith("\\"):
            pending = line.rstrip()[:-1] + " "
            continue
        pending = ""
        command, comment = split_comment(line)
        if command.strip():
            found.append((command.strip(), comment))
    return found


def test_comments_are_read_as_claims() -> None:
    assert claim("exit 3: refused, not asked") == Claim(exit_code=3)
    assert claim("asks in the terminal") == Claim(exit_code=3, asks=True)
    assert claim("never asks: read-only") == Claim(exit_code=0)
    assert claim("exit 4: it would ask") == Claim(exit_code=4)
    assert claim("exit 1, says `[exit code 7]`") == Claim(exit_code=1, says=["[exit code 7]"])
    assert claim("the tools, their environment") == Claim()
    with pytest.raises(AssertionError, match="cannot check"):
        claim("the human is asked here")
    assert split_comment("""codecoder key -- 'a # b'   # says `x`""") == (
        "codecoder key -- 'a # b'",
        "says `x`",
    )


@pytest.fixture(scope="module")
def machine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One state directory for the module, so that one decision server serves every command
    (a command in its own process costs ten times as much); stopped at the end."""
    root = tmp_path_factory.mktemp("docs-machine")
    yield root
    Machine(root, root).stop()


@pytest.fixture
def project(tmp_path: Path, machine: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A git repository holding a committed README.md, as the examples assume; the module's
    state directory and decision server; a configuration directory and a home of the test's own
    (an example that installs an agent's hook writes `~/.claude/settings.json` there, never in
    the home of whoever runs the tests)."""
    monkeypatch.setenv("XDG_STATE_HOME", str(machine / "state"))
    (tmp_path / "home").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for variable in ("CLAUDE_CONFIG_DIR", "CODEX_HOME"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.delenv("CODECODER_DAEMON", raising=False)
    root = tmp_path / "project"
    root.mkdir()
    (root / "README.md").write_text("hello\n")
    git = ["git", "-c", "user.name=docs", "-c", "user.email=docs@example.invalid"]
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run([*git, "add", "README.md"], cwd=root, check=True)
    subprocess.run([*git, "commit", "-qm", "init"], cwd=root, check=True)
    return root


def environment() -> dict[str, str]:
    """This checkout's codecoder first on PATH, in a person's environment: CI=true (which CI
    sets) would make every question a refusal (`runtime.permissions.prompt`)."""
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("NO_COLOR", None)
    return env


def user_file() -> Path:
    return Path(os.environ["XDG_CONFIG_HOME"]) / "codecoder" / "config.json"


def run_line(command: str, expected: Claim, project: Path, where: str) -> None:
    if expected.asks:
        child = pexpect.spawn(
            "bash",
            ["-c", command],
            cwd=project,
            env=environment(),
            encoding="utf-8",
            timeout=TIMEOUT,
            dimensions=(50, 200),
        )
        if child.expect([r"\[d\] Deny", pexpect.EOF]) == 1:
            pytest.fail(
                f"{where}: `{command}` claims it asks, but no question came:\n{child.before}"
            )
        shown = child.before + child.after
        child.sendline("d")
        child.expect(pexpect.EOF)
        child.close()
        output, code = shown + (child.before or ""), child.exitstatus
    else:
        proc = subprocess.run(
            ["bash", "-c", command],
            cwd=project,
            env=environment(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        output, code = proc.stdout + proc.stderr, proc.returncode
    assert code == expected.exit_code, f"{where}: `{command}` exited {code}:\n{output}"
    for text in expected.says:
        assert text in output, f"{where}: `{command}` did not say {text!r}:\n{output}"


RUN_PAGES = sorted({b.page for b in of("sh", "", "run")})


@pytest.mark.parametrize("page", RUN_PAGES, ids=[str(p.relative_to(REPO)) for p in RUN_PAGES])
def test_shell_examples_do_what_their_comments_say(page: Path, project: Path) -> None:
    if shutil.which("bwrap") is None and not IN_CI:
        pytest.skip("the examples show commands contained in @bwrap: bubblewrap is not installed")
    for block in blocks(page):
        if block.language != "sh" or block.kind not in ("", "run"):
            continue
        if "codecoder.json" in block.argument:
            (project / "codecoder.json").write_text(the_one_above(block, "codecoder.json").text)
        if "user config" in block.argument:
            user_file().parent.mkdir(parents=True, exist_ok=True)
            user_file().write_text(the_one_above(block, "user config").text)
        for command, comment in commands(block.text):
            run_line(command, claim(comment), project, block.where)


SHOWN = of("sh", "no-run", "recipe", "set-up")


@pytest.mark.parametrize("block", SHOWN, ids=_ids(SHOWN))
def test_shell_examples_not_run_are_valid_shell(block: Block) -> None:
    proc = subprocess.run(["bash", "-n"], input=block.text, capture_output=True, text=True)
    assert proc.returncode == 0, f"{block.where}: {proc.stderr}"
    for _, comment in commands(block.text):
        claim(comment)  # no outcome is claimed that nothing checks


OUTPUTS = of("text", "output")
PLACEHOLDER = "/home/you/project"


@pytest.mark.parametrize("block", OUTPUTS, ids=_ids(OUTPUTS))
def test_output_shown_is_what_the_command_prints(block: Block, project: Path) -> None:
    """`<!-- output: COMMAND -->`: every line shown is a line COMMAND prints (a question is
    answered Deny), with /home/you/project standing for the project."""
    command = block.argument
    if "[d] Deny" in block.text:
        child = pexpect.spawn(
            "bash",
            ["-c", command],
            cwd=project,
            env=environment(),
            encoding="utf-8",
            timeout=TIMEOUT,
            dimensions=(50, 250),
        )
        child.expect(r"\[d\] Deny[^\n]*\n")
        printed = child.before + child.after
        child.sendline("d")
        child.expect(pexpect.EOF)
    else:
        printed = subprocess.run(
            ["bash", "-c", command],
            cwd=project,
            env=environment(),
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=TIMEOUT,
        ).stdout
    lines = {line.rstrip() for line in printed.replace("\r\n", "\n").splitlines()}
    for shown in block.text.splitlines():
        if shown.strip():
            expected = shown.replace(PLACEHOLDER, str(project)).rstrip()
            assert expected in lines, f"{block.where}: not printed: {shown!r}\n{printed}"


# --- JSON and TOML ----------------------------------------------------------------------------


JSON = of("json", "no-run", "recipe", "codecoder.json", "user config")


@pytest.mark.parametrize("block", JSON, ids=_ids(JSON))
def test_json_examples_parse(block: Block) -> None:
    json.loads(block.text)


TOML = of("toml", "no-run", "recipe")


@pytest.mark.parametrize("block", TOML, ids=_ids(TOML))
def test_toml_examples_parse(block: Block) -> None:
    tomllib.loads(block.text)


def check(project: Path) -> list[dict[str, object]]:
    proc = subprocess.run(
        ["codecoder", "check", "--json"],
        cwd=project,
        env=environment(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    report = json.loads(proc.stdout)
    errors: list[dict[str, object]] = [d for d in report["diagnostics"] if d["severity"] == "error"]
    return errors


PROJECT_FILES = of("json", "codecoder.json")


@pytest.mark.parametrize("block", PROJECT_FILES, ids=_ids(PROJECT_FILES))
def test_project_files_are_valid_as_written_and_trusted(block: Block, project: Path) -> None:
    try:
        ProjectFileModel.model_validate_json(block.text)
    except ValidationError as error:
        pytest.fail(f"{block.where}: not a valid codecoder.json:\n{error}")
    (project / "codecoder.json").write_text(block.text)
    assert check(project) == [], f"{block.where}: as written"
    trust_project(project)  # as `codecoder trust --yes` records it, without its own process
    errors = [e for e in check(project) if e["code"] not in MACHINE_DEPENDENT]
    assert errors == [], f"{block.where}: trusted"


USER_FILES = of("json", "user config")


@pytest.mark.parametrize("block", USER_FILES, ids=_ids(USER_FILES))
def test_user_files_are_valid(block: Block, project: Path) -> None:
    try:
        ProjectFileModel.model_validate_json(block.text)
    except ValidationError as error:
        pytest.fail(f"{block.where}: not a valid user file:\n{error}")
    user_file().parent.mkdir(parents=True, exist_ok=True)
    user_file().write_text(block.text)
    assert [e for e in check(project) if e["code"] not in MACHINE_DEPENDENT] == [], block.where


# --- Python ---------------------------------------------------------------------------------


PYTHON_SHOWN = of("python", "no-run")


@pytest.mark.parametrize("block", PYTHON_SHOWN, ids=_ids(PYTHON_SHOWN))
def test_python_examples_not_run_compile(block: Block) -> None:
    """A fragment shown, not run (it needs a model, or a variable of the page), is still Python:
    it compiles, `await` at its top level allowed."""
    import ast

    compile(block.text, block.where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)


PYTHON = of("python", "")


@pytest.mark.parametrize("block", PYTHON, ids=_ids(PYTHON))
def test_python_examples_run(block: Block, project: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", block.text],
        cwd=project,
        env=environment(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert proc.returncode == 0, f"{block.where}:\n{proc.stdout}{proc.stderr}"


# --- the command's own help ---------------------------------------------------------------


def test_the_examples_of_call_help_do_what_their_comments_say(project: Path) -> None:
    """`codecoder call --help` shows examples with claims in the docs' form: each is run here
    as the docs' examples are (its help once said `git status` asks; in @bwrap it does not)."""
    if shutil.which("bwrap") is None and not IN_CI:
        pytest.skip("the examples show commands contained in @bwrap: bubblewrap is not installed")
    shown = subprocess.run(
        ["codecoder", "call", "--help"],
        env=environment(),
        capture_output=True,
        text=True,
        check=True,
        timeout=TIMEOUT,
    ).stdout
    examples = shown.split("examples", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
    lines = [line.strip() for line in examples if line.strip().startswith("codecoder ")]
    assert len(lines) >= 5, shown
    (project / "args.json").write_text('{"path": "notes.txt", "content": "hello\\n"}')
    for line in lines:
        command, comment = split_comment(line)
        run_line(command, claim(comment), project, "codecoder call --help")
