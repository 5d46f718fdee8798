"""The agent tools: `agent` (a read-only child agent), `reason`, `todo` and `memory`.

`agent` hands a sub-task to a child agent. The child runs in a child session
(`Session.child(CHILD_TOOLSET)`): it is offered, and can call, only the nine read-only tools of
SPEC §3, by name or otherwise, because its session's dispatcher knows no other (a `write_file`
or `run_command` call is an UnknownTool error the model reads as the tool's answer). Each of its
calls goes through the same dispatcher, permission engine and audit log as the parent's, audited
with the child's id and depth. The child may call `agent`, but depth is locked at 1: that call
fails before anything runs.

The model behind a child is a `runtime.tools.drivers.ModelDriver`. By default it is the
OpenAI-compatible client configured in codecoder.json's `agent` section (or OPENAI_BASE_URL,
OPENAI_MODEL and the key in OPENAI_API_KEY); tests give the tool a `ScriptedDriver`.

`reason` records a thought and changes nothing. `todo` keeps a task list for the session that
calls it, dropped with the session. `memory` keeps the agent's notes for the project in the
runtime's state directory (`$XDG_STATE_HOME/codecoder/projects/<id>/memory.json`), never in the
user's files.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from codecoder.config.settings import AgentSettings
from codecoder.foundation.atomicfile import exclusive_lock, replace_atomically
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.errors import ExecutionFailed
from codecoder.foundation.regularfile import read_regular_file
from codecoder.foundation.state import project_state_directory, state_directory
from codecoder.permissions.keys import Permission
from codecoder.tools.base import (
    CallingSession,
    Category,
    P,
    Parameters,
    Tool,
    ToolContext,
    ToolResult,
)
from codecoder.tools.drivers import (
    Message,
    ModelDriver,
    OpenAIChatDriver,
    ToolCall,
    ToolSpec,
)

__all__ = [
    "AGENT_TOOLS",
    "CHILD_TOOLSET",
    "Agent",
    "Memory",
    "Reason",
    "Todo",
    "driver_from_settings",
    "memory_path",
    "state_directory",
]

CHILD_TOOLSET: frozenset[str] = frozenset(
    {
        "read_file",
        "glob",
        "grep",
        "diff",
        "web_search",
        "web_fetch",
        "github_search",
        "agent",
        "reason",
    }
)

MAX_DEPTH = 1

CHILD_INSTRUCTIONS = """\
You are a research sub-agent started by another agent to do one task. You can read the \
project's files (read_file, glob, grep, diff), search and read the web (web_search, web_fetch, \
github_search) and think aloud (reason). You cannot change anything. Work step by step with the \
tools; when you are done, answer without calling a tool: that answer, and nothing else, goes \
back to the agent that started you, so make it complete and concrete (paths, line numbers, \
URLs, findings)."""

# A tool result longer than this is cut before the child's model sees it, to keep its context.
MAX_RESULT_CHARS = 30_000


class _AgentTool(Tool[P]):
    category = Category.AGENT
    environment = EnvironmentTag.RUNTIME
    asks = False

    def permission(self, args: P) -> Permission:
        return Permission.none()


def _session(ctx: ToolContext, tool: str) -> CallingSession:
    if ctx.session is None:
        raise ExecutionFailed(f"{tool} needs a session: call it through Session.call()")
    return ctx.session


# --- agent -----------------------------------------------------------------------------------


class AgentParameters(Parameters):
    task: str = Field(
        min_length=1,
        max_length=100_000,
        description="The sub-task for the child agent, complete and self-contained: the child "
        "sees nothing of your conversation. Say what to find out and what to report back. The "
        "child can only read files, search and read the web, and reason; it cannot change "
        "anything.",
    )
    max_turns: int | None = Field(
        default=None,
        ge=1,
        le=1000,
        description="The most model turns the child may take; the project's limit by default.",
    )


def driver_from_settings(
    settings: AgentSettings, environ: Mapping[str, str] | None = None
) -> ModelDriver:
    """The OpenAI-compatible driver the project configures, or ExecutionFailed saying what is
    missing. The key only ever comes from the environment."""
    environ = os.environ if environ is None else environ
    base_url = settings.base_url or environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
    model = settings.model or environ.get("OPENAI_MODEL")
    if not model:
        raise ExecutionFailed(
            'agent has no model to run: set "agent": {"model": ...} in codecoder.json '
            "or OPENAI_MODEL in the environment"
        )
    return OpenAIChatDriver(
        base_url, model, environ.get(settings.api_key_env) or None, settings.timeout
    )


