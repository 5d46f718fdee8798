"""The permission lookup chain (SPEC §4), in one function.

    None                    → allow                      (source none)
    a file is unreadable    → refuse, never ask          (source deny: its rules are unknown)
    deny rule matches       → refuse, never ask          (source deny)
    read-only command, confined read-only → allow        (source read-only)
    would fail contained, host granted for the session → run on the host (session, escalated)
    project entry matches   → ceiling ok → allow         (source project)
                              ceiling too low → report CeilingViolation, fall through
    session entry matches   → not expired → allow        (source session)
                              expired → drop it, fall through
    ask the human           → Once                       (source once)
                              AlwaysThisSession → record (source session)
                              AlwaysThisProject → ceiling ok → write codecoder.json (project)
                                                  ceiling too low → CeilingViolation, refused
                              Deny                       (source denied)

What an "always" answer records is as narrow as the question: the key's first grant level
(`run_command:git:status`, a path escaped so that it matches only itself). Where a command's key
names more than its program, the human is also offered the program-wide entry
(`run_command:git`), as separate choices whose labels say what it covers.

A read-only command (`Permission.read_only`) needs no question where its environment confines
it read-only (@bwrap: `EnvironmentTag.confines_read_only`), after the deny rules: anywhere
else it goes down the chain like any command. A command that would fail contained
(`Permission.host`: `git push` in @bwrap) is covered there only by a grant of its own narrow
key, and its question offers running it on the host instead, once or for the session (a
session grant bound to @shell, never a project grant: @shell's ceiling). Only the human's
answer escalates; the Decision then names @shell and the sandbox it was escalated from.

For a command in a sandbox the question also offers any command there (`run_command:**`,
AlwaysThisProject): it covers compound lines too, since they run in the same sandbox, but
never one that needs the host (a part of it would fail contained: its question offers the host)
and never a protected one, and deny rules, checked first, still refuse any line with a denied
command in it; `run_command:*` (every simple command) keeps its meaning. For a file the write
tools change, its directory (`edit_file:src/report/**`) and any file in the workspace, written
or edited (`edit_file:**` with `write_file:**`, AlwaysThisProject), which never cover a
protected path (below). Where a chain can write the user's own file, the broadest of these, and
a host's or package index's network grant, are also offered for every project
(`EVERY_PROJECT`): contained grants only, never a host grant.

A command that may work contained with the network (`npm install`, `git fetch` of an https
remote: `Permission.host_after_contained`) is asked as a contained command first; only a later
question for it in the same session also offers the host, once the contained route was
offered.

Keys for protected paths (codecoder.json, .codecoder/, every .git and .gitmodules, the
runtime's state and the user's configuration directory, and commands that run the codecoder
CLI; `foundation.protected`) skip both allowlists and can be allowed only once: a standing grant
there would let a tool grant itself trust or plant a hook.

`evaluate()` walks the same chain without asking anyone or recording anything: it returns the
standing decision, or the question the human would be asked (`codecoder decide`, hooks).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import threading
from collections.abc import Callable, Iterator
from typing import NoReturn, Protocol

from codecoder.foundation.ceiling import EnvironmentTag, Scope
from codecoder.foundation.decision import Answer, Decider, Decision, Source
from codecoder.foundation.errors import (
    CeilingViolation,
    ConfigError,
    DeniedByRule,
    DeniedByUser,
    RulesUnreadable,
    Unanswered,
)
from codecoder.permissions.allowlist import Grant, ProjectAllowlist, SessionAllowlist
from codecoder.permissions.keys import GrantLevel, KeyStyle, Permission, PermissionKey
from codecoder.permissions.patterns import ANY_COMMAND, KeyPattern
from codecoder.permissions.prompt import Asker, AskRequest, decider_of

log = logging.getLogger(__name__)

_SUBJECT_LABELS = {KeyStyle.COMMAND: "runs", KeyStyle.PATH: "path"}


class GrantRecorder(Protocol):
    """Writes an AlwaysThisProject answer to the project's file (runtime.config.writing's
    `add_allow_entry`); raises ConfigError when the file cannot take it."""

    def __call__(self, entry: str, digest: str | None) -> None: ...


PROTECTED_NOTE = (
    "a protected path (codecoder.json, .codecoder/, any .git or .gitmodules, the agents' own "
    "settings: .claude/, .gemini/, .codex/, .mcp.json, .vscode/; the runtime's state and the "
    "user's configuration, the codecoder command itself) can be allowed only once"
)


class PermissionChain:
    def __init__(
        self,
        project: Callable[[], ProjectAllowlist],
        session: SessionAllowlist,
        asker: Asker,
        record_grant: GrantRecorder,
        project_file: str = "codecoder.json",
        *,
        record_user_grant: GrantRecorder | None = None,
        user_file: str = "",
    ) -> None:
        """`project_file` is where an AlwaysThisProject answer is written, as the question
        names it; `record_user_grant` writes an EVERY_PROJECT answer to the user's own file
        (`user_file`), which is offered only where there is one."""
        self._project = project
        self.session = session
        self.asker = asker
        self._record_grant = record_grant
        self._record_user_grant = record_user_grant
        self.project_file = project_file
        self.user_file = user_file
        # Keys whose contained route was offered in this session (host_after_contained).
        self._contained_offered: set[str] = set()
        # While a call runs (`grants_written_after`): the grants answered meanwhile, written
        # when it ends.
        self._deferred: list[tuple[GrantRecorder, str, str | None]] | None = None
        self._deferring = threading.Lock()

    @contextlib.contextmanager
    def grants_written_after(self) -> Iterator[None]:
        """While the block (a call) runs, hold the file writes of the grants answered meanwhile
        (a host asked for during the call) and make them when it ends: they hold at once in
        memory, and the sandbox the call runs in never sees codecoder.json change under it
        (a protected path changed during a call is what its guard quarantines)."""
        with self._deferring:
            outer = self._deferred is not None
            if not outer:
                self._deferred = []
        try:
            yield
        finally:
            if not outer:
                with self._deferring:
                    pending, self._deferred = self._deferred or [], None
                for record, entry, digest in pending:
                    try:
                        record(entry, digest)
                    except (ConfigError, OSError, ValueError) as exc:
                        log.warning("the grant %s holds for this session only: %s", entry, exc)

    def _write(self, record: GrantRecorder, entry: str, digest: str | None) -> None:
        with self._deferring:
            if self._deferred is not None:
                self._deferred.append((record, entry, digest))
                return
        record(entry, digest)

    def evaluate(
        self, tool: str, environment: EnvironmentTag, permission: Permission
    ) -> Decision | AskRequest:
        """What `decide()` would do, with nobody asked and nothing recorded: the standing
        decision (a deny rule raises DeniedByRule, as in `decide()`), or the question that
        would be put to the human."""
        try:
            return self.decide(tool, environment, permission, asker=_would_ask)
        except _WouldAsk as asked:
            return asked.request

    def decide(
        self,
        tool: str,
        environment: EnvironmentTag,
        permission: Permission,
        *,
        asker: Asker | None = None,
    ) -> Decision:
        """Decide one call; a refusal raises PermissionDenied carrying its Decision.

        `asker` replaces the engine's own for this one decision."""
        key = permission.key
        if key is None:
            return _standing(Source.NONE, tool, environment, None, None, "needs no permission")
        project = self._project()
        if project.unreadable is not None:
            # Fail closed: any rule of the broken file could have refused this call.
            decision = Decision(
                False,
                Source.DENY,
                tool,
                environment,
                key.raw,
                None,
                reason=project.unreadable,
                decided_by=Decider.RULE,
            )
            raise RulesUnreadable(f"{key.raw} is refused: {project.unreadable}", decision)
        host = permission.host
        if permission.host_after_contained and key.raw not in self._contained_offered:
            host = None  # the contained route first: no host choice, and wide grants cover it
        _refuse_denied(project, tool, environment, key)
        if host is not None:
            _refuse_denied(project, tool, EnvironmentTag.SHELL, host)
        if permission.reads_only and key.read_only and environment.confines_read_only:
            return _standing(
                Source.READ_ONLY,
                tool,
                environment,
                key.raw,
                None,
                f"a read-only command ({key.read_only}), run confined read-only in "
                f"{environment.value}: the file system read-only, your secrets hidden, no "
                "network",
            )
        if host is not None and not host.protected:
            escalated = self.session.find(host, EnvironmentTag.SHELL, host.digest)
            if escalated is not None and escalated[1]:
                return Decision(
                    True,
                    Source.SESSION,
                    tool,
                    EnvironmentTag.SHELL,
                    host.raw,
                    escalated[0],
                    reason="session grant to run it on the host, unconfined (an escalation)",
                    escalated_from=environment,
                    decided_by=Decider.RULE,
                )
        # A command that would fail contained is covered in its sandbox only by a grant of its
        # own key: `run_command:*` and `run_command:git` cover what can work there, and `git
        # push` is asked, so that the question can offer the host.
        narrow_only = host is not None
        looked_up = dataclasses.replace(key, levels=key.grant_levels[:1]) if narrow_only else key

        violations: list[str] = []
        notes: list[str] = []
        if not key.protected:
            for grant in project.granted_by(key):
                if narrow_only and grant.pattern.raw not in (key.raw, looked_up.levels[0].entry):
                    continue
                if key.digest is not None and grant.digest != key.digest:
                    notes.append(_digest_note(grant, key.digest))
                    continue
                if environment.allows(Scope.PROJECT):
                    return _standing(
                        Source.PROJECT,
                        tool,
                        environment,
                        key.raw,
                        grant.pattern.raw,
                        "codecoder.json allowlist",
                    )
                violations.append(self._violation(grant, key.raw, environment))
            session_entry = self.session.find(looked_up, environment, key.digest)
            if session_entry is not None:
                entry, valid, _ = session_entry
                if valid:
                    return _standing(
                        Source.SESSION,
                        tool,
                        environment,
                        key.raw,
                        entry,
                        "session allowlist",
                        tuple(violations),
                    )
                notes.append("the session grant for this key has expired")
        else:
            notes.append(PROTECTED_NOTE)
        if host is not None and key.needs_host:
            notes.append(
                f"{key.needs_host}: contained in {environment.value} (the network only through "
                "its egress proxy, your credentials hidden) it would likely fail; the host "
                "choices run it on the host instead, unconfined (@shell)"
            )
        elif host is not None:
            notes.append(
                f"it ran contained in {environment.value} earlier in this session (the network "
                "through its egress proxy, each host asked); if that is not enough, the host "
                "choices run it on the host instead, unconfined (@shell)"
            )
        notes.extend(violations)
        offered = permission.host_after_contained
        if offered and host is None:
            permission = dataclasses.replace(permission, host=None)
        try:
            return self._ask(
                tool, environment, permission, violations, "; ".join(notes), asker or self.asker
            )
        except _WouldAsk:
            # Only what would be asked (`evaluate`, `codecoder decide`): nothing was offered,
            # so the call that follows offers the contained route first as decide said.
            offered = False
            raise
        finally:
            if offered:
                self._contained_offered.add(key.raw)

    def _ask(
        self,
        tool: str,
        environment: EnvironmentTag,
        permission: Permission,
        violations: list[str],
        note: str,
        asker: Asker,
    ) -> Decision:
        key = permission.key
        assert key is not None
        host = permission.host
        levels = key.grant_levels
        narrow, wide = levels[0], levels[1] if len(levels) > 1 and host is None else None
        widest = _widest(key, environment, host)
        choices, why_not = _choices(key, environment, host, wide is not None, widest is not None)
        if self._record_user_grant is not None and _for_every_project(key, choices):
            at = choices.index(Answer.DENY) if host is None else choices.index(Answer.HOST_ONCE)
            choices = (*choices[:at], Answer.EVERY_PROJECT, *choices[at:])
        if self.session.lifetime.one_call:
            # Nothing follows this call in its session: "for this session" is "once".
            choices = tuple(choice for choice in choices if choice.scope is not Answer.SESSION)
        recorded_by = {
            Answer.SESSION: narrow,
            Answer.PROJECT: narrow,
            Answer.SESSION_PROGRAM: wide or narrow,
            Answer.PROJECT_PROGRAM: wide or narrow,
            Answer.PROJECT_ANY: widest or narrow,
            Answer.EVERY_PROJECT: widest or wide or narrow,
        }
        if host is not None:
            recorded_by[Answer.HOST_SESSION] = host.grant_levels[0]
            program = _host_program(host)
            if program is not None:
                recorded_by[Answer.HOST_SESSION_PROGRAM] = program
        grants = tuple((answer, recorded_by[answer]) for answer in choices if answer in recorded_by)
        request = AskRequest(
            tool=tool,
            environment=environment,
            key=key.raw,
            subject=key.subject,
            choices=choices,
            why_not_project=why_not,
            note=note,
            grants=grants,
            host_key=host.raw if host is not None else "",
            notes=key.notes,
            session_lasts=self.session.lasts(),
            session_kept=self.session.lifetime.kept,
            project_file=self.project_file,
            user_file=self.user_file,
            preview=key.preview,
            subject_label=_SUBJECT_LABELS.get(key.style, "does"),
            compound=key.compound,
        )
        answer = asker(request)
        decider = decider_of(asker)
        # Only an answer someone gave is recorded as one: a refusal by the non-interactive
        # policy is not "answered deny".
        given = answer if decider.answered else None
        done = tuple(violations)
        # An answer that was not offered (a fixed asker's program-wide or host choice for a key
        # that has none) counts as its plain scope: the narrowest entry, in the call's own
        # environment; it never runs anything on the host.
        effective = answer if answer in choices else answer.scope
        level = request.grant_for(effective) if effective in choices else narrow
        entry = level.entry
        recorded = entry if effective.scope in (Answer.SESSION, Answer.PROJECT) else None

        def decided(allowed: bool, source: Source, reason: str, *more: str) -> Decision:
            return Decision(
                allowed,
                source,
                tool,
                environment,
                key.raw,
                recorded if allowed else None,
                given,
                reason,
                (*done, *more),
                decided_by=decider,
            )

        def refuse(error: CeilingViolation) -> NoReturn:
            error.decision = decided(False, Source.DENIED, error.reason, error.reason)
            raise error

        if effective is Answer.DENY:
            if not decider.answered:
                reason = "non-interactive: nothing granted this key"
                refusal: DeniedByUser = Unanswered(
                    f"{key.raw} was not allowed ({reason})", decided(False, Source.DENIED, reason)
                )
                raise refusal
            reason = (
                "denied at the prompt" if decider is Decider.PERSON else "the given answer: Deny"
            )
            raise DeniedByUser(
                f"{key.raw} was not allowed ({reason})", decided(False, Source.DENIED, reason)
            )
        if effective.on_host:
            assert host is not None
            if effective.scope is Answer.SESSION:
                self.session.grant(host, EnvironmentTag.SHELL, digest=host.digest, entry=entry)
            source = Source.SESSION if effective.scope is Answer.SESSION else Source.ONCE
            how = "for this session" if source is Source.SESSION else "once"
            return Decision(
                True,
                source,
                tool,
                EnvironmentTag.SHELL,
                host.raw,
                recorded,
                given,
                f"allowed on the host, unconfined, {how} (an escalation from "
                f"{environment.value}: {key.needs_host or 'the human chose the host'})",
                done,
                escalated_from=environment,
                decided_by=decider,
            )
        if effective is Answer.ONCE:
            return decided(True, Source.ONCE, "allowed once")
        if key.protected:
            refuse(CeilingViolation(key.raw, environment.value, "Once", PROTECTED_NOTE))
        if effective.scope is Answer.SESSION:
            for each in level.entries:
                self.session.grant(_of_entry(key, each), environment, digest=key.digest, entry=each)
            return decided(True, Source.SESSION, "allowed for this session")
        # AlwaysThisProject: checked against the ceiling here, at the grant, as well as at load.
        if not environment.allows(Scope.PROJECT):
            refuse(
                CeilingViolation(
                    key.raw,
                    environment.value,
                    environment.ceiling.label,
                    environment.refusal(key.raw),
                )
            )
        every = effective is Answer.EVERY_PROJECT and self._record_user_grant is not None
        record = self._record_user_grant if every else self._record_grant
        assert record is not None
        where = self.user_file if every else self.project_file
        try:
            for each in level.entries:
                self._write(record, each, key.digest)
        except ConfigError as exc:
            raise DeniedByUser(
                f"{key.raw} was not granted: {where} is not usable and is left as it is ({exc})",
                decided(False, Source.DENIED, f"cannot record the grant: {exc}"),
            ) from exc
        for each in level.entries:
            self._project().add_grant(
                Grant(KeyPattern.parse(each), digest=key.digest, file=where if every else None)
            )
        if every:
            return decided(True, Source.PROJECT, f"allowed for every project (written to {where})")
        return decided(True, Source.PROJECT, f"allowed for the project (written to {where})")

    @staticmethod
    def _violation(grant: Grant, key: str, environment: EnvironmentTag) -> str:
        where = f" (codecoder.json line {grant.line})" if grant.line else ""
        return f"CeilingViolation: entry {grant.pattern.raw!r}{where} grants nothing: " + (
            environment.refusal(key)
        )


