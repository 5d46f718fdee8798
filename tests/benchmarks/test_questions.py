"""The questions-per-100-calls area: the recorded sessions, the simulated human, the replay."""

from __future__ import annotations

import json
from pathlib import Path

from codecoder.benchmarks.questions import (
    CONTAINED_SESSIONS,
    SESSIONS,
    broadest_lasting,
    load_session,
    replay,
)
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.decision import Answer
from codecoder.permissions.commandkey import key_command
from codecoder.permissions.prompt import AskRequest


def test_the_sessions_are_110_calls_of_agent_work_each_ending_with_a_push() -> None:
    sessions = [load_session(name) for name in SESSIONS]
    assert sum(len(s["calls"]) for s in sessions) == 110
    for session in sessions:
        tools = {call["tool"] for call in session["calls"]}
        assert {"run_command", "edit_file"} <= tools
        assert session["calls"][-1]["args"]["command"].startswith("git push") or any(
            call["args"].get("command", "").startswith("git push") for call in session["calls"]
        )


def test_the_tired_human_takes_the_broadest_lasting_answer_offered() -> None:
    def asked(*choices: Answer) -> Answer:
        request = AskRequest("run_command", EnvironmentTag.BWRAP, "k", "", choices)
        return broadest_lasting(request)

    assert asked(Answer.ONCE, Answer.SESSION, Answer.PROJECT, Answer.PROJECT_ANY) is (
        Answer.PROJECT_ANY
    )
    assert asked(Answer.PROJECT, Answer.PROJECT_ANY, Answer.EVERY_PROJECT) is Answer.EVERY_PROJECT
    assert asked(Answer.ONCE, Answer.SESSION, Answer.SESSION_PROGRAM, Answer.DENY) is (
        Answer.SESSION_PROGRAM
    )
    assert asked(Answer.ONCE, Answer.HOST_ONCE, Answer.HOST_SESSION, Answer.DENY) is (
        Answer.HOST_SESSION
    )
    assert asked(Answer.ONCE, Answer.DENY) is Answer.ONCE


def test_for_a_command_that_needs_the_host_the_tired_human_takes_the_broadest_host_choice() -> None:
    # Contained, `git push` would fail: the lasting contained grant is not an answer that works.
    choices = (
        Answer.ONCE,
        Answer.SESSION,
        Answer.PROJECT,
        Answer.HOST_ONCE,
        Answer.HOST_SESSION,
        Answer.HOST_SESSION_PROGRAM,
        Answer.DENY,
    )
    request = AskRequest(
        "run_command",
        EnvironmentTag.BWRAP,
        "run_command:git:push",
        "",
        choices,
        host_key="run_command:git:push",
    )
    assert broadest_lasting(request) is Answer.HOST_SESSION_PROGRAM


def test_in_bwrap_no_read_only_command_is_asked_and_a_later_session_asks_only_for_the_host(
    tmp_path: Path,
) -> None:
    contained = replay(EnvironmentTag.BWRAP, tmp_path)
    shell = replay(EnvironmentTag.SHELL, tmp_path)
    assert contained.calls == shell.calls == 110
    asked = {(q.session, q.call) for q in contained.questions}
    for name in SESSIONS:
        for index, call in enumerate(load_session(name)["calls"], start=1):
            command = call["args"].get("command")
            if command is not None and key_command(command).read_only:
                assert (name, index) not in asked, command
    later = [q for q in contained.questions if q.phase == "later"]
    # No host grant outlives its session: only the commands that need the host come back.
    assert later and all(q.answer == "host-session-program" for q in later)
    assert {q.key for q in later} <= {"run_command:git:push", "run_command:gh:run:list"}
    assert contained.count("first") < shell.count("first")
    assert shell.count("later") > 0  # @shell grants end with the session
    assert all(q.why for q in contained.questions)


def test_with_the_route_git_push_runs_contained_and_a_later_session_never_asks_for_it(
    tmp_path: Path,
) -> None:
    contained = replay(EnvironmentTag.BWRAP, tmp_path)
    later = [q for q in contained.questions if q.phase == "later"]
    assert [(q.session, q.key) for q in later] == [("ci-investigation", "run_command:gh:run:list")]
    # The push's connection asks network:github.com once, granted for every project.
    network = [q for q in contained.questions if q.tool == "network"]
    assert [(q.phase, q.key, q.answer) for q in network] == [
        ("first", "network:github.com", "every-project")
    ]
    assert not any(q.key == "run_command:git:push" for q in contained.questions)
    assert contained.per100("first") <= 15 and contained.per100("later") <= 3
    # The grants the human gave are in the user's own file, and no host grant.
    user = json.loads((tmp_path / "user-config-bwrap" / "codecoder" / "config.json").read_text())
    assert user["allowlist"]["network:github.com"] == "AlwaysThisProject"
    assert all(not key.startswith("run_command:gh") for key in user["allowlist"])
    for name in SESSIONS:
        project = json.loads((tmp_path / f"bwrap-{name}" / "codecoder.json").read_text())
        assert project["docker"] == {"network": {"allow": ["github.com"]}}


def test_the_twelve_contained_sessions_are_realistic_work_with_their_connections() -> None:
    sessions = [load_session(name) for name in CONTAINED_SESSIONS]
    assert len(sessions) == 12 and sum(len(s["calls"]) for s in sessions) == 230
    assert not set(CONTAINED_SESSIONS) & set(SESSIONS)
    hosts = {host for s in sessions for call in s["calls"] for host in call.get("network", ())}
    assert {"pypi.org", "registry.npmjs.org", "index.crates.io", "proxy.golang.org"} <= hosts
    for session in sessions:
        assert {"run_command", "edit_file"} <= {call["tool"] for call in session["calls"]}


def test_contained_sessions_meet_the_targets_counting_every_host_they_reach(
    tmp_path: Path,
) -> None:
    contained = replay(EnvironmentTag.BWRAP, tmp_path, CONTAINED_SESSIONS)
    assert contained.calls == 230
    # Each host is asked once, a package index's hosts as one, during the call that reaches it.
    assert contained.hosts("first") == {
        "pypi.org": 1,
        "registry.npmjs.org": 1,
        "index.crates.io": 1,
        "proxy.golang.org": 1,
        "github.com": 1,
        "data.example.org": 1,
    }
    assert not contained.hosts("later")
    assert contained.per100("first") <= 5 and contained.per100("later") <= 1
    assert contained.escalations("first") <= 1 and contained.escalations("later") <= 1
    # Nothing a contained command needs is moved to the host: the one escalation is `gh`.
    escalated = [q.key for q in contained.questions if q.answer.startswith("host-")]
    assert set(escalated) == {"run_command:gh:release:create"}
    # Package installs, fetches and compound lines are never offered the host first.
    for question in contained.questions:
        assert question.key != "run_command:git:fetch"
