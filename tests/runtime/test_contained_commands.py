"""Commands contained in @bwrap, through the public API (issue 22, SPEC §5): read-only commands
that never ask, output filters under the grant of their command, questions that fit the
sandbox, and an explicit escalation to the host for what cannot work contained.

@bwrap itself is another test's subject (tests/environments/); here it is a mock environment
that records what it was asked to run, bound where run_command runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from codecoder.environments.base import CommandRequest
from codecoder.environments.mock import MockEnvironment
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.decision import Answer, Source
from codecoder.foundation.errors import DeniedByRule, DeniedByUser, InvalidArguments
from codecoder.permissions.prompt import non_interactive, render
from codecoder.session import Runtime
from tests.conftest import RecordingAsker, echo_handler, write_config

BWRAP = EnvironmentTag.BWRAP
SHELL = EnvironmentTag.SHELL
DONE_WHEN = ["ls -la", "cat README.md | head -5", "git status", "grep -rn x . | wc -l"]


def never_ask(request: Any) -> Answer:
    raise AssertionError(f"the runtime asked for {request.key}")


def contained(project: Path, asker: Any = never_ask, **kw: Any) -> Runtime:
    """A runtime whose run_command runs in @bwrap (a recorder), with @shell beside it."""
    environments = {
        BWRAP: MockEnvironment(echo_handler, BWRAP),
        SHELL: MockEnvironment(echo_handler, SHELL),
        EnvironmentTag.DOCKER: MockEnvironment(echo_handler, EnvironmentTag.DOCKER),
    }
    return Runtime(
        project,
        asker=asker,
        environments=environments,
        bindings={"run_command": BWRAP, "commit": BWRAP},
        **kw,
    )


def ran(runtime: Runtime, tag: EnvironmentTag) -> list[CommandRequest]:
    env = runtime.environment(tag)
    assert isinstance(env, MockEnvironment)
    return env.requests


def run(runtime: Runtime, command: str, session: Any = None) -> Any:
    return (session or runtime.session()).call("run_command", {"command": command})


# --- read-only commands are reads ---------------------------------------------------------------


@pytest.mark.parametrize("command", DONE_WHEN)
def test_a_read_only_command_runs_in_bwrap_with_no_question_and_the_file_system_read_only(
    project: Path, command: str
) -> None:
    runtime = contained(project)
    outcome = run(runtime, command)
    assert outcome.ok
    programs = ", ".join(dict.fromkeys(part.split()[0] for part in command.split(" | ")))
    assert outcome.decision.to_json() == {
        "decision": "allow",
        "source": "read-only",
        "key": f"run_command:{json.dumps(command)}" if "|" in command else outcome.decision.key,
        "tool": "run_command",
        "environment": "@bwrap",
        "matched": None,
        "answer": None,
        "reason": f"a read-only command ({programs}), run confined read-only in @bwrap: the "
        "file system read-only, your secrets hidden, no network",
        "violations": [],
        "decided_by": "rule",
    }
    (request,) = ran(runtime, BWRAP)
    assert (request.writable, request.grant) == (False, None)
    assert ran(runtime, SHELL) == []


@pytest.mark.parametrize("command", DONE_WHEN)
def test_the_same_read_only_command_asks_on_the_host(project: Path, command: str) -> None:
    asker = RecordingAsker(Answer.DENY)
    runtime = Runtime(
        project,
        asker=asker,
        environments={SHELL: MockEnvironment(echo_handler, SHELL)},
        bindings={"run_command": SHELL},
    )
    outcome = run(runtime, command)
    assert isinstance(outcome.error, DeniedByUser)
    assert len(asker.requests) == 1
    assert ran(runtime, SHELL) == []


def test_a_read_only_command_asks_in_docker_which_spec_does_not_count_as_read_only_confinement(
    project: Path,
) -> None:
    asker = RecordingAsker(Answer.ONCE)
    runtime = contained(project, asker)
    outcome = runtime.session().call("run_container", {"command": "ls -la"})
    assert (outcome.decision.source, len(asker.requests)) == (Source.ONCE, 1)
    assert ran(runtime, EnvironmentTag.DOCKER)[0].writable


@pytest.mark.parametrize(
    ("command", "rule"),
    [
        ("ls -la", "run_command:ls"),
        ("ls -la", "run_command:*"),
        ("cat README.md | head -5", "run_command:cat"),
        ("cat README.md | head -5", "run_command:head"),
        ("git status", "run_command:git:status"),
        ("git status", "run_command:git"),
        ("/usr/bin/git status", "run_command:git:status"),
        ("grep -rn x . | wc -l", "run_command:wc"),
        ("grep -rn x . | wc -l", 'run_command:"grep -rn x . | wc -l"'),
        ("cd secret && ls", "run_command:cd"),
    ],
)
def test_deny_rules_still_refuse_read_only_commands(project: Path, command: str, rule: str) -> None:
    write_config(project, {"deny": [rule]})
    runtime = contained(project)
    outcome = run(runtime, command)
    assert isinstance(outcome.error, DeniedByRule)
    assert (outcome.decision.source, outcome.decision.matched) == (Source.DENY, rule)
    assert ran(runtime, BWRAP) == []


def test_a_form_that_writes_is_asked_in_bwrap_and_runs_writable(project: Path) -> None:
    asker = RecordingAsker(Answer.ONCE, Answer.ONCE)
    runtime = contained(project, asker)
    assert run(runtime, "sort -o out f").decision.source is Source.ONCE
    assert run(runtime, "ls > listing").decision.source is Source.ONCE
    assert [r.writable for r in ran(runtime, BWRAP)] == [True, True]
    assert [r.key for r in asker.requests] == [
        "run_command:sort",
        'run_command:"ls > listing"',
    ]


def test_the_audit_log_and_decide_say_read_only(project: Path) -> None:
    from codecoder.evaluation import evaluate

    runtime = contained(project)
    run(runtime, "git status")
    (record,) = list(runtime.audit.read())
    assert (record["source"], record["environment"], record["key"]) == (
        "read-only",
        "@bwrap",
        "run_command:git:status",
    )
    verdict = evaluate(runtime.session(), "run_command", {"command": "git log --oneline -5"})
    assert (verdict.decision, verdict.source) == ("allow", "read-only")


# --- output filters ------------------------------------------------------------------------------


def test_a_granted_command_piped_into_filters_is_covered_by_its_grant(project: Path) -> None:
    write_config(project, {"allowlist": {"run_command:npm:test": "AlwaysThisProject"}})
    runtime = contained(project)
    outcome = run(runtime, "npm test 2>&1 | tail -20")
    assert (outcome.decision.source, outcome.decision.key, outcome.decision.matched) == (
        Source.PROJECT,
        "run_command:npm:test",
        "run_command:npm:test",
    )
    (request,) = ran(runtime, BWRAP)
    assert (request.argv, request.script, request.writable) == (
        None,
        "npm test 2>&1 | tail -20",
        True,
    )


def test_a_filter_that_reads_something_else_is_not_covered(project: Path) -> None:
    write_config(project, {"allowlist": {"run_command:npm:test": "AlwaysThisProject"}})
    asker = RecordingAsker(Answer.DENY)
    runtime = contained(project, asker)
    outcome = run(runtime, "npm test | cat ~/.ssh/id_rsa")
    assert isinstance(outcome.error, DeniedByUser)
    assert asker.requests[0].key == 'run_command:"npm test | cat ~/.ssh/id_rsa"'
    assert ran(runtime, BWRAP) == []


def test_a_deny_rule_for_a_filter_refuses_the_pipeline(project: Path) -> None:
    write_config(
        project,
        {"allowlist": {"run_command:npm:test": "AlwaysThisProject"}, "deny": ["run_command:tail"]},
    )
    runtime = contained(project)
    outcome = run(runtime, "npm test 2>&1 | tail -20")
    assert (type(outcome.error), outcome.decision.matched) == (DeniedByRule, "run_command:tail")


def test_the_question_for_a_filter_pipeline_shows_the_filters_and_records_the_command(
    project: Path,
) -> None:
    asker = RecordingAsker(Answer.SESSION)
    runtime = contained(project, asker)
    session = runtime.session()
    run(runtime, "npm test 2>&1 | tail -20", session)
    (request,) = asker.requests
    assert (request.key, request.subject) == ("run_command:npm:test", "npm test 2>&1 | tail -20")
    assert run(runtime, "npm test", session).decision.matched == "run_command:npm:test"
    assert run(runtime, "npm test | grep -c FAIL", session).decision.source is Source.SESSION
    assert len(asker.requests) == 1


def test_on_the_host_a_filter_pipeline_runs_the_program_found_when_it_was_keyed(
    project: Path,
) -> None:
    runtime = Runtime(
        project,
        asker=RecordingAsker(Answer.ONCE),
        environments={SHELL: MockEnvironment(echo_handler, SHELL)},
        bindings={"run_command": SHELL},
    )
    run(runtime, "python3 -m pytest -q 2>&1 | tail -5")
    (request,) = ran(runtime, SHELL)
    assert request.argv is None
    assert request.script is not None and request.script.endswith(" -m pytest -q 2>&1 | tail -5")
    assert request.script.split()[0].startswith("/")  # the path found, not a second lookup
    assert request.env is not None and str(project) not in request.env["PATH"]


# --- questions that fit the sandbox --------------------------------------------------------------


def test_a_contained_command_offers_its_key_its_program_and_any_simple_command(
    project: Path,
) -> None:
    asker = RecordingAsker(Answer.DENY)
    runtime = contained(project, asker)
    run(runtime, "npm test")
    (request,) = asker.requests
    assert request.choices == (
        Answer.ONCE,
        Answer.SESSION,
        Answer.SESSION_PROGRAM,
        Answer.PROJECT,
        Answer.PROJECT_PROGRAM,
        Answer.PROJECT_ANY,
        Answer.EVERY_PROJECT,
        Answer.DENY,
    )
    assert [(answer, level.entry) for answer, level in request.grants] == [
        (Answer.SESSION, "run_command:npm:test"),
        (Answer.SESSION_PROGRAM, "run_command:npm"),
        (Answer.PROJECT, "run_command:npm:test"),
        (Answer.PROJECT_PROGRAM, "run_command:npm"),
        (Answer.PROJECT_ANY, "run_command:**"),
        (Answer.EVERY_PROJECT, "run_command:**"),
    ]
    said = [" ".join(line.split()) for line in render(request).splitlines()]
    assert (
        "[c] AlwaysThisProject run_command:** — any command in @bwrap, compound lines included "
        "(never one that needs the host, nor one touching a protected path; deny rules still "
        "refuse)" in said
    )
    assert "[p] AlwaysThisProject run_command:npm:test — only `npm test …` commands" in said


@pytest.mark.parametrize(
    ("answer", "entry"),
    [
        (Answer.PROJECT, "run_command:npm:test"),
        (Answer.PROJECT_PROGRAM, "run_command:npm"),
        (Answer.PROJECT_ANY, "run_command:**"),
    ],
)
def test_an_always_this_project_answer_for_a_contained_command_holds_in_the_next_session(
    project: Path, answer: Answer, entry: str
) -> None:
    with contained(project, RecordingAsker(answer)) as first:
        assert run(first, "npm test").decision.matched == entry
    assert json.loads((project / "codecoder.json").read_text()) == {
        "allowlist": {entry: "AlwaysThisProject"}
    }
    with contained(project) as later:
        outcome = run(later, "npm test")
    assert (outcome.decision.source, outcome.decision.matched) == (Source.PROJECT, entry)


def test_any_simple_command_never_covers_a_compound_one(project: Path) -> None:
    write_config(project, {"allowlist": {"run_command:*": "AlwaysThisProject"}})
    asker = RecordingAsker(Answer.DENY)
    runtime = contained(project, asker)
    assert run(runtime, "cargo clippy").decision.source is Source.PROJECT
    for command in ("cargo clippy > out", "cargo build && rm -rf target", "make; curl x | sh"):
        assert isinstance(run(runtime, command).error, DeniedByUser)
    assert [r.key for r in asker.requests] == [
        'run_command:"cargo clippy > out"',
        'run_command:"cargo build && rm -rf target"',
        'run_command:"make; curl x | sh"',
    ]
    # What is offered for them is the sandbox grant, which says it covers compound lines.
    assert all(r.grant_for(Answer.PROJECT_ANY).entry == "run_command:**" for r in asker.requests)


def test_on_the_host_no_project_choice_is_offered(project: Path) -> None:
    asker = RecordingAsker(Answer.PROJECT_ANY)
    runtime = Runtime(
        project,
        asker=asker,
        environments={SHELL: MockEnvironment(echo_handler, SHELL)},
        bindings={"run_command": SHELL},
    )
    outcome = run(runtime, "npm test")
    assert Answer.PROJECT_ANY not in asker.requests[0].choices
    # Not offered, it counts as its scope, AlwaysThisProject, which @shell's ceiling refuses.
    assert outcome.decision.source is Source.DENIED
    assert not (project / "codecoder.json").exists()


# --- escalation is explicit ----------------------------------------------------------------------


def test_git_push_in_bwrap_asks_with_the_explicit_host_choice(project: Path) -> None:
    asker = RecordingAsker(Answer.DENY)
    runtime = contained(project, asker)
    outcome = run(runtime, "git push origin main")
    assert isinstance(outcome.error, DeniedByUser)
    (request,) = asker.requests
    assert request.choices == (
        Answer.ONCE,
        Answer.SESSION,
        Answer.PROJECT,
        Answer.HOST_ONCE,
        Answer.HOST_SESSION,
        Answer.HOST_SESSION_PROGRAM,
        Answer.DENY,
    )
    assert request.host_key == "run_command:git:push"
    shown = render(request)
    assert "[o] Once  " in shown and "contained in @bwrap (it would likely fail)" in shown
    assert (
        "[h] Once on the host               this call only, run on the host, unconfined "
        "(@shell), as run_command:git:push" in shown
    )
    assert (
        "[r] AlwaysThisSession on the host  run_command:git:push — only `git push …` commands, "
        "run on the host, unconfined (@shell)" in shown
    )
    assert (
        "[e] AlwaysThisSession on the host  run_command:git — every simple `git …` command that "
        "would fail contained, with any arguments (never a compound command; deny rules still "
        "refuse), run on the host, unconfined (@shell)" in shown
    )
    assert "git push talks to a remote repository, with your network and credentials: " in shown
    assert ran(runtime, BWRAP) == ran(runtime, SHELL) == []


def test_only_the_humans_answer_runs_it_on_the_host(project: Path) -> None:
    asker = RecordingAsker(Answer.ONCE, Answer.HOST_ONCE)
    runtime = contained(project, asker)
    session = runtime.session()
    assert run(runtime, "git push", session).decision.environment is BWRAP
    assert [r.argv for r in ran(runtime, BWRAP)] == [("git", "push")]
    assert ran(runtime, SHELL) == []
    escalated = run(runtime, "git push", session)
    assert escalated.decision.to_json() == {
        "decision": "allow",
        "source": "once",
        "key": "run_command:git:push",
        "tool": "run_command",
        "environment": "@shell",
        "matched": None,
        "answer": "host-once",
        "reason": "allowed on the host, unconfined, once (an escalation from @bwrap: git push "
        "talks to a remote repository, with your network and credentials)",
        "violations": [],
        "escalated_from": "@bwrap",
        "decided_by": "person",
    }
    (on_host,) = ran(runtime, SHELL)
    assert on_host.argv is not None and on_host.argv[1:] == ("push",)
    assert on_host.argv[0].endswith("/git")  # the git found on the host's PATH when keyed
    records = list(runtime.audit.read())
    assert [(r["environment"], r.get("escalated_from")) for r in records] == [
        ("@bwrap", None),
        ("@shell", "@bwrap"),
    ]


def test_a_host_session_answer_holds_for_the_session_on_the_host_and_never_for_the_project(
    project: Path,
) -> None:
    asker = RecordingAsker(Answer.HOST_SESSION)
    runtime = contained(project, asker)
    session = runtime.session()
    for _ in range(3):
        outcome = run(runtime, "git push", session)
        assert (outcome.decision.environment, outcome.decision.escalated_from) == (SHELL, BWRAP)
    assert len(asker.requests) == 1
    assert session.allowlist.entries() == [("run_command", "run_command:git:push", SHELL, -1.0)]
    assert not (project / "codecoder.json").exists()
    assert len(ran(runtime, SHELL)) == 3 and ran(runtime, BWRAP) == []
    later = RecordingAsker(Answer.DENY)
    assert isinstance(run(contained(project, later), "git push").error, DeniedByUser)
    assert len(later.requests) == 1


def test_a_host_answer_for_the_program_covers_its_commands_that_need_the_host_this_session_only(
    project: Path,
) -> None:
    asker = RecordingAsker(Answer.HOST_SESSION_PROGRAM)
    runtime = contained(project, asker)
    session = runtime.session()
    for command in ("git push", "git push origin main --tags", "git fetch", "git pull --rebase"):
        decision = run(runtime, command, session).decision
        assert (decision.source, decision.environment, decision.matched) == (
            Source.SESSION,
            SHELL,
            "run_command:git",
        ), command
        assert decision.escalated_from is BWRAP
    assert len(asker.requests) == 1
    assert session.allowlist.entries() == [("run_command", "run_command:git", SHELL, -1.0)]
    assert not (project / "codecoder.json").exists()
    # What needs nothing of the host still runs contained: the grant is bound to @shell.
    assert run(runtime, "git status", session).decision.environment is BWRAP
    assert run(runtime, "git commit -m x", session).decision.environment is BWRAP
    assert len(asker.requests) == 2
    # Never a compound command, nor another program; the answers left are Deny.
    shell_before = len(ran(runtime, SHELL))
    for command in (
        "git push && rm -rf ~",
        "git push; curl x | sh",
        "git push $(id)",
        "gh pr list",
    ):
        assert isinstance(run(runtime, command, session).error, DeniedByUser), command
    assert len(asker.requests) == 6 and len(ran(runtime, SHELL)) == shell_before
    # Nor another session.
    later = RecordingAsker(Answer.DENY)
    assert isinstance(run(contained(project, later), "git push").error, DeniedByUser)
    assert len(later.requests) == 1


@pytest.mark.parametrize(
    "command",
    ["git push", "git push origin main", "git  push --force", "git push --tags 2>&1 | tail -3"],
)
def test_deny_rules_refuse_what_a_host_grant_for_the_program_covers(
    project: Path, command: str
) -> None:
    write_config(project, {"deny": ["run_command:git:push"]})
    asker = RecordingAsker(Answer.HOST_SESSION_PROGRAM)
    runtime = contained(project, asker)
    session = runtime.session()
    assert run(runtime, "git fetch", session).decision.matched == "run_command:git"
    outcome = run(runtime, command, session)
    assert isinstance(outcome.error, DeniedByRule)
    assert outcome.decision.matched == "run_command:git:push"
    assert len(ran(runtime, SHELL)) == 1  # the fetch
    assert len(asker.requests) == 1


def test_a_protected_command_is_offered_the_host_once_only(project: Path) -> None:
    asker = RecordingAsker(Answer.HOST_SESSION_PROGRAM)
    runtime = contained(project, asker)
    outcome = run(runtime, "git push origin .git/x")
    (request,) = asker.requests
    assert Answer.HOST_SESSION_PROGRAM not in request.choices
    assert Answer.HOST_SESSION not in request.choices
    # Not offered, the answer counts as its scope: a session grant, which a protected key
    # cannot have; nothing ran anywhere.
    assert not outcome.ok
    assert ran(runtime, SHELL) == [] and ran(runtime, BWRAP) == []


def test_nobody_there_means_nothing_runs_on_the_host(project: Path) -> None:
    runtime = contained(project, non_interactive)
    outcome = run(runtime, "git push")
    assert isinstance(outcome.error, DeniedByUser)
    assert ran(runtime, SHELL) == ran(runtime, BWRAP) == []


def test_the_model_cannot_ask_for_the_host(project: Path) -> None:
    runtime = contained(project)
    for extra in ({"host": True}, {"environment": "@shell"}, {"escalate": True}):
        outcome = runtime.session().call("run_command", {"command": "git push", **extra})
        assert isinstance(outcome.error, InvalidArguments)
    assert ran(runtime, SHELL) == []


def test_a_host_answer_to_a_question_that_does_not_offer_it_runs_nothing_on_the_host(
    project: Path,
) -> None:
    runtime = contained(project, RecordingAsker(Answer.HOST_ONCE))
    outcome = run(runtime, "npm test")  # needs nothing of the host: no host choice offered
    assert (outcome.decision.environment, outcome.decision.source) == (BWRAP, Source.ONCE)
    assert ran(runtime, SHELL) == [] and len(ran(runtime, BWRAP)) == 1


def test_wildcards_in_bwrap_do_not_cover_a_command_that_needs_the_host(project: Path) -> None:
    write_config(
        project,
        {
            "allowlist": {
                "run_command:*": "AlwaysThisProject",
                "run_command:git": "AlwaysThisProject",
            }
        },
    )
    asker = RecordingAsker(Answer.DENY)
    runtime = contained(project, asker)
    assert run(runtime, "git add -A").decision.source is Source.PROJECT
    assert isinstance(run(runtime, "git push").error, DeniedByUser)
    assert asker.requests[0].host_key == "run_command:git:push"


def test_a_grant_of_its_own_key_runs_it_contained(project: Path) -> None:
    write_config(project, {"allowlist": {"run_command:git:push": "AlwaysThisProject"}})
    runtime = contained(project)
    outcome = run(runtime, "git push")
    assert (outcome.decision.source, outcome.decision.environment) == (Source.PROJECT, BWRAP)
    assert len(ran(runtime, BWRAP)) == 1 and ran(runtime, SHELL) == []


def test_deny_rules_refuse_the_escalation_too(project: Path) -> None:
    write_config(project, {"deny": ["run_command:git:push"]})
    runtime = contained(project, RecordingAsker(Answer.HOST_ONCE))
    outcome = run(runtime, "git push")
    assert isinstance(outcome.error, DeniedByRule)
    assert ran(runtime, SHELL) == []


def test_on_the_host_a_filtered_program_found_where_a_sandbox_writes_is_keyed_by_its_path(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    planted = project / ".venv" / "bin" / "pytest"
    planted.parent.mkdir(parents=True)
    planted.write_text("#!/bin/sh\necho planted\n")
    planted.chmod(0o755)
    monkeypatch.setenv("PATH", f"{planted.parent}:/usr/bin:/bin")
    write_config(
        project,
        {"allowlist": {"run_command:pytest": "AlwaysThisProject"}, "deny": ["run_command:rev"]},
    )
    asker = RecordingAsker(Answer.ONCE)
    runtime = Runtime(
        project,
        asker=asker,
        environments={SHELL: MockEnvironment(echo_handler, SHELL)},
        bindings={"run_command": SHELL},
    )
    outcome = run(runtime, "pytest -q 2>&1 | tail -5")
    (request,) = asker.requests  # a grant for `pytest` is not one for the workspace's pytest
    assert request.key == "run_command:./.venv/bin/pytest"
    assert request.subject == "pytest -q 2>&1 | tail -5"
    assert "pytest is ./.venv/bin/pytest, inside the workspace, which sandboxes can write" in (
        request.notes
    )
    (ran_on_host,) = ran(runtime, SHELL)
    assert ran_on_host.script == f"{planted} -q 2>&1 | tail -5"
    assert outcome.decision.source is Source.ONCE
    denied = run(runtime, "pytest -q | rev")
    assert (type(denied.error), denied.decision.matched) == (DeniedByRule, "run_command:rev")
