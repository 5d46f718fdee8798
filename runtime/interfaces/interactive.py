"""`codecoder session`: a person at a terminal calls tools by name and answers the prompts.

    codecoder> run_command git status              the rest of the line is the command
    codecoder> run_command {"command": "ls -la"}   or the arguments as a JSON object
    codecoder> /allowlist                          session and project grants, deny rules
    codecoder> /audit 5                            the last decisions
    codecoder> /reload                             apply codecoder.json, report its problems
    codecoder> /revoke run_command:git             drop a session grant

On a terminal the line is edited with readline (history in the state directory, kept across
sessions: `$XDG_STATE_HOME/codecoder/session_history`).

One session for the whole run, so AlwaysThisSession answers hold until `/quit`. Edits to
codecoder.json are applied by `/reload` only, and a reload prints every diagnostic (syntax
errors with line and column, ceiling violations) instead of dropping it.

Whatever comes from a tool or a call goes through `visible()` (keys, error messages, audit
records) or `for_terminal()` (output, which keeps its line breaks and tabs) before it reaches
the terminal, so an escape sequence in a command's output cannot repaint the screen, fake a
prompt or hide a line, and a long run of blanks is shown as a marker with its length. On a
terminal a command's output is shown as it comes (`runtime.interfaces.liveview`), and Ctrl-C
stops the command but keeps what it printed. The duration shown for a call leaves out the time
the human took to answer its question.
"""

from __future__ import annotations

import atexit
import contextlib
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from codecoder.config.projectfile import Diagnostic, format_diagnostic
from codecoder.config.trust import TrustState
from codecoder.dispatcher import CallOutcome
from codecoder.foundation.display import colours_for, for_terminal, visible, visible_message
from codecoder.foundation.errors import (
    PermissionDenied,
    ToolError,
    UnknownTool,
    UsageError,
)
from codecoder.foundation.state import state_directory
from codecoder.interfaces.interruption import Terminated
from codecoder.interfaces.livegrants import published
from codecoder.interfaces.liveview import TerminalView
from codecoder.interfaces.shorthand import arguments_of
from codecoder.permissions.allowlist import NEVER, Lifetime
from codecoder.permissions.prompt import (
    Asker,
    TerminalPrompt,
    key_for_person,
    non_interactive,
)
from codecoder.session import Runtime, Session, default_asker
from codecoder.tools.execute import command_status
from codecoder.tools.liveoutput import LiveOutput

__all__ = ["InteractiveSession", "run_session"]

PROMPT = "codecoder> "
SESSION_LIFETIME = Lifetime(
    "until you leave this session (/quit)",
    "kept in its memory; `codecoder allowlist list` shows it",
)

HELP = """\
  TOOL {JSON}        call a tool with its arguments as a JSON object (TOOL alone: no arguments)
  TOOL TEXT          for a tool with one required text argument (run_command: the command)
  /tools             the tools, their environment and whether they ask
  /allowlist         session grants, project grants (codecoder.json) and deny rules
  /audit [N]         the last N decisions (default 10)
  /reload            apply codecoder.json as it is now and show its problems
  /revoke KEY        drop the session grant for KEY (codecoder.json: codecoder allowlist revoke)
  /help              this help
  /quit              leave (Ctrl-D too); session grants end with the session"""


