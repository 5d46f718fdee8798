"""What the permission check returns: a small value that explains itself.

The audit log, the CLI, the prompt and the MCP server all print from a `Decision`; none of them
recomputes why a call was allowed or refused.
"""

from __future__ import annotations

import difflib
import enum
from dataclasses import dataclass, field
from typing import Any

from codecoder.foundation.ceiling import EnvironmentTag


class Source(enum.StrEnum):
    """Where a decision came from (SPEC §7: none / deny / project / session / once / denied)."""

    NONE = "none"  # Permission.none(): nothing to decide
    DENY = "deny"  # a deny rule of codecoder.json
    PROJECT = "project"  # codecoder.json's allowlist, or the human's AlwaysThisProject
    SESSION = "session"  # the session allowlist, or the human's AlwaysThisSession
    ONCE = "once"  # the human allowed this one call
    DENIED = "denied"  # the human said no, or nobody could be asked
    READ_ONLY = "read-only"  # a read-only command, run confined read-only: nothing to ask


class Decider(enum.StrEnum):
    """Who or what decided a call (SPEC §7), as the audit log records it.

    Only PERSON and GIVEN are answers: a refusal nobody gave is never recorded as one.
    """

    PERSON = "person"  # a person answered the question (a terminal, MCP elicitation, a host's)
    GIVEN = "given-answer"  # an answer given before the question: `--answer`, a replay line
    RULE = "rule"  # a standing rule: a deny rule, a grant, the read-only table, no permission
    NON_INTERACTIVE = "non-interactive"  # nobody could be asked: the non-interactive policy
    CANCELLED = "cancelled"  # the question was put and ended without an answer
    TIMEOUT = "timeout"  # the question's time ran out before an answer came

    @property
    def answered(self) -> bool:
        return self in (Decider.PERSON, Decider.GIVEN)


class Answer(enum.StrEnum):
    """The human's choices at the prompt.

    SESSION and PROJECT record the narrowest entry naming what the human saw (the key's first
    grant level: `run_command:git:status`); SESSION_PROGRAM and PROJECT_PROGRAM, offered only
    where the key names a wider entry, record it: a command's program-wide entry
    (`run_command:git`), a file's directory (`edit_file:src/report/**`); PROJECT_ANY records the
    widest: for a simple command in a sandbox `run_command:*`, every simple command in that
    sandbox; for a file the write tools change `edit_file:**`, any file in the workspace but
    never a protected path. HOST_ONCE and HOST_SESSION, offered
    only for a command that would fail contained, run it on the host instead (@shell), once or
    for the session (a session grant bound to @shell); HOST_SESSION_PROGRAM, offered with them
    for a simple command, grants for the session every simple command of its program that
    would fail contained, on the host (`run_command:gh`, bound to @shell; never for the
    project: @shell's ceiling). EVERY_PROJECT records the broadest contained entry offered (any
    command in the sandbox, any file, a host or a package index) in the user's own file
    (`$XDG_CONFIG_HOME/codecoder/config.json`), where it holds in every project whose tool runs
    contained; never a host grant. `AskRequest.grants` says which entry each choice records.
    """

    ONCE = "once"
    SESSION = "session"
    SESSION_PROGRAM = "session-program"
    PROJECT = "project"
    PROJECT_PROGRAM = "project-program"
    PROJECT_ANY = "project-any"
    EVERY_PROJECT = "every-project"
    HOST_ONCE = "host-once"
    HOST_SESSION = "host-session"
    HOST_SESSION_PROGRAM = "host-session-program"
    DENY = "deny"

    @classmethod
    def parse(cls, text: str) -> Answer:
        """The answer `text` names, in either vocabulary: the short names (`once`, `session`,
        `project`, `deny`, `session-program`, `project-program`) or codecoder.json's
        (`Once`, `AlwaysThisSession`, `AlwaysThisProject`, and `Deny`), in any case, with or
        without `-`, `_` or spaces. ValueError says what it takes, and what was meant where
        that is clear."""
        wanted = _normal(text)
        for answer, spellings in _SPELLINGS.items():
            if wanted in spellings:
                return answer
        names = [*(a.value for a in Answer), *(a.label for a in _BY_SCOPE)]
        close = difflib.get_close_matches(text, names, n=1, cutoff=0.6)
        close += difflib.get_close_matches(wanted, [_normal(n) for n in names], n=1, cutoff=0.6)
        hint = ""
        if close:
            meant = next(n for n in names if _normal(n) == _normal(close[0]))
            hint = f" (did you mean {meant}?)"
        raise ValueError(
            f"{text!r} is not an answer{hint}; the answers are {', '.join(ANSWER_NAMES)}"
        )

    @property
    def label(self) -> str:
        """The scope's name as codecoder.json writes it (`AlwaysThisSession`), the one every
        surface shows; `Deny` for a refusal."""
        return _LABELS[self.scope]

    @property
    def scope(self) -> Answer:
        """ONCE, SESSION or PROJECT for the answers that allow; DENY for DENY."""
        return _SCOPES.get(self, self)

    @property
    def on_host(self) -> bool:
        """Whether the answer runs the call on the host instead of its sandbox."""
        return self in (Answer.HOST_ONCE, Answer.HOST_SESSION, Answer.HOST_SESSION_PROGRAM)


