"""Egress from a sandbox (@docker, @bwrap) as a permission: every host a key `network:<host>`.

A project whose `docker.network` is `{"allow": [...]}` (the one egress allowlist of its
sandboxes: @bwrap obeys it too) lets the sandbox reach those hosts through
the runtime's egress proxy (`environments.egress`), and only as far as the permission chain
admits each host: `network:pypi.org` is asked like any other key, refused by a deny rule
(`"deny": ["network:*"]`), granted for the session or, because the sandbox contains whatever
comes back, for the project (`"network:pypi.org": "AlwaysThisProject"`).

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
from codecoder.tools.base import Category, Parameters, Tool, ToolContext, ToolResult

if TYPE_CHECKING:
    from codecoder.permissions.chain import PermissionChain

__all__ = ["NETWORK", "NetworkAccess", "SessionNetwork", "network_key"]


class NetworkParameters(Parameters):
    host: str = Field(description="The host the sandbox connects to.", min_length=1)
    port: int = Field(default=443, ge=1, le=65535)


def network_key(host: str, port: int, *, credential: bool = False) -> PermissionKey:
    """`credential`: the user's own file routes the host's git credential through the broker
    (`environments.broker`), so what the grant lets through carries it: the question says so.
    The key is the same either way (`network:<host>`)."""
    subject = f"connect to {host}:{port} from the sandbox, through its egress proxy"
    covers = f"connections to {host} only"
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
        levels=(GrantLevel(f"network:{escape_literal(host)}", covers),),
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
    """The `NetworkGate` of one call: the session's permission chain and the audit log."""

    def __init__(
        self,
        engine: PermissionChain,
        audit: AuditLog,
        session: str,
        credential_hosts: tuple[tuple[str, int], ...] = (),
    ) -> None:
        """`credential_hosts`: where the call's sandbox sends git's requests with the user's
        credential (the broker's routes the allowlist admits), named in their question."""
        self._engine = engine
        self._audit = audit
        self._session = session
        self._credential_hosts = frozenset(credential_hosts)
        self._decisions: dict[str, Decision] = {}
        self._lock = threading.Lock()

    def admit(self, host: str, port: int) -> str | None:
        # One question at a time: a client opening several connections at once asks once.
        with self._lock:
            try:
                # A connection that could not be recorded is not made (runtime.auditlog).
                self._audit.reserve()
            except AuditUnavailable as exc:
                return str(exc)
            try:
                key = network_key(host, port, credential=(host, port) in self._credential_hosts)
                decision = self._engine.decide(
                    NETWORK.name, EnvironmentTag.DOCKER, Permission.ask(key)
                )
            except PermissionDenied as refused:
                if refused.decision is not None:
                    self._decisions[host] = refused.decision
                return str(refused)
            except Exception as exc:  # an asker that cannot ask from here: refused, said why
                return f"network:{host} could not be asked for: {type(exc).__name__}: {exc}"
            self._decisions[host] = decision
            return None

    def record(self, connection: Connection) -> None:
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
