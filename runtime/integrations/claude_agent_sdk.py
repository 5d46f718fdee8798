"""codecoder as the permission engine of the Claude Agent SDK: its built-in tools (Bash, Read,
Write, Edit, Glob, Grep, WebFetch, WebSearch ...) decided by codecoder, its shell contained.

    from claude_agent_sdk import ClaudeSDKClient
    from codecoder.integrations.claude_agent_sdk import ClaudeCodePermissions

    permissions = ClaudeCodePermissions("path/to/project", asker=ask)
    async with ClaudeSDKClient(permissions.options(max_turns=20)) as claude:
        await claude.query("...")

This is the Claude Code hook (`codecoder hook claude-code --sandbox bwrap`, runtime.interfaces
.hooks) run in the application's process, with the application answering the questions:

* PreToolUse: every call is judged by the hook (`hooks.handle`) with the same rules as the
  command-line hook: deny rules, protected paths (the agents' own settings among them), project
  and session grants with their ceilings, the web policy for fetches. By default (`sandbox=
  "bwrap"`) a Bash command is rewritten to run through `codecoder exec --sandbox bwrap`: in
  bubblewrap, the file system read-only but for the workspace, no network but through
  codecoder's proxy, the user's secrets hidden; a read-only command runs with no question, and
  `codecoder exec` decides again before anything runs. `sandbox="docker"` runs it in the
  container instead; `sandbox=None` leaves the shell on the host (judged as @shell's).
* `can_use_tool`: where the hook asked, Claude Code asks the application through this
  callback. codecoder's question (`AskRequest`, the choices the hook can keep: Once,
  AlwaysThisSession, Deny; a protected path Once or Deny; an escalation to the host the host
  choices) goes to the `asker` (sync or async; none: nobody answers, so it is refused).
  AlwaysThisSession is recorded as the hook records the approval of its question: for the rest
  of the Claude session, in codecoder's state directory, when the call has run (PostToolUse).
  An AlwaysThisProject answer is kept for the session only: the hook grants no more.
* PostToolUse: the hook records what the approval granted; a call answered Once records
  nothing.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import anyio.to_thread
from claude_agent_sdk import (
    ClaudeAgentOptions,
    HookContext,
    HookMatcher,
    PermissionResultAllow,
    PermissionResultDeny,
    ToolPermissionContext,
)

from codecoder.evaluation import evaluate
from codecoder.eventloop import AsyncAsker, is_async_asker
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.decision import Answer
from codecoder.foundation.display import visible
from codecoder.foundation.errors import CodecoderError
from codecoder.interfaces.hooks import HookOptions, HookSessions, handle, map_call
from codecoder.permissions.prompt import Asker, AskRequest, non_interactive
from codecoder.session import Runtime

__all__ = ["ClaudeCodePermissions", "options"]

Sandbox = Literal["bwrap", "docker"]


@dataclass(frozen=True, slots=True)
class _Seen:
    """A call as the PreToolUse hook saw it, before its command was rewritten."""

    session_id: str
    tool_name: str
    tool_input: dict[str, Any]
    verdict: str | None  # the hook's: allow / deny / ask, None for no opinion


class ClaudeCodePermissions:
    """The hooks and the `can_use_tool` callback for one project (see the module docstring)."""

    def __init__(
        self,
        project: str | os.PathLike[str],
        *,
        asker: Asker | AsyncAsker | None = None,
        sandbox: Sandbox | None = "bwrap",
        allow: Sequence[str] = (),
        exec_program: Sequence[str] = (),
    ) -> None:
        """`allow`: keys granted for every session, as `codecoder hook --allow`.
        `exec_program`: the command line a rewritten shell command runs codecoder with (by
        default this installation's, by its absolute path: `interfaces.installation`)."""
        self.project = Path(project).resolve()
        self._asker = asker or non_interactive
        self._hook = HookOptions(
            project=self.project,
            allow=tuple(allow),
            sandbox=sandbox,
            exec_program=tuple(exec_program),
        )
        self._seen: dict[str, _Seen] = {}
        self._once: set[str] = set()
        self._lock = threading.Lock()

    # --- the hooks -------------------------------------------------------------------------

    @property
    def hooks(self) -> dict[Any, list[HookMatcher]]:
        """`ClaudeAgentOptions.hooks`: PreToolUse and PostToolUse for every tool."""
        return {
            "PreToolUse": [HookMatcher(hooks=[self.pre_tool_use])],
            "PostToolUse": [HookMatcher(hooks=[self.post_tool_use])],
        }

    async def pre_tool_use(self, input: Any, tool_use_id: str | None, context: HookContext) -> Any:
        event = dict(input)
        answer = await anyio.to_thread.run_sync(self._handle, event)
        specific = answer.get("hookSpecificOutput", {})
        call_id = tool_use_id or event.get("tool_use_id")
        if isinstance(call_id, str) and isinstance(event.get("tool_input"), dict):
            with self._lock:
                self._seen[call_id] = _Seen(
                    str(event.get("session_id", "")),
                    str(event.get("tool_name", "")),
                    dict(event["tool_input"]),
                    specific.get("permissionDecision"),
                )
        return answer

    async def post_tool_use(self, input: Any, tool_use_id: str | None, context: HookContext) -> Any:
        event = dict(input)
        call_id = tool_use_id or event.get("tool_use_id")
        with self._lock:
            self._seen.pop(str(call_id), None)
            once = call_id in self._once
            self._once.discard(str(call_id))
        if once:
            return {}  # answered Once: the approval grants nothing further
        return await anyio.to_thread.run_sync(self._handle, event)

    def _handle(self, event: dict[str, Any]) -> dict[str, Any]:
        try:
            return handle("claude-code", event, self._hook)
        except CodecoderError as exc:  # an event it cannot read: the call must not go through
            if event.get("hook_event_name") != "PreToolUse":
                return {}
            reason = f"codecoder: {visible(str(exc))}"
            return {
                "hookSpecificOutput": {
                    "hookEventName": "PreToolUse",
                    "permissionDecision": "deny",
                    "permissionDecisionReason": reason,
                }
            }

    # --- the question ----------------------------------------------------------------------

    async def can_use_tool(
        self, tool_name: str, tool_input: dict[str, Any], context: ToolPermissionContext
    ) -> PermissionResultAllow | PermissionResultDeny:
        """Claude Code's question, answered by the asker with codecoder's question."""
        call_id = context.tool_use_id or ""
        with self._lock:
            seen = self._seen.get(call_id)
        if seen is None or seen.verdict != "ask":
            # Nothing codecoder asked about (no hook ran for it, or it allowed or refused):
            # Claude Code's own rules asked, and codecoder does not answer for them.
            return PermissionResultDeny(
                message=f"codecoder: {visible(tool_name)} was not asked about by codecoder's "
                "hook, so it is not allowed"
            )
        question = await anyio.to_thread.run_sync(self._question, seen)
        if question is None:
            return PermissionResultDeny(message="codecoder: this call can no longer be asked")
        answer = await self._ask(question)
        if answer.scope is Answer.DENY:
            return PermissionResultDeny(
                message=f"codecoder: {visible(question.key)} was not allowed (denied at the prompt)"
            )
        if answer.scope is Answer.ONCE:
            with self._lock:
                self._once.add(call_id)
        return PermissionResultAllow()

    def _question(self, seen: _Seen) -> AskRequest | None:
        """What the hook asked about the call, as codecoder's question."""
        mapped = map_call(seen.tool_name, seen.tool_input, self.project, sandbox=self._hook.sandbox)
        if mapped.tool is None or mapped.own_server:
            return None
        bindings: dict[str, EnvironmentTag] | None = None
        if self._hook.sandbox == "bwrap":
            bindings = {"run_command": EnvironmentTag.BWRAP}
        elif mapped.shell and self._hook.sandbox is None:
            bindings = {"run_command": EnvironmentTag.SHELL}
        tool, args = mapped.tool, mapped.args
        if mapped.shell and self._hook.sandbox == "docker":
            tool = "run_container"
        with Runtime(
            self.project, asker=non_interactive, audit_log=None, bindings=bindings
        ) as runtime:
            session = runtime.session()
            if runtime.config.unreadable_reason is None:
                for key in self._hook.allow:
                    session.grant(key)
            HookSessions(self.project, "claude-code").load_into(session, seen.session_id)
            try:
                verdict = evaluate(session, tool, args)
            except CodecoderError:
                return None
        asked = verdict.question
        if asked is None:
            return None
        return dataclasses.replace(asked, choices=_kept(asked))

    async def _ask(self, question: AskRequest) -> Answer:
        asker = self._asker
        if is_async_asker(asker):
            answer = await asker(question)  # type: ignore[misc]
        else:
            answer = await anyio.to_thread.run_sync(asker, question)
        if not isinstance(answer, Answer):
            return Answer.DENY
        return answer if answer in question.choices else answer.scope

    # --- the options -----------------------------------------------------------------------

    def options(self, **claude_options: Any) -> ClaudeAgentOptions:
        """`ClaudeAgentOptions` with these hooks and `can_use_tool`, run in the project
        (`cwd`); `claude_options` are passed on (a `hooks` given there runs too)."""
        hooks: dict[Any, list[HookMatcher]] = {}
        for event, matchers in (claude_options.pop("hooks", None) or {}).items():
            hooks[event] = list(matchers)
        for event, matchers in self.hooks.items():
            hooks[event] = [*matchers, *hooks.get(event, [])]
        claude_options.setdefault("cwd", str(self.project))
        return ClaudeAgentOptions(hooks=hooks, can_use_tool=self.can_use_tool, **claude_options)


def options(
    project: str | os.PathLike[str],
    *,
    asker: Asker | AsyncAsker | None = None,
    sandbox: Sandbox | None = "bwrap",
    allow: Sequence[str] = (),
    **claude_options: Any,
) -> ClaudeAgentOptions:
    """`ClaudeAgentOptions` for `project` with codecoder deciding (`ClaudeCodePermissions`)."""
    permissions = ClaudeCodePermissions(project, asker=asker, sandbox=sandbox, allow=allow)
    return permissions.options(**claude_options)


def _kept(question: AskRequest) -> tuple[Answer, ...]:
    """The choices the hook can keep: it records a session grant of the key (or of the host
    key, for an escalation) when the call has run, and nothing longer."""
    if question.host_key:
        wanted: tuple[Answer, ...] = (Answer.HOST_ONCE, Answer.HOST_SESSION, Answer.DENY)
    else:
        wanted = (Answer.ONCE, Answer.SESSION, Answer.DENY)
    return tuple(answer for answer in wanted if answer in question.choices) or (
        Answer.ONCE,
        Answer.DENY,
    )
