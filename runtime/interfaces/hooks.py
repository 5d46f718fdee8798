"""codecoder as the permission engine of another agent: hooks for Claude Code and Gemini CLI.

    codecoder hook claude-code|gemini [--project DIR] [--allow KEY ...] [--non-interactive]
                                      [--sandbox bwrap|docker | --host-shell]

(`codecoder hook install AGENT`, `interfaces.hookinstall`, writes it into the agent's settings.)

The host runs the hook before each tool call with a JSON event on stdin, and reads the answer
from stdout in its own format:

* Claude Code (hooks reference, https://code.claude.com/docs/en/hooks): `PreToolUse` input
  `{session_id, cwd, hook_event_name, tool_name, tool_input, tool_use_id, ...}`; the answer is
  `{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision":
  "allow"|"deny"|"ask", "permissionDecisionReason": ..., "updatedInput"?: {...}}}`. `allow`
  skips Claude Code's own prompt, `ask` shows it with our reason, `deny` tells the model why.
  `PostToolUse` and `SessionEnd` arrive on the same command.
* Gemini CLI (hooks reference, https://geminicli.com/docs/hooks/reference): `BeforeTool` input
  `{session_id, cwd, hook_event_name, tool_name, tool_input, ...}`; the answer is
  `{"decision": "allow"|"deny"|"ask", "reason": ..., "systemMessage"?: ...,
  "hookSpecificOutput"?: {"tool_input": {...}}}` (the tool input is merged over the model's).
  `deny` blocks, `ask` forces Gemini's confirmation even in YOLO mode, `allow` leaves the call
  to Gemini's approval mode. `AfterTool` and `SessionEnd` arrive on the same command.

Each host tool is mapped to the codecoder call that does the same thing
(`runtime.interfaces.hostcalls.map_call`: Bash / run_shell_command → run_command, Read /
read_file → read_file, Write / write_file → write_file, Edit / replace → edit_file, Glob, Grep,
LS, WebFetch, WebSearch), and that call is evaluated by the same engine as every call
(`runtime.evaluation`): deny rules, protected paths (the agents' own settings among them),
project grants with their ceilings, session grants. A fetch is judged as the web tools judge
theirs, every URL of it: the web policy, and loopback, private, link-local and metadata
addresses refused unless the policy names them. What codecoder refuses is denied, with its
reason: a path outside the workspace and its read roots, a glob reaching out, arguments its
tools reject. A tool codecoder does not know is never allowed: it is asked.

Audited. Every verdict is recorded in the project's audit log, with who or what decided
(`interfaces.hookaudit`), and so is a call the host's person approved at its prompt when the
host reports that it ran; a command rewritten into `codecoder exec` is recorded there instead.

Tools of codecoder's own MCP server are allowed here, because the server asks for them itself;
a name that could as well be another server's is not taken for one of them.

Session grants. The host's prompt is the one the human answers. When the hook answered `ask`
and the tool then ran (the host reports it after the call: PostToolUse / AfterTool), the human
approved it, and the question said what approving allows. Claude Code: the key for the rest of
the host's session, recorded as a session grant for that host session in the runtime's state
directory (outside the workspace, `foundation.state.project_state_directory`), dropped at
the host's SessionEnd, expired with the project's `session_ttl`, and removed with a session file
untouched for a day. Gemini CLI: this call only, since its prompt offers "Allow once" beside
longer choices and tells the hook nothing of which was chosen. A protected path is never
recorded: it is asked every time.

The user's own rules. Where codecoder would ask, a rule of the user's own home settings of the
host that allows the call (`Bash(ls:*)` in ~/.claude/settings.json; never a project's settings)
allows it (`runtime.interfaces.agentsettings`). Deny rules, protected paths and compound
commands are codecoder's alone to decide.

Refusals are seen. A denied call's reason goes to the model (the host's reason field) and to the
person, in the host's transcript (`systemMessage`).

Where the host's shell commands run. By default they are contained (`--sandbox bwrap`, below);
`--host-shell` leaves them on the host, unconfined: they are then judged as run_command bound
to @shell (a project grant for a contained command never lets the host run it).

`--sandbox docker` runs the host's shell commands in codecoder's sandbox instead of the host:
the command is evaluated as `run_container` (so a project grant for it holds, the container
being within the AlwaysThisProject ceiling) and rewritten, through the host's input-rewriting
field, into `CODECODER exec --project=DIR --hook=HOST:SESSION [--approved=TOKEN] -- COMMAND`
(CODECODER the absolute path of this codecoder: `interfaces.installation`; every value joined
to its option and the command after `--`, so none is ever read as an option). `codecoder exec`
decides again through the same chain before anything runs; a question the host asked is passed
as a one-time token bound to the key that was asked, kept in the state directory, never in the
command's reach otherwise. The reason of a question names the command first: the host shows
the rewritten input, wrapper first.

`--sandbox bwrap` (the default) does the same with codecoder's contained environment: shell
commands are evaluated as `run_command` bound to @bwrap and rewritten into `codecoder exec
--sandbox=bwrap …`. A read-only command (`ls`, `git status`, `grep -rn x . | wc -l`) is allowed
with no question and runs with the file system read-only; a project grant for a contained command
holds. A command that would fail contained (`git push`, `gh …`) is asked as an escalation: the
host's question says that approving runs it on the host, unconfined, for the rest of the host's
session (a session grant bound to @shell, recorded when the host reports that it ran), and
`codecoder exec` runs it on @shell, audited as an escalation, only with that question's token.
Nothing the model writes can ask for the host: the token comes from the hook.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import secrets
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

from codecoder.foundation.atomicfile import exclusive_lock, replace_atomically
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.decision import Answer
from codecoder.foundation.display import visible, visible_lines
from codecoder.foundation.errors import CodecoderError, UsageError
from codecoder.foundation.regularfile import STATE_FILE_LIMIT, read_regular_file
from codecoder.foundation.state import project_state_directory
from codecoder.interfaces.hookaudit import Judged, audit_ran, audit_verdict
from codecoder.interfaces.hostcalls import HOST_INTERNAL, Mapped, Sandbox, map_call
from codecoder.interfaces.installation import codecoder_command

if TYPE_CHECKING:
    from codecoder.evaluation import Evaluation
    from codecoder.interfaces.agentsettings import UserGrant
    from codecoder.permissions.prompt import AskRequest
    from codecoder.session import Runtime, Session

__all__ = [
    "HOSTS",
    "HookAnswer",
    "HookSessions",
    "Mapped",
    "handle",
    "hook_project",
    "map_call",
]

Host = Literal["claude-code", "gemini"]
HOSTS: Final[tuple[Host, ...]] = ("claude-code", "gemini")

MAX_IDLE: Final = 24 * 3600.0  # seconds a host session's file may stay untouched
_PENDING_TTL: Final = 3600.0  # seconds a question waits for the host to run the call

# --- the host session's grants and questions ----------------------------------------------------


class HookSessions:
    """The session grants and open questions of each host session, in the state directory.

    One JSON file per host session (named by a digest of the host and its session id), read
    and rewritten whole under a lock, since a host may run hooks for parallel calls at once.
    """

    def __init__(self, project: Path, host: Host, clock: Callable[[], float] = time.time) -> None:
        self.directory = project_state_directory(project) / "hooks"
        self.host = host
        self._clock = clock

    def path(self, session_id: str) -> Path:
        digest = hashlib.sha256(f"{self.host}\0{session_id}".encode()).hexdigest()[:32]
        return self.directory / f"{digest}.json"

    def _read(self, session_id: str) -> dict[str, Any]:
        try:
            data = json.loads(read_regular_file(self.path(session_id), limit=STATE_FILE_LIMIT))
        except (OSError, ValueError):
            return {"grants": [], "pending": {}}
        if not isinstance(data, dict) or data.get("session") != session_id:
            return {"grants": [], "pending": {}}
        return data

    def _write(self, session_id: str, data: dict[str, Any]) -> None:
        data.update(host=self.host, session=session_id, touched=self._clock())
        text = json.dumps(data, indent=1, sort_keys=True).encode()
        replace_atomically(self.path(session_id), text, mode=0o600)

    def _locked(self) -> Any:
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        return exclusive_lock(self.directory / ".lock", mode=0o600)

    def grants(self, session_id: str) -> list[dict[str, Any]]:
        now = self._clock()
        return [
            g
            for g in self._read(session_id).get("grants", [])
            if isinstance(g, dict) and (g.get("expiry", -1) < 0 or g["expiry"] > now)
        ]

    def load_into(self, session: Session, session_id: str) -> None:
        """Give `session` the host session's grants (each for the environment it was made in)."""
        from codecoder.permissions.keys import PermissionKey

        for grant in self.grants(session_id):
            tool, key = grant.get("tool"), grant.get("key")
            if not isinstance(tool, str) or not isinstance(key, str):
                continue
            if session.runtime.tools.get(tool) is None:
                continue
            environment = session.runtime.environment_of(tool)
            if grant.get("escalation") and grant.get("environment") == EnvironmentTag.SHELL.value:
                environment = EnvironmentTag.SHELL  # approved to run on the host instead
            elif grant.get("environment") != environment.value:
                continue  # approved for another environment: asked again here
            expiry = grant.get("expiry", -1)
            ttl = -1.0 if expiry < 0 else max(expiry - self._clock(), 0.0)
            permission_key = PermissionKey(tool, key.partition(":")[2], key)
            session.allowlist.grant(
                permission_key, environment, ttl=ttl, digest=grant.get("digest")
            )

    def ask(self, session_id: str, call_id: str, question: dict[str, Any]) -> str:
        """Remember a question the host is about to ask; returns its one-time token."""
        token = secrets.token_urlsafe(18)
        with self._locked():
            data = self._read(session_id)
            pending = {
                k: v
                for k, v in data.get("pending", {}).items()
                if v.get("asked", 0) > self._clock() - _PENDING_TTL
            }
            pending[call_id] = {**question, "token": token, "asked": self._clock()}
            data["pending"] = pending
            self._write(session_id, data)
        return token

    def ran(self, session_id: str, call_id: str) -> dict[str, Any] | None:
        """The host ran a call it had asked about: the human approved it. Record the session
        grant the question announced (never for a protected path); returns the question."""
        with self._locked():
            data = self._read(session_id)
            question = data.get("pending", {}).pop(call_id, None)
            if not isinstance(question, dict):
                return None
            escalation = bool(question.get("host_key"))
            if not question.get("protected") and question.get("scope", "session") == "session":
                ttl = float(question.get("ttl", -1))
                expiry = -1.0 if ttl < 0 else self._clock() + ttl
                key = question["host_key"] if escalation else question["key"]
                grants = [
                    g
                    for g in data.get("grants", [])
                    if (g.get("tool"), g.get("key")) != (question["tool"], key)
                ]
                grants.append(
                    {
                        "tool": question["tool"],
                        "key": key,
                        "environment": EnvironmentTag.SHELL.value
                        if escalation
                        else question["environment"],
                        "digest": question.get("digest"),
                        "expiry": expiry,
                        "escalation": escalation,
                    }
                )
                data["grants"] = grants
            self._write(session_id, data)
        return question

    def redeem(self, session_id: str, token: str, key: str) -> dict[str, Any] | None:
        """Use a question's one-time token (`codecoder exec --approved`): the question when it
        is open, for this very key (its `host_key` says the human approved the host); None
        otherwise. A token is good once."""
        with self._locked():
            data = self._read(session_id)
            for call_id, question in list(data.get("pending", {}).items()):
                if question.get("token") != token:
                    continue
                if question.get("key") != key or question.get("redeemed"):
                    return None
                question["redeemed"] = True
                data["pending"][call_id] = question
                self._write(session_id, data)
                return dict(question)
        return None

    def end(self, session_id: str) -> None:
        with self._locked():
            self.path(session_id).unlink(missing_ok=True)

    def every_grant(self) -> list[tuple[str, dict[str, Any]]]:
        """(host session id, grant) of every live grant of this host's sessions, for
        `codecoder allowlist list`."""
        found: list[tuple[str, dict[str, Any]]] = []
        for path in sorted(self.directory.glob("*.json")) if self.directory.is_dir() else ():
            try:
                data = json.loads(read_regular_file(path, limit=STATE_FILE_LIMIT))
            except (OSError, ValueError):
                continue
            if not isinstance(data, dict) or data.get("host") != self.host:
                continue
            session_id = data.get("session")
            if isinstance(session_id, str) and self.path(session_id) == path:
                found += [(session_id, grant) for grant in self.grants(session_id)]
        return found

    def revoke(self, key: str) -> list[str]:
        """Drop the grant of `key` from every session of this host; returns their ids."""
        dropped: list[str] = []
        with self._locked():
            for session_id, _ in self.every_grant():
                data = self._read(session_id)
                kept = [g for g in data.get("grants", []) if g.get("key") != key]
                if len(kept) != len(data.get("grants", [])):
                    data["grants"] = kept
                    self._write(session_id, data)
                    dropped.append(session_id)
        return sorted(set(dropped))

    def sweep(self, max_idle: float = MAX_IDLE) -> None:
        """Remove the files of host sessions untouched for longer than `max_idle` seconds."""
        if not self.directory.is_dir():
            return
        limit = self._clock() - max_idle
        for path in self.directory.glob("*.json"):
            try:
                if path.stat().st_mtime < limit:
                    path.unlink(missing_ok=True)
            except OSError:
                continue


