"""The configuration reference (docs/reference/configuration.md), generated from the schema.

The keys, their types and constraints come from the JSON Schema of `ProjectFileModel`
(runtime/config/schema.py); the defaults from the settings the runtime obeys (ShellSettings,
WebSettings, AgentSettings, DockerSettings, BwrapSettings); what an untrusted project file may
do with each section from `runtime.config.untrusted.SECTIONS`. Only the words are written here,
one entry per key: tests/test_docs.py fails when the schema has a key this file does not
describe (or describes one it no longer has), and when the committed page differs from what
this script writes.

    python scripts/config_reference.py           write the page
    python scripts/config_reference.py --check   exit 1 if the committed page is stale
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from codecoder.config.schema import ProjectFileModel
from codecoder.config.settings import AgentSettings, ShellSettings, WebSettings
from codecoder.config.untrusted import SECTIONS
from codecoder.environments.bwrap.settings import BwrapSettings
from codecoder.environments.docker.settings import DockerSettings

PAGE = Path(__file__).resolve().parents[1] / "docs" / "reference" / "configuration.md"

# The settings whose defaults a section's keys fall back to.
DEFAULTS: dict[str, Any] = {
    "limits": ShellSettings(),
    "web": WebSettings(),
    "agent": AgentSettings(),
    "docker": DockerSettings(),
    "bwrap": BwrapSettings(),
}
# Defaults of top-level keys that are not sections of settings.
TOP_DEFAULTS: dict[str, str] = {
    "$schema": "not set",
    "allowlist": "`{}`",
    "deny": "`[]`",
    "environments": "each tool's own (`codecoder tools`)",
    "session_ttl": "`-1` (never expires)",
    "read_roots": "`{}`",
    "credentials": "`{}`",
}

SECTION_WORDS: dict[str, str] = {
    "limits": "Limits of every command a tool runs.",
    "web": "What the web tools (`web_fetch`, `web_search`, `github_search`) may reach and read.",
    "agent": "The model behind child agents (the `agent` tool).",
    "docker": (
        "Overrides of the hardened `@docker` defaults ([@docker](../environments/docker.md))."
    ),
    "bwrap": (
        "What the `@bwrap` sandbox shows beyond its defaults ([@bwrap](../environments/bwrap.md))."
    ),
}

# What a project file nobody trusted may do with a key or section, where `SECTIONS`' one word
# for the section says less than the rule (runtime.config.untrusted).
UNTRUSTED_DETAIL: dict[str, str] = {
    "environments": "a binding to a sandbox obeyed; one to `@shell` ignored until trusted",
    "session_ttl": "obeyed when shorter than the layer below, else ignored until trusted",
    "read_roots": "a root inside the project obeyed; one outside it ignored until trusted",
    "credentials": "an error, trusted or not (your own file only)",
    "docker": (
        "the numeric limits (`memory`, `cpus`, `pids_limit`, `tmpfs_size`, `pool`) obeyed when no "
        'larger than the layer below; `runtime: "runsc"` and `workspace` obeyed; every other '
        "setting ignored until trusted"
    ),
    "web": (
        "`deny_hosts` obeyed; `max_bytes`, `timeout`, `max_redirects` obeyed when no larger than "
        "the layer below; the rest ignored until trusted"
    ),
    "agent": (
        "`max_turns` and `timeout` obeyed when no larger than the layer below; the rest ignored "
        "until trusted"
    ),
}

UNTRUSTED: dict[str, str] = {
    "inert": "no effect on what runs",
    "narrows": "obeyed: it narrows",
    "compared": "obeyed where it narrows or equals the layer below, else ignored until trusted",
    "widens": "ignored until trusted",
}

# One entry per key of the schema, in words.
DESCRIPTIONS: dict[str, str] = {
    "$schema": "The URL or path of a JSON Schema, for editors. Ignored by codecoder.",
    "allowlist": (
        "Grants for the project: a key pattern (`run_command:npm:test`, `write_file:tests/**`) to "
        '`"AlwaysThisProject"` (or `{"scope": "AlwaysThisProject", "digest": …}`, which the '
        "runtime writes for a capability, pinned to its code). `AlwaysThisSession` is reported as "
        "meaningless in a file. A grant above its tool's ceiling grants nothing. In your own "
        "file, a grant holds in every project where its tool runs contained (never a "
        "capability's, never on @shell): what an AlwaysEveryProject answer writes."
    ),
    "deny": (
        "Key patterns that are refused, never asked, even inside a compound command "
        "(`run_command:git:push`). Those of your own file and of the project's both count."
    ),
    "environments": (
        'Where a tool runs: a tool name to an environment tag (`"run_command": "@docker"`). A '
        "binding to a sandbox narrows and is obeyed from an untrusted file; a binding to "
        "`@shell` widens."
    ),
    "limits.timeout": "Seconds before a command is killed (at most 86400).",
    "limits.max_output": "Bytes of output kept per stream (head and tail; at least 1024).",
    "session_ttl": (
        "Seconds a session grant lasts, or `-1` for the whole session. A shorter value narrows."
    ),
    "web.allow_hosts": (
        'Hosts the web tools may reach, local addresses included: `"docs.python.org"`, '
        '`"127.0.0.1:8123"`, `"*.example.com"` (never `"*"`). The most specific entry of '
        "`allow_hosts` and `deny_hosts` decides; a deny wins a tie."
    ),
    "web.deny_hosts": (
        'Hosts the web tools refuse (`"*"`, `"*.example.com"`); a denied name is not even resolved.'
    ),
    "web.search_url": "The SearxNG instance `web_search` queries (http or https, no credentials).",
    "web.github_api_url": "The GitHub API `github_search` queries.",
    "web.github_token_env": "The environment variable holding the GitHub token.",
    "web.max_bytes": "Bytes a fetch reads at most (1 KiB to 1 GiB).",
    "web.timeout": "Seconds a fetch may take (at most 3600).",
    "web.max_redirects": "Redirects a fetch follows (0 to 20).",
    "agent.base_url": (
        "The OpenAI-compatible chat-completions endpoint of child agents; unset, "
        "`OPENAI_BASE_URL` when a child starts."
    ),
    "agent.model": "The model of child agents; unset, `OPENAI_MODEL` when a child starts.",
    "agent.api_key_env": "The environment variable holding the API key.",
    "agent.max_turns": "Turns a child agent may take (1 to 1000).",
    "agent.timeout": "Seconds a child agent may take.",
    "read_roots": (
        'Directories the read tools may read (never write), by name: `"docs": "../shared-docs"` '
        "is read as `@docs/…`. A root inside the project is obeyed from an untrusted file, one "
        "outside it needs trust; none may be `/`, the home directory or above it, nor hold the "
        "runtime's state or your configuration."
    ),
    "docker.image": "The sandbox image (one `codecoder image build` made, carrying the agent).",
    "docker.runtime": (
        'The engine runtime: unset for the engine\'s default, `"runsc"` for gVisor (obeyed from '
        "an untrusted file: it tightens)."
    ),
    "docker.workspace": (
        '`"bind"` (a bind mount), `"sync"` (a per-session volume kept in step), `"auto"` (sync '
        "when `DOCKER_HOST` names another machine, or when root owns a workspace not everyone "
        'may write and `"user"` is `"auto"`: commands then run as 10001, who could not write a '
        "bind mount of it)."
    ),
    "docker.memory": "Memory limit, equal to memory+swap (`512m`, `1g`).",
    "docker.cpus": "CPU quota, in CPUs.",
    "docker.pids_limit": "Processes the container may hold (at least 8).",
    "docker.tmpfs_size": "Size of each tmpfs (`/tmp`, `/dev/shm`, extra writable paths).",
    "docker.network": (
        '`"ask"`: writable calls reach the network only through the runtime\'s egress proxy, '
        "each https host asked as `network:<host>` during the call (read-only calls, and any "
        'call on a remote engine, have none); `"none"`: no network at all (an untrusted project '
        'may say it); an egress allowlist `{"allow": ["pypi.org", …]}`: only those hosts, each '
        "asked as `network:<host>`, in every call ([Egress allowlist](../environments/egress.md)), "
        'also obeyed by `@bwrap`; any other string is the engine\'s network mode (`"bridge"`: a '
        "loosening `check` warns about)."
    ),
    "docker.read_only_rootfs": "Whether the container's root file system is read-only.",
    "docker.user": (
        '`"auto"` (the workspace\'s owner, or 10001 when root owns it) or `"uid[:gid]"`, '
        "never root."
    ),
    "docker.extra_writable_paths": (
        "More size-capped tmpfs mounts inside the container (absolute, never `/` or `/workspace`)."
    ),
    "docker.disk_budget": "How much a writable call may grow the workspace (also `@wasm`'s).",
    "docker.pool": "Warm sandboxes the pool keeps per workspace and mode (0 turns it off).",
    "bwrap.home": (
        "Directories or files under the home to show read-only in the sandbox's empty home "
        '(`"~/.m2"`); never one that is, holds or lies in a credential path.'
    ),
    "bwrap.env": (
        'Environment variables (names or `*` patterns, never `"*"` alone) passed through the '
        "scrubbing of secrets."
    ),
    "credentials": (
        'Hosts whose git smart-HTTP requests from a sandbox get your credential: `"github.com": '
        '{"from": "git"}` ([the credential broker](../environments/credential-broker.md)). Read '
        "from your own file only: in a project file it is an error, trusted or not."
    ),
}


def schema() -> dict[str, Any]:
    return ProjectFileModel.model_json_schema(by_alias=True)


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in node:
        return dict(defs[node["$ref"].rsplit("/", 1)[1]])
    return node


def _without_null(node: dict[str, Any]) -> dict[str, Any]:
    options = [o for o in node.get("anyOf", ()) if o.get("type") != "null"]
    return options[0] if len(options) == 1 else node


def _is_section(node: dict[str, Any], defs: dict[str, Any]) -> bool:
    resolved = _resolve(_without_null(node), defs)
    return resolved.get("type") == "object" and "properties" in resolved


def leaves(document: dict[str, Any] | None = None) -> list[str]:
    """Every key the schema describes: top-level keys, and `section.key` inside sections."""
    document = document or schema()
    defs = document.get("$defs", {})
    paths = []
    for name, node in document["properties"].items():
        if _is_section(node, defs):
            section = _resolve(_without_null(node), defs)
            paths.extend(f"{name}.{key}" for key in section["properties"])
        else:
            paths.append(name)
    return paths


def _untrusted(name: str) -> str:
    return UNTRUSTED_DETAIL.get(name) or UNTRUSTED[SECTIONS[name]]


def _type(node: dict[str, Any], defs: dict[str, Any]) -> str:
    node = _without_null(node)
    if "anyOf" in node:
        options = [o for o in node["anyOf"] if o.get("type") != "null"]
        return " or ".join(_type(option, defs) for option in options)
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[1]
        if name == "EnvironmentTag":
            return " \\| ".join(f"`{tag}`" for tag in defs[name]["enum"])
        if name == "_Grant":
            return '`"AlwaysThisProject"` or `{"scope", "digest"}`'
        if name == "_Egress":
            return '`{"allow": [host, …]}`'
        if name == "_CredentialRoute":
            return '`{"from": "git"}`'
        return f"`{name}`"
    if "enum" in node:
        return " \\| ".join(f"`{json.dumps(v)}`" for v in node["enum"])
    if "const" in node:
        return f"`{json.dumps(node['const'])}`"
    kind = node.get("type")
    if kind == "array":
        text = f"list of {_type(node['items'], defs)}"
        return text + (", not empty" if node.get("minItems") else "")
    if kind == "object":
        return f"object: name → {_type(node.get('additionalProperties', {}), defs)}"
    words = {"string": "string", "integer": "integer", "number": "number", "boolean": "boolean"}
    text = words.get(kind, str(kind))
    if node.get("minLength"):
        text = "non-empty string"
    if "pattern" in node:
        text += f" matching `{node['pattern']}`"
    low = node.get("minimum", node.get("exclusiveMinimum"))
    high = node.get("maximum")
    if low is not None or high is not None:
        bounds = []
        if "exclusiveMinimum" in node:
            bounds.append(f"> {low}")
        elif low is not None:
            bounds.append(f"≥ {low}")
        if high is not None:
            bounds.append(f"≤ {high}")
        text += " " + ", ".join(bounds)
    return text


def _default(section: str, key: str) -> str:
    settings = DEFAULTS[section]
    names = {f.name for f in dataclasses.fields(settings)}
    if key not in names:
        return "–"
    value = getattr(settings, key)
    if value is None:
        return "not set"
    if isinstance(value, frozenset | tuple):
        value = sorted(value)
    return f"`{json.dumps(value)}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|") if "\\|" not in text else text


def render() -> str:
    document = schema()
    defs = document.get("$defs", {})
    out = [
        "# Configuration reference",
        "",
        "<!-- Generated by scripts/config_reference.py from runtime/config/schema.py and the",
        "settings models; do not edit by hand: run `python scripts/config_reference.py`. -->",
        "",
        "Every setting of `codecoder.json` (the project's file) and of your own file",
        "(`$XDG_CONFIG_HOME/codecoder/config.json`, which has the same settings except grants).",
        'Unknown keys are errors; numbers are JSON numbers (`"120"` is not one); top-level keys',
        "starting with `//` are comments. For each section, what a project file nobody trusted",
        "may do with it ([Trust](../security/trust.md)). How the files are read, layered and",
        "reloaded: [codecoder.json](codecoder-json.md).",
        "",
        "## Top level",
        "",
        "| key | type | default | untrusted project file | what it is |",
        "|---|---|---|---|---|",
    ]
    sections = []
    for name, node in document["properties"].items():
        if _is_section(node, defs):
            sections.append((name, _resolve(_without_null(node), defs)))
            out.append(
                f"| [`{name}`](#{name}) | object | | {_untrusted(name)} | {SECTION_WORDS[name]} |"
            )
            continue
        out.append(
            f"| `{name}` | {_cell(_type(node, defs))} | {TOP_DEFAULTS[name]} "
            f"| {_untrusted(name)} | {DESCRIPTIONS[name]} |"
        )
    for name, section in sections:
        out += [
            "",
            f"## `{name}`",
            "",
            f"{SECTION_WORDS[name]} From an untrusted project file: {_untrusted(name)}.",
            "",
            "| key | type | default | what it is |",
            "|---|---|---|---|",
        ]
        for key, node in section["properties"].items():
            out.append(
                f"| `{key}` | {_cell(_type(node, defs))} | {_default(name, key)} "
                f"| {DESCRIPTIONS[f'{name}.{key}']} |"
            )
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if PAGE.read_text(encoding="utf-8") != text:
            print(f"{PAGE} is stale: run python scripts/config_reference.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
