"""Running tool calls: `call` (one call through the whole permission chain; on a terminal a
command's output as it comes, or with `--json` its progress on stderr; when interrupted, the
output so far), `exec` (a command in a sandbox, as `--sandbox docker|bwrap` hooks rewrite it) and
`replay` (a recorded run: one session, one call per JSON line)."""

from __future__ import annotations

import argparse
import contextlib
import json
import shlex
import sys
from typing import TYPE_CHECKING, Any

from codecoder.foundation.errors import UsageError
from codecoder.interfaces.cli.exit_codes import (
    EXIT_DENIED,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    exit_code,
)
from codecoder.interfaces.cli.inputs import call_arguments, read_text, usage
from codecoder.interfaces.cli.output import is_terminal, prefixed, print_outcome
from codecoder.interfaces.cli.project import granted, report_config
from codecoder.interfaces.interruption import interruptible

if TYPE_CHECKING:
    from codecoder.dispatcher import CallOutcome
    from codecoder.interfaces.liveview import TerminalView
    from codecoder.permissions.prompt import Asker
    from codecoder.session import Session


def _asker_for(args: argparse.Namespace) -> Asker:
    from codecoder.permissions.prompt import fixed, non_interactive
    from codecoder.session import default_asker

    if args.answer:
        return fixed(args.answer)
    if args.non_interactive:
        return non_interactive
    return default_asker()


def call(args: argparse.Namespace) -> int:
    from codecoder.interfaces.livegrants import published
    from codecoder.interfaces.liveview import TerminalView
    from codecoder.permissions.allowlist import Lifetime
    from codecoder.session import Runtime
    from codecoder.tools.liveoutput import LiveOutput

    asker = _asker_for(args)
    runtime = Runtime(args.project, asker=asker, ahead=False)
    live: TerminalView | None = None
    progress: ProgressLine | None = None
    allow_with: str | None = None
    try:
        payload = call_arguments(args.arguments, args.tool, runtime.tools.get(args.tool))
        report_config(runtime)
        if is_terminal() and not args.json:
            live = TerminalView(sys.stdout, sys.stderr, limit=runtime.config.limits.max_output)
        progress = ProgressLine() if live is None and sys.stderr.isatty() else None
        kept = LiveOutput(live)  # what the command printed, should the call be interrupted
        try:
            with (
                interruptible(),
                runtime.session(
                    lifetime=Lifetime(CALL_LIFETIME, one_call=True), standing=runtime.standing_in()
                ) as session,
                published(runtime.project_dir, "codecoder call", session.allowlist),
            ):
                outcome = granted(session, args).call(
                    args.tool, payload, progress=progress, output=kept
                )
                allow_with = _unanswered(session, asker, outcome, args.tool, payload)
        except KeyboardInterrupt as exc:
            _finish(progress, live)
            shown = live is not None and live.shown
            _report_interrupted(exc, kept.text(), shown=shown, args=args)
            raise
    finally:
        runtime.close()
    _finish(progress, live)
    if allow_with is not None and args.json:
        document = outcome.to_json()
        document["error"]["allow"] = allow_with
        print(json.dumps(document, ensure_ascii=not is_terminal()))
        return exit_code(outcome)
    print_outcome(outcome, args.json, shown=live is not None and live.shown)
    if allow_with is not None:
        from codecoder.permissions.prompt import in_ci

        why = "CI=true" if in_ci() and not args.non_interactive else "--non-interactive"
        print(
            prefixed(
                f"nobody can answer here ({why}); to allow it for a run, add --allow "
                f"{shlex.quote(allow_with)}"
            ),
            file=sys.stderr,
        )
    return exit_code(outcome)


def _unanswered(
    session: Session, asker: Asker, outcome: CallOutcome, tool: str, payload: Any
) -> str | None:
    """The `--allow` entry that would have let a call nobody could answer run (what the
    hooks and MCP say too), or None: the call was not refused so, or only a person can allow
    it (a protected path, once)."""
    from codecoder.evaluation import evaluate
    from codecoder.foundation.decision import Answer
    from codecoder.foundation.errors import DeniedByUser
    from codecoder.permissions.prompt import non_interactive

    if asker is not non_interactive or not isinstance(outcome.error, DeniedByUser):
        return None
    verdict = evaluate(session, tool, payload)
    if verdict.question is None or verdict.protected:
        return None
    return verdict.question.grant_for(Answer.SESSION).entry