# --- answering the host -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HookAnswer:
    """What the hook tells its host: a verdict (None: no opinion), why, and a rewritten input."""

    verdict: Literal["allow", "deny", "ask"] | None
    reason: str = ""
    rewritten: dict[str, Any] | None = None

    def render(self, host: Host, tool_input: Mapping[str, Any]) -> dict[str, Any]:
        """The answer in the host's own output format (see the module docstring)."""
        if self.verdict is None:
            return {}
        if host == "claude-code":
            specific: dict[str, Any] = {
                "hookEventName": "PreToolUse",
                "permissionDecision": self.verdict,
                "permissionDecisionReason": self.reason,
            }
            if self.rewritten is not None:
                specific["updatedInput"] = {**tool_input, **self.rewritten}
            answer: dict[str, Any] = {"hookSpecificOutput": specific}
            if self.verdict == "deny":
                answer["systemMessage"] = self.reason  # the person sees it too
            return answer
        out: dict[str, Any] = {"decision": self.verdict, "reason": self.reason}
        if self.verdict in ("ask", "deny"):
            out["systemMessage"] = self.reason
        if self.rewritten is not None:
            out["hookSpecificOutput"] = {"tool_input": self.rewritten}
        return out


@dataclass(frozen=True, slots=True)
class HookOptions:
    # None: found from the `cwd` the host sends, as git finds its repository
    # (`runtime.config.discovery`); a project given here overrides it.
    project: Path | None
    allow: Sequence[str] = ()
    # Where the host's own shell commands run: codecoder's sandbox unless the user asked for
    # the host (None: `--host-shell`), where they are judged as run_command on @shell.
    sandbox: Sandbox | None = "bwrap"
    mcp_server: str = "codecoder"
    # The command that runs codecoder in a rewritten shell command (empty: the one running
    # now, by its absolute path: `interfaces.installation`).
    exec_program: tuple[str, ...] = ()
    session_ttl: float = -1.0  # filled from codecoder.json when the hook evaluates
    # Nobody can answer the host's prompt (`claude -p`, `gemini -p`): what would be asked is
    # denied, with how to allow it for the run. Gemini CLI waits for ever on an "ask" there.
    interactive: bool = True


