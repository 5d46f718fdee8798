"""The audit records of another agent's hook (`interfaces.hooks`): every verdict it gives, with
who or what decided, and the call the agent's person approved at its own prompt once the agent
reports that it ran. A shell command the hook rewrote into `codecoder exec` is recorded there,
with the decision made again before it runs, and not here."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.state import project_state_directory

if TYPE_CHECKING:
    from codecoder.auditlog import AuditLog
    from codecoder.evaluation import Evaluation
    from codecoder.interfaces.hostcalls import Mapped

__all__ = ["Judged", "audit_ran", "audit_verdict"]


@dataclass(slots=True)
class Judged:
    """What a hook's verdict was made from, for its audit record."""

    mapped: Mapped | None = None
    evaluation: Evaluation | None = None
    user_rule: str | None = None  # the user's own agent setting that allowed it


def _audit_log(project: Path) -> AuditLog:
    from codecoder.auditlog import AuditLog

    return AuditLog(project_state_directory(project) / "audit.jsonl", project)


def audit_verdict(
    host: str,
    session_id: str,
    host_tool: str,
    project: Path,
    verdict: str,
    reason: str,
    judged: Judged,
) -> None:
    """Record the hook's verdict: who or what decided, and that the host, not codecoder,
    runs (or asks about) the call. A command rewritten into `codecoder exec` is recorded
    there, with the decision that counts (made again before it runs); nothing is lost."""
    from codecoder.foundation.decision import Decider, Decision, Source

    evaluation, mapped = judged.evaluation, judged.mapped
    tool = evaluation.tool if evaluation else (mapped.tool if mapped and mapped.tool else host_tool)
    environment = evaluation.environment if evaluation else EnvironmentTag.SHELL
    key = evaluation.key if evaluation else None
    unknown = mapped is not None and mapped.tool is None and not mapped.refused
    if verdict == "deny":
        nobody = (evaluation is not None and evaluation.decision == "ask") or unknown
        decision = Decision(
            False,
            Source.DENIED if nobody else Source.DENY,
            tool,
            environment,
            key,
            evaluation.matched if evaluation else None,
            reason=reason,
            decided_by=Decider.NON_INTERACTIVE if nobody else Decider.RULE,
        )
        outcome = "denied"
    else:
        source = Source.NONE
        if evaluation is not None and evaluation.source is not None:
            source = Source(evaluation.source)
        elif judged.user_rule is not None:
            source = Source.SESSION
        decision = Decision(
            True,
            source,
            tool,
            environment,
            key,
            (evaluation.matched if evaluation else None) or judged.user_rule,
            reason=reason,
            decided_by=Decider.RULE,
        )
        outcome = "handed-over" if verdict == "allow" else "asked"
    _audit_log(project).record(
        session=f"{host}:{session_id}",
        tool=tool,
        decision=decision,
        outcome=outcome,
        duration=0.0,
        error=reason if verdict == "deny" else None,
        front_end=f"hook {host}",
        host_tool=host_tool,
        asked=verdict == "ask",
    )


def audit_ran(
    host: str, session_id: str, host_tool: str | None, project: Path, question: dict[str, Any]
) -> None:
    """The host ran a call its person approved at the host's own prompt: recorded as that
    person's answer (once, or for the host's session)."""
    from codecoder.foundation.decision import Answer, Decider, Decision, Source

    session_wide = question.get("scope") == "session" and not question.get("protected")
    escalation = bool(question.get("host_key"))
    decision = Decision(
        True,
        Source.SESSION if session_wide else Source.ONCE,
        str(question.get("tool")),
        EnvironmentTag.SHELL if escalation else EnvironmentTag(str(question.get("environment"))),
        str(question.get("host_key") or question.get("key")),
        answer=Answer.SESSION if session_wide else Answer.ONCE,
        reason=f"approved at the {host} prompt, which ran it",
        decided_by=Decider.PERSON,
    )
    _audit_log(project).record(
        session=f"{host}:{session_id}",
        tool=decision.tool,
        decision=decision,
        outcome="ran",
        duration=0.0,
        front_end=f"hook {host}",
        host_tool=host_tool,
    )
