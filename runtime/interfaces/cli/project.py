"""The project a command works on: its `Runtime` (asking nobody unless told to), the session
with the run's `--allow` grants, and what its configuration tells the user before a call
(diagnostics, an unusable or untrusted file)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from codecoder.config.project import ProjectConfig
    from codecoder.permissions.prompt import Asker
    from codecoder.session import Runtime, Session


def project_runtime(args: argparse.Namespace, asker: Asker | None = None) -> Runtime:
    from codecoder.permissions.prompt import non_interactive
    from codecoder.session import Runtime

    return Runtime(args.project, asker=asker or non_interactive)


def granted(session: Session, args: argparse.Namespace) -> Session:
    """The session with the run's `--allow` keys granted (each checked as a session grant)."""
    for key in args.allow:
        session.grant(key)
    return session


def report_config(runtime: Runtime) -> None:
    from codecoder.config.projectfile import format_diagnostic
    from codecoder.config.trust import TrustState

    for d in runtime.diagnostics:
        print(format_diagnostic(runtime.project_file, d), file=sys.stderr)
    if runtime.config.unreadable:
        print(
            "codecoder: the rules cannot be read: every call that needs permission is refused "
            "until the file is fixed",
            file=sys.stderr,
        )
    elif runtime.config.trust.state is TrustState.UNTRUSTED:
        print(f"codecoder: {runtime.project_file}{trust_note(runtime.config)}", file=sys.stderr)


def trust_note(config: ProjectConfig) -> str:
    from codecoder.config.trust import TrustState

    trust = config.trust
    # A widening that can never take effect (an entry that can never match, a grant above its
    # tool's ceiling …) is an error said above: never counted as obeyed, nor as waiting.
    count = sum(1 for w in trust.widenings if not w.never)
    never = len(trust.widenings) - count
    void = f"; {never} never take{'s' if never == 1 else ''} effect, see the errors above"
    if trust.state is TrustState.UNTRUSTED:
        return (
            f"; not trusted: {count} widening(s) ignored (see `codecoder trust --show`, then "
            f"`codecoder trust`){void if never else ''}"
        )
    if trust.state is TrustState.TRUSTED:
        return f"; trusted ({count} widening(s) obeyed{void if never else ''})"
    return ""