@dataclass(slots=True)
class _Transcript:
    """What the child did, for the parent's ToolResult.data and for people reading it."""

    calls: list[dict[str, Any]] = field(default_factory=list)
    turns: int = 0


class Agent(_AgentTool[AgentParameters]):
    name = "agent"
    description = (
        "Hand a self-contained research sub-task to a child agent and get its final answer. "
        "The child has read-only tools (read_file, glob, grep, diff, web_search, web_fetch, "
        "github_search, reason) and works on its own; use it for investigations that need many "
        "lookups. Children cannot start agents of their own."
    )
    parameters = AgentParameters

    def __init__(
        self, driver: ModelDriver | Callable[[AgentSettings], ModelDriver] | None = None
    ) -> None:
        self._driver = driver

    def execute(self, args: AgentParameters, ctx: ToolContext) -> ToolResult:
        session = _session(ctx, self.name)
        if session.depth >= MAX_DEPTH:
            # Checked before anything else: no driver is made, no child session, no model call.
            raise ExecutionFailed(
                "agent: a child agent cannot start agents of its own (depth is locked at "
                f"{MAX_DEPTH}); do this part of the task yourself with your other tools"
            )
        settings = session.runtime.config.agent
        driver = self._make_driver(settings)
        child = session.child(CHILD_TOOLSET)
        max_turns = args.max_turns or settings.max_turns
        result: ToolResult = ctx.environment.run(
            lambda: self._run(child, driver, args.task, max_turns)
        )
        return result

    def _make_driver(self, settings: AgentSettings) -> ModelDriver:
        if self._driver is None:
            return driver_from_settings(settings)
        if isinstance(self._driver, ModelDriver):
            return self._driver
        return self._driver(settings)

    def _run(
        self, child: CallingSession, driver: ModelDriver, task: str, max_turns: int
    ) -> ToolResult:
        tools = [
            ToolSpec(name, tool.description, tool.parameters.model_json_schema())
            for name, tool in sorted(child.tools().items())
        ]
        messages = [Message.system(CHILD_INSTRUCTIONS), Message.user(task)]
        transcript = _Transcript()
        last = ""
        while transcript.turns < max_turns:
            transcript.turns += 1
            turn = driver.complete(messages, tools)
            last = turn.content
            if not turn.tool_calls:
                return ToolResult(output=turn.content, data=self._data(child, transcript, True))
            messages.append(turn.as_message())
            for call in turn.tool_calls:
                messages.append(Message.tool_result(call.id, self._call(child, call, transcript)))
        output = f"the child agent did not finish within {max_turns} turns"
        if last.strip():
            output += f"; its last words: {last}"
        return ToolResult(output=output, is_error=True, data=self._data(child, transcript, False))

    def _call(self, child: CallingSession, call: ToolCall, transcript: _Transcript) -> str:
        """Run one call of the child through its session; what its model reads back."""
        outcome = child.call(call.name, call.arguments)
        record: dict[str, Any] = {"tool": call.name, "ok": outcome.ok, "error": None}
        if outcome.error is not None:
            record["error"] = f"{type(outcome.error).__name__}: {outcome.error}"
            text = f"error: {record['error']}"
            if call.problem is not None:
                text += f" ({call.problem})"
        else:
            assert outcome.result is not None
            text = outcome.result.output
            if outcome.result.is_error:
                text = f"error: {text}"
        transcript.calls.append(record)
        if len(text) > MAX_RESULT_CHARS:
            text = (
                text[:MAX_RESULT_CHARS] + f"\n[cut: {len(text) - MAX_RESULT_CHARS} more characters]"
            )
        return text

    @staticmethod
    def _data(child: CallingSession, transcript: _Transcript, finished: bool) -> dict[str, Any]:
        return {
            "agent_id": child.agent_id,
            "depth": child.depth,
            "turns": transcript.turns,
            "finished": finished,
            "calls": transcript.calls,
        }


# --- reason ----------------------------------------------------------------------------------


class ReasonParameters(Parameters):
    thought: str = Field(
        min_length=1,
        max_length=50_000,
        description="Your reasoning: what you know, what you are unsure of, what to do next. "
        "It is recorded and changes nothing.",
    )


class Reason(_AgentTool[ReasonParameters]):
    name = "reason"
    description = (
        "Think aloud: record a step of reasoning (a plan, a hypothesis, a check of your work) "
        "before acting. It has no effect besides being recorded."
    )
    parameters = ReasonParameters

    def execute(self, args: ReasonParameters, ctx: ToolContext) -> ToolResult:
        return ToolResult(output="Thought recorded.", data={"thought": args.thought})