@functools.lru_cache(maxsize=4096)
def _standing(
    source: Source,
    tool: str,
    environment: EnvironmentTag,
    key: str | None,
    matched: str | None,
    reason: str,
    violations: tuple[str, ...] = (),
) -> Decision:
    """An allow decision from a standing rule. Decisions are frozen values, so the same one is
    shared by every call it decides; building one each time was a third of a decision's cost."""
    return Decision(
        True,
        source,
        tool,
        environment,
        key,
        matched,
        None,
        reason,
        violations,
        decided_by=Decider.RULE,
    )


def _refuse_denied(
    project: ProjectAllowlist, tool: str, environment: EnvironmentTag, key: PermissionKey
) -> None:
    """Raise DeniedByRule when a deny rule of codecoder.json matches `key`."""
    deny = project.denied_by(key)
    if deny is None:
        return
    decision = Decision(
        False,
        Source.DENY,
        tool,
        environment,
        key.raw,
        deny.pattern.raw,
        reason=f"deny rule {deny.pattern.raw!r} of {deny.where}",
        decided_by=Decider.RULE,
    )
    raise DeniedByRule(f"{key.raw} is refused by {decision.reason}", decision)


def _widest(
    key: PermissionKey, environment: EnvironmentTag, host: PermissionKey | None
) -> GrantLevel | None:
    """The widest entry offered for the project (PROJECT_ANY), if any: the key's own
    (`edit_file:**`, any file in the workspace), or for a command any command in its sandbox
    (`run_command:**`, compound lines included). None for a command that would fail contained,
    whose question offers the host instead."""
    if host is not None:
        return None
    if key.widest is not None:
        return key.widest
    if key.style is not KeyStyle.COMMAND:
        return None
    return GrantLevel(
        f"{key.tool}:{ANY_COMMAND}",
        f"any command in {environment.value}, compound lines included (never one that needs "
        "the host, nor one touching a protected path; deny rules still refuse)",
    )


