"""How an attempt of `codecoder audit` ends: its `Status`, and the exceptions a layer raises
to say so.

Each attempt ends in one of four states:

    blocked          the attack failed; `how` is the defence that was seen stopping it
    escaped          the attack worked; `how` says what was seen
    not-run          the attempt could not be carried out (no Docker engine, an error the attack
                     did not expect): it proves nothing, so it fails the audit like an escape
    not-applicable   the configuration offers nothing to attack (a tool that does not exist, a
                     feature not built yet); shown with the reason, never counted as blocked

A layer's runner returns how the attack was blocked, or ends the attempt otherwise by raising
`_Escaped` (through `_escaped`), `_NotRun` or `_NotApplicable`.
"""

from __future__ import annotations

import enum
from typing import NoReturn

__all__ = ["Status"]


class Status(enum.StrEnum):
    BLOCKED = "blocked"
    ESCAPED = "escaped"
    NOT_RUN = "not-run"
    NOT_APPLICABLE = "not-applicable"

    @property
    def label(self) -> str:
        """How the table shows it: an escape shouts, a gap is plain."""
        return {"blocked": "blocked", "escaped": "ESCAPED", "not-run": "NOT RUN"}.get(
            self.value, "n/a"
        )


class _Outcome(Exception):
    status: Status

    def __init__(self, how: str) -> None:
        super().__init__(how)
        self.how = how


class _Escaped(_Outcome):
    status = Status.ESCAPED


class _NotRun(_Outcome):
    status = Status.NOT_RUN


class _NotApplicable(_Outcome):
    status = Status.NOT_APPLICABLE


def _escaped(how: str) -> NoReturn:
    raise _Escaped(how)
