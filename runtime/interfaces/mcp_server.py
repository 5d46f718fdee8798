"""`codecoder serve`: the project's tools over MCP (stdio), asking the human through elicitation.

    codecoder serve --project DIR [--allow KEY ...]

The server is one long-running process holding one `Session`: session grants live as long as
it does (`--allow` adds some at the start, ceiling-checked). Every tool of the runtime is listed
with its JSON Schema, a title and annotations derived from the tool model, and an output schema
where its result carries more than text (`runtime.interfaces.schemas.mcp_tool`); every call goes
through `Session.call()`, the same chain as every other interface. A call that fails in any way
(denied, invalid arguments, unknown tool, the tool's own failure) is an MCP tool result with
`isError: true`, never a protocol error.

Results. `content` is the text the model needs, once, and all of it: no `structuredContent`
(nor `outputSchema`), because clients that receive it show the model that *instead of* the
text (Codex does). What a program may want in a form it reads (a command's exit code, whether
its output was truncated; the text says both too), the decision and the call's duration travel
in `_meta` (`codecoder/result`, `codecoder/decision`, `codecoder/duration_ms`), which clients
do not hand to the model.

Concurrency. Calls that need no permission run as soon as they arrive, alongside a running
call and alongside a question waiting for the human. Calls that may ask take turns, in order:
one question at a time, and an answer is never given to a call it was not asked for.

Cancellation. `notifications/cancelled` stops the call: a command's process group is killed
(@shell) or its container discarded (@docker), a question still waiting is withdrawn, and the
call is audited with the outcome `cancelled`. Progress a tool reports goes to the client as
`notifications/progress` when the request carried a progress token: for a command, from its
first second on, its latest lines (runtime.tools.liveoutput). A command killed at its deadline
reports the output it printed before, in the error's text.

Asking. The engine's asker is synchronous and is called inside `Session.call()`, while the
server is async. Each call therefore runs in a worker thread, and the asker reaches back into
the event loop for the question:

* on a handshake-era connection (`initialize`, protocol up to 2025-11-25) it sends the client an
  `elicitation/create` request (`anyio.from_thread.run`) and blocks the worker until the human
  answers; the event loop keeps serving the connection meanwhile;
* a 2026-07-28 connection forbids server-to-client requests: the call stops before anything
  runs and returns `input_required` with the same elicitation embedded; when the client retries
  with the answer, the call is run again and the answer is given to the asker, but only for the
  very question it was asked (a one-time state token, kept here, not trusted from the client);
* a client that declared no elicitation support gets a "permission required" tool error that
  names the key and how it can be granted. Nothing is ever allowed because nobody was asked.

The form offers exactly `AskRequest.choices` (AlwaysThisProject only where the ceiling allows;
the message says why it is missing) and shows the key, the environment and the full subject
through `visible()`. Only an accepted, offered choice is an answer. A client that declines or
cancels the question (a headless client does so without showing it to anyone) is reported as
exactly that, not as a human's Deny; nothing runs either way.

Tool list changes. The server declares `tools.listChanged` and sends
`notifications/tools/list_changed` after a call changed the tools (`create_capability`) and
after a reload.

Reload is never automatic: SIGHUP applies codecoder.json as it now is and logs its
diagnostics to stderr. `codecoder reload` finds the project's servers through their pid files
(`.codecoder/run/serve-<pid>.pid`, written once the SIGHUP handler is in place, removed at
exit; stale ones are ignored and removed) and signals them.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shlex
import signal
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Final, Literal, TextIO

import anyio
import anyio.abc
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
import mcp.types as types
from anyio.lowlevel import EventLoopToken
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.session import ServerSession
from mcp.server.stdio import stdio_server
from mcp.types.version import MODERN_PROTOCOL_VERSIONS

# The audit log's helper creates .codecoder/ with its .gitignore; a second way would drift.
from codecoder.config.projectfile import Diagnostic, format_diagnostic
from codecoder.dispatcher import CallOutcome, validate_arguments
from codecoder.foundation.decision import Answer, Decider, Decision, Source
from codecoder.foundation.display import visible
from codecoder.foundation.errors import (
    Cancelled,
    CodecoderError,
    DeniedByUser,
    Unanswered,
)
from codecoder.foundation.regularfile import STATE_FILE_LIMIT, read_regular_file
from codecoder.foundation.state import workspace_directory
from codecoder.interfaces.livegrants import LiveProcess, Publisher, start_time
from codecoder.interfaces.schemas import mcp_tool
from codecoder.permissions.allowlist import Lifetime
from codecoder.permissions.prompt import (
    GUTTER,
    AskRequest,
    describe,
    key_for_person,
    non_interactive,
    why_not_project,
)
from codecoder.session import Runtime, Session

__all__ = [
    "ANSWER_FIELD",
    "ToolServer",
    "answer_of",
    "elicitation_message",
    "elicitation_schema",
    "live_servers",
    "permission_required_message",
    "pid_directory",
    "question_refused",
    "serve",
    "signal_servers",
    "tool_result",
]

ANSWER_FIELD: Final = "decision"
"""The one field of the elicitation form: the answer, one of `AskRequest.choices`."""

_INPUT_KEY: Final = "permission"  # the key of the embedded elicitation in `input_required`
_MAX_OPEN_QUESTIONS: Final = 64  # questions awaiting a client's retry; the oldest are dropped

SERVER_LIFETIME: Final = Lifetime(
    "while this MCP server runs (until its client disconnects)",
    "kept in the server's memory; `codecoder allowlist list` shows it",
)
"""What "this session" is for a grant made through the server."""

_TITLED_ENUM_SINCE: Final = "2025-11-25"  # oneOf/const/title; earlier revisions used enumNames
_META: Final = "codecoder"  # the prefix of this server's `_meta` keys


# --- what the human sees ------------------------------------------------------------------


def elicitation_message(request: AskRequest) -> str:
    """The question, with everything that comes from the call made visible."""
    lines = ["codecoder: permission required"]
    for label, value in describe(request):
        if len(value) == 1:
            lines.append(f"{label}: {value[0]}")
        else:
            lines += [f"{label}:", *(f"  {GUTTER}{line}" for line in value)]
    if request.why_not_project:
        lines.append(f"AlwaysThisProject is not offered: {why_not_project(request)}")
    return "\n".join(lines)


def elicitation_schema(request: AskRequest, protocol_version: str) -> dict[str, Any]:
    """A one-field form offering exactly the request's choices.

    Clients of 2025-11-25 and later read titled choices as `oneOf` of `const`/`title`;
    earlier ones as `enum` with `enumNames`.
    """
    field: dict[str, Any] = {
        "type": "string",
        "title": "Allow this call?",
        "description": f"{key_for_person(request.key)} on {request.environment.value}",
    }
    options = request.options()
    if _titled_enums(protocol_version):
        field["oneOf"] = [{"const": c.answer.value, "title": c.title} for c in options]
    else:
        field["enum"] = [c.answer.value for c in options]
        field["enumNames"] = [c.title for c in options]
    return {"type": "object", "properties": {ANSWER_FIELD: field}, "required": [ANSWER_FIELD]}


def _titled_enums(protocol_version: str) -> bool:
    order = types.version.KNOWN_PROTOCOL_VERSIONS
    if protocol_version not in order:
        return True
    return order.index(protocol_version) >= order.index(_TITLED_ENUM_SINCE)


def answer_of(result: types.ElicitResult, request: AskRequest) -> Answer:
    """The answer an elicitation result gives: an accepted, offered choice.

    Anything else raises DeniedByUser saying what happened (`question_refused`).
    """
    refusal = question_refused(result, request)
    if refusal is not None:
        raise refusal
    assert result.content is not None
    value = result.content[ANSWER_FIELD]
    assert isinstance(value, str)
    return Answer.parse(value)


def question_refused(result: types.ElicitResult, request: AskRequest) -> DeniedByUser | None:
    """None for an accepted, offered choice; otherwise the refusal that says what the client
    did: declined or cancelled the question (a headless client does so without showing it to
    anyone), or answered something that was not offered."""
    key = visible(request.key)
    if result.action in ("decline", "cancel"):
        what = "declined" if result.action == "decline" else "cancelled"
        reason = f"the MCP client {what} the question (no answer was given)"
        return _refusal(request, f"{key} was not allowed: {reason}", reason)
    value = (result.content or {}).get(ANSWER_FIELD)
    if isinstance(value, str) and _offered(value, request):
        return None
    shown = visible(repr(value))[:80]
    reason = f"the MCP client answered {shown}, which was not one of the choices offered"
    return _refusal(request, f"{key} was not allowed: {reason}", reason)


def _offered(value: str, request: AskRequest) -> bool:
    """`value` names a choice the request offered, in either vocabulary (`session`,
    `AlwaysThisSession`)."""
    try:
        return Answer.parse(value) in request.choices
    except ValueError:
        return False


def permission_required_message(request: AskRequest) -> str:
    """Why a call that needs asking was refused when nobody could be asked, and what to do."""
    key = visible(request.key)
    ways = ["connect with an MCP client that supports elicitation, so the human can answer"]
    if Answer.PROJECT in request.choices:
        ways.append(
            f'add "{key}": "AlwaysThisProject" to the allowlist of codecoder.json, then apply '
            "it with `codecoder reload`"
        )
    else:
        reason = request.why_not_project or f"{request.environment.value} does not allow it"
        ways.append(f"codecoder.json cannot grant it ({visible(reason)})")
    if Answer.SESSION in request.choices:
        entry = visible(request.grant_for(Answer.SESSION).entry)
        ways.append(
            f"start the server with `codecoder serve --allow {shlex.quote(entry)}` for that run"
        )
    ways.append("or run the call yourself in `codecoder session` (it asks in the terminal)")
    return (
        f"permission required: {request.tool} needs approval for {key} "
        f"({request.environment.value}), and this MCP client cannot ask the human (it declared "
        "no elicitation support). Nothing ran. To allow it: " + "; ".join(ways) + "."
    )


def _refusal(
    request: AskRequest, message: str, reason: str, decider: Decider = Decider.CANCELLED
) -> DeniedByUser:
    """A question the client did not answer: declined or cancelled it, answered what was not
    offered (cancelled), or could not ask at all (non-interactive). Nobody answered Deny."""
    decision = Decision(
        False,
        Source.DENIED,
        request.tool,
        request.environment,
        request.key,
        reason=reason,
        decided_by=decider,
    )
    return Unanswered(message, decision)


# --- the server ---------------------------------------------------------------------------


class _QuestionPending(BaseException):
    """Unwinds a call whose question must go back to a 2026-07-28 client as `input_required`.

    A BaseException on purpose: the dispatcher turns every Exception into a failed, audited
    call, while this call has not happened yet; it happens, and is audited, on the retry.
    """

    def __init__(self, request: AskRequest) -> None:
        super().__init__(request.key)
        self.request = request


AskMode = Literal["request", "input_required", "unable"]


@dataclass(slots=True)
class _Channel:
    """How the call being run can ask its client."""

    mode: AskMode
    ctx: ServerRequestContext[Any, Any]
    loop: EventLoopToken  # the server's event loop, reachable from any thread
    answered: tuple[AskRequest, Answer] | None = None  # from a 2026-07-28 retry
    cancel: threading.Event = field(default_factory=threading.Event)  # seen by the call
    withdrawn: anyio.Event = field(default_factory=anyio.Event)  # seen by its question


class ToolServer:
    """The MCP face of one runtime: lists its tools, runs calls through one session."""

    def __init__(
        self,
        runtime: Runtime,
        *,
        log: TextIO | None = None,
        allow: Sequence[str] = (),
    ) -> None:
        self.runtime = runtime
        self.session: Session = runtime.session(asker=self._ask, lifetime=SERVER_LIFETIME)
        # Its grants, where `codecoder allowlist` sees and revokes them (started by `_serve`
        # once SIGUSR1 is handled).
        self.publisher = Publisher(runtime.project_dir, "codecoder serve", self.session.allowlist)
        self._log = log or sys.stderr
        for key in allow:
            self.session.grant(key)  # UsageError / CeilingViolation: refused before serving
        # Calls that may ask take turns, in the order they came: one question at a time, and
        # the asker finds its call's channel here, whichever thread the question comes from (a
        # tool may ask from a thread of its own). Reloads take the same turn. Calls that need
        # no permission never ask and do not wait for it.
        self._turn = threading.Lock()
        self._channel: _Channel | None = None
        self._questions: OrderedDict[str, AskRequest] = OrderedDict()
        self._questions_lock = threading.Lock()
        self._listed: tuple[str, ...] = ()
        self._notify: ServerSession | None = None  # the connection, for list_changed
        self.server: Server[Any] = Server(
            "codecoder",
            version=_version(),
            instructions=(
                f"Tools of the codecoder runtime for {runtime.project_dir}. Calls that need "
                "permission are asked to the human through elicitation before anything runs; "
                "a refused call is a tool error that says why."
            ),
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )

    def initialization_options(self) -> Any:
        return self.server.create_initialization_options(NotificationOptions(tools_changed=True))

    async def _list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        self._notify = ctx.session
        definitions = self.runtime.definitions()
        self._listed = _fingerprint(self.runtime)
        tools = [types.Tool.model_validate(mcp_tool(d)) for d in definitions]
        return types.ListToolsResult(tools=tools)

    async def _call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        self._notify = ctx.session
        loop = anyio.lowlevel.current_token()
        channel = _Channel(_ask_mode(ctx), ctx, loop)
        if channel.mode == "input_required":
            channel.answered = self._answer_from_retry(params)
        arguments = dict(params.arguments or {})
        progress = _progress_reporter(ctx, loop)
        finished = False

        async def watch_for_cancel() -> None:
            # The SDK cancels this handler's scope on `notifications/cancelled` (and when the
            # connection closes); the call in its worker thread learns it here.
            try:
                await anyio.sleep_forever()
            finally:
                if not finished:
                    channel.cancel.set()
                    channel.withdrawn.set()

        ran: CallOutcome | _QuestionPending | None = None
        async with anyio.create_task_group() as watchers:
            watchers.start_soon(watch_for_cancel)
            try:
                ran = await anyio.to_thread.run_sync(
                    self._run, channel, params.name, arguments, progress
                )
            except _QuestionPending as pending:
                ran = pending
            finally:
                finished = True
                watchers.cancel_scope.cancel()
        if isinstance(ran, _QuestionPending):
            return self._input_required(ran.request, ctx.protocol_version)
        assert ran is not None
        outcome = ran
        await self.tools_changed()
        tool = self.runtime.tools.get(params.name)
        return tool_result(outcome, tool.output_schema if tool is not None else None)

    def _run(
        self,
        channel: _Channel,
        name: str,
        arguments: dict[str, Any],
        progress: Callable[[float, float | None, str | None], None] | None,
    ) -> CallOutcome:
        if not self._may_ask(name, arguments):
            return self.session.call(name, arguments, cancel=channel.cancel, progress=progress)
        while not self._turn.acquire(timeout=0.05):
            if channel.cancel.is_set():
                break
        else:
            try:
                self._channel = channel
                return self.session.call(name, arguments, cancel=channel.cancel, progress=progress)
            finally:
                self._channel = None
                self._turn.release()
        # Cancelled while waiting for its turn: the dispatcher audits it as cancelled.
        return self.session.call(name, arguments, cancel=channel.cancel)

    def _may_ask(self, name: str, arguments: dict[str, Any]) -> bool:
        """Whether the call can reach the asker; calls that cannot never wait for their turn."""
        tool = self.session.tools().get(name)
        if tool is None:
            return False  # refused as unknown, without asking
        try:
            params = validate_arguments(tool, arguments)
            return tool.permission(params).key is not None
        except CodecoderError:
            return False  # refused as invalid, without asking
        except Exception:
            return True  # the dispatcher reports it; when unsure, take a turn

    def _ask(self, request: AskRequest) -> Answer:
        """The session's asker; runs in a worker thread, never on the event loop."""
        channel = self._channel
        if channel is None or channel.mode == "unable":
            raise _refusal(
                request,
                permission_required_message(request),
                "permission required: the MCP client cannot ask the human (no elicitation)",
                Decider.NON_INTERACTIVE,
            )
        if channel.mode == "request":
            answer: Answer = anyio.from_thread.run(
                self._elicit, channel, request, token=channel.loop
            )
            return answer
        if channel.answered is not None:
            asked, answer = channel.answered
            channel.answered = None
            if asked == request:
                return answer
        raise _QuestionPending(request)

    async def _elicit(self, channel: _Channel, request: AskRequest) -> Answer:
        ctx = channel.ctx
        result: types.ElicitResult | None = None
        failure: Exception | None = None
        async with anyio.create_task_group() as race:

            async def withdraw_on_cancel() -> None:
                await channel.withdrawn.wait()
                race.cancel_scope.cancel()

            race.start_soon(withdraw_on_cancel)
            try:
                result = await ctx.session.elicit_form(
                    elicitation_message(request),
                    elicitation_schema(request, ctx.protocol_version),
                    related_request_id=ctx.request_id,
                )
            except Exception as exc:
                failure = exc
            race.cancel_scope.cancel()
        if failure is not None:
            # A failed question is not an answer: nothing runs, and the error says so.
            what = (
                f"{type(failure).__name__}: {failure}" if str(failure) else type(failure).__name__
            )
            raise _refusal(
                request,
                f"{request.key} was not allowed: asking through the MCP client failed ({what})",
                f"the elicitation failed ({what})",
            )
        if result is None:  # the call was cancelled while its question waited
            raise Cancelled(
                f"{visible(request.key)} was cancelled by the MCP client while its question "
                "waited for an answer; nothing ran"
            )
        return answer_of(result, request)

    def _input_required(
        self, request: AskRequest, protocol_version: str
    ) -> types.InputRequiredResult:
        token = secrets.token_urlsafe(18)
        with self._questions_lock:
            self._questions[token] = request
            while len(self._questions) > _MAX_OPEN_QUESTIONS:
                self._questions.popitem(last=False)
        elicit = types.ElicitRequest(
            params=types.ElicitRequestFormParams(
                message=elicitation_message(request),
                requested_schema=elicitation_schema(request, protocol_version),
            )
        )
        return types.InputRequiredResult(input_requests={_INPUT_KEY: elicit}, request_state=token)

    def _answer_from_retry(
        self, params: types.CallToolRequestParams
    ) -> tuple[AskRequest, Answer] | None:
        if params.request_state is None:
            return None
        with self._questions_lock:
            # One use per token: a replayed retry cannot turn "once" into "twice".
            asked = self._questions.pop(params.request_state, None)
        if asked is None:
            return None
        response = (params.input_responses or {}).get(_INPUT_KEY)
        if not isinstance(response, types.ElicitResult):
            return asked, Answer.DENY
        if question_refused(response, asked) is not None:
            return asked, Answer.DENY
        return asked, answer_of(response, asked)

    async def tools_changed(self, *, reloaded: bool = False) -> None:
        """Tell the client when the tool list is no longer what it last listed (and after
        every reload: what the client holds was listed from the file as it was)."""
        if not reloaded and (not self._listed or _fingerprint(self.runtime) == self._listed):
            return
        self._listed = _fingerprint(self.runtime)
        session = self._notify
        if session is None:
            return
        with contextlib.suppress(Exception):  # a client gone, or of an era without it
            await session.send_tool_list_changed()

    def reload(self) -> list[Diagnostic]:
        """Apply codecoder.json as it now is (between calls) and log its diagnostics."""
        with self._turn:
            diagnostics = self.runtime.reload()
        _log_config(self.runtime, diagnostics, self._log, "reloaded")
        return diagnostics

    def close(self) -> None:
        self.publisher.close()
        self.session.close()
        self.runtime.close()