class InteractiveSession:
    """The read-eval-print loop over one runtime session."""

    def __init__(
        self,
        runtime: Runtime,
        stdin: TextIO,
        stdout: TextIO,
        asker: Asker | None = None,
        standing: str = ".",
    ) -> None:
        self.runtime = runtime
        self._in = stdin
        self._out = stdout
        self.session: Session = runtime.session(
            asker=asker, lifetime=SESSION_LIFETIME, standing=standing
        )
        self._commands: dict[str, Callable[[str], bool]] = {
            "/help": self._help,
            "/tools": self._tools,
            "/allowlist": self._allowlist,
            "/audit": self._audit,
            "/reload": self._reload,
            "/revoke": self._revoke,
            "/quit": self._quit,
            "/exit": self._quit,
        }

    def run(self) -> int:
        here = self.session.standing
        where = f" (paths and commands from {visible(here)}/)" if here != "." else ""
        self._say(f"codecoder session for {visible(str(self.runtime.project_dir))}{where}")
        self._report(list(self.runtime.diagnostics), "loaded")
        self._say("type /help for commands, /quit to leave")
        read = self._line_reader()
        while True:
            try:
                line = read()
            except Terminated:
                raise
            except KeyboardInterrupt:
                self._say("\n(interrupted: /quit to leave)")
                continue
            if not line:
                self._say("")
                return 0
            try:
                if not self.handle(line.strip()):
                    return 0
            except Terminated:
                raise
            except KeyboardInterrupt:
                # The call in progress was stopped (its process group killed) and audited.
                self._say("\n(interrupted)")

    def _line_reader(self) -> Callable[[], str]:
        """readline's `input()` with history on a terminal; a plain line read otherwise."""
        if self._in is sys.stdin and self._out is sys.stdout and sys.stdin.isatty():
            try:
                import readline
            except ImportError:  # a Python built without it
                pass
            else:
                history = state_directory() / "session_history"
                with contextlib.suppress(OSError):
                    readline.read_history_file(history)
                readline.set_history_length(1000)

                def save() -> None:
                    with contextlib.suppress(OSError):
                        history.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                        readline.write_history_file(history)

                atexit.register(save)

                def read_line() -> str:
                    try:
                        return input(PROMPT) + "\n"
                    except EOFError:
                        return ""

                return read_line

        def plain() -> str:
            self._out.write(PROMPT)
            self._out.flush()
            return self._in.readline()

        return plain

    def handle(self, line: str) -> bool:
        """Run one line; False when the session should end."""
        if not line:
            return True
        if line.startswith("/"):
            name, _, rest = line.partition(" ")
            command = self._commands.get(name)
            if command is None:
                self._say(f"unknown command {visible(name)}; /help lists them")
                return True
            return command(rest.strip())
        name, _, rest = line.partition(" ")
        try:
            tools = self.session.tools()
            if name not in tools:
                raise UnknownTool(name, list(tools))  # a typo, not a call: nothing to audit
            arguments = self._arguments(name, rest.strip())
        except UsageError as exc:
            self._say(f"codecoder: {visible(str(exc))}")
            return True
        live = None
        if self._out.isatty():
            live = TerminalView(self._out, limit=self.runtime.config.limits.max_output)
        kept = LiveOutput(live)  # what the command printed, should it be interrupted
        try:
            outcome = self.session.call(name, arguments, output=kept)
        except KeyboardInterrupt:
            if live is not None:
                live.finish()
            so_far = kept.text()
            if so_far and not (live is not None and live.shown):
                self._say(for_terminal(so_far.rstrip("\n"), colours_for(self._out)))
            raise
        if live is not None:
            live.finish()
        self._show(outcome, shown=live is not None and live.shown)
        return True

    def _arguments(self, name: str, text: str) -> Any:
        return arguments_of(name, self.session.tools().get(name), [text] if text else [])

    def _show(self, outcome: CallOutcome, *, shown: bool = False) -> None:
        """The call's result; `shown`: its command's output is on the terminal already."""
        result = outcome.result
        if result is not None and shown and isinstance(result.data.get("exit_code"), int):
            self._say(command_status(result.data["exit_code"], result.data.get("killed_by")))
        elif result is not None and result.output:
            self._say(for_terminal(result.output.rstrip("\n"), colours_for(self._out)))
        so_far = outcome.error.output if isinstance(outcome.error, ToolError) else ""
        if so_far and not shown:
            self._say(for_terminal(so_far.rstrip("\n"), colours_for(self._out)))
        decision = outcome.decision
        for violation in decision.violations if decision else ():
            self._say(f"codecoder: {visible_message(violation)}")
        error = outcome.error
        if error is not None:
            kind = (
                "permission denied"
                if isinstance(error, PermissionDenied)
                else "tool error"
                if isinstance(error, ToolError)
                else "error"
            )
            self._say(f"codecoder: {kind}: {visible_message(str(error))}")
        status = "ok" if outcome.ok else "denied" if _denied(outcome) else "failed"
        parts = [status]
        if decision is not None:
            if decision.key:
                parts.append(key_for_person(decision.key))
            parts.append(decision.environment.value)
            parts.append(f"{decision.source.value}: {visible(decision.reason)}")
        parts.append(f"{outcome.duration * 1000:.0f} ms")
        self._say(f"[{' · '.join(parts)}]")

    def _help(self, rest: str) -> bool:
        self._say(HELP)
        return True

    def _tools(self, rest: str) -> bool:
        for d in self.runtime.definitions():
            if self.session.toolset is not None and d.name not in self.session.toolset:
                continue
            ask = "ask" if d.needs_permission else "none"
            self._say(f"  {d.name:<18} {d.environment.value:<9} {ask:<5} {d.description}")
        return True

    def _allowlist(self, rest: str) -> bool:
        self._say("session grants (until /quit):")
        entries = self.session.allowlist.entries()
        for tool, key, environment, expiry in entries:
            until = "no expiry"
            if expiry != NEVER:
                until = "until " + time.strftime("%X", time.localtime(expiry))
            self._say(f"  {key_for_person(key)}  ({visible(tool)} in {environment.value}, {until})")
        if not entries:
            self._say("  (none)")
        config = self.runtime.config
        self._say(f"project grants ({visible(str(self.runtime.project_file))}):")
        problems = {
            **dict.fromkeys(config.ignored, "untrusted"),
            **{
                d.key: d.code
                for d in config.diagnostics
                if d.key and d.file is None and (d.severity == "error" or d.code == "untrusted")
            },
        }
        for entry in config.file.allowlist:
            state = "grants"
            if not entry.grants or entry.pattern in problems:
                state = f"grants nothing: {problems.get(entry.pattern, 'scope')}"
            self._say(f"  {visible(entry.pattern)}  {visible(entry.scope)}  [{state}]")
        if not config.file.allowlist:
            self._say("  (none)")
        if config.unreadable:
            self._say("  (the rules cannot be read: every call that needs permission is refused)")
        self._say("deny rules:")
        for deny in config.file.deny:
            self._say(f"  {visible(deny.pattern)}")
        if not config.file.deny:
            self._say("  (none)")
        return True

    def _audit(self, rest: str) -> bool:
        try:
            count = int(rest) if rest else 10
        except ValueError:
            self._say("usage: /audit [N]")
            return True
        records = self.runtime.audit.tail(max(count, 1)) if self.runtime.audit.path else []
        if not records:
            self._say("(no decisions recorded yet)")
        for r in records:
            stamp = time.strftime("%H:%M:%S", time.localtime(r.get("ts", 0)))
            decision = f"{r.get('decision') or '-'}/{r.get('source') or '-'}"
            fields = [stamp, r.get("tool"), r.get("key") or "-", r.get("environment") or "-"]
            fields += [decision, r.get("outcome"), f"{r.get('duration_ms', 0):.0f} ms"]
            fields[2] = key_for_person(str(fields[2]))
            shown = [f if i == 2 else visible(str(f)) for i, f in enumerate(fields)]
            self._say("  " + "  ".join(str(f) for f in shown))
        return True

    def _reload(self, rest: str) -> bool:
        self._report(self.runtime.reload(), "reloaded")
        return True

    def _revoke(self, rest: str) -> bool:
        if not rest:
            self._say("usage: /revoke KEY (the session grants: /allowlist)")
        elif self.session.allowlist.revoke(rest):
            self._say(f"revoked the session grant for {visible(rest)}")
        else:
            self._say(
                f"no session grant for {visible(rest)}; project grants are revoked with "
                "`codecoder allowlist revoke KEY`"
            )
        return True

    def _quit(self, rest: str) -> bool:
        return False

    def _report(self, diagnostics: list[Diagnostic], what: str) -> None:
        for d in diagnostics:
            self._say(format_diagnostic(self.runtime.project_file, d))
        errors = sum(d.severity == "error" for d in diagnostics)
        state = f"{errors} error(s)" if errors else "ok"
        if self.runtime.config.unreadable:
            state += "; the rules cannot be read: every call that needs permission is refused"
        elif any(d.code == "kept_last_good" for d in diagnostics):
            state += "; the last good rules stay in effect"
        trust = self.runtime.config.trust
        if trust.state is TrustState.UNTRUSTED:
            state += (
                f"; not trusted: {len(trust.widenings)} widening(s) ignored until `codecoder trust`"
            )
        self._say(f"{what} {visible(str(self.runtime.project_file))}: {state}")

    def _say(self, text: str) -> None:
        self._out.write(text + "\n")
        self._out.flush()


def _denied(outcome: CallOutcome) -> bool:
    return isinstance(outcome.error, PermissionDenied)


def session_asker(stdin: TextIO, stdout: TextIO) -> Asker:
    """Ask on the session's own terminal; otherwise (CI, a script on stdin) as any command."""
    asker = default_asker()
    if asker is not non_interactive and stdin.isatty():
        # The prompt goes to the session's own output, between the lines it belongs to.
        return TerminalPrompt(stdin, stdout)
    return asker


def run_session(
    project_dir: Path, stdin: TextIO | None = None, stdout: TextIO | None = None
) -> int:
    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    runtime = Runtime(project_dir, asker=session_asker(stdin, stdout))
    try:
        # Typed at a terminal: paths and commands are where the person stands.
        interactive = InteractiveSession(runtime, stdin, stdout, standing=runtime.standing_in())
        allowlist = interactive.session.allowlist
        with published(runtime.project_dir, "codecoder session", allowlist):
            return interactive.run()
    finally:
        runtime.close()