_SCOPES = {
    Answer.SESSION_PROGRAM: Answer.SESSION,
    Answer.PROJECT_PROGRAM: Answer.PROJECT,
    Answer.PROJECT_ANY: Answer.PROJECT,
    Answer.EVERY_PROJECT: Answer.PROJECT,
    Answer.HOST_ONCE: Answer.ONCE,
    Answer.HOST_SESSION: Answer.SESSION,
    Answer.HOST_SESSION_PROGRAM: Answer.SESSION,
}


_LABELS = {
    Answer.ONCE: "Once",
    Answer.SESSION: "AlwaysThisSession",
    Answer.PROJECT: "AlwaysThisProject",
    Answer.DENY: "Deny",
}
_BY_SCOPE = (Answer.ONCE, Answer.SESSION, Answer.PROJECT, Answer.DENY)


def _normal(text: str) -> str:
    return "".join(ch for ch in text.lower() if ch not in "-_ ")


_SPELLINGS = {
    answer: frozenset(
        {_normal(answer.value)} | ({_normal(_LABELS[answer])} if answer in _LABELS else set())
    )
    for answer in Answer
}
ANSWER_NAMES = (
    "once/Once",
    "session/AlwaysThisSession",
    "project/AlwaysThisProject",
    "deny/Deny",
    "session-program",
    "project-program",
    "project-any",
    "every-project",
    "host-once",
    "host-session",
    "host-session-program",
)
"""Every spelling `Answer.parse` takes, as a person is told them."""


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    source: Source
    tool: str
    environment: EnvironmentTag
    key: str | None = None
    # The allowlist entry or deny rule that decided (for an "always" answer, the entry recorded).
    matched: str | None = None
    answer: Answer | None = None  # set when the human was asked
    reason: str = ""
    violations: tuple[str, ...] = field(default=())  # CeilingViolations met on the way
    # Set when the human chose to run the call on the host instead of the sandbox it is bound
    # to (an escalation): the sandbox it would have run in. `environment` is then @shell.
    escalated_from: EnvironmentTag | None = None
    # Who or what decided (None: not said; the audit log then says it from `source`).
    decided_by: Decider | None = None

    @property
    def grant(self) -> str | None:
        """The standing grant this call runs under, or None for a call allowed on its own.

        Calls under the same grant may share a sandbox's state (its home, /tmp); a call under
        another grant, or one allowed Once, starts from an empty one.
        """
        if not self.allowed or self.source not in (Source.PROJECT, Source.SESSION):
            return None
        return f"{self.source.value}:{self.matched or self.key}"

    def to_json(self) -> dict[str, Any]:
        shown: dict[str, Any] = {
            "decision": "allow" if self.allowed else "deny",
            "source": self.source.value,
            "key": self.key,
            "tool": self.tool,
            "environment": self.environment.value,
            "matched": self.matched,
            "answer": self.answer.value if self.answer else None,
            "reason": self.reason,
            "violations": list(self.violations),
        }
        if self.escalated_from is not None:
            shown["escalated_from"] = self.escalated_from.value
        if self.decided_by is not None:
            shown["decided_by"] = self.decided_by.value
        return shown
