"""Tool calls an attempt makes through a session, and what is observed of them: environments that
record what they are given and run nothing, an asker that gives every prompt one answer and
keeps the requests, and a call's outcome in the words of the report (allowed by what, refused
how, how it ended).
"""

from __future__ import annotations

from typing import Any

from codecoder.dispatcher import CallOutcome
from codecoder.environments.base import CommandResult, Environment
from codecoder.environments.mock import MockEnvironment
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.decision import Answer, Source
from codecoder.permissions.prompt import AskRequest


class _Asker:
    """Answers every prompt with one answer (Deny: the non-interactive mode) and keeps them."""

    def __init__(self, answer: Answer = Answer.DENY) -> None:
        self.answer = answer
        self.requests: list[AskRequest] = []

    def __call__(self, request: AskRequest) -> Answer:
        self.requests.append(request)
        return self.answer


def _recorded(request: Any) -> CommandResult:
    return CommandResult(exit_code=0, stdout="", stderr="", duration=0.0)


def _recorders() -> tuple[MockEnvironment, dict[EnvironmentTag, Environment[Any, Any]]]:
    """One environment for every tag that records what it is given and runs nothing: a call
    that should have been refused must not run anything, even when the audit finds it allowed."""
    recorder = MockEnvironment(_recorded)
    return recorder, dict.fromkeys(EnvironmentTag, recorder)


def _allowed(outcome: CallOutcome) -> bool:
    return outcome.decision is not None and outcome.decision.allowed


def _refusal(outcome: CallOutcome, asker: _Asker | None = None) -> str:
    """How a call that was not allowed was stopped, in the words of its decision."""
    decision = outcome.decision
    if decision is None:
        return f"{type(outcome.error).__name__}: {outcome.error}"
    if decision.source is Source.DENY:
        return f"refused by the deny rule {decision.matched}"
    asked = asker is not None and bool(asker.requests)
    text = f"{decision.key}: {decision.reason}"
    if asked:
        text = f"asked for {text}"
    if decision.violations:
        text += f"; {decision.violations[-1]}"
    return text


def _grant_source(outcome: CallOutcome) -> str:
    decision = outcome.decision
    assert decision is not None
    return f"allowed ({decision.source.value}: {decision.matched or decision.reason})"


def _result_line(outcome: CallOutcome) -> str:
    """The gist of how a call ended: its error, or its exit code and last line of output."""
    if outcome.error is not None:
        return f"{type(outcome.error).__name__}: {_last_line(str(outcome.error))}"
    assert outcome.result is not None
    data = outcome.result.data
    text = str(data.get("stderr") or "") or str(data.get("stdout") or "")
    if "exit_code" not in data:
        text = text or outcome.result.output
    code = data.get("exit_code")
    return (f"exit code {code}, " if code is not None else "") + _last_line(text)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"
