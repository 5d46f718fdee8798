"""codecoder's tools as a pydantic-ai toolset.

    from pydantic_ai import Agent, DeferredToolRequests
    from codecoder.integrations.pydantic_ai import results, toolset

    agent = Agent(model, toolsets=[toolset(session)], output_type=[str, DeferredToolRequests])
    run = await agent.run("...")
    if isinstance(run.output, DeferredToolRequests):         # a call needs a person's answer
        answers = {call.tool_call_id: Answer.SESSION for call in run.output.approvals}
        run = await agent.run(message_history=run.all_messages(),
                              deferred_tool_results=results(run.output, answers))

Each tool of the session is offered with codecoder's own JSON schema (`interfaces.schemas`). A
call is decided by codecoder's chain, as every call is:

* allowed (a read, a read-only command, a grant, a rule): it runs, contained where it is bound,
  and its output is the tool's return;
* refused (a deny rule, a protected path, a broken rules file): nothing runs, and the refusal
  is returned to the model as a failed tool result (`ToolFailed`: it says why, and does not use
  up the tool's retries or end the run); so is a tool's own failure;
* invalid arguments: `ModelRetry`, naming each field, for the model to correct;
* needs a question: without an `asker`, the run ends with the call in
  `DeferredToolRequests.approvals` (raised as `ApprovalRequired`); its metadata, under
  "codecoder", is the question (`Evaluation.to_json()`: the key, the environment, the choices
  offered and what each records). Nothing has run. With an `asker`, the question is answered at
  once instead (a sync or async asker, `runtime.eventloop`).

On resuming, an approved call runs with the person's answer: the scope they chose travels in
`DeferredToolResults.metadata[tool_call_id]["codecoder"]["answer"]` (`results()` puts it
there): Once, AlwaysThisSession, AlwaysThisProject where the environment's ceiling allows it
(above the ceiling it is a CeilingViolation, refused, as at any prompt), or Deny, which
refuses it through codecoder (recorded in the audit log, the refusal returned to the model). A
plain `approvals={id: True}` counts as Once; a plain `ToolDenied` never reaches codecoder (the
model gets pydantic-ai's denial, and nothing is recorded).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic_ai import (
    ApprovalRequired,
    DeferredToolRequests,
    DeferredToolResults,
    ModelRetry,
    RunContext,
    ToolApproved,
    ToolDefinition,
    ToolFailed,
)
from pydantic_ai.toolsets import AbstractToolset, ToolsetTool
from pydantic_core import SchemaValidator, core_schema

from codecoder.dispatcher import CallOutcome
from codecoder.evaluation import aevaluate
from codecoder.eventloop import AsyncAsker
from codecoder.foundation.decision import Answer, Decider
from codecoder.foundation.errors import UsageError
from codecoder.interfaces.schemas import input_schema
from codecoder.permissions.prompt import Asker, fixed
from codecoder.session import Session

__all__ = ["CodecoderToolset", "results", "toolset"]

METADATA_KEY = "codecoder"
_ANY_ARGUMENTS = SchemaValidator(core_schema.any_schema())  # codecoder validates them itself


def toolset(
    session: Session,
    tools: Iterable[str] | None = None,
    asker: Asker | AsyncAsker | None = None,
) -> CodecoderToolset:
    """The session's tools (or those named in `tools`) as a pydantic-ai toolset; see the module
    docstring. `asker` answers questions during the run instead of deferring them."""
    return CodecoderToolset(session, tools, asker)


class CodecoderToolset(AbstractToolset[Any]):
    """A pydantic-ai toolset whose calls codecoder decides and runs (`toolset()`)."""

    def __init__(
        self,
        session: Session,
        tools: Iterable[str] | None = None,
        asker: Asker | AsyncAsker | None = None,
        *,
        id: str | None = "codecoder",
    ) -> None:
        self.session = session
        self._names = frozenset(tools) if tools is not None else None
        if self._names is not None:
            unknown = sorted(self._names - set(session.tools()))
            if unknown:
                raise UsageError(f"the session has no tool {', '.join(map(repr, unknown))}")
        self._asker = asker
        self._id = id
        self._listed: tuple[object, dict[str, ToolDefinition]] | None = None

    @property
    def id(self) -> str | None:
        return self._id

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        return {
            name: ToolsetTool(
                toolset=self, tool_def=definition, max_retries=1, args_validator=_ANY_ARGUMENTS
            )
            for name, definition in (await self._definitions()).items()
        }

    async def _definitions(self) -> dict[str, ToolDefinition]:
        """The tool definitions, made again only when the runtime's tools change (a reload,
        a new capability): finding where each runs may look at the machine once."""
        tools = self.session.tools()
        if self._listed is not None and self._listed[0] is tools:
            return self._listed[1]
        import anyio.to_thread

        definitions = await anyio.to_thread.run_sync(self._define, tools)
        self._listed = (tools, definitions)
        return definitions

    def _define(self, tools: Mapping[str, Any]) -> dict[str, ToolDefinition]:
        runtime = self.session.runtime
        found: dict[str, ToolDefinition] = {}
        for name, tool in tools.items():
            if self._names is not None and name not in self._names:
                continue
            definition = tool.definition(runtime.environment_of(name))
            found[name] = ToolDefinition(
                name=name,
                description=definition.description,
                parameters_json_schema=input_schema(definition),
            )
        return found

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        asker: Asker | AsyncAsker | None = self._asker
        if ctx.tool_call_approved:
            asker = fixed(_answer_of(ctx.tool_call_metadata), Decider.PERSON)
        elif asker is None:
            try:
                verdict = await aevaluate(self.session, name, tool_args)
            except UsageError as exc:
                raise ModelRetry(str(exc)) from None
            if verdict.decision == "ask":
                raise ApprovalRequired(metadata={METADATA_KEY: verdict.to_json()})
        outcome = await self.session.acall(name, tool_args, asker=asker, call_id=ctx.tool_call_id)
        return _returned(outcome)


def _answer_of(metadata: Any) -> Answer:
    """The answer a resumed approval carries (`results()`); Once when it carries none."""
    given = metadata.get(METADATA_KEY) if isinstance(metadata, Mapping) else None
    answer = given.get("answer") if isinstance(given, Mapping) else None
    if answer is None:
        return Answer.ONCE
    if isinstance(answer, Answer):
        return answer
    return Answer.parse(str(answer))


def _returned(outcome: CallOutcome) -> str:
    if outcome.ok:
        return outcome.text
    if isinstance(outcome.error, UsageError):
        raise ModelRetry(outcome.text)
    if outcome.error is None:  # the tool ran and failed (a command's exit code): its output
        return outcome.text
    raise ToolFailed(outcome.text)


def results(
    requests: DeferredToolRequests, answers: Mapping[str, Answer | str]
) -> DeferredToolResults:
    """The `DeferredToolResults` that resume `requests` with a person's answers, by
    `tool_call_id` (an `Answer`, or its name: "once", "AlwaysThisSession", "project", "deny"
    ...). Every approval of `requests` must be answered; each answer is carried to codecoder,
    a Deny too (so that codecoder records the refusal)."""
    pending = {call.tool_call_id for call in requests.approvals}
    unknown = sorted(set(answers) - pending)
    if unknown:
        raise UsageError(f"no approval is pending for {', '.join(unknown)}")
    missing = sorted(pending - set(answers))
    if missing:
        raise UsageError(f"no answer for {', '.join(missing)}")
    parsed = {
        call_id: answer if isinstance(answer, Answer) else Answer.parse(answer)
        for call_id, answer in answers.items()
    }
    return DeferredToolResults(
        approvals={call_id: ToolApproved() for call_id in parsed},
        metadata={
            call_id: {METADATA_KEY: {"answer": answer.value}} for call_id, answer in parsed.items()
        },
    )