def handle(host: Host, event: Mapping[str, Any], options: HookOptions) -> dict[str, Any]:
    """Answer one host event; returns the JSON to print (empty: no opinion).

    Raises UsageError for an event that is not one (the caller blocks the call: a hook that
    cannot read its input must not let the call through).
    """
    name = event.get("hook_event_name")
    session_id = event.get("session_id")
    if not isinstance(name, str) or not isinstance(session_id, str) or not session_id:
        raise UsageError("the hook input has no hook_event_name or session_id")
    project = hook_project(event, options.project)
    options = dataclasses.replace(options, project=project)
    sessions = HookSessions(project, host)
    sessions.sweep()
    if name == "SessionEnd":
        sessions.end(session_id)
        return {}
    tool_name = event.get("tool_name")
    tool_input = event.get("tool_input")
    if not isinstance(tool_name, str) or not isinstance(tool_input, dict):
        if name in ("PreToolUse", "BeforeTool"):
            raise UsageError(f"the {name} input has no tool_name or tool_input object")
        return {}
    call_id = _call_id(event, tool_name, tool_input)
    if name in ("PostToolUse", "AfterTool"):
        question = sessions.ran(session_id, call_id)
        if question is not None and not question.get("rewritten"):
            audit_ran(host, session_id, tool_name, project, question)
        return {}
    if name not in ("PreToolUse", "BeforeTool"):
        return {}
    judged = Judged()
    answer = _pre_tool(host, event, call_id, tool_name, tool_input, options, sessions, judged)
    if answer.verdict is not None and answer.rewritten is None:  # `exec` audits the rest
        audit_verdict(host, session_id, tool_name, project, answer.verdict, answer.reason, judged)
    return answer.render(host, tool_input)


