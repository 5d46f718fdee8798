"""Every branch of the permission lookup chain (SPEC §4), through the public API.

run_command is the Ask tool of most tests. Where a test is about a tool on the host (the
session ceiling, PATH looked up on the host), its project binds run_command to @shell
(`SHELL_BOUND`); by default it runs contained in @bwrap."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, ClassVar

import pytest

from codecoder.environments.mock import MockEnvironment
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.decision import Answer, Source
from codecoder.foundation.errors import (
    CeilingViolation,
    DeniedByRule,
    DeniedByUser,
    InvalidArguments,
    RulesUnreadable,
    UnknownTool,
)
from codecoder.foundation.state import project_state_directory
from codecoder.permissions.keys import Permission, PermissionKey
from codecoder.permissions.prompt import non_interactive
from codecoder.tools.base import Category, Parameters, Tool, ToolContext, ToolResult
from codecoder.tools.catalogue import builtin_tools
from tests.conftest import RecordingAsker, write_config

DOCKER_BOUND = {"environments": {"run_command": "@docker"}}
SHELL_BOUND = {"environments": {"run_command": "@shell"}}


def never_ask(request: Any) -> Answer:
    raise AssertionError(f"the runtime asked for {request.key}")


class NoteParameters(Parameters):
    text: str


class Note(Tool[NoteParameters]):
    """A Permission::None tool for the first branch of the chain."""

    name = "note"
    description = "records a note"
    category = Category.AGENT
    environment = EnvironmentTag.RUNTIME
    parameters = NoteParameters
    asks = False
    executed: ClassVar[list[str]] = []

    def permission(self, args: NoteParameters) -> Permission:
        return Permission.none()

    def execute(self, args: NoteParameters, ctx: ToolContext) -> ToolResult:
        self.executed.append(args.text)
        return ToolResult(output=f"noted {args.text}")


class Stamp(Tool[NoteParameters]):
    """An Ask tool in a sandboxed environment, so AlwaysThisProject is within its ceiling."""

    name = "stamp"
    description = "stamps a text"
    category = Category.WRITE
    environment = EnvironmentTag.RUNTIME
    parameters = NoteParameters

    def permission(self, args: NoteParameters) -> Permission:
        return Permission.ask(PermissionKey.named(self.name, args.text))

    def execute(self, args: NoteParameters, ctx: ToolContext) -> ToolResult:
        return ToolResult(output=f"stamped {args.text}")


def call(runtime: Any, command: str, session: Any = None) -> Any:
    return (session or runtime.session()).call("run_command", {"command": command})


def ran(runtime: Any, tag: EnvironmentTag = EnvironmentTag.SHELL) -> list[Any]:
    env = runtime.environment(tag)
    assert isinstance(env, MockEnvironment)
    return env.requests


# --- None -----------------------------------------------------------------------------------


def test_a_none_tool_runs_without_asking_and_is_audited(make_runtime) -> None:
    runtime = make_runtime(asker=never_ask, tools={**builtin_tools(), "note": Note()})
    outcome = runtime.session().call("note", {"text": "hi"})
    assert outcome.result.output == "noted hi"
    assert (outcome.decision.source, outcome.decision.key) == (Source.NONE, None)
    assert [r["source"] for r in runtime.audit.read()] == ["none"]


# --- validation comes first -----------------------------------------------------------------


def test_bad_arguments_name_the_field_and_nothing_is_asked_or_run(make_runtime) -> None:
    runtime = make_runtime(asker=never_ask)
    outcome = runtime.session().call("run_command", {"command": 42})
    assert isinstance(outcome.error, InvalidArguments)
    assert outcome.error.problems == [("command", "Input should be a valid string")]
    extra = runtime.session().call("run_command", {"command": "ls", "sudo": True})
    assert isinstance(extra.error, InvalidArguments)
    assert extra.error.problems[0][0] == "sudo"
    assert ran(runtime) == []


def test_an_unknown_tool_is_a_usage_error(make_runtime) -> None:
    outcome = make_runtime(asker=never_ask).session().call("format_disk", {})
    assert isinstance(outcome.error, UnknownTool)


# --- deny rules -----------------------------------------------------------------------------


def test_a_deny_rule_refuses_without_asking_even_when_granted(make_runtime, project) -> None:
    write_config(
        project,
        {
            **DOCKER_BOUND,
            "allowlist": {"run_command:git": "AlwaysThisProject"},
            "deny": ["run_command:git:push"],
        },
    )
    runtime = make_runtime(asker=never_ask)
    for command in [
        "git push",
        "git -C sub push --force",
        "/usr/bin/git push",
        "git status && git push",
    ]:
        outcome = call(runtime, command)
        assert isinstance(outcome.error, DeniedByRule), command
        assert outcome.decision.to_json()["source"] == "deny"
        assert outcome.decision.matched == "run_command:git:push"
    assert ran(runtime, EnvironmentTag.DOCKER) == []
    assert call(runtime, "git status").decision.source is Source.PROJECT


@pytest.mark.parametrize(
    "command",
    [
        "git pu''sh origin main && true",
        "git pu\\sh origin main; true",
        'true && g"i"t "pu"sh',
        "/usr/lib/git-core/git-push origin main",
        "/usr/lib/git-core/git-push origin main && true",
        "git pp origin main",
        "timeout 60 git push",
        "bash -c 'git push origin main'",
        "echo $(git push)",
        "x=$((1)); git push",
        "{git,push} origin main",
        "g{i,}t push origin",
        "/usr/bin/gi? push origin",
        "env -iS'git push'",
        "shopt -s expand_aliases\nalias p='git push'\np",
    ],
)
def test_a_deny_rule_cannot_be_dodged_and_a_compound_holding_it_is_refused_unasked(
    make_runtime, project, command: str
) -> None:
    write_config(project, {"deny": ["run_command:git:push"]})
    asker = RecordingAsker(Answer.ONCE)
    runtime = make_runtime(asker=asker)
    outcome = call(runtime, command)
    assert isinstance(outcome.error, DeniedByRule), command
    assert (outcome.decision.source, asker.requests, ran(runtime)) == (Source.DENY, [], [])


def test_a_move_is_refused_when_a_deny_rule_covers_its_source(make_runtime, project) -> None:
    write_config(project, {"deny": ["move_file:secrets/**"]})
    asker = RecordingAsker(Answer.ONCE)
    runtime = make_runtime(asker=asker)
    with runtime.session() as session:
        for source, destination in [("secrets/key", "public/key"), ("public/x", "secrets/x")]:
            outcome = session.call("move_file", {"source": source, "destination": destination})
            assert isinstance(outcome.error, DeniedByRule), (source, destination)
    assert asker.requests == []


def test_a_path_named_like_a_glob_is_granted_as_that_path_only(make_runtime, project) -> None:
    asker = RecordingAsker(Answer.PROJECT)
    runtime = make_runtime(asker=asker)
    with runtime.session() as session:
        first = session.call("write_file", {"path": "**", "content": "x"})
        assert first.decision.matched == "write_file:[*][*]"
        saved = json.loads((project / "codecoder.json").read_text())
        assert saved["allowlist"] == {"write_file:[*][*]": "AlwaysThisProject"}
        other = session.call("write_file", {"path": "src/app.py", "content": "x"})
    assert isinstance(other.error, DeniedByUser) and len(asker.requests) == 2
    fresh = make_runtime(asker=never_ask)
    with fresh.session() as session:
        again = session.call("write_file", {"path": "**", "content": "y"})
    assert again.decision.matched == "write_file:[*][*]"


# --- project allowlist and the ceiling check at load ----------------------------------------


def test_a_project_grant_for_a_sandboxed_tool_runs_without_asking(make_runtime, project) -> None:
    write_config(project, {**DOCKER_BOUND, "allowlist": {"run_command:cargo": "AlwaysThisProject"}})
    runtime = make_runtime(asker=never_ask)
    outcome = call(runtime, "cargo build --release")
    assert outcome.ok
    decision = outcome.decision.to_json()
    assert (decision["source"], decision["matched"], decision["environment"]) == (
        "project",
        "run_command:cargo",
        "@docker",
    )
    assert [r.argv for r in ran(runtime, EnvironmentTag.DOCKER)] == [
        ("cargo", "build", "--release")
    ]


def test_a_project_entry_for_a_shell_tool_is_a_reported_ceiling_violation_then_asks(
    make_runtime, project
) -> None:
    write_config(project, {**SHELL_BOUND, "allowlist": {"run_command:git": "AlwaysThisProject"}})
    asker = RecordingAsker(Answer.ONCE)
    runtime = make_runtime(asker=asker)
    assert [d.code for d in runtime.diagnostics] == ["ceiling_violation"]
    outcome = call(runtime, "git status")
    assert outcome.ok
    assert outcome.decision.source is Source.ONCE
    assert len(outcome.decision.violations) == 1
    assert "CeilingViolation" in outcome.decision.violations[0]
    assert "run_command:git" in asker.requests[0].note
    audit = list(runtime.audit.read())
    assert audit[-1]["violations"] == list(outcome.decision.violations)


# --- session allowlist ----------------------------------------------------------------------


def test_always_this_session_is_remembered_for_the_session_only(make_runtime) -> None:
    asker = RecordingAsker(Answer.SESSION)
    runtime = make_runtime(asker=asker)
    session = runtime.session()
    first = call(runtime, "git add a.txt", session)
    second = call(runtime, "git add -A", session)
    assert (first.decision.source, second.decision.source) == (Source.SESSION, Source.SESSION)
    assert (first.decision.matched, second.decision.matched) == ("run_command:git:add",) * 2
    assert second.decision.answer is None and len(asker.requests) == 1
    other = call(runtime, "git add a.txt", runtime.session())
    assert isinstance(other.error, DeniedByUser) and len(asker.requests) == 2
    assert not (runtime.project_dir / "codecoder.json").exists()


def test_always_this_session_grants_only_the_subcommand_the_human_saw(
    make_runtime, project
) -> None:
    write_config(project, SHELL_BOUND)  # the argv run names git as found on the host's PATH
    asker = RecordingAsker(Answer.SESSION)
    runtime = make_runtime(asker=asker)
    session = runtime.session()
    assert call(runtime, "git status --short", session).decision.source is Source.SESSION
    cleaned = call(runtime, "git clean -fdx", session)
    assert isinstance(cleaned.error, DeniedByUser) and len(asker.requests) == 2
    git = shutil.which("git")
    assert [request.argv for request in ran(runtime)] == [(git, "status", "--short")]


def test_the_program_wide_choice_is_offered_apart_and_says_what_it_covers(
    make_runtime, project
) -> None:
    write_config(project, SHELL_BOUND)  # where the project choices are not offered
    asker = RecordingAsker(Answer.SESSION_PROGRAM)
    runtime = make_runtime(asker=asker)
    session = runtime.session()
    first = call(runtime, "git status", session)
    request = asker.requests[0]
    assert request.choices == (Answer.ONCE, Answer.SESSION, Answer.SESSION_PROGRAM, Answer.DENY)
    assert [(answer, level.entry) for answer, level in request.grants] == [
        (Answer.SESSION, "run_command:git:status"),
        (Answer.SESSION_PROGRAM, "run_command:git"),
    ]
    assert "every simple `git …` command" in request.grant_for(Answer.SESSION_PROGRAM).covers
    assert first.decision.matched == "run_command:git"
    assert call(runtime, "git log", session).decision.matched == "run_command:git"
    assert len(asker.requests) == 1


def test_a_session_grant_expires(make_runtime, project) -> None:
    write_config(project, {"session_ttl": 60})
    now = [1000.0]
    asker = RecordingAsker(Answer.SESSION, Answer.ONCE)
    runtime = make_runtime(asker=asker, clock=lambda: now[0])
    session = runtime.session()
    assert call(runtime, "git add a.txt", session).decision.source is Source.SESSION
    now[0] += 59
    assert call(runtime, "git add a.txt", session).decision.source is Source.SESSION
    now[0] += 2
    expired = call(runtime, "git add a.txt", session)
    assert expired.decision.source is Source.ONCE
    assert "expired" in asker.requests[1].note


def test_minus_one_means_a_session_grant_never_expires(make_runtime, project) -> None:
    write_config(project, SHELL_BOUND)
    now = [0.0]
    runtime = make_runtime(asker=RecordingAsker(Answer.SESSION), clock=lambda: now[0])
    session = runtime.session()
    call(runtime, "ls", session)
    assert session.allowlist.entries() == [
        ("run_command", "run_command:ls", EnvironmentTag.SHELL, -1)
    ]
    now[0] = 10**12
    assert call(runtime, "ls", session).decision.source is Source.SESSION


# --- asking ---------------------------------------------------------------------------------


def test_once_asks_again_next_time(make_runtime) -> None:
    asker = RecordingAsker(Answer.ONCE, Answer.ONCE)
    runtime = make_runtime(asker=asker)
    session = runtime.session()
    assert call(runtime, "touch out.txt", session).decision.source is Source.ONCE
    assert call(runtime, "touch out.txt", session).decision.source is Source.ONCE
    assert len(asker.requests) == 2


def test_deny_refuses_and_runs_nothing(make_runtime) -> None:
    runtime = make_runtime(asker=RecordingAsker(Answer.DENY))
    outcome = call(runtime, "rm -rf build")
    assert isinstance(outcome.error, DeniedByUser)
    assert outcome.decision.to_json()["source"] == "denied"
    assert ran(runtime) == []


def test_non_interactive_denies_whatever_is_not_granted(make_runtime) -> None:
    outcome = call(make_runtime(asker=non_interactive), "touch out.txt")
    assert isinstance(outcome.error, DeniedByUser)
    assert outcome.decision.reason == "non-interactive: nothing granted this key"


def test_the_prompt_offers_always_this_project_only_where_the_ceiling_allows(
    make_runtime, project
) -> None:
    write_config(project, SHELL_BOUND)
    shell_asker = RecordingAsker(Answer.DENY)
    call(make_runtime(asker=shell_asker), "touch out.txt")
    shown = shell_asker.requests[0]
    assert shown.choices == (Answer.ONCE, Answer.SESSION, Answer.DENY)
    assert "ceiling is AlwaysThisSession" in shown.why_not_project
    write_config(project, {})  # the default: contained in @bwrap
    contained_asker = RecordingAsker(Answer.DENY)
    call(make_runtime(asker=contained_asker), "touch out.txt")
    assert contained_asker.requests[0].choices == (
        Answer.ONCE,
        Answer.SESSION,
        Answer.PROJECT,
        Answer.PROJECT_ANY,
        Answer.EVERY_PROJECT,
        Answer.DENY,
    )
    assert contained_asker.requests[0].environment is EnvironmentTag.BWRAP
    write_config(project, DOCKER_BOUND)
    docker_asker = RecordingAsker(Answer.DENY)
    call(make_runtime(asker=docker_asker), "touch out.txt")
    assert docker_asker.requests[0].choices == (
        Answer.ONCE,
        Answer.SESSION,
        Answer.PROJECT,
        Answer.PROJECT_ANY,
        Answer.EVERY_PROJECT,
        Answer.DENY,
    )
    assert docker_asker.requests[0].environment is EnvironmentTag.DOCKER


# --- AlwaysThisProject and the ceiling check at grant ---------------------------------------


def test_always_this_project_for_a_shell_tool_is_a_ceiling_violation_and_not_granted(
    make_runtime, project
) -> None:
    write_config(project, SHELL_BOUND)
    runtime = make_runtime(asker=RecordingAsker(Answer.PROJECT))
    outcome = call(runtime, "git status")
    assert isinstance(outcome.error, CeilingViolation)
    assert "permanent trust goes only to sandboxed tools" in str(outcome.error)
    assert "allowlist" not in (project / "codecoder.json").read_text()
    assert ran(runtime) == []


def test_always_this_project_for_a_sandboxed_tool_is_written_and_used_by_a_new_process(
    make_runtime, project
) -> None:
    write_config(project, DOCKER_BOUND)
    first = make_runtime(asker=RecordingAsker(Answer.PROJECT))
    outcome = call(first, "cargo test")
    assert (outcome.ok, outcome.decision.source) == (True, Source.PROJECT)
    saved = json.loads((project / "codecoder.json").read_text())
    assert saved == {**DOCKER_BOUND, "allowlist": {"run_command:cargo:test": "AlwaysThisProject"}}
    assert call(first, "cargo test --release").decision.source is Source.PROJECT
    second = make_runtime(asker=never_ask)
    assert call(second, "cargo test -q").decision.matched == "run_command:cargo:test"
    assert "the runtime asked for run_command:cargo:publish" in str(
        call(second, "cargo publish").error
    )


def test_always_this_project_program_wide_records_the_program(make_runtime, project) -> None:
    write_config(project, DOCKER_BOUND)
    first = make_runtime(asker=RecordingAsker(Answer.PROJECT_PROGRAM))
    assert call(first, "cargo test").decision.matched == "run_command:cargo"
    saved = json.loads((project / "codecoder.json").read_text())
    assert saved["allowlist"] == {"run_command:cargo": "AlwaysThisProject"}
    second = make_runtime(asker=never_ask)
    assert call(second, "cargo fmt").decision.matched == "run_command:cargo"


def test_a_project_grant_is_refused_when_the_file_broke_since_it_was_read_and_it_is_kept(
    make_runtime, project
) -> None:
    write_config(project, {})
    runtime = make_runtime(
        asker=RecordingAsker(Answer.PROJECT), tools={**builtin_tools(), "stamp": Stamp()}
    )
    broken = '{"allowlist": {"stamp:a": "AlwaysThisProject",}}\n'
    write_config(project, broken)
    outcome = runtime.session().call("stamp", {"text": "a"})
    assert isinstance(outcome.error, DeniedByUser)
    assert "not usable" in str(outcome.error)
    assert (project / "codecoder.json").read_text() == broken


def test_a_file_broken_at_load_refuses_every_call_that_needs_permission_before_asking(
    make_runtime, project
) -> None:
    broken = '{"allowlist": {"stamp:a": "AlwaysThisProject",}}\n'
    write_config(project, broken)
    asker = RecordingAsker(Answer.PROJECT)
    runtime = make_runtime(asker=asker, tools={**builtin_tools(), "stamp": Stamp()})
    assert runtime.diagnostics[0].code == "syntax"
    outcome = runtime.session().call("stamp", {"text": "a"})
    assert isinstance(outcome.error, RulesUnreadable)
    assert outcome.decision is not None and outcome.decision.source is Source.DENY
    assert f"{project / 'codecoder.json'}:1:47: error: [syntax]" in str(outcome.error)
    assert asker.requests == []
    assert (project / "codecoder.json").read_text() == broken


def test_a_malformed_file_grants_nothing(make_runtime, project) -> None:
    write_config(
        project,
        '{"environments": {"run_command": "@docker"}, "allowlist": '
        '{"run_command:ls": "AlwaysThisProject"}, "typo": 1}',
    )
    runtime = make_runtime(asker=RecordingAsker())
    assert [d.code for d in runtime.diagnostics] == ["schema"]
    assert isinstance(call(runtime, "ls").error, RulesUnreadable)


# --- compound commands and wildcards --------------------------------------------------------


def test_a_simple_grant_never_covers_a_compound_command(make_runtime, project) -> None:
    write_config(
        project,
        {
            **DOCKER_BOUND,
            "allowlist": {
                "run_command:git": "AlwaysThisProject",
                "run_command:*": "AlwaysThisProject",
                "run_command:git:*": "AlwaysThisProject",
            },
        },
    )
    asker = RecordingAsker()
    runtime = make_runtime(asker=asker)
    for command in [
        "git status && git push",
        "git status; rm -rf /",
        "git log | sh",
        "GIT_SSH_COMMAND=evil git fetch",
        "env git status",
        "git $(echo push)",
    ]:
        outcome = call(runtime, command)
        assert isinstance(outcome.error, DeniedByUser), command
    assert next(r.key for r in asker.requests) == 'run_command:"git status && git push"'
    assert ran(runtime, EnvironmentTag.DOCKER) == []


def test_a_compound_command_is_granted_only_by_its_exact_key_and_runs_as_approved(
    make_runtime, project
) -> None:
    write_config(project, SHELL_BOUND)
    asker = RecordingAsker(Answer.SESSION)
    runtime = make_runtime(asker=asker)
    session = runtime.session()
    assert call(runtime, "make && make test", session).decision.source is Source.SESSION
    assert call(runtime, "make && make test", session).decision.source is Source.SESSION
    assert isinstance(call(runtime, "make && make install", session).error, DeniedByUser)
    assert [r.script for r in ran(runtime)] == ["make && make test"] * 2


def test_a_subcommand_grant_covers_only_that_subcommand(make_runtime, project) -> None:
    write_config(
        project, {**DOCKER_BOUND, "allowlist": {"run_command:git:status": "AlwaysThisProject"}}
    )
    runtime = make_runtime(asker=RecordingAsker())
    assert call(runtime, "git status -s").decision.source is Source.PROJECT
    assert isinstance(call(runtime, "git push").error, DeniedByUser)
    assert isinstance(call(runtime, "git -c x=y status").error, DeniedByUser)


# --- protected paths ------------------------------------------------------------------------


def test_a_command_naming_a_protected_path_is_allowed_at_most_once(make_runtime, project) -> None:
    write_config(project, {**DOCKER_BOUND, "allowlist": {"run_command:cp": "AlwaysThisProject"}})
    asker = RecordingAsker(Answer.SESSION, Answer.ONCE)
    runtime = make_runtime(asker=asker)
    session = runtime.session()
    refused = call(runtime, "cp evil .git/hooks/pre-commit", session)
    assert isinstance(refused.error, CeilingViolation)
    assert asker.requests[0].choices == (Answer.ONCE, Answer.DENY)
    once = call(runtime, "cp evil .git/hooks/pre-commit", session)
    assert once.decision.source is Source.ONCE
    assert call(runtime, "cp a b", session).decision.source is Source.PROJECT


def test_a_session_grant_covers_only_the_environment_it_was_approved_in(
    make_runtime, project
) -> None:
    # Approved while run_command ran in the container; the binding is then removed and the
    # file reloaded: the same command would now run on the host, which nobody approved.
    write_config(project, DOCKER_BOUND)
    asker = RecordingAsker(Answer.SESSION)
    runtime = make_runtime(asker=asker)
    session = runtime.session()
    assert call(runtime, "git status", session).decision.source is Source.SESSION
    assert call(runtime, "git status", session).decision.source is Source.SESSION
    write_config(project, SHELL_BOUND)
    runtime.reload()

    on_host = call(runtime, "git status", session)

    assert isinstance(on_host.error, DeniedByUser)
    assert [(r.key, r.environment) for r in asker.requests] == [
        ("run_command:git:status", EnvironmentTag.DOCKER),
        ("run_command:git:status", EnvironmentTag.SHELL),
    ]
    assert runtime._environments[EnvironmentTag.SHELL].requests == []


# --- reload ---------------------------------------------------------------------------------


def test_edits_to_the_file_apply_only_after_reload(make_runtime, project) -> None:
    write_config(project, DOCKER_BOUND)  # where `ls` asks (in @bwrap it is read-only)
    runtime = make_runtime(asker=RecordingAsker())
    write_config(project, {**DOCKER_BOUND, "allowlist": {"run_command:ls": "AlwaysThisProject"}})
    assert isinstance(call(runtime, "ls").error, DeniedByUser)
    assert runtime.reload() == []
    assert call(runtime, "ls").decision.source is Source.PROJECT
    write_config(project, '{"allowlist": ')
    diagnostics = runtime.reload()
    assert [(d.code, d.severity) for d in diagnostics] == [
        ("syntax", "error"),
        ("kept_last_good", "error"),
    ]
    assert call(runtime, "ls").decision.source is Source.PROJECT  # the last good rules
    write_config(project, DOCKER_BOUND)
    assert runtime.reload() == []
    assert isinstance(call(runtime, "ls").error, DeniedByUser)


# --- audit ----------------------------------------------------------------------------------


def test_every_call_leaves_one_audit_record_with_its_source(make_runtime, project) -> None:
    write_config(
        project,
        {
            **DOCKER_BOUND,
            "allowlist": {"run_command:ls": "AlwaysThisProject"},
            "deny": ["run_command:rm"],
        },
    )
    runtime = make_runtime(asker=RecordingAsker(Answer.ONCE, Answer.SESSION, Answer.DENY))
    session = runtime.session()
    for command in ["ls", "rm x", "cat a", "pwd", "pwd", "touch b"]:
        call(runtime, command, session)
    session.call("run_command", {})
    records = list(runtime.audit.read())
    assert [(r["key"], r["source"], r["outcome"]) for r in records] == [
        ("run_command:ls", "project", "ok"),
        ("run_command:rm", "deny", "denied"),
        ("run_command:cat", "once", "ok"),
        ("run_command:pwd", "session", "ok"),
        ("run_command:pwd", "session", "ok"),
        ("run_command:touch", "denied", "denied"),
        (None, None, "invalid"),
    ]
    assert all(
        r["session"] == session.id and r["environment"] in ("@docker", None) for r in records
    )
    assert runtime.audit.path == project_state_directory(project) / "audit.jsonl"


@pytest.mark.parametrize("answer", list(Answer))
def test_the_decision_explains_itself_for_every_answer(make_runtime, project, answer) -> None:
    write_config(project, DOCKER_BOUND)
    outcome = call(make_runtime(asker=RecordingAsker(answer)), "ls")
    decision = outcome.decision.to_json()
    assert decision["answer"] == answer.value
    assert decision["reason"]
    assert decision["key"] == "run_command:ls"


def test_the_project_directory_must_exist(tmp_path: Path) -> None:
    from codecoder.session import Runtime

    with pytest.raises(FileNotFoundError):
        Runtime(tmp_path / "missing")


# --- grants pinned to a digest ---------------------------------------------------------------


class PinnedParameters(Parameters):
    name: str
    code: str


class Pinned(Tool[PinnedParameters]):
    """An Ask tool whose key is pinned to the digest of what it would run, like a capability."""

    name = "pinned"
    description = "runs pinned code"
    category = Category.AGENT
    environment = EnvironmentTag.WASM
    parameters = PinnedParameters

    def permission(self, args: PinnedParameters) -> Permission:
        return Permission.ask(
            PermissionKey.named(self.name, args.name, digest=f"sha256:{args.code}")
        )

    def execute(self, args: PinnedParameters, ctx: ToolContext) -> ToolResult:
        return ToolResult(output=f"ran {args.code}")


def pinned_call(make_runtime: Any, asker: Any, code: str) -> Any:
    runtime = make_runtime(asker=asker, tools={**builtin_tools(), "pinned": Pinned()})
    return runtime.session().call("pinned", {"name": "lint", "code": code})


def test_a_pinned_project_grant_records_its_digest_and_holds_only_for_it(
    make_runtime, project
) -> None:
    granted = pinned_call(make_runtime, RecordingAsker(Answer.PROJECT), "v1")
    assert granted.decision.source is Source.PROJECT
    assert json.loads((project / "codecoder.json").read_text()) == {
        "allowlist": {"pinned:lint": {"scope": "AlwaysThisProject", "digest": "sha256:v1"}}
    }
    assert pinned_call(make_runtime, never_ask, "v1").decision.source is Source.PROJECT
    asker = RecordingAsker(Answer.ONCE)
    changed = pinned_call(make_runtime, asker, "v2")
    assert changed.decision.source is Source.ONCE
    assert "changed since it was approved" in asker.requests[0].note


def test_a_pinned_key_is_not_granted_by_an_entry_without_its_digest(make_runtime, project) -> None:
    write_config(project, {"allowlist": {"pinned:lint": "AlwaysThisProject"}})
    asker = RecordingAsker(Answer.DENY)
    outcome = pinned_call(make_runtime, asker, "v1")
    assert isinstance(outcome.error, DeniedByUser)
    assert "has no digest" in asker.requests[0].note


def test_a_session_grant_for_a_pinned_key_ends_when_the_digest_changes(make_runtime) -> None:
    asker = RecordingAsker(Answer.SESSION, Answer.DENY)
    runtime = make_runtime(asker=asker, tools={**builtin_tools(), "pinned": Pinned()})
    session = runtime.session()
    first = session.call("pinned", {"name": "lint", "code": "v1"})
    again = session.call("pinned", {"name": "lint", "code": "v1"})
    changed = session.call("pinned", {"name": "lint", "code": "v2"})
    assert (first.decision.source, again.decision.source) == (Source.SESSION, Source.SESSION)
    assert isinstance(changed.error, DeniedByUser)


def test_a_runtime_can_pin_a_tool_to_another_environment_it_may_run_in(project) -> None:
    from codecoder.foundation.errors import UsageError
    from codecoder.session import Runtime

    with Runtime(project, bindings={"read_file": EnvironmentTag.WASM}) as runtime:
        assert runtime.environment_of("read_file") is EnvironmentTag.WASM
    with (
        Runtime(project, bindings={"read_file": EnvironmentTag.SHELL}) as runtime,
        pytest.raises(UsageError, match="read_file cannot run in @shell"),
    ):
        runtime.environment_of("read_file")
