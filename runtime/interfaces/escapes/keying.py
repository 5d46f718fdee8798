"""The keying layer (keying.json): run_command through a session holding a grant for an innocent
command (checked first to really allow it). The attack must not be allowed, and nothing may
reach the environment (a recorder that runs nothing).

Where the binding confines read-only commands (@bwrap), most innocent commands (`git status`)
run unasked as reads: the control then proves the grant by the session's own lookup, the one the
engine makes for a command that is not read-only. An `expect: argv` attempt, whose attack is a
shell reading the quoted metacharacters, may be allowed read-only, but only as exactly its argv,
without a shell, and handed to the environment read-only (never writable).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from codecoder.config.project import PROJECT_FILE
from codecoder.dispatcher import CallOutcome
from codecoder.environments.base import CommandRequest
from codecoder.foundation.ceiling import Scope
from codecoder.foundation.decision import Source
from codecoder.foundation.display import SPACE_RUN, renders_blank
from codecoder.interfaces.escapes.calls import _allowed, _Asker, _grant_source, _recorders, _refusal
from codecoder.interfaces.escapes.corpus import Attempt, KeyingEntry, ToolCall
from codecoder.interfaces.escapes.layer import AuditContext, _LayerRunner
from codecoder.interfaces.escapes.outcomes import _escaped, _NotApplicable, _NotRun
from codecoder.permissions.commandkey import key_command
from codecoder.permissions.prompt import describe, render
from codecoder.session import Runtime


class _KeyingLayer(_LayerRunner):
    def __init__(self, audit: AuditContext) -> None:
        self.audit = audit
        self.tag = audit.binding("run_command") if "run_command" in audit.tools else None
        if self.tag is None:
            self.blocker = _NotApplicable("run_command is not a tool of this runtime")
        self.directory = audit.scratch_dir("keying")

    def run(self, attempt: Attempt) -> str:
        entry = attempt.entry
        assert isinstance(entry, KeyingEntry) and self.tag is not None
        audit = self.audit
        innocent = audit.key(ToolCall(tool="run_command", args={"command": entry.innocent}))
        assert innocent is not None
        # The widest grants a human can give for the innocent command: each level the prompt
        # offers (its subcommand, then its whole program), the program's wildcard, and where
        # the entry says so every simple command.
        levels = [level.entry for level in innocent.grant_levels]
        program = f"run_command:{innocent.path[0]}" if innocent.path else innocent.raw
        grants = list(dict.fromkeys([*levels, program, f"{program}:*"]))
        if not entry.program_wide:
            levels = grants = levels[:1]
        grants += ["run_command:*"] if entry.wildcard else []
        # Any command in the sandbox, compound lines included (a project grant, where the
        # binding admits one): what it must still never cover is the attack.
        grants += ["run_command:**"] if entry.sandbox_grant else []
        # Project grants exist only where the binding admits them; session grants always can,
        # for the entries the prompt offers.
        project_scope = self.tag.allows(Scope.PROJECT)
        text = audit.document(allow=grants if project_scope else (), deny=entry.deny)
        (self.directory / PROJECT_FILE).write_text(text)
        recorder, environments = _recorders()
        asker = _Asker()
        granted = ", ".join(grants if project_scope else levels)
        with (
            Runtime(
                self.directory,
                asker=asker,
                environments=environments,
                audit_log=None,
                tools=audit.tools,
                trusted=self.audit.trusted,
            ) as runtime,
            runtime.session() as session,
        ):
            for level in levels:
                session.allowlist.grant(innocent, self.tag, entry=level)
            control = session.call("run_command", {"command": entry.innocent})
            if not _allowed(control) or not recorder.requests:
                raise _NotRun(
                    f"the grant for {entry.innocent!r} did not allow it "
                    f"({_refusal(control, asker)}), so this attempt would prove nothing"
                )
            assert control.decision is not None
            if control.decision.source is Source.READ_ONLY:
                # Allowed as a read, not by the grant: the grant must still cover it.
                found = session.allowlist.find(innocent, self.tag, innocent.digest)
                if found is None or not found[1]:
                    raise _NotRun(
                        f"{entry.innocent!r} runs read-only, and the grant for it does not "
                        "cover it, so this attempt would prove nothing"
                    )
            recorder.requests.clear()
            outcome = session.call("run_command", {"command": entry.command})
        ran: list[CommandRequest] = list(recorder.requests)
        if entry.expect == "argv":
            return self._ran_as_argv(entry, outcome, ran)
        if _allowed(outcome) or ran:
            _escaped(
                f"{_grant_source(outcome) if _allowed(outcome) else 'not allowed'}, and "
                f"{self._what_ran(ran)} was handed to {self.tag.value}"
            )
        how = self._refused(entry, outcome, asker, granted)
        if entry.display:
            how += "; " + self._display(asker)
        return how

    def _refused(
        self, entry: KeyingEntry, outcome: CallOutcome, asker: _Asker, granted: str
    ) -> str:
        decision = outcome.decision
        if decision is None:
            return f"{type(outcome.error).__name__}: {outcome.error}; nothing ran"
        if decision.source is Source.DENY:
            return f"refused by the deny rule {decision.matched}; nothing ran"
        asked = "the prompt refused it" if asker.requests else decision.reason
        keyed = key_command(entry.command)
        if decision.key != keyed.permission_key("run_command").raw:
            why = ""  # keyed by another keyer than the runtime's own: say only what it did
        elif keyed.compound:
            why = f" ({keyed.reason})"
        elif keyed.protected:
            return (
                f"keyed {decision.key}, but it names a protected path, which no grant covers "
                f"(only Once); {asked}; nothing ran"
            )
        else:
            why = ""
        return f"keyed {decision.key}{why}, not covered by {granted}; {asked}; nothing ran"

    def _ran_as_argv(
        self, entry: KeyingEntry, outcome: CallOutcome, ran: list[CommandRequest]
    ) -> str:
        if not ran:
            return f"not allowed ({_refusal(outcome)}); nothing ran"
        argv = ran[0].argv
        expected = entry.argv or ()
        # The program as found on PATH when the call was keyed (`/usr/bin/git` for `git`).
        if (
            len(ran) != 1
            or argv is None
            or argv[1:] != expected[1:]
            or os.path.basename(argv[0]) != os.path.basename(expected[0])
        ):
            _escaped(f"{_grant_source(outcome)} and {self._what_ran(ran)}")
        decision = outcome.decision
        assert decision is not None
        if decision.source is Source.READ_ONLY:
            # No grant allowed it: only a read, in an environment that confines it read-only.
            if ran[0].writable or not decision.environment.confines_read_only:
                _escaped(
                    f"allowed as a read-only command, but handed to {decision.environment.value} "
                    f"{'writable' if ran[0].writable else 'unconfined'}"
                )
            return (
                f"allowed read-only ({decision.key}, a read-only command), run confined "
                f"read-only in {decision.environment.value} as the argv {list(argv)} without a "
                "shell"
            )
        return f"{_grant_source(outcome)}, run as the argv {list(argv)} without a shell"

    @staticmethod
    def _what_ran(ran: Sequence[CommandRequest]) -> str:
        if not ran:
            return "nothing"
        request = ran[0]
        if request.script is not None:
            return f"the script {request.script!r} (run by bash)"
        return f"the argv {list(request.argv or ())}"

    @staticmethod
    def _display(asker: _Asker) -> str:
        if not asker.requests:
            return "no prompt was shown"
        shown = render(asker.requests[0])
        raw = sorted(
            {
                f"U+{ord(ch):04X}"
                for ch in shown
                if ch not in " \n" and (renders_blank(ch) or not ch.isprintable())
            }
        )
        if raw:
            _escaped(f"the prompt would print raw invisible or blank characters {', '.join(raw)}")
        # Any other blank character shown raw was caught above: only spaces can still pad.
        if any(" " * SPACE_RUN in text for _, text in describe(asker.requests[0])):
            _escaped("the prompt would print a run of spaces that can push text out of view")
        return (
            "the prompt shows every control character made visible, and every long run of "
            "characters that render blank as a marker with its length"
        )
