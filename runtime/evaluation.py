"""Deciding without running: what the permission chain says about a call, and nothing else.

    evaluation = evaluate(session, "run_command", {"command": "git push"})
    evaluation.decision        # "allow" | "deny" | "ask"
    evaluation = await aevaluate(session, "run_command", {"command": "git push"})  # off the loop

The call is prepared as every call is (`Dispatcher.prepare`, which `Session.call` runs): the
same validation, the same key, the same deny rules, project and session grants and ceiling
checks (`PermissionChain.evaluate`).
Where the chain would ask the human, it stops at the question instead: nobody is asked, nothing
runs, no grant is recorded and no audit record is written. `codecoder decide` prints it; the
hooks for other agents (`runtime.interfaces.hooks`) answer their host from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.errors import DeniedByRule
from codecoder.permissions.prompt import AskRequest

if TYPE_CHECKING:
    from codecoder.session import Session

__all__ = ["Evaluation", "aevaluate", "evaluate"]

Verdict = Literal["allow", "deny", "ask"]


@dataclass(frozen=True, slots=True)
class Evaluation:
    """What the chain decided about one call, or the question it would have asked."""

    tool: str
    decision: Verdict
    environment: EnvironmentTag
    key: str | None
    source: str | None  # none / deny / read-only / project / session; None when it would ask
    matched: str | None  # the allowlist entry or deny rule that decided
    reason: str
    question: AskRequest | None = None  # what the human would be asked
    violations: tuple[str, ...] = ()
    protected: bool = False
    # The sandbox the call is bound to, when a session grant runs it on the host instead.
    escalated_from: EnvironmentTag | None = None

    @property
    def would_ask(self) -> bool:
        return self.question is not None

    def to_json(self) -> dict[str, Any]:
        question = self.question
        shown: dict[str, Any] = {
            "decision": self.decision,
            "tool": self.tool,
            "key": self.key,
            "environment": self.environment.value,
            "source": self.source,
            "matched": self.matched,
            "would_ask": self.would_ask,
            "choices": [c.value for c in question.choices] if question else None,
            "options": [c.to_json() for c in question.options()] if question else None,
            "reason": self.reason,
            "violations": list(self.violations),
            "protected": self.protected,
        }
        if self.escalated_from is not None:
            shown["escalated_from"] = self.escalated_from.value
        return shown


def evaluate(session: Session, tool: str, args: Any) -> Evaluation:
    """The chain's verdict on `tool(args)` in `session`, with nothing asked, run or recorded:
    what `Session.call` would meet, from the same `Dispatcher.prepare` (the key as keyed where
    the call would run, the same chain, the same escalation).

    Raises UsageError (UnknownTool, InvalidArguments) for a call the runtime cannot consider.
    """
    prepared = session.prepare(tool, args)
    key = prepared.permission.key
    protected = key.protected if key is not None else False
    refusal = prepared.refusal
    if refusal is not None:
        decision = refusal.decision
        if not isinstance(refusal, DeniedByRule) or decision is None:
            raise refusal
        return Evaluation(
            tool,
            "deny",
            prepared.bound,
            decision.key,
            decision.source.value,
            decision.matched,
            decision.reason,
            violations=decision.violations,
            protected=protected,
        )
    question = prepared.question
    if question is not None:
        reason = question.note or "nothing grants this key: the human would be asked"
        return Evaluation(
            tool,
            "ask",
            prepared.bound,
            question.key,
            None,
            None,
            reason,
            question=question,
            protected=protected,
        )
    decision = prepared.decision
    assert decision is not None
    return Evaluation(
        tool,
        "allow",
        prepared.environment,
        decision.key,
        decision.source.value,
        decision.matched,
        decision.reason,
        violations=decision.violations,
        protected=protected,
        escalated_from=decision.escalated_from,
    )


async def aevaluate(session: Session, tool: str, args: Any) -> Evaluation:
    """`evaluate()` in a worker thread, for an event loop (it may parse a long command, or look
    once at what the machine can run)."""
    import anyio.to_thread

    return await anyio.to_thread.run_sync(evaluate, session, tool, args)
