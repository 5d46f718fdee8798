"""codecoder's tools as OpenAI Agents SDK function tools, codecoder deciding their approval.

    from agents import Agent, Runner
    from codecoder.integrations.openai_agents import approve, question, reject, tools

    agent = Agent(name="coder", tools=tools(session))
    result = await Runner.run(agent, "...")
    while result.interruptions:                  # calls that need a person's answer
        state = result.to_state()
        for item in result.interruptions:
            print(question(item).key)            # what is asked: codecoder's question
            approve(state, item, Answer.SESSION) # or reject(state, item)
        result = await Runner.run(agent, state)

Each tool's `needs_approval` is codecoder's decision for the call (`evaluate`): True only where
codecoder would ask a person. A read (`grep`), a read-only command (`echo`, run confined
read-only) or a granted call needs none and runs; a call a rule refuses (a denied `rm`) needs
none either: it is refused when invoked, and the refusal is the tool's output, so the model reads
why. What a call returns is its output, or what refused or stopped it (`CallOutcome.text`).

A person's answer reaches codecoder when the approved call runs:

* `approve(state, item, answer)` / `reject(state, item)`: the answer as codecoder names it,
  at the scope chosen (Once, AlwaysThisSession, AlwaysThisProject where the environment's
  ceiling allows it); a rejection is recorded by codecoder as the person's Deny (nothing runs,
  nothing is granted) and its refusal is what the model is told.
* the SDK's own `state.approve(item)` counts as Once, and `state.approve(item,
  always_approve=True)` as `always` (AlwaysThisSession unless `tools(..., always=...)` says
  otherwise): codecoder grants the call's own key, the narrowest entry naming what the person
  saw. The SDK then approves every later call of that tool without asking; codecoder does not:
  each runs only if a grant or rule allows it, and is otherwise refused (the session's asker,
  by default nobody, answers), never run on the SDK's word. The SDK's own `state.reject(item)`
  never reaches codecoder: nothing ran, nothing is recorded.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from agents import FunctionTool, RunContextWrapper, RunState, ToolApprovalItem
from agents.tool_context import ToolContext

from codecoder.evaluation import aevaluate
from codecoder.foundation.decision import Answer, Decider
from codecoder.foundation.errors import UsageError
from codecoder.interfaces.schemas import openai_responses_tool
from codecoder.permissions.prompt import AskRequest, fixed
from codecoder.session import Session

__all__ = ["CodecoderTool", "approve", "question", "reject", "tools"]


@dataclass
class _Approvals:
    """The questions codecoder put to the SDK, and the answers given through `approve`."""

    always: Answer
    asked: dict[str, AskRequest] = field(default_factory=dict)
    answers: dict[str, Answer] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass
class CodecoderTool(FunctionTool):
    """A `FunctionTool` whose calls codecoder decides and runs (`tools()`)."""

    session: Session | None = field(default=None, kw_only=True, repr=False)
    approvals: _Approvals | None = field(default=None, kw_only=True, repr=False)


def tools(
    session: Session, tools: Iterable[str] | None = None, *, always: Answer = Answer.SESSION
) -> list[FunctionTool]:
    """The session's tools (or those named in `tools`) as function tools; see the module
    docstring. `always` is what the SDK's `always_approve=True` grants: AlwaysThisSession, or
    AlwaysThisProject (where the ceiling allows it)."""
    if always.scope not in (Answer.SESSION, Answer.PROJECT):
        raise UsageError(f"always={always.value!r}: an 'always' answer is a session or project one")
    available = session.tools()
    names = list(tools) if tools is not None else list(available)
    unknown = [name for name in names if name not in available]
    if unknown:
        raise UsageError(f"the session has no tool {', '.join(map(repr, unknown))}")
    approvals = _Approvals(always)
    made: list[FunctionTool] = []
    for name in names:
        definition = available[name].definition(session.runtime.environment_of(name))
        exported = openai_responses_tool(definition, strict=True)
        made.append(
            CodecoderTool(
                name=name,
                description=definition.description,
                params_json_schema=exported["parameters"],
                on_invoke_tool=_invoker(session, name, approvals),
                strict_json_schema=bool(exported["strict"]),
                needs_approval=_approval_check(session, name, approvals),
                session=session,
                approvals=approvals,
            )
        )
    return made


def _approval_check(session: Session, name: str, approvals: _Approvals) -> Any:
    async def needs_approval(
        context: RunContextWrapper[Any], params: dict[str, Any], call_id: str
    ) -> bool:
        try:
            verdict = await aevaluate(session, name, params)
        except UsageError:
            return False  # refused with its reason when invoked
        if verdict.question is None:
            return False
        with approvals.lock:
            approvals.asked[call_id] = verdict.question
        return True

    return needs_approval


def _invoker(session: Session, name: str, approvals: _Approvals) -> Any:
    async def invoke(context: ToolContext[Any], arguments: str) -> str:
        try:
            args = json.loads(arguments) if arguments else {}
        except ValueError as exc:
            return f"invalid call: the arguments are not JSON ({exc})"
        call_id = context.tool_call_id
        answer = _answer_for(context, name, call_id, approvals)
        outcome = await session.acall(
            name,
            args,
            asker=fixed(answer, Decider.PERSON) if answer is not None else None,
            call_id=call_id,
        )
        return outcome.text

    return invoke


def _answer_for(
    context: ToolContext[Any], name: str, call_id: str, approvals: _Approvals
) -> Answer | None:
    """The person's answer to this very call, if they were asked about it: given through
    `approve()`, or read from the SDK's approval (Once; `approvals.always` if the person
    approved the tool for good). None: nobody was asked about this call."""
    with approvals.lock:
        given = approvals.answers.pop(call_id, None)
        asked = approvals.asked.pop(call_id, None)
    if given is not None:
        return given
    if asked is None or context.is_tool_approved(name, call_id) is not True:
        return None
    # A decision the SDK keeps for the tool as a whole also answers a call it never saw.
    sticky = context.is_tool_approved(name, f"codecoder-unseen-{call_id}") is True
    return approvals.always if sticky else Answer.ONCE


def _tool_of(item: ToolApprovalItem) -> CodecoderTool:
    for tool in getattr(item.agent, "tools", ()):
        if isinstance(tool, CodecoderTool) and tool.name == item.tool_name:
            return tool
    raise UsageError(f"{item.tool_name!r} is not one of codecoder's tools of this agent")


def _call_id(item: ToolApprovalItem) -> str:
    raw = item.raw_item
    call_id = raw.get("call_id") if isinstance(raw, dict) else getattr(raw, "call_id", None)
    if not isinstance(call_id, str) or not call_id:
        raise UsageError("the interruption names no call")
    return call_id


def question(item: ToolApprovalItem) -> AskRequest | None:
    """What codecoder asks about the interrupted call (the key, the environment, the choices
    and what each records: `AskRequest.options()`), or None for another tool's interruption."""
    try:
        tool = _tool_of(item)
    except UsageError:
        return None
    assert tool.approvals is not None
    with tool.approvals.lock:
        return tool.approvals.asked.get(_call_id(item))


