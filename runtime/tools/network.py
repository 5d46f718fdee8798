"""Egress from a sandbox (@docker, @bwrap) as a permission: every host a key `network:<host>`.

A contained command (@bwrap) reaches any https host through the runtime's egress proxy
(`environments.egress`), and @docker the hosts of its `docker.network` allowlist, only as far as
the permission chain admits each host: `network:pypi.org` is asked like any other key, during
the call, through the same question the call would get (the terminal, an MCP elicitation),
refused by a deny rule (`"deny": ["network:*"]`), granted for the session or, because the
sandbox contains whatever comes back, for the project (`"network:pypi.org":
"AlwaysThisProject"`) or, from the user's own file, for every project. A package index's hosts
are one grant (`permissions.programs.registries`). Where nobody can be asked during the call (a
hook's `codecoder exec`, whose one question was the agent's), a new host is refused at once,
its client told the key and how to allow it.

`NETWORK` is the permission subject those keys belong to: a tool as far as codecoder.json, deny
rules and `--allow` are concerned (so entries are checked like every tool's, with its ceiling,
@docker's), but not one an agent can call: it is not in the catalogue, and runs nothing.
`SessionNetwork` is what a call hands the sandbox (`CommandRequest.network`): it decides each
connection through the session's chain and writes each to the audit log.
"""

from __future__ import annotations

import contextlib
import threading
from typing import TYPE_CHECKING, Final

from pydantic import Field

from codecoder.auditlog import AuditLog
from codecoder.environments.base import Connection
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.decision import Decision
from codecoder.foundation.errors import AuditUnavailable, ExecutionFailed, PermissionDenied
from codecoder.permissions.keys import (
    GrantLevel,
    Permission,
    PermissionKey,
    escape_literal,
)
from codecoder.permissions.programs.registries import index_for_host
from codecoder.tools.base import Category, Parameters, Tool, ToolContext, ToolResult

if TYPE_CHECKING:
    from codecoder.permissions.chain import PermissionChain

__all__ = ["NETWORK", "NetworkAccess", "SessionNetwork", "how_to_allow", "network_key"]


class NetworkParameters(Parameters):
    host: str = Field(description="The host the sandbox connects to.", min_length=1)
    port: int = Field(default=443, ge=1, le=65535)


def network_key(
    host: str, port: int, *, credential: bool = False, program: str | None = None
) -> PermissionKey:
    """`credential`: the user's own file routes the host's git credential through the broker
    (`environments.broker`), so what the grant lets through carries it: the question says so.
    The key is the same either way (`network:<host>`). A host of a package index
    (`permissions.programs.registries`) is granted with the index's other hosts, one answer for
    them all; `program` names the command that connects, where it is known."""
    subject = f"connect to {host}:{port} from the sandbox, through its egress proxy"
    if program:
        subject = f"{program} asks to {subject}"
    covers = f"connections to {host} only"
    also: tuple[str, ...] = ()
    index = None if credential else index_for_host(host)
    if index is not None:
        others = tuple(h for h in index.hosts if h != host)
        also = tuple(f"network:{escape_literal(h)}" for h in others)
        covers = f"{index.name}: connections to {', '.join(index.hosts)}"
    if credential:
        subject += (
            f"; git's pushes and fetches there carry YOUR git credential for {host} (added "
            "outside the sandbox, never visible in it): any contained command you allow may "
            "push with it"
        )
        covers += ", git's with your credential"
    return PermissionKey(
        tool="network",
        action=host,
        raw=f"network:{host}",
        subject=subject,
        levels=(GrantLevel(f"network:{escape_literal(host)}", covers, also),),
    )


def how_to_allow(host: str) -> str:
    """What a person can do to let a sandbox reach `host`, for a refusal's message."""
    key = f"network:{host}"
    return (
        f"to allow it, answer its question when asked, run with --allow {key}, or add "
        f'"{key}": "AlwaysThisProject" to codecoder.json (or to your own file, '
        "~/.config/codecoder/config.json, for every project)"
    )