def _fingerprint(runtime: Runtime) -> tuple[str, ...]:
    """What a client's tool list depends on: each tool's definition as listed."""
    return tuple(json.dumps(mcp_tool(d), sort_keys=True) for d in runtime.definitions())


def _progress_reporter(
    ctx: ServerRequestContext[Any, Any], loop: EventLoopToken
) -> Callable[[float, float | None, str | None], None] | None:
    """`ToolContext.progress` for this request: `notifications/progress`, when the client
    asked for it (a progress token); None otherwise."""
    meta = ctx.meta
    token = meta.get("progress_token", meta.get("progressToken")) if meta else None
    if token is None:
        return None

    def report(progress: float, total: float | None, message: str | None) -> None:
        with contextlib.suppress(Exception):  # progress is advice: never fail the call for it
            anyio.from_thread.run(ctx.session.report_progress, progress, total, message, token=loop)

    return report


def _ask_mode(ctx: ServerRequestContext[Any, Any]) -> AskMode:
    capabilities = ctx.session.client_capabilities
    elicitation = capabilities.elicitation if capabilities is not None else None
    # An elicitation capability without modes is a form-only client of 2025-06-18.
    if elicitation is None or (elicitation.form is None and elicitation.url is not None):
        return "unable"
    if ctx.session.can_send_request:
        return "request"
    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
        return "input_required"
    return "unable"


