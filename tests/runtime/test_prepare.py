"""What `decide` says is what `call` does: both go through `Dispatcher.prepare`, so for every
call of a table the verdict of `evaluate` (codecoder decide, the hooks) equals what the call
met: the same decision, source, key and entry, the same environment, the same question."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from codecoder.evaluation import evaluate
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.decision import Answer
from codecoder.foundation.errors import PermissionDenied
from codecoder.session import Runtime
from tests.conftest import RecordingAsker, write_config

CONFIG = {
    "allowlist": {
        "run_command:make": "AlwaysThisProject",
        "write_file:docs/**": "AlwaysThisProject",
    },
    "deny": ["run_command:git:push", "write_file:secret.txt"],
    "environments": {"commit": "@shell"},
}
CALLS: list[tuple[str, dict[str, Any]]] = [
    ("read_file", {"path": "README.md"}),
    ("run_command", {"command": "make test"}),
    ("run_command", {"command": "git push origin main"}),
    ("run_command", {"command": "git status && git push"}),
    ("run_command", {"command": "npm install"}),
    ("run_command", {"command": "ls -la"}),
    ("run_command", {"command": "cat README.md | wc -l"}),
    ("write_file", {"path": "docs/a.md", "content": "x"}),
    ("write_file", {"path": "secret.txt", "content": "x"}),
    ("write_file", {"path": "codecoder.json", "content": "{}"}),
    ("commit", {"message": "m"}),
    ("todo", {"action": "list"}),
]


@pytest.mark.parametrize(("tool", "args"), CALLS, ids=[f"{t}:{a}" for t, a in CALLS])
def test_decide_says_what_call_does(
    make_runtime: Callable[..., Runtime], project: Path, tool: str, args: dict[str, Any]
) -> None:
    (project / "README.md").write_text("hello\n")
    write_config(project, CONFIG)
    asker = RecordingAsker(Answer.DENY)
    with make_runtime(asker) as runtime:
        session = runtime.session()
        verdict = evaluate(session, tool, args)
        outcome = session.call(tool, args)

    decision = outcome.decision
    if verdict.decision == "ask":
        # The call asked exactly the question decide said it would (answered Deny here).
        assert verdict.question is not None
        (asked,) = asker.requests
        assert (asked.key, asked.choices, asked.environment) == (
            verdict.question.key,
            verdict.question.choices,
            verdict.question.environment,
        )
        assert isinstance(outcome.error, PermissionDenied)
        return
    assert asker.requests == []
    assert decision is not None
    assert (verdict.decision == "allow") == decision.allowed
    assert (verdict.key, verdict.source, verdict.matched) == (
        decision.key,
        decision.source.value,
        decision.matched,
    )
    assert verdict.environment == decision.environment
    if verdict.decision == "deny":
        assert isinstance(outcome.error, PermissionDenied)
    else:
        assert outcome.error is None or not isinstance(outcome.error, PermissionDenied)


def test_every_verdict_of_the_table_occurs(
    make_runtime: Callable[..., Runtime], project: Path
) -> None:
    """The table covers allowing without a key, by a grant, refusing by a rule, and asking."""
    (project / "README.md").write_text("hello\n")
    write_config(project, CONFIG)
    with make_runtime() as runtime:
        session = runtime.session()
        verdicts = {evaluate(session, tool, args).decision for tool, args in CALLS}
        sources = {evaluate(session, tool, args).source for tool, args in CALLS}
    assert verdicts == {"allow", "deny", "ask"}
    assert {"none", "project", "deny", "read-only"} <= sources


def test_a_prepared_call_names_where_it_runs(
    make_runtime: Callable[..., Runtime], project: Path
) -> None:
    write_config(project, CONFIG)
    with make_runtime() as runtime:
        prepared = runtime.session().prepare("run_command", {"command": "make test"})
    assert prepared.bound is EnvironmentTag.BWRAP
    assert prepared.environment is EnvironmentTag.BWRAP
    assert prepared.key is not None and prepared.key.raw == "run_command:make:test"
    assert prepared.decision is not None and prepared.decision.allowed
    assert prepared.decision.matched == "run_command:make"
    assert prepared.question is None and prepared.refusal is None
