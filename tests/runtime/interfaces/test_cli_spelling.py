"""One vocabulary, and what a person probably meant: scope names in both spellings everywhere,
`--allow` checked with "did you mean", the shorthand of `session` in `call`, clean errors.
Real processes, real files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from codecoder.foundation.decision import ANSWER_NAMES, Answer
from tests.conftest import write_config
from tests.runtime.interfaces.test_cli import as_json, codecoder


@pytest.mark.parametrize(
    ("spelling", "answer"),
    [
        ("once", Answer.ONCE),
        ("Once", Answer.ONCE),
        ("session", Answer.SESSION),
        ("AlwaysThisSession", Answer.SESSION),
        ("always-this-session", Answer.SESSION),
        ("project", Answer.PROJECT),
        ("AlwaysThisProject", Answer.PROJECT),
        ("ALWAYS_THIS_PROJECT", Answer.PROJECT),
        ("deny", Answer.DENY),
        ("Deny", Answer.DENY),
        ("session-program", Answer.SESSION_PROGRAM),
        ("project-program", Answer.PROJECT_PROGRAM),
    ],
)
def test_an_answer_is_read_in_either_vocabulary(spelling: str, answer: Answer) -> None:
    assert Answer.parse(spelling) is answer


def test_an_unknown_answer_names_the_closest_and_every_spelling() -> None:
    with pytest.raises(ValueError) as raised:
        Answer.parse("AlwaysThisSesion")
    assert str(raised.value) == (
        "'AlwaysThisSesion' is not an answer (did you mean AlwaysThisSession?); the answers are "
        + ", ".join(ANSWER_NAMES)
    )
    with pytest.raises(ValueError, match=r"^'forever' is not an answer; the answers are"):
        Answer.parse("forever")


def test_answer_takes_the_files_scope_names(project: Path) -> None:
    proc = codecoder(
        "call", "run_command", "touch a", "--answer", "AlwaysThisSession", "--json", project=project
    )
    assert proc.returncode == 0, proc.stderr
    decision = as_json(proc)["decision"]
    assert (decision["source"], decision["answer"]) == ("session", "session")
    typo = codecoder(
        "call", "run_command", "touch hi", "--answer", "AlwaysThisSesion", project=project
    )
    assert typo.returncode == 2
    assert typo.stderr.startswith(
        "codecoder call: argument --answer: 'AlwaysThisSesion' is not an answer (did you mean "
        "AlwaysThisSession?)"
    )


def test_replay_takes_the_files_scope_names_and_says_when_a_line_gave_no_answer(
    project: Path,
) -> None:
    lines = [
        {"tool": "run_command", "args": {"command": "touch one"}, "answer": "AlwaysThisSession"},
        {"tool": "run_command", "args": {"command": "touch two"}},
        {"tool": "run_command", "args": {"command": "mkdir three"}},
        {"tool": "run_command", "args": {"command": "mkdir four"}, "answer": "Sometimes"},
    ]
    script = project / "run.jsonl"
    script.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    proc = codecoder("replay", str(script), "--json", project=project)
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [(r.get("decision") or {}).get("source") for r in rows] == [
        "session",
        "session",
        "denied",
        None,
    ]
    assert rows[2]["error"]["message"] == (
        "run_command:mkdir was not allowed (line 3 of the replay gives no answer, and nothing "
        "granted it)"
    )
    assert rows[3]["error"]["message"].startswith("line 4: 'Sometimes' is not an answer")
    assert sorted(path.name for path in project.iterdir()) == ["one", "run.jsonl", "two"]
    assert proc.returncode == 2


@pytest.mark.parametrize(
    ("spelling", "meant"),
    [
        ("run_command:git status", "did you mean --allow 'run_command:git:status'?"),
        ("run_command: git:status", "did you mean --allow 'run_command:git:status'?"),
        ("Bash(git status)", "did you mean --allow 'run_command:git:status'?"),
        ("Bash(npm run test:*)", "did you mean --allow 'run_command:npm:run:test'?"),
        ("Bash(npm test *)", "did you mean --allow 'run_command:npm:test'?"),
        ("run_shell_command(ls -la)", "did you mean --allow 'run_command:ls'?"),
        ("Edit(./src/app.py)", "did you mean --allow 'edit_file:src/app.py'?"),
        ("Write(notes.txt)", "did you mean --allow 'write_file:notes.txt'?"),
        ("run_comand:git", "there is no tool named 'run_comand' (did you mean run_command?)"),
        ("run_command:gti", "did you mean --allow 'run_command:git'?"),
        ("run_command:git:status:short", "did you mean --allow 'run_command:git:status'?"),
        ("read_file:README.md", "read_file needs no permission (Permission::None)"),
    ],
)
def test_an_allow_that_can_never_match_is_a_usage_error_that_says_what_was_meant(
    project: Path, spelling: str, meant: str
) -> None:
    for command in (
        ("call", "run_command", "git status", "--non-interactive"),
        ("decide", "run_command", "git status"),
    ):
        proc = codecoder(*command, "--allow", spelling, "--json", project=project)
        assert proc.returncode == 2, (command, proc.stdout)
        error = as_json(proc)["error"]
        assert error["type"] == "UsageError"
        assert meant in error["message"]
        assert error["message"].startswith(f"--allow {spelling!r}")


def test_the_spelling_allow_suggests_is_one_that_works(project: Path) -> None:
    proc = codecoder(
        "call",
        "run_command",
        "echo ok",
        "--allow",
        "run_command:echo",
        "--non-interactive",
        project=project,
    )
    assert (proc.returncode, proc.stdout) == (0, "ok\n[exit code 0]\n")
    suggested = codecoder(
        "call", "run_command", "echo ok", "--allow", "Bash(echo ok)", project=project
    )
    assert "did you mean --allow 'run_command:echo'?" in suggested.stderr


def test_call_takes_the_shorthand_of_session(project: Path) -> None:
    (project / "README.md").write_text("hello\n")
    read = codecoder("call", "read_file", "README.md", project=project)
    assert (read.returncode, read.stdout) == (0, "     1\thello\n")
    words = codecoder(
        "call",
        "run_command",
        "--answer",
        "once",
        "--",
        "printf",
        "%s|",
        "a b",
        "c",
        project=project,
    )
    assert (words.returncode, words.stdout) == (0, "a b|c|\n[exit code 0]\n")
    group = codecoder(
        "call", "run_command", "{ echo grouped; }", "--answer", "once", project=project
    )
    assert (group.returncode, group.stdout) == (0, "grouped\n[exit code 0]\n")
    json_object = codecoder("call", "read_file", '{"path": "README.md"}', project=project)
    assert json_object.stdout == read.stdout


def test_broken_json_is_refused_with_where_it_broke_never_taken_as_a_name(project: Path) -> None:
    (project / '{"path": "README.md"').write_text("not this\n")
    proc = codecoder("call", "read_file", '{"path": "README.md"', project=project)
    assert proc.returncode == 2
    assert proc.stderr == (
        "codecoder: the arguments are not valid JSON: Expecting ',' delimiter at line 1 column 21\n"
    )
    assert proc.stdout == ""


def test_errors_name_codecoder_once_and_carry_no_library_prefix(project: Path) -> None:
    blank = codecoder("call", "run_command", "   ", "--answer", "once", project=project)
    bad_json = codecoder("call", "run_command", '{"command": }', project=project)
    typo = codecoder("cal", "run_command", project=project)
    tool = codecoder("call", "read_fil", "README.md", project=project)
    for proc in (blank, bad_json, typo, tool):
        assert proc.returncode == 2, proc.stderr
        assert "codecoder: codecoder" not in proc.stderr
        assert "Value error" not in proc.stderr and "(cli)" not in proc.stderr
    assert typo.stderr.startswith("codecoder: 'cal' is not a command (did you mean call?)")
    assert tool.stderr.startswith(
        "codecoder: error: unknown tool 'read_fil' (did you mean read_file?)"
    )
    empty = codecoder("call", "run_command", '{"command": " "}', project=project)
    assert empty.stderr == (
        "codecoder: error: invalid arguments for run_command: command: the command is blank\n"
    )


def test_decide_names_the_file_a_deny_rule_came_from(project: Path) -> None:
    user_file = Path(os.environ["XDG_CONFIG_HOME"]) / "codecoder" / "config.json"
    user_file.parent.mkdir(parents=True)
    user_file.write_text('{\n  "deny": ["run_command:rm"]\n}\n')
    write_config(project, {"deny": ["run_command:git:push"]})
    mine = codecoder("decide", "run_command", "rm -rf build", project=project)
    theirs = codecoder("decide", "run_command", "git push", project=project)
    assert (mine.returncode, theirs.returncode) == (3, 3)
    assert f"deny rule 'run_command:rm' of {user_file} line 2" in mine.stdout
    assert "deny rule 'run_command:git:push' of codecoder.json line 3" in theirs.stdout


def test_decide_shows_each_choice_with_what_it_records_and_how_long(project: Path) -> None:
    proc = codecoder("decide", "run_command", "cp a b", project=project)
    assert proc.returncode == 4
    written = f"lasts until revoked; written to {project.resolve() / 'codecoder.json'}"
    sandbox = (
        "run_command:** — any command in @bwrap, compound lines included (never one that needs "
        "the host, nor one touching a protected path; deny rules still refuse)"
    )
    assert proc.stdout.splitlines()[-6:] == [
        "  [o] Once: this call only; nothing is recorded",
        "  [s] AlwaysThisSession: run_command:cp — every simple `cp …` command, with any "
        "arguments (lasts until this session ends; kept in memory only (nothing is written))",
        "  [p] AlwaysThisProject: run_command:cp — every simple `cp …` command, with any "
        f"arguments ({written})",
        f"  [c] AlwaysThisProject: {sandbox} ({written})",
        f"  [g] AlwaysEveryProject: {sandbox} (lasts until revoked, in every project where it "
        "runs contained; written to your own file, "
        f"{Path(os.environ['XDG_CONFIG_HOME']) / 'codecoder' / 'config.json'})",
        "  [d] Deny: nothing runs; nothing is recorded",
    ]


def test_an_entry_that_can_never_match_is_an_error_trusted_or_not_and_never_obeyed(
    project: Path,
) -> None:
    """The trial's file: after `trust`, check said "errors found; trusted (5 widening(s)
    obeyed)" and listed the entries that can never match as rules in effect."""
    file = project / "codecoder.json"
    file.write_text(
        "{\n"
        '  "allowlist": {\n'
        '    "run_comand:ls": "AlwaysThisProject",\n'
        '    "run_command:npm test": "AlwaysThisProject",\n'
        '    "write_file:./x": "AlwaysThisProject",\n'
        '    "run_command:make": "AlwaysThisProject"\n'
        "  },\n"
        '  "deny": ["run_command:git:push"]\n'
        "}\n"
    )
    expected = [
        ("error", "unknown_tool", "run_comand:ls", 3),
        ("error", "never_matches", "run_command:npm test", 4),
        ("error", "never_matches", "write_file:./x", 5),
    ]
    for trusted in (False, True):
        report = as_json(codecoder("check", "--json", project=project))
        found = [(d["severity"], d["code"], d["key"], d["line"]) for d in report["diagnostics"]]
        assert [d for d in found if d[0] == "error"] == expected, trusted
        assert report["ok"] is False
        allowed = [rule["value"] for rule in report["rules"] if rule["kind"] == "allow"]
        assert allowed == (["run_command:make"] if trusted else [])
        assert codecoder("trust", "--yes", project=project).returncode == 0
    text = codecoder("check", project=project).stdout
    assert text.splitlines()[-1] == (
        f"{file}: errors found; trusted (1 widening(s) obeyed; 3 never take effect, see the "
        "errors above)"
    )
    assert "did you mean run_command?" in text
    assert "to mean that, write run_command:npm:test" in text
    rules = text.split("rules in effect:\n")[1].split("@docker")[0]
    assert "npm test" not in rules and "./x" not in rules and "run_comand" not in rules


def test_revoking_what_nothing_grants_names_what_does(project: Path) -> None:
    write_config(project, {"allowlist": {"run_command:make": "AlwaysThisProject"}})
    typo = codecoder("allowlist", "revoke", "run_command:mkae", project=project)
    assert (typo.returncode, typo.stdout) == (1, "")
    assert typo.stderr == (
        "codecoder: run_command:mkae is not granted anywhere (`codecoder allowlist list`); did "
        "you mean run_command:make?\n"
    )
    never = codecoder("allowlist", "revoke", "--json", "run_command:gti", project=project)
    assert as_json(never)["meant"] == "run_command:git"
    assert (
        "nor could it be: gti is no program on this PATH"
        in codecoder("allowlist", "revoke", "run_command:gti", project=project).stderr
    )


def test_a_misspelt_setting_names_the_one_meant(project: Path) -> None:
    (project / "codecoder.json").write_text('{"limts": {"timeout": 5}}\n')
    report = as_json(codecoder("check", "--json", project=project))
    [diagnostic] = report["diagnostics"]
    assert diagnostic["message"].startswith('unknown key "limts" (did you mean limits?)')