def _for_every_project(key: PermissionKey, choices: tuple[Answer, ...]) -> bool:
    """Whether the question also offers its broadest contained grant for every project: where
    it offers a widest entry for the project (any command in the sandbox, any file), or a
    network grant (a host, a package index) for the project; never for a key pinned to what
    was approved (a capability's digest: the project's own code). A host git reaches with the
    user's credential may be granted for every project too: the credential goes there only
    from a project whose trusted codecoder.json admits that host (`credential_hosts`), a
    choice made per project already, and its question says what the grant carries."""
    if key.protected or key.digest is not None:
        return False
    return Answer.PROJECT_ANY in choices or (key.tool == "network" and Answer.PROJECT in choices)


def _of_entry(key: PermissionKey, entry: str) -> PermissionKey:
    """`key` as the session allowlist records `entry` (whose tool may be another's: an `also`
    entry of another write tool)."""
    tool = entry.partition(":")[0]
    return key if tool == key.tool else dataclasses.replace(key, tool=tool)


def _host_program(host: PermissionKey) -> GrantLevel | None:
    """The program-wide entry of a simple command run on the host (`run_command:gh`), offered
    for the session only (HOST_SESSION_PROGRAM), or None: a compound or protected command has
    none. It covers what the host lookup (`decide`) consults it for: a simple command of that
    program that would fail contained; the others still run where they are bound, and deny
    rules, checked first, still refuse."""
    levels = host.grant_levels
    if host.compound or host.protected or host.style is not KeyStyle.COMMAND or len(levels) < 2:
        return None
    entry = levels[-1].entry
    name = entry.removeprefix(f"{host.tool}:")
    return GrantLevel(
        entry,
        f"every simple `{name} …` command that would fail contained, with any arguments "
        "(never a compound command; deny rules still refuse)",
    )