# --- todo ------------------------------------------------------------------------------------

TaskStatus = Literal["pending", "in_progress", "done"]
_MARKS: dict[str, str] = {"pending": "[ ]", "in_progress": "[~]", "done": "[x]"}


class TodoParameters(Parameters):
    action: Literal["add", "update", "complete", "list"] = Field(
        description="add: a new task (`title`); update: change a task's `title` and/or "
        "`status` (by `id`); complete: mark a task done (by `id`); list: show all tasks."
    )
    title: str | None = Field(
        default=None, min_length=1, max_length=2000, description="The task, in a few words."
    )
    id: int | None = Field(default=None, ge=1, description="The task's number, as listed.")
    status: TaskStatus | None = Field(
        default=None, description="For update: pending, in_progress or done."
    )

    @model_validator(mode="after")
    def _fields_for_the_action(self) -> TodoParameters:
        needed = {"add": ("title",), "update": ("id",), "complete": ("id",), "list": ()}
        for name in needed[self.action]:
            if getattr(self, name) is None:
                raise ValueError(f"`{name}` is required to {self.action} a task")
        if self.action == "update" and self.title is None and self.status is None:
            raise ValueError("update needs a new `title` or `status`")
        unused = {
            "add": ("id", "status"),
            "update": (),
            "complete": ("title", "status"),
            "list": ("title", "id", "status"),
        }
        extra = [name for name in unused[self.action] if getattr(self, name) is not None]
        if extra:
            raise ValueError(f"{self.action} takes no {', '.join(f'`{n}`' for n in extra)}")
        return self


@dataclass(slots=True)
class _Task:
    id: int
    title: str
    status: TaskStatus = "pending"


class Todo(_AgentTool[TodoParameters]):
    """Keeps one list per session object: a child session, or another session with the same id,
    has its own. The list goes when the session does (weak keys)."""

    name = "todo"
    description = (
        "Keep a task list for this session: add tasks, update or complete them, list them. "
        "Use it to plan multi-step work and to track what is left."
    )
    parameters = TodoParameters

    def __init__(self) -> None:
        self._lists: weakref.WeakKeyDictionary[CallingSession, list[_Task]] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()

    def execute(self, args: TodoParameters, ctx: ToolContext) -> ToolResult:
        session = _session(ctx, self.name)
        with self._lock:
            tasks = self._lists.setdefault(session, [])
            if args.action == "add":
                assert args.title is not None
                tasks.append(_Task(len(tasks) + 1, args.title))
            elif args.action in ("update", "complete"):
                task = self._find(tasks, args.id)
                if args.title is not None:
                    task.title = args.title
                task.status = "done" if args.action == "complete" else args.status or task.status
            lines = [f"{t.id}. {_MARKS[t.status]} {t.title}" for t in tasks]
            listed = [{"id": t.id, "title": t.title, "status": t.status} for t in tasks]
            left = sum(t.status != "done" for t in tasks)
        summary = f"{len(listed)} tasks, {left} not done" if listed else "no tasks"
        return ToolResult(output="\n".join([*lines, summary]), data={"tasks": listed})

    @staticmethod
    def _find(tasks: list[_Task], task_id: int | None) -> _Task:
        for task in tasks:
            if task.id == task_id:
                return task
        known = f"tasks are 1 to {len(tasks)}" if tasks else "the list is empty"
        raise ExecutionFailed(f"no task {task_id}: {known}")


# --- memory ----------------------------------------------------------------------------------

MAX_MEMORY_BYTES = 2 * 1024 * 1024


def memory_path(project: Path, environ: Mapping[str, str] | None = None) -> Path:
    """Where the notes for `project` are kept: in its state directory, not inside it."""
    return project_state_directory(project, environ) / "memory.json"


_KEY = r"^[A-Za-z0-9][A-Za-z0-9 ._/:-]{0,199}$"


class MemoryParameters(Parameters):
    action: Literal["write", "read", "list", "delete", "search"] = Field(
        description="write: save a note under `key` (replacing it); read: a note by `key`; "
        "list: every key with its first line; delete: a note by `key`; search: notes whose key "
        "or text contains `query`."
    )
    key: str | None = Field(
        default=None,
        pattern=_KEY,
        description="The note's name, e.g. `build-commands` or `conventions/tests`.",
    )
    content: str | None = Field(
        default=None, min_length=1, max_length=50_000, description="For write: the note's text."
    )
    query: str | None = Field(
        default=None, min_length=1, max_length=500, description="For search: text to look for."
    )

    @model_validator(mode="after")
    def _fields_for_the_action(self) -> MemoryParameters:
        needed = {
            "write": ("key", "content"),
            "read": ("key",),
            "delete": ("key",),
            "list": (),
            "search": ("query",),
        }
        for name in needed[self.action]:
            if getattr(self, name) is None:
                raise ValueError(f"`{name}` is required to {self.action}")
        extra = [
            name
            for name in ("key", "content", "query")
            if name not in needed[self.action] and getattr(self, name) is not None
        ]
        if extra:
            raise ValueError(f"{self.action} takes no {', '.join(f'`{n}`' for n in extra)}")
        return self

    @field_validator("key")
    @classmethod
    def _no_trailing_space(cls, value: str | None) -> str | None:
        return value.strip() if value is not None else None