def _finish(progress: ProgressLine | None, live: TerminalView | None) -> None:
    if progress is not None:
        progress.clear()
    if live is not None:
        live.finish()


def _report_interrupted(
    exc: KeyboardInterrupt, so_far: str, *, shown: bool, args: argparse.Namespace
) -> None:
    """What the command printed before Ctrl-C or SIGTERM stopped it: already on the terminal,
    or written now (as JSON with `--json`); `main` then says it was interrupted."""
    from codecoder.foundation.display import for_terminal
    from codecoder.interfaces.interruption import Terminated

    kind = "Terminated" if isinstance(exc, Terminated) else "Interrupted"
    with contextlib.suppress(OSError):  # a pipe whose reader the same Ctrl-C ended
        if args.json:
            message = f"{args.tool} was {kind.lower()}; what it started was stopped"
            error = {"type": kind, "message": message, "output": so_far}
            document = {"tool": args.tool, "ok": False, "error": error}
            print(json.dumps(document, ensure_ascii=not is_terminal()))
        elif so_far and not shown:
            sys.stdout.write(for_terminal(so_far) if is_terminal() else so_far)
            if not so_far.endswith("\n"):
                sys.stdout.write("\n")
        sys.stdout.flush()


# What "this session" is for a grant made in each command (runtime.permissions.allowlist's
# Lifetime, made where it is used: `decide` and `hook` start without the permission model).
CALL_LIFETIME = "until this `codecoder call` exits (this process only)"
REPLAY_LIFETIME = "until this replay ends (this process only)"
EXEC_LIFETIME = "until this `codecoder exec` exits (this process only)"
# `call` and `exec` make one call: their questions offer no session scope (it would be Once).


class ProgressLine:
    """A long call's progress, as one line on stderr (a terminal) rewritten in place, and
    cleared when the call ends; a call that reports nothing writes nothing at all."""

    def __init__(self) -> None:
        self._shown = False

    def __call__(self, done: float, total: float | None, message: str | None) -> None:
        from codecoder.foundation.display import visible

        text = message or (f"{done:g}/{total:g}" if total else f"{done:g}")
        lines = text.splitlines() or [""]
        if len(lines) > 1:  # a command's latest lines: its state and the very last line
            text = f"{lines[0]} {lines[-1]}"
        sys.stderr.write(f"\r\x1b[K{visible(text)[:200]}")
        sys.stderr.flush()
        self._shown = True

    def clear(self) -> None:
        if self._shown:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()
            self._shown = False


def exec_(args: argparse.Namespace) -> int:
    """Run a command in its sandbox through the chain, as `--sandbox docker|bwrap` hooks
    rewrite it (run_container in @docker, or run_command in @bwrap): the command's own output
    and exit code, or a refusal on stderr (exit 3). A question the host asked is this call's
    only answer: its token allows it once, on the host where the question was an escalation."""
    from codecoder.foundation.ceiling import EnvironmentTag
    from codecoder.foundation.decision import Answer, Decider
    from codecoder.interfaces.hooks import HOSTS, HookSessions
    from codecoder.permissions.allowlist import Lifetime
    from codecoder.permissions.prompt import AskRequest, unanswered
    from codecoder.session import Runtime, default_asker

    host_session: tuple[HookSessions, str] | None = None
    if args.hook:
        host, _, session_id = args.hook.partition(":")
        if host not in HOSTS or not session_id:
            usage(f"--hook must be HOST:SESSION with HOST one of {', '.join(HOSTS)}")
        host_session = (HookSessions(args.project.resolve(), host), session_id)

    def approved(request: AskRequest) -> Answer:
        """The host's question, answered by the human there, is this call's only answer."""
        assert host_session is not None
        sessions, session_id = host_session
        question = (
            sessions.redeem(session_id, args.approved, request.key) if args.approved else None
        )
        if question is not None:
            escalation = bool(question.get("host_key")) and bool(request.host_key)
            return Answer.HOST_ONCE if escalation else Answer.ONCE
        reason = (
            "the host's approval for this call was already used, was for another key, or "
            "waited longer than its question stays open"
            if args.approved
            else "nothing granted this key, and the host asked no question for it"
        )
        raise unanswered(request, Decider.NON_INTERACTIVE, reason)

    asker = approved if host_session is not None else default_asker()
    contained = args.sandbox == "bwrap"
    bindings = {"run_command": EnvironmentTag.BWRAP} if contained else None
    with Runtime(args.project, asker=asker, bindings=bindings, ahead=False) as runtime:
        # The host's shell runs `codecoder exec` where its agent stands (`cd src` included):
        # the command runs there.
        session = granted(
            runtime.session(
                lifetime=Lifetime(EXEC_LIFETIME, one_call=True), standing=runtime.standing_in()
            ),
            args,
        )
        if host_session is not None:
            host_session[0].load_into(session, host_session[1])
        tool = "run_command" if contained else "run_container"
        outcome = session.call(tool, {"command": args.command_line})
    if args.json:
        print_outcome(outcome, True)
        return exit_code(outcome)
    if outcome.result is not None:
        data = outcome.result.data
        sys.stdout.write(str(data.get("stdout", outcome.result.output)))
        sys.stderr.write(str(data.get("stderr", "")))
        code = data.get("exit_code")
        return code if isinstance(code, int) else exit_code(outcome)
    print_outcome(outcome, False)
    return exit_code(outcome)