def hook_project(event: Mapping[str, Any], given: Path | None) -> Path:
    """The project a hook event is about: `given` (`--project`), else the one found from the
    `cwd` the host sends (the agent may have `cd`-ed into a subdirectory), else from the
    hook's own working directory."""
    from codecoder.config.discovery import find_project

    if given is not None:
        return given.resolve()
    cwd = event.get("cwd")
    start = Path(cwd) if isinstance(cwd, str) and os.path.isabs(cwd) else None
    if start is not None and not start.is_dir():
        start = None
    return find_project(start).directory.resolve()


def _agent_directory(event: Mapping[str, Any]) -> Path | None:
    """Where the agent stands: the `cwd` its host sends (Claude Code's follows the `cd`s of its
    shell), which its relative paths and its shell commands are read from."""
    cwd = event.get("cwd")
    if isinstance(cwd, str) and os.path.isabs(cwd) and os.path.isdir(cwd):
        return Path(cwd)
    return None


def _call_id(event: Mapping[str, Any], tool_name: str, tool_input: Mapping[str, Any]) -> str:
    """Claude Code names each call (`tool_use_id`); Gemini CLI does not, so its calls are
    told apart by what they are (a rewritten input is matched through its original)."""
    given = event.get("tool_use_id")
    if isinstance(given, str) and given:
        return given
    text = json.dumps([tool_name, _original_input(tool_input)], sort_keys=True)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def _original_input(tool_input: Mapping[str, Any]) -> Mapping[str, Any]:
    """The input as the model wrote it, before `--sandbox docker` rewrote its command."""
    command = tool_input.get("command")
    if not isinstance(command, str) or " exec " not in command:
        return tool_input
    try:
        words = shlex.split(command)
    except ValueError:
        return tool_input
    if "exec" in words and "--" in words:
        rest = words[words.index("--") + 1 :]
        if len(rest) == 1:
            return {**tool_input, "command": rest[0]}
    return tool_input