def tool_result(
    outcome: CallOutcome, output_schema: dict[str, Any] | None = None
) -> types.CallToolResult:
    """A call's outcome as an MCP tool result.

    `content`: the text for the model, once and complete. `_meta`, for the client: the
    decision, the call's duration and, on success of a tool with an output schema, the
    schema's fields (`codecoder/result`: what the text says, in a form a program reads).
    Never `structuredContent`: clients show it to the model in place of the text.
    """
    text = outcome.text
    structured: dict[str, Any] | None = None
    if outcome.error is None and outcome.result is not None and output_schema is not None:
        fields = output_schema.get("properties", {})
        structured = {k: v for k, v in outcome.result.data.items() if k in fields}
    meta: dict[str, Any] = {
        f"{_META}/decision": outcome.decision.to_json() if outcome.decision else None,
        f"{_META}/duration_ms": round(outcome.duration * 1000, 3),
    }
    if structured is not None:
        meta[f"{_META}/result"] = structured
    return types.CallToolResult.model_validate(
        {
            "content": [{"type": "text", "text": text}],
            "isError": not outcome.ok,
            "_meta": meta,
        }
    )


def _version() -> str:
    try:
        return metadata.version("codecoder-runtime")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def _log_config(runtime: Runtime, diagnostics: list[Diagnostic], log: TextIO, what: str) -> None:
    for d in diagnostics:
        log.write(f"codecoder serve: {format_diagnostic(runtime.project_file, d)}\n")
    state = "ok" if not any(d.severity == "error" for d in diagnostics) else "errors found"
    if runtime.config.unreadable:
        state += ", the rules cannot be read: every call that needs permission is refused"
    elif any(d.code == "kept_last_good" for d in diagnostics):
        state += ", the last good rules stay in effect"
    log.write(f"codecoder serve: {what} {runtime.project_file}: {state}\n")
    log.flush()


