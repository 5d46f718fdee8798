"""codecoder: a sandboxed tool-execution runtime for AI agents. This package (the folder
runtime/) is its core: what decides whether a tool call may run, and runs it where it is bound.

The packages, from the bottom layer up (each imports only from those below it; pyproject.toml's
import-linter contracts hold it so): `foundation` (errors, environment tags and their ceilings, the
decision value, protected paths, confined reads, state directories), `auditlog`, `permissions`
(keys, the program table, patterns, allowlists, the lookup chain, the question), `config`
(codecoder.json, the user's file, trust, capabilities), `tools` (the 26 built-in tools),
`dispatcher` and `session` (the Python API: `session.Runtime`), `evaluation` (deciding without
running), and `interfaces` (the command line, the MCP server, the interactive session, the hooks
of other agents, the decision server). The environments the tools run in are
`codecoder.environments`.
"""