def _pre_tool(
    host: Host,
    event: Mapping[str, Any],
    call_id: str,
    tool_name: str,
    tool_input: Mapping[str, Any],
    options: HookOptions,
    sessions: HookSessions,
    judged: Judged,
) -> HookAnswer:
    project = options.project
    assert project is not None  # placed by `handle`
    session_id = str(event["session_id"])
    if tool_name in HOST_INTERNAL:
        return HookAnswer(None)
    from codecoder.evaluation import evaluate
    from codecoder.permissions.prompt import non_interactive
    from codecoder.session import Runtime

    # The host runs its own shell commands on the host unless they are rewritten into a sandbox.
    bindings: dict[str, EnvironmentTag] | None = None
    if options.sandbox == "bwrap":
        bindings = {"run_command": EnvironmentTag.BWRAP}
    elif options.sandbox is None:
        bindings = {"run_command": EnvironmentTag.SHELL}
    with Runtime(project, asker=non_interactive, audit_log=None, bindings=bindings) as runtime:
        mapped = map_call(
            tool_name,
            tool_input,
            project,
            sandbox=options.sandbox,
            mcp_server=options.mcp_server,
            mcp_context=event.get("mcp_context"),
            read_roots=runtime.config.read_roots,
            cwd=_agent_directory(event),
        )
        judged.mapped = mapped
        if mapped.tool is None:
            if mapped.refused:
                # What codecoder refuses, it refuses here too, with its reason.
                return HookAnswer("deny", f"codecoder: {visible(mapped.problem)}")
            problem = f"codecoder: {visible(mapped.problem)}; not allowed by codecoder"
            return HookAnswer("ask" if options.interactive else "deny", problem)
        if mapped.own_server:
            if mapped.tool in runtime.tools:
                reason = "codecoder's MCP server decides (and asks) for its own tools"
                return HookAnswer("allow", reason)
            problem = (
                f"codecoder: its MCP server has no tool {visible(mapped.tool)}; not allowed by "
                "codecoder"
            )
            return HookAnswer("ask" if options.interactive else "deny", problem)
        refused = _fetch_refusal(runtime, mapped)
        if refused is None and mapped.shell and options.sandbox is None:
            # The host runs the command on the host: never while git would run what the
            # human has not seen (environments.host.gitseen).
            refused = _git_refusal(runtime)
        if refused is not None:
            return HookAnswer("deny", f"codecoder: {visible(refused)}")
        # A shell command runs where the agent stands; a path was made workspace-relative.
        session = runtime.session(standing=mapped.standing)
        # While a rules file cannot be read, no key is granted: every call that needs
        # permission is refused with the file's error (calls that need none still run).
        if runtime.config.unreadable_reason is None:
            for key in options.allow:
                session.grant(key)
        sessions.load_into(session, session_id)
        try:
            verdict = evaluate(session, mapped.tool, mapped.args)
        except CodecoderError as exc:
            # Input codecoder refuses (InvalidArguments: an absolute path, `..`), or a call it
            # cannot judge: never let through.
            return HookAnswer("deny", f"codecoder refuses this call: {visible(str(exc))}")
        options = dataclasses.replace(options, session_ttl=runtime.config.session_ttl)
    judged.evaluation = verdict
    mine = None
    if verdict.decision == "ask" and not verdict.protected:
        from codecoder.interfaces.agentsettings import user_grant

        mine = user_grant(host, tool_name, tool_input, project)
        judged.user_rule = mine.describe() if mine is not None else None
    return _answer(host, session_id, call_id, mapped, verdict, options, sessions, mine)