class Memory(_AgentTool[MemoryParameters]):
    """Notes that outlive the session, one file per project in the runtime's state directory.

    Changes are read-modify-write under an exclusive lock and land by atomic rename, so two
    processes writing at once both land, and a crash leaves the old file or the new one. A file
    that is not valid is never overwritten: the error says where it is.
    """

    name = "memory"
    description = (
        "Your long-term notes for this project, kept between sessions: write a note under a "
        "key, read it, list, search or delete notes. Use it for facts worth remembering (how to "
        "build and test, conventions, decisions). Stored outside the project's files."
    )
    parameters = MemoryParameters

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self._environ = environ

    def execute(self, args: MemoryParameters, ctx: ToolContext) -> ToolResult:
        path = memory_path(ctx.workspace, self._environ)
        result: ToolResult = ctx.environment.run(lambda: self._act(args, path, ctx.workspace))
        return result

    def _act(self, args: MemoryParameters, path: Path, project: Path) -> ToolResult:
        if args.action in ("write", "delete"):
            with _locked(path):
                notes = _read_notes(path)
                if args.action == "write":
                    assert args.key is not None and args.content is not None
                    notes[args.key] = args.content
                    output = f"saved {args.key!r}"
                elif notes.pop(args.key or "", None) is None:
                    raise ExecutionFailed(f"no note {args.key!r}")
                else:
                    output = f"deleted {args.key!r}"
                try:
                    _write_notes(path, project, notes)
                except OSError as exc:
                    raise ExecutionFailed(f"cannot write {path}: {exc.strerror}") from None
            return ToolResult(output=output, data={"key": args.key, "path": str(path)})
        notes = _read_notes(path)
        if args.action == "read":
            if args.key not in notes:
                raise ExecutionFailed(f"no note {args.key!r}; list shows the keys there are")
            return ToolResult(output=notes[args.key], data={"key": args.key})
        if args.action == "search":
            assert args.query is not None
            needle = args.query.casefold()
            found = {
                k: v for k, v in notes.items() if needle in k.casefold() or needle in v.casefold()
            }
        else:
            found = notes
        lines = [f"{key}: {_first_line(text)}" for key, text in sorted(found.items())]
        return ToolResult(output="\n".join(lines) or "no notes", data={"keys": sorted(found)})


def _first_line(text: str) -> str:
    line = text.strip().split("\n", 1)[0]
    return line if len(line) <= 120 else line[:117] + "..."


def _read_notes(path: Path) -> dict[str, str]:
    try:
        data = read_regular_file(path)
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ExecutionFailed(f"cannot read the memory file {path}: {exc.strerror}") from None
    try:
        document = json.loads(data)
        notes = document["notes"]
        if not isinstance(notes, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in notes.items()
        ):
            raise ValueError("notes must map keys to texts")
    except (ValueError, KeyError, TypeError) as exc:
        raise ExecutionFailed(
            f"the memory file {path} is not valid ({exc}); it is left as it is: fix or remove it"
        ) from None
    return notes


def _write_notes(path: Path, project: Path, notes: Mapping[str, str]) -> None:
    document = {"project": str(project), "notes": dict(sorted(notes.items()))}
    data = (json.dumps(document, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    if len(data) > MAX_MEMORY_BYTES:
        raise ExecutionFailed(
            f"memory is full ({len(data)} bytes over the limit of {MAX_MEMORY_BYTES}): "
            "delete or shorten notes first"
        )
    replace_atomically(path, data, 0o600)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            stack.enter_context(exclusive_lock(path.with_name(path.name + ".lock"), 0o600))
        except OSError as exc:
            raise ExecutionFailed(
                f"cannot open the memory file in {path.parent}: {exc.strerror}"
            ) from None
        yield


AGENT_TOOLS: tuple[Agent, Reason, Todo, Memory] = (Agent(), Reason(), Todo(), Memory())
