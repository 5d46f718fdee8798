"""The schema of codecoder.json and of the user's file, as pydantic models (`ProjectFileModel`),
and what a pattern of theirs may not be (`pattern_problem`).

`runtime.config.reading` validates each parsed document against it and reports every error as a
`schema` diagnostic at the line and column of the value concerned.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    field_validator,
    model_validator,
)

from codecoder.environments.broker import CredentialRoute
from codecoder.environments.docker.settings import MAX_POOL
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.display import quoted as _quote
from codecoder.foundation.hosts import parse_host_entry

__all__ = ["ProjectFileModel", "pattern_problem"]

# strict: a JSON string "120" is not a number and true is not 1. allow_inf_nan: Python's json
# module reads NaN and Infinity, which are not JSON and mean nothing as a limit.
_STRICT = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class _Grant(BaseModel):
    model_config = _STRICT

    scope: str
    digest: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _bare_scope(cls, value: Any) -> Any:
        # "AlwaysThisProject" is short for {"scope": "AlwaysThisProject"}. Normalising here
        # rather than declaring `str | _Grant` keeps one error per bad value instead of one
        # per union member.
        return {"scope": value} if isinstance(value, str) else value


class _Limits(BaseModel):
    model_config = _STRICT

    timeout: float | None = Field(default=None, gt=0, le=86400)
    max_output: int | None = Field(default=None, ge=1024)


def _check_host_entry(value: str) -> str:
    host, _ = parse_host_entry(value)
    if host == "*":
        raise ValueError(
            'must name hosts: "*" would let every address through; to reach only some hosts, '
            'deny "*" in deny_hosts and name them here'
        )
    return value


def _check_denied_host(value: str) -> str:
    parse_host_entry(value)
    return value


def _check_base_url(value: str) -> str:
    # Parsed the way the web tools parse it, so a URL accepted here is one they can use.
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - the property raises ValueError for a bad port
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"must be an http:// or https:// URL with a host, not {_quote(value)}")
    if parts.username is not None or parts.query or parts.fragment:
        raise ValueError(f"must not hold credentials, a query or a fragment: {_quote(value)}")
    return value


def _check_variable_name(value: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
        raise ValueError(f"must be the name of an environment variable, not {_quote(value)}")
    return value


_HostEntry = Annotated[str, AfterValidator(_check_host_entry)]
_DeniedHost = Annotated[str, AfterValidator(_check_denied_host)]
_BaseUrl = Annotated[str, AfterValidator(_check_base_url)]
_VariableName = Annotated[str, AfterValidator(_check_variable_name)]


class _Web(BaseModel):
    model_config = _STRICT

    allow_hosts: list[_HostEntry] = Field(default_factory=list)
    deny_hosts: list[_DeniedHost] = Field(default_factory=list)
    search_url: _BaseUrl | None = None
    github_api_url: _BaseUrl | None = None
    github_token_env: _VariableName | None = None
    max_bytes: int | None = Field(default=None, ge=1024, le=1024**3)
    timeout: float | None = Field(default=None, gt=0, le=3600)
    max_redirects: int | None = Field(default=None, ge=0, le=20)


class _Agent(BaseModel):
    model_config = _STRICT

    base_url: _BaseUrl | None = None
    model: str | None = Field(default=None, min_length=1)
    api_key_env: _VariableName | None = None
    max_turns: int | None = Field(default=None, ge=1, le=1000)
    timeout: float | None = Field(default=None, gt=0, le=86400)


def _check_root_name(value: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", value):
        raise ValueError("a read root's name is letters, digits, `_`, `.` and `-` only")
    return value


_RootName = Annotated[str, AfterValidator(_check_root_name)]


class _Egress(BaseModel):
    """`"network": {"allow": [hosts]}`: egress through the runtime's proxy to these hosts only."""

    model_config = _STRICT

    allow: list[Annotated[str, Field(min_length=1)]] = Field(min_length=1)


