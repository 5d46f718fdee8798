"""What the command line asks and says: a one-shot call offers only what differs, a question is
wrapped between words at the terminal's width and shows a diff in colour, a refusal nobody
could answer names the `--allow` that would allow it, and messages say what things are. Real
terminals (pexpect), real processes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pexpect
import pytest

from tests.conftest import write_config

_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _env(**more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "NO_COLOR", "COLUMNS")}
    return {**env, "TERM": "xterm", **more}


def spawn(project: Path, *args: str, columns: int = 200, **env: str) -> pexpect.spawn:
    return pexpect.spawn(
        sys.executable,
        ["-m", "codecoder", *args],
        cwd=str(project),
        env=_env(**env),
        encoding="utf-8",
        timeout=60,
        dimensions=(60, columns),
    )


def run(project: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "codecoder", *args],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(**env),
    )


def _question(child: pexpect.spawn) -> str:
    child.expect("permission required")
    child.expect(r"choice \[[a-z/]+\]: ")
    return str(child.before) + str(child.after)


def test_a_one_shot_call_offers_no_session_scope(project: Path) -> None:
    """`codecoder call` makes one call: "AlwaysThisSession" would mean exactly Once."""
    write_config(project, {"environments": {"run_command": "@shell"}})
    child = spawn(project, "call", "run_command", "--", "echo hi")
    shown = _question(child)
    assert "choice [o/d]: " in shown
    assert "[s]" not in shown and "AlwaysThisSession  " not in shown
    child.sendline("o")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    # An explicit --answer session still works, as the file's name for a scope.
    said = run(project, "call", "run_command", "--answer", "session", "--json", "--", "echo hi")
    assert json.loads(said.stdout)["decision"]["source"] == "session"


def test_a_question_at_80_columns_breaks_between_words(project: Path) -> None:
    child = spawn(project, "call", "run_command", "--", "make -v", columns=80)
    shown = _ESCAPE.sub("", _question(child)).replace("\r\n", "\n")
    child.sendline("d")
    child.expect(pexpect.EOF)
    lines = shown.splitlines()
    # Only a word longer than a line (the project file's path here) is kept whole, alone.
    too_long = [line for line in lines if len(line) > 80]
    assert all(len(line.split()) == 1 for line in too_long), too_long
    # The widest choice's text ran past 80 columns: it continues, indented, on the next line,
    # broken where a space was.
    at = next(i for i, line in enumerate(lines) if "[c] AlwaysThisProject" in line)
    first, after = lines[at], lines[at + 1]
    # (indented under the widest label, AlwaysEveryProject)
    assert after.startswith(" " * 26) and not after.startswith(" " * 27)
    joined = first.rstrip() + " " + after.strip()
    assert "any command in @bwrap, compound lines included (never one that needs" in joined


def _edit_question(project: Path, **env: str) -> str:
    (project / "app.py").write_text("old line\nsame\n")
    content = json.dumps({"path": "app.py", "content": "new line\nsame\n"})
    child = spawn(project, "call", "write_file", content, **env)
    shown = _question(child)
    child.sendline("d")
    child.expect(pexpect.EOF)
    return shown


def test_a_diff_in_a_question_is_in_colour_unless_no_color(project: Path) -> None:
    coloured = _edit_question(project)
    assert "\x1b[31m-old line\x1b[0m" in coloured
    assert "\x1b[32m+new line\x1b[0m" in coloured
    plain = _edit_question(project, NO_COLOR="1")
    assert "-old line" in plain and "+new line" in plain
    assert "\x1b[3" not in plain


@pytest.mark.parametrize(
    ("how", "env"), [("--non-interactive", {}), ("CI=true", {"CI": "true"})], ids=["option", "ci"]
)
def test_a_refusal_nobody_could_answer_names_the_allow_that_would_run_it(
    project: Path, how: str, env: dict[str, str]
) -> None:
    flags = ["--non-interactive"] if how == "--non-interactive" else []
    refused = run(project, "call", "run_command", *flags, "--", "make -v", **env)
    assert refused.returncode == 3
    assert refused.stderr.splitlines()[-1] == (
        f"codecoder: nobody can answer here ({how}); to allow it for a run, add --allow "
        "run_command:make"
    )
    allowed = run(project, "call", "run_command", *flags, "--allow", "run_command:make", "--",
                  "make -v", **env)  # fmt: skip
    assert allowed.returncode == 0, allowed.stderr
    as_json = run(project, "call", "run_command", *flags, "--json", "--", "make -v", **env)
    assert json.loads(as_json.stdout)["error"]["allow"] == "run_command:make"


def test_a_project_that_is_a_file_is_said_to_be_one(project: Path) -> None:
    (project / "README.md").write_text("hello\n")
    said = run(project, "check", "--project", "README.md")
    assert (said.returncode, said.stderr) == (
        2,
        f"codecoder: {project / 'README.md'} is a file, not a directory: a project is a "
        f"directory (its directory is {project})\n",
    )


def test_a_hand_edit_that_widens_says_once_what_changed(project: Path) -> None:
    grants = {f"run_command:tool{n}": "AlwaysThisProject" for n in range(6)}
    write_config(project, {"allowlist": grants}, trusted=False)
    assert run(project, "trust", "--yes").returncode == 0  # as a person trusts it
    grants["run_command:cargo"] = "AlwaysThisProject"
    (project / "codecoder.json").write_text(json.dumps({"allowlist": grants}, indent=2) + "\n")
    said = run(project, "call", "read_file", "codecoder.json").stderr.splitlines()
    assert said[:2] == [
        f"{project / 'codecoder.json'}: warning: [untrusted_edit] this codecoder.json changed "
        "since you trusted it: it now widens what you have not trusted (line 9: grants "
        "run_command:cargo for the project), so until you trust it again (`codecoder trust`), "
        "the 6 widening(s) you trusted before are ignored too; an edit that only narrows keeps "
        "the trust",
        f"{project / 'codecoder.json'}:9:5: warning: [untrusted] grants run_command:cargo for "
        "the project (new since you trusted this file): ignored, because this codecoder.json "
        "is not trusted (review it with `codecoder trust`)",
    ]
    assert len(said) == 3  # and the one line that says the file is not trusted
    listed = json.loads(run(project, "allowlist", "list", "--json").stdout)["allowlist"]
    assert not any(entry["grants"] for entry in listed)  # the trusted ones wait too
    # An edit that only narrows keeps the trust.
    del grants["run_command:cargo"], grants["run_command:tool0"]
    (project / "codecoder.json").write_text(json.dumps({"allowlist": grants}, indent=2) + "\n")
    assert run(project, "call", "read_file", "codecoder.json").stderr == ""