# --- pid files and signals ----------------------------------------------------------------


def pid_directory(project_dir: Path) -> Path:
    return project_dir / ".codecoder" / "run"


@contextlib.contextmanager
def _pid_file(project_dir: Path) -> Iterator[Path]:
    directory = pid_directory(project_dir)
    workspace_directory(project_dir)
    directory.mkdir(exist_ok=True)
    ignore = directory / ".gitignore"
    if not ignore.exists():
        ignore.write_text("*\n")
    pid = os.getpid()
    path = directory / f"serve-{pid}.pid"
    record = {"pid": pid, "started": start_time(pid), "project": str(project_dir)}
    path.write_text(json.dumps(record) + "\n")
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)


def live_servers(project_dir: Path) -> list[int]:
    """Pids of the servers running for this project; stale pid files are removed."""
    return [server.pid for server in _servers(project_dir)]


def _servers(project_dir: Path) -> list[LiveProcess]:
    """The servers running for this project, each confirmed by the kernel
    (`livegrants.LiveProcess`): a damaged pid file (pid 0 would signal our own process group)
    is never believed; stale and damaged ones are removed."""
    found: list[LiveProcess] = []
    directory = pid_directory(Path(project_dir).resolve())
    for path in sorted(directory.glob("serve-*.pid")):
        try:
            record = json.loads(read_regular_file(path, limit=STATE_FILE_LIMIT))
            process = LiveProcess.find(record["pid"], record.get("started"))
            if record["pid"] != int(path.name.removeprefix("serve-").removesuffix(".pid")):
                process = False
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            process = False
        if process is None:
            continue  # someone else's process: neither ours to signal nor to clean up
        if process is False:
            # The server died, its pid now names another process, or the file is damaged.
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)
            continue
        assert isinstance(process, LiveProcess)
        found.append(process)
    return found