def _fetch_refusal(runtime: Runtime, mapped: Mapped) -> str | None:
    """Why the web tools would refuse one of the URLs the host's call fetches, or None: the
    web policy, then every address the host resolves to (loopback, private, link-local,
    metadata refused unless the policy names them)."""
    from codecoder.foundation.errors import ExecutionFailed
    from codecoder.tools.web import GuardedHttp

    http = GuardedHttp(runtime.config.web)
    for url in mapped.urls:
        try:
            http.checked(url)
        except ExecutionFailed as exc:
            return str(exc)
    return None


def _git_refusal(runtime: Runtime) -> str | None:
    from codecoder.foundation.errors import ExecutionFailed

    try:
        runtime.git_guard.before()
    except (ExecutionFailed, CodecoderError) as exc:
        return str(exc)
    return None


def _session_scope(host: Host, question: AskRequest, ttl: float) -> str:
    """What approving at the host's prompt records, covers, how long and where: the host
    session's grant of the key (`HookSessions.ran`)."""
    covers = question.grant_for(Answer.SESSION).covers
    name = "Claude Code" if host == "claude-code" else "Gemini CLI"
    until = ""
    if ttl >= 0:
        until = f", at most until {time.strftime('%H:%M', time.localtime(time.time() + ttl))}"
    return (
        f"{visible(question.key)} ({visible(covers)}) for the rest of this {name} session{until}, "
        "kept in codecoder's state directory (`codecoder allowlist revoke "
        f"{visible(question.key)}` takes it back)"
    )