def _choices(
    key: PermissionKey,
    environment: EnvironmentTag,
    host: PermissionKey | None,
    wide: bool,
    widest: bool,
) -> tuple[tuple[Answer, ...], str]:
    """What the human is offered for `key`, and why AlwaysThisProject is not, where it is not.

    A protected key: once (or once on the host), or deny. Otherwise once, the session (with a
    command's program-wide entry) and, where the ceiling allows, the project choices: the narrow
    entry, the wider one where the key names one (a command's program, a file's directory), and
    the widest (`_widest`: every simple
    command in the sandbox, any file in the workspace); then, for a command that would fail
    contained, running it on the host, once or for the session (never for the project: @shell's
    ceiling).
    """
    on_host: tuple[Answer, ...] = ()
    if host is not None and host.protected:
        on_host = (Answer.HOST_ONCE,)
    elif host is not None:
        on_host = (Answer.HOST_ONCE, Answer.HOST_SESSION)
        if _host_program(host) is not None:
            on_host += (Answer.HOST_SESSION_PROGRAM,)
    if key.protected:
        return (Answer.ONCE, *on_host, Answer.DENY), PROTECTED_NOTE
    # The session allowlist finds an entry among a later key's own levels: a command's
    # program-wide entry is one of them, a file's directory is not one of a deeper file's, so
    # a directory is offered for the project only, where entries match as patterns.
    session_wide = wide and key.style is KeyStyle.COMMAND
    session = (Answer.SESSION, Answer.SESSION_PROGRAM) if session_wide else (Answer.SESSION,)
    if not environment.allows(Scope.PROJECT):
        return (Answer.ONCE, *session, *on_host, Answer.DENY), environment.refusal(key.raw)
    project: tuple[Answer, ...] = (
        (Answer.PROJECT, Answer.PROJECT_PROGRAM) if wide else (Answer.PROJECT,)
    )
    if widest:
        project += (Answer.PROJECT_ANY,)
    return (Answer.ONCE, *session, *project, *on_host, Answer.DENY), ""


def _digest_note(grant: Grant, digest: str) -> str:
    where = f" (codecoder.json line {grant.line})" if grant.line else ""
    if grant.digest is None:
        return (
            f"entry {grant.pattern.raw!r}{where} has no digest, but this key is pinned to what "
            "was approved: the entry grants nothing until it is approved again"
        )
    return (
        f"entry {grant.pattern.raw!r}{where} was approved for {grant.digest}, but what would "
        f"run now is {digest}: it changed since it was approved, so it is asked again"
    )


class _WouldAsk(BaseException):
    """Unwinds `evaluate()` at the question, before anything is answered or recorded.

    A BaseException so that no `except Exception` between the engine and here can take it
    for an answer."""

    def __init__(self, request: AskRequest) -> None:
        super().__init__(request.key)
        self.request = request


def _would_ask(request: AskRequest) -> Answer:
    raise _WouldAsk(request)