class NetworkAccess(Tool[NetworkParameters]):
    name = "network"
    description = "A connection from a sandbox to a host of its egress allowlist."
    category = Category.WEB
    environment = EnvironmentTag.DOCKER
    bindable = frozenset({EnvironmentTag.DOCKER})
    parameters = NetworkParameters

    def permission(self, args: NetworkParameters) -> Permission:
        return Permission.ask(network_key(args.host, args.port))

    def execute(self, args: NetworkParameters, ctx: ToolContext) -> ToolResult:
        raise ExecutionFailed("network is a permission of the sandboxes, not a tool")


NETWORK: Final = NetworkAccess()


class SessionNetwork:
    """The `NetworkGate` of one call: the session's permission chain and the audit log.

    Each host is decided once per call: a client opening many connections (or retrying a
    refused one) is asked one question, and a refused host is refused again at once, with the
    same words. `refusals()` lists what was refused, for the call's result."""

    def __init__(
        self,
        engine: PermissionChain,
        audit: AuditLog,
        session: str,
        credential_hosts: tuple[tuple[str, int], ...] = (),
        program: str | None = None,
        environment: EnvironmentTag = EnvironmentTag.DOCKER,
    ) -> None:
        """`credential_hosts`: where the call's sandbox sends git's requests with the user's
        credential (the broker's routes the allowlist admits), named in their question;
        `program`: the command the call runs, named in its questions; `environment`: the
        sandbox it runs in, where its questions say the connection comes from."""
        self._engine = engine
        self._audit = audit
        self._session = session
        self._credential_hosts = frozenset(credential_hosts)
        self._program = program
        self._environment = environment
        self._decisions: dict[str, Decision] = {}
        self._answered: dict[str, str | None] = {}
        self._refused: dict[str, str] = {}  # refused by the proxy, after the chain admitted
        self._lock = threading.Lock()

    def admit(self, host: str, port: int) -> str | None:
        # One question at a time: a client opening several connections at once asks once.
        with self._lock:
            try:
                # A connection that could not be recorded is not made (runtime.auditlog).
                self._audit.reserve()
            except AuditUnavailable as exc:
                return str(exc)
            if host in self._answered:
                return self._answered[host]
            why_not = self._decide(host, port)
            self._answered[host] = why_not
            return why_not

    def _decide(self, host: str, port: int) -> str | None:
        try:
            key = network_key(
                host,
                port,
                credential=(host, port) in self._credential_hosts,
                program=self._program,
            )
            decision = self._engine.decide(NETWORK.name, self._environment, Permission.ask(key))
        except PermissionDenied as refused:
            if refused.decision is not None:
                self._decisions[host] = refused.decision
            return f"{refused}; {how_to_allow(host)}"
        except Exception as exc:  # an asker that cannot ask from here: refused, said why
            return (
                f"network:{host} could not be asked for during this call "
                f"({type(exc).__name__}: {exc}); {how_to_allow(host)}"
            )
        self._decisions[host] = decision
        return None

    def refusals(self) -> dict[str, str]:
        """Each host refused in this call, and why (the words its client was answered): by
        the permission chain, or by the proxy after it (an address never reached)."""
        with self._lock:
            found = dict(self._refused)
            found.update((host, why) for host, why in self._answered.items() if why is not None)
            return found

    def record(self, connection: Connection) -> None:
        if not connection.allowed:
            with self._lock:
                self._refused.setdefault(connection.host, connection.reason)
        where = f" to {connection.address}" if connection.address else ""
        with contextlib.suppress(AuditUnavailable):  # room was set aside when it was admitted
            self._record(connection, where)

    def _record(self, connection: Connection, where: str) -> None:
        self._audit.record(
            session=self._session,
            tool=NETWORK.name,
            decision=self._decisions.get(connection.host),
            outcome="ok" if connection.allowed else "denied",
            duration=connection.duration,
            error=None if connection.allowed else connection.reason,
            network={
                "host": connection.host,
                "port": connection.port,
                "address": connection.address,
                "sent": connection.sent,
                "received": connection.received,
                "detail": f"{connection.reason}{where}",
            },
        )