def _answer(
    host: Host,
    session_id: str,
    call_id: str,
    mapped: Mapped,
    verdict: Evaluation,
    options: HookOptions,
    sessions: HookSessions,
    mine: UserGrant | None = None,
) -> HookAnswer:
    key = visible(verdict.key or verdict.tool)
    where = verdict.environment.value
    if verdict.decision == "deny":
        return HookAnswer("deny", f"codecoder: {key} is refused: {visible(verdict.reason)}")
    token: str | None = None
    question = {
        "tool": verdict.tool,
        "key": verdict.key,
        "environment": where,
        "protected": verdict.protected,
        "ttl": options.session_ttl,
        # Rewritten into `codecoder exec`, which audits the call itself.
        "rewritten": mapped.shell and options.sandbox is not None,
    }
    if verdict.decision == "ask" and mine is not None:
        reason = f"codecoder: {key} ({where}) is allowed by {visible(mine.describe())}"
        answer = HookAnswer("allow", reason)
        if mapped.shell and options.sandbox is not None:  # `codecoder exec` takes it once
            token = sessions.ask(session_id, call_id, {**question, "scope": "once"})
        return _rewritten(host, session_id, mapped, answer, token, options)
    if verdict.decision == "ask" and not options.interactive:
        reason = f"codecoder: {key} on {where} needs approval, and nobody can answer here"
        if verdict.protected or verdict.question is None:
            reason += " (a protected path: only a person can allow it, once)"
        else:
            entry = verdict.question.grant_for(Answer.SESSION).entry
            reason += (
                f"; to allow it for a run: codecoder hook --allow {visible(shlex.quote(entry))}"
            )
        return HookAnswer("deny", reason)
    host_key = verdict.question.host_key if verdict.question is not None else ""
    if verdict.decision == "allow":
        reason = f"codecoder: {key} ({where}) is allowed: {visible(verdict.reason)}"
        answer = HookAnswer("allow", reason)
    elif host_key:
        # An escalation: the host's question is the only one, so approving it means the host.
        # Gemini's prompt does not tell the hook which of its choices was made: once there.
        once = verdict.protected or host == "gemini"
        scope = "this call only" if once else "the rest of this session"
        reason = (
            f"codecoder: {key} would run contained in {where} and would likely fail "
            f"({visible(verdict.question.note if verdict.question else '')}); approving runs "
            f"it on the host instead, unconfined (@shell), for {scope}"
        )
        token = sessions.ask(
            session_id,
            call_id,
            {
                "tool": verdict.tool,
                "key": verdict.key,
                "host_key": host_key,
                "environment": where,
                "protected": verdict.protected,
                "ttl": options.session_ttl,
                "scope": "once" if once else "session",
                "rewritten": mapped.shell and options.sandbox is not None,
            },
        )
        answer = HookAnswer("ask", reason)
    else:
        once = verdict.protected or host == "gemini"
        if verdict.protected or verdict.question is None:
            scope = "this call only (a protected path is never granted for longer)"
        elif host == "gemini":
            # Gemini's prompt does not tell the hook which of its choices was made.
            scope = "this call only: codecoder asks again next time"
        else:
            scope = _session_scope(host, verdict.question, options.session_ttl)
        reason = f"codecoder: {key} on {where} needs your approval; approving allows {scope}"
        asked = verdict.question
        remarks = [*asked.notes, asked.note] if asked is not None else []
        for remark in filter(None, remarks):
            reason += f" ({'; '.join(visible_lines(remark))})"
        scoped = {**question, "scope": "once" if once else "session"}
        token = sessions.ask(session_id, call_id, scoped)
        answer = HookAnswer("ask", reason)
    return _rewritten(host, session_id, mapped, answer, token, options)


def _rewritten(
    host: Host,
    session_id: str,
    mapped: Mapped,
    answer: HookAnswer,
    token: str | None,
    options: HookOptions,
) -> HookAnswer:
    """With `--sandbox docker|bwrap`, a shell command rewritten to run in the sandbox through
    `codecoder exec` (with the one-time token of the question asked for it, if any)."""
    if mapped.shell and options.sandbox is not None:
        # Every value is joined to its option (`--approved=-iPGz…`) and the command follows
        # `--`: a token, path, session id or key that starts with `-` is never read as an
        # option (a token_urlsafe starts with one about once in 64).
        command = [
            *(options.exec_program or codecoder_command()),
            "exec",
            f"--project={options.project}",
            f"--hook={host}:{session_id}",
        ]
        if options.sandbox == "bwrap":
            command.append("--sandbox=bwrap")
        if token is not None:
            command.append(f"--approved={token}")
        command += [f"--allow={key_allowed}" for key_allowed in options.allow]
        command += ["--", mapped.args["command"]]
        rewritten = {"command": shlex.join(command)}
        reason = answer.reason
        if answer.verdict == "ask" and reason.startswith("codecoder: "):
            # The host's question shows the rewritten input, wrapper first: its text names
            # the command itself first.
            shown = " ".join(visible_lines(mapped.args["command"]))
            reason = f"codecoder: `{shown}` — {reason.removeprefix('codecoder: ')}"
        return HookAnswer(answer.verdict, reason, rewritten)
    return answer