def signal_servers(project_dir: Path) -> list[int]:
    """Send SIGHUP to every live server of the project; returns the pids signalled."""
    return [server.pid for server in _servers(project_dir) if server.signal(signal.SIGHUP)]


# --- serving ------------------------------------------------------------------------------


async def _handle_signals(
    tool_server: ToolServer, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    handled = (signal.SIGHUP, signal.SIGUSR1, signal.SIGTERM, signal.SIGINT)
    with anyio.open_signal_receiver(*handled) as signals:
        task_status.started()
        async for signum in signals:
            if signum == signal.SIGHUP:
                await anyio.to_thread.run_sync(tool_server.reload)
                await tool_server.tools_changed(reloaded=True)
            elif signum == signal.SIGUSR1:  # `codecoder allowlist revoke` (livegrants)
                await anyio.to_thread.run_sync(tool_server.publisher.apply_revocations)
            else:
                _stop(tool_server, signum)


def _stop(tool_server: ToolServer, signum: int) -> None:
    """Clean up and die of `signum`, as a process without a handler would.

    Not a cancellation: the stdio transport reads stdin in a thread that cannot be
    interrupted, so a cancelled server would linger until its client writes or closes.
    """
    (pid_directory(tool_server.runtime.project_dir) / f"serve-{os.getpid()}.pid").unlink(
        missing_ok=True
    )
    with contextlib.suppress(Exception):
        tool_server.close()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


async def _serve(project_dir: Path, log: TextIO, allow: Sequence[str]) -> None:
    runtime = Runtime(project_dir, asker=non_interactive)
    try:
        tool_server = ToolServer(runtime, log=log, allow=allow)
    except BaseException:
        runtime.close()
        raise
    _log_config(runtime, list(runtime.diagnostics), log, "serving")
    try:
        async with anyio.create_task_group() as tasks:
            # The SIGHUP handler is in place before the pid file announces us: a reload sent
            # right after must not meet SIGHUP's default action, which is to terminate.
            await tasks.start(_handle_signals, tool_server)
            tool_server.publisher.start()
            with _pid_file(runtime.project_dir):
                async with stdio_server() as (read, write):
                    options = tool_server.initialization_options()
                    await tool_server.server.run(read, write, options)
            tasks.cancel_scope.cancel()
    finally:
        tool_server.close()


def serve(project_dir: Path, log: TextIO | None = None, allow: Sequence[str] = ()) -> int:
    """Serve over stdin/stdout until the client closes stdin; returns the exit code."""
    anyio.run(_serve, Path(project_dir), log or sys.stderr, tuple(allow))
    return 0