def approve(state: RunState[Any], item: ToolApprovalItem, answer: Answer | str = "once") -> None:
    """Approve the interrupted call with `answer` (an `Answer` or its name: "once",
    "AlwaysThisSession", "project" ...), which codecoder applies when the call runs. A Deny
    rejects it (`reject`)."""
    tool = _tool_of(item)
    answer = answer if isinstance(answer, Answer) else Answer.parse(answer)
    if answer is Answer.DENY:
        reject(state, item)
        return
    assert tool.approvals is not None
    with tool.approvals.lock:
        tool.approvals.answers[_call_id(item)] = answer
    state.approve(item)  # this call only: the SDK asks codecoder again about the next one


def reject(state: RunState[Any], item: ToolApprovalItem, message: str | None = None) -> None:
    """Reject the interrupted call: codecoder records the person's Deny (nothing runs), and its
    refusal, or `message`, is what the model is told."""
    tool = _tool_of(item)
    assert tool.session is not None and tool.approvals is not None
    call_id = _call_id(item)
    with tool.approvals.lock:
        tool.approvals.asked.pop(call_id, None)
        tool.approvals.answers.pop(call_id, None)
    try:
        args = json.loads(item.arguments or "{}")
    except ValueError:
        args = {}
    # Stopped before it starts, whatever happens: should a grant allow the call by now (no
    # question asked), it is cancelled before it runs instead of run.
    stopped = threading.Event()
    stopped.set()
    outcome = tool.session.call(
        tool.name, args, asker=fixed(Answer.DENY, Decider.PERSON), cancel=stopped, call_id=call_id
    )
    state.reject(item, rejection_message=message or outcome.text)
