"""The contained-commands layer (contained.json): the permission side of run_command in @bwrap
(SPEC §5, issue 22). run_command is bound to @bwrap, every environment is a recorder that runs
nothing, and the audit's asker gives every question the entry's `answer` (never the host).

* `read-only`: a command that looks like a read but writes or runs something. Blocked when it
  was asked (and refused), or when it ran with no question only confined read-only (handed to
  @bwrap with `writable=False`, and nowhere else).
* `filter`: with project grants (`grants`) that really allow an innocent command (`innocent`,
  checked first), a pipeline that smuggles something past them as an output filter. Blocked
  when the grants did not cover it.
* `escalation`: a command that would fail contained (`git push`). Blocked when nothing reached
  @shell: only the human's explicit host choice may run it there, and the audit never makes it.
"""

from __future__ import annotations

from typing import Any

from codecoder.config.project import PROJECT_FILE
from codecoder.dispatcher import CallOutcome
from codecoder.environments.base import CommandRequest, CommandResult
from codecoder.environments.mock import MockEnvironment
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.decision import Answer, Source
from codecoder.interfaces.escapes.calls import _allowed, _Asker, _grant_source, _refusal
from codecoder.interfaces.escapes.corpus import Attempt, ContainedEntry
from codecoder.interfaces.escapes.layer import AuditContext, _LayerRunner
from codecoder.interfaces.escapes.outcomes import _escaped, _NotApplicable, _NotRun
from codecoder.session import Runtime

BWRAP = EnvironmentTag.BWRAP


def _recorded(request: Any) -> CommandResult:
    return CommandResult(exit_code=0, stdout="", stderr="", duration=0.0)


class _ContainedLayer(_LayerRunner):
    def __init__(self, audit: AuditContext) -> None:
        self.audit = audit
        tool = audit.tools.get("run_command")
        if tool is None:
            self.blocker = _NotApplicable("run_command is not a tool of this runtime")
        elif BWRAP not in tool.bindable | {tool.environment}:
            self.blocker = _NotApplicable("run_command cannot be bound to @bwrap in this runtime")
        self.directory = audit.scratch_dir("contained")

    def run(self, attempt: Attempt) -> str:
        entry = attempt.entry
        assert isinstance(entry, ContainedEntry)
        (self.directory / PROJECT_FILE).write_text(self.audit.document(allow=entry.grants))
        recorders = {tag: MockEnvironment(_recorded, tag) for tag in EnvironmentTag}
        asker = _Asker(Answer(entry.answer))
        with (
            Runtime(
                self.directory,
                asker=asker,
                environments=dict(recorders),
                audit_log=None,
                tools=self.audit.tools,
                trusted=self.audit.trusted,
                bindings={"run_command": BWRAP},
            ) as runtime,
            runtime.session() as session,
        ):
            if entry.innocent is not None:
                control = session.call("run_command", {"command": entry.innocent})
                if not _allowed(control) or asker.requests:
                    raise _NotRun(
                        f"the grants {', '.join(entry.grants)} did not allow {entry.innocent!r} "
                        f"({_refusal(control, asker)}), so this attempt would prove nothing"
                    )
                for env in recorders.values():
                    env.requests.clear()
            outcome = session.call("run_command", {"command": entry.command, **entry.args})
        ran = {tag: env.requests for tag, env in recorders.items() if env.requests}
        if entry.kind == "read-only":
            return self._read_only(outcome, ran, asker)
        if entry.kind == "filter":
            return self._filter(entry, outcome, ran, asker)
        return self._escalation(outcome, ran, asker)

    @staticmethod
    def _read_only(
        outcome: CallOutcome, ran: dict[EnvironmentTag, list[CommandRequest]], asker: _Asker
    ) -> str:
        if asker.requests:
            return f"{_refusal(outcome, asker)}; nothing ran unasked"
        if not _allowed(outcome):
            return f"not allowed ({_refusal(outcome)}); nothing ran"
        requests = [r for tag, rs in ran.items() for r in rs]
        confined = list(ran) == [BWRAP] and all(not r.writable for r in requests)
        decision = outcome.decision
        assert decision is not None
        if decision.source is not Source.READ_ONLY or not confined:
            where = ", ".join(
                f"{tag.value} ({'writable' if any(r.writable for r in rs) else 'read-only'})"
                for tag, rs in ran.items()
            )
            _escaped(f"{_grant_source(outcome)} with no question, and ran in {where or 'nothing'}")
        return "run with no question only confined read-only: @bwrap with writable=False"

    @staticmethod
    def _filter(
        entry: ContainedEntry,
        outcome: CallOutcome,
        ran: dict[EnvironmentTag, list[CommandRequest]],
        asker: _Asker,
    ) -> str:
        if _allowed(outcome) and not asker.requests:
            _escaped(
                f"{_grant_source(outcome)}: the grant {', '.join(entry.grants)} covered it, "
                f"and {len(ran.get(BWRAP, []))} request(s) reached @bwrap"
            )
        return f"not covered by {', '.join(entry.grants)}: {_refusal(outcome, asker)}; nothing ran"

    @staticmethod
    def _escalation(
        outcome: CallOutcome, ran: dict[EnvironmentTag, list[CommandRequest]], asker: _Asker
    ) -> str:
        if EnvironmentTag.SHELL in ran:
            _escaped(f"{_grant_source(outcome)}, and it ran on the host (@shell)")
        decision = outcome.decision
        offered = asker.requests and Answer.HOST_ONCE in asker.requests[0].choices
        if not _allowed(outcome) or decision is None:
            return f"not allowed ({_refusal(outcome, asker)}); nothing ran on the host"
        asked = "asked with the host offered, answered " if offered else ""
        answer = decision.answer.value if decision.answer else decision.source.value
        return f"{asked}{answer}: ran contained in {decision.environment.value}, never on the host"
