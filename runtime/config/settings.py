"""The settings the runtime obeys, as plain values with their defaults: the limits of commands
(`ShellSettings`), what the web tools may reach and read (`WebSettings`) and the model behind
child agents (`AgentSettings`).

`WebSettings` and `AgentSettings` are built from the `web` and `agent` sections of the files,
lowest layer first (`layered`): host entries add up, and each other setting comes from the top
layer that sets it. Which layers those are is `runtime.config.project`'s business, and how far an
untrusted project file counts as one, `runtime.config.untrusted`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from codecoder.config.projectfile import AgentSection, WebSection
from codecoder.foundation.hosts import parse_host_entry

__all__ = ["AgentSettings", "HostRule", "ShellSettings", "WebSettings"]

HostRule = tuple[str, int | None]  # (host or *.suffix or *, port or None for any)


@dataclass(frozen=True, slots=True)
class ShellSettings:
    """Limits for commands, from codecoder.json's `limits` (defaults here)."""

    timeout: float = 120.0
    max_output: int = 64 * 1024


@dataclass(frozen=True, slots=True)
class WebSettings:
    """What the web tools may reach and read, from the `web` objects (defaults here).

    The policy for a host is decided by the most specific entry that matches it (`host:port`,
    then `host`, then the longest `*.suffix`, then `*`); when an allow and a deny entry are
    equally specific, the deny wins. A host no entry matches is reached if its addresses are
    public (see `runtime.tools.web`). An allowed host is reached even when its address is
    loopback or private: that is what naming it is for.
    """

    allow_hosts: frozenset[HostRule] = frozenset()
    deny_hosts: frozenset[HostRule] = frozenset()
    search_url: str | None = None  # a SearxNG instance; web_search needs one
    github_api_url: str = "https://api.github.com"
    github_token_env: str = "GITHUB_TOKEN"
    max_bytes: int = 5 * 1024 * 1024
    timeout: float = 30.0
    max_redirects: int = 5

    @classmethod
    def from_section(cls, section: WebSection) -> WebSettings:
        return cls.layered((section,))

    @classmethod
    def layered(cls, sections: tuple[WebSection, ...]) -> WebSettings:
        """Lowest layer first: host entries add up, each setting comes from the top layer
        that sets it."""
        default = cls()

        def top(name: str) -> Any:
            for section in reversed(sections):
                value = getattr(section, name)
                if value is not None:
                    return value
            return getattr(default, name)

        return cls(
            allow_hosts=frozenset(
                parse_host_entry(entry) for section in sections for entry in section.allow_hosts
            ),
            deny_hosts=frozenset(
                parse_host_entry(entry) for section in sections for entry in section.deny_hosts
            ),
            search_url=top("search_url"),
            github_api_url=top("github_api_url"),
            github_token_env=top("github_token_env"),
            max_bytes=top("max_bytes"),
            timeout=top("timeout"),
            max_redirects=top("max_redirects"),
        )

    def verdict(
        self, host: str, port: int, extra_allowed: frozenset[HostRule] = frozenset()
    ) -> tuple[Literal["allow", "deny"], str] | None:
        """What the policy says of `host:port`, and the entry that said it; None if nothing."""
        best: tuple[int, int, str, str] | None = None  # (specificity, deny?, verdict, entry)
        for verdict, rules in (
            ("allow", self.allow_hosts | extra_allowed),
            ("deny", self.deny_hosts),
        ):
            for rule_host, rule_port in rules:
                rank = _specificity(rule_host, rule_port, host, port)
                if rank is None:
                    continue
                candidate = (rank, verdict == "deny", verdict, _rule_text(rule_host, rule_port))
                if best is None or candidate[:2] > best[:2]:
                    best = candidate
        if best is None:
            return None
        return ("allow" if best[2] == "allow" else "deny"), best[3]


def _specificity(rule_host: str, rule_port: int | None, host: str, port: int) -> int | None:
    if rule_port is not None and rule_port != port:
        return None
    if rule_host == "*":
        matched = 0
    elif rule_host.startswith("*."):
        suffix = rule_host[1:]
        if not host.endswith(suffix) or host == suffix[1:]:
            return None
        matched = len(suffix)
    elif rule_host == host:
        matched = 10_000
    else:
        return None
    return matched * 2 + (rule_port is not None)


def _rule_text(host: str, port: int | None) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"{shown}:{port}" if port is not None else host


@dataclass(frozen=True, slots=True)
class AgentSettings:
    """The model behind child agents, from the `agent` objects (defaults here).

    `base_url` and `model` left unset here are taken from the environment (OPENAI_BASE_URL,
    OPENAI_MODEL) when a child starts; the key is always read from `api_key_env`.
    """

    base_url: str | None = None
    model: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    max_turns: int = 20
    timeout: float = 120.0

    @classmethod
    def from_section(cls, section: AgentSection) -> AgentSettings:
        return cls.layered((section,))

    @classmethod
    def layered(cls, sections: tuple[AgentSection, ...]) -> AgentSettings:
        default = cls()
        values: dict[str, Any] = {}
        for name in ("base_url", "model", "api_key_env", "max_turns", "timeout"):
            values[name] = next(
                (getattr(s, name) for s in reversed(sections) if getattr(s, name) is not None),
                getattr(default, name),
            )
        return cls(**values)