class _Docker(BaseModel):
    """Overrides of the hardened @docker defaults
    (environments.docker.environment.DockerSettings)."""

    model_config = _STRICT

    image: str | None = Field(default=None, min_length=1)
    runtime: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    workspace: Literal["auto", "bind", "sync"] | None = None
    memory: str | None = Field(default=None, pattern=r"^[0-9]+[kmgKMG]?$")
    cpus: float | None = Field(default=None, gt=0, le=1024)
    pids_limit: int | None = Field(default=None, ge=8, le=1_000_000)
    tmpfs_size: str | None = Field(default=None, pattern=r"^[0-9]+[kmgKMG]?$")
    # "ask" (the default when unset: writable calls through the egress proxy, each host asked),
    # "none" (no network at all), {"allow": [...]}, or another engine network mode ("bridge").
    network: Annotated[str, Field(min_length=1)] | _Egress | None = None
    read_only_rootfs: bool | None = None
    user: str | None = Field(default=None, pattern=r"^(auto|[0-9]+(:[0-9]+)?)$")
    extra_writable_paths: list[str] | None = None
    disk_budget: str | None = Field(default=None, pattern=r"^[0-9]+[kmgKMG]?$")
    pool: int | None = Field(default=None, ge=0, le=MAX_POOL)


COMMENT_PREFIX = "//"
"""A top-level key that starts with it is a comment (JSON has none): `"// limits": "..."`."""


def _check_credential_host(value: str) -> str:
    CredentialRoute.parse(value)
    return value


class _CredentialRoute(BaseModel):
    """`{"from": "git"}`: the credential comes from the user's git credential helpers."""

    model_config = _STRICT

    from_: Literal["git"] = Field(alias="from")


class _Bwrap(BaseModel):
    """What a trusted file adds to the @bwrap sandbox (environments.bwrap.settings)."""

    model_config = _STRICT

    home: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)
    env: list[Annotated[str, Field(pattern=r"^[A-Za-z_*][A-Za-z0-9_*]*$")]] = Field(
        default_factory=list
    )


class ProjectFileModel(BaseModel):
    """The file's settings. Top-level keys starting with `//` are comments (a string or a list
    of strings), read by people and by nothing else: `codecoder init` writes its notes so."""

    model_config = _STRICT

    schema_: str | None = Field(default=None, alias="$schema")
    allowlist: dict[str, _Grant] = Field(default_factory=dict)
    deny: list[str] = Field(default_factory=list)
    # Strict(False): in strict mode pydantic accepts only enum members, and JSON has strings.
    environments: dict[str, Annotated[EnvironmentTag, Strict(False)]] = Field(default_factory=dict)
    limits: _Limits = Field(default_factory=_Limits)
    session_ttl: float | None = None
    web: _Web = Field(default_factory=_Web)
    agent: _Agent = Field(default_factory=_Agent)
    # Extra directories the read tools may read (never write), addressed as `@name/path`.
    read_roots: dict[_RootName, Annotated[str, Field(min_length=1)]] = Field(default_factory=dict)
    docker: _Docker = Field(default_factory=_Docker)
    bwrap: _Bwrap = Field(default_factory=_Bwrap)
    # Hosts whose git smart-HTTP requests from a sandbox get the user's credential through the
    # credential broker (environments.broker). Read from the user's own file only.
    credentials: dict[Annotated[str, AfterValidator(_check_credential_host)], _CredentialRoute] = (
        Field(default_factory=dict)
    )

    @model_validator(mode="before")
    @classmethod
    def _without_comments(cls, value: Any) -> Any:
        # What a comment holds is checked where its line is known (runtime.config.reading).
        if not isinstance(value, dict):
            return value
        return {
            k: v
            for k, v in value.items()
            if not (isinstance(k, str) and k.startswith(COMMENT_PREFIX))
        }

    @field_validator("session_ttl")
    @classmethod
    def _never_or_positive(cls, value: float | None) -> float | None:
        if value is not None and value != -1 and not value > 0:
            raise ValueError("must be -1 (never expires) or a positive number of seconds")
        return value


# Unicode category Cc is exactly these two ranges; a regex is much faster than unicodedata on
# a file with thousands of patterns.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def pattern_problem(pattern: str) -> str | None:
    if not pattern:
        return "a pattern must not be empty"
    if _CONTROL.search(pattern):
        return "a pattern must not contain control characters"
    return None