def replay(args: argparse.Namespace) -> int:
    from codecoder.foundation.decision import Answer, Decider
    from codecoder.interfaces.livegrants import published
    from codecoder.permissions.allowlist import Lifetime
    from codecoder.permissions.prompt import AskRequest, unanswered
    from codecoder.permissions.prompt import given as answered_beforehand
    from codecoder.session import Runtime

    text = sys.stdin.read() if str(args.file) == "-" else read_text(args.file)
    current: list[Answer] = []
    line_number = [0]

    def answer(request: AskRequest) -> Answer:
        if current:
            return current[0]
        reason = f"line {line_number[0]} of the replay gives no answer, and nothing granted it"
        raise unanswered(request, Decider.NON_INTERACTIVE, reason)

    runtime = Runtime(args.project, asker=answered_beforehand(answer))
    report_config(runtime)
    codes: list[int] = []
    try:
        with (
            interruptible(),
            runtime.session(lifetime=Lifetime(REPLAY_LIFETIME)) as session,
            published(runtime.project_dir, "codecoder replay", session.allowlist),
        ):
            granted(session, args)
            for number, line in enumerate(text.splitlines(), start=1):
                if not line.strip():
                    continue
                current.clear()
                line_number[0] = number
                try:
                    tool, call_args, given = _replay_line(line, number)
                except UsageError as exc:
                    codes.append(EXIT_USAGE)
                    row = {
                        "line": number,
                        "ok": False,
                        "error": {"type": type(exc).__name__, "message": str(exc)},
                    }
                    print(json.dumps(row) if args.json else f"line {number}: {exc}")
                    continue
                if given is not None:
                    current.append(given)
                outcome = session.call(tool, call_args)
                codes.append(exit_code(outcome))
                if args.json:
                    row = {"line": number, **outcome.to_json()}
                    print(json.dumps(row, ensure_ascii=not is_terminal()))
                else:
                    print(f"--- line {number}: {tool}")
                    print_outcome(outcome, False)
    finally:
        runtime.close()
    for code in (EXIT_USAGE, EXIT_DENIED, EXIT_FAILED):
        if code in codes:
            return code
    return EXIT_OK


def _replay_line(line: str, number: int) -> tuple[str, Any, Any]:
    from codecoder.foundation.decision import Answer

    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise UsageError(f"line {number}: not JSON: {exc.msg} at column {exc.colno}") from None
    if not isinstance(row, dict) or not isinstance(row.get("tool"), str):
        raise UsageError(f'line {number}: expected {{"tool": NAME, "args": {{...}}}}')
    unknown = set(row) - {"tool", "args", "answer"}
    if unknown:
        raise UsageError(f"line {number}: unknown fields {sorted(unknown)}")
    answer = row.get("answer")
    if answer is None:
        return row["tool"], row.get("args", {}), None
    if not isinstance(answer, str):
        raise UsageError(f'line {number}: "answer" must be a string, e.g. "AlwaysThisSession"')
    try:
        return row["tool"], row.get("args", {}), Answer.parse(answer)
    except ValueError as exc:
        raise UsageError(f"line {number}: {exc}") from None
