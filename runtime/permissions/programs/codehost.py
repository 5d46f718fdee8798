"""GitHub's CLI, `gh`: keyed to its group and command (`run_command:gh:run:view`), so that a
grant for reading a run's log never covers deleting the run. What runs code of its own (an
extension, an alias, the configured editor, pager or browser, a codespace) is compound, and so is
a subcommand the table does not know (an installed extension or an alias may be called so).
`gh` talks to a code host with the user's token: contained it fails, and the question offers the
host (`programs.host`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from codecoder.permissions.programs.form import Form
from codecoder.permissions.programs.options import _options_and_operands
from codecoder.permissions.programs.rules import _subcommand_tool

__all__ = ["_gh"]

# Groups whose second word is the command (`gh pr merge`); the rest stand alone (`gh status`).
_GROUPS: Final = (
    *("run", "pr", "issue", "repo", "release", "workflow", "auth", "search", "gist", "label"),
    *("secret", "variable", "cache", "ruleset", "project", "org", "ssh-key", "gpg-key"),
    "attestation",
)
_ALONE: Final = ("api", "status", "help", "completion")
_RUNS: Final = {
    **dict.fromkeys(("extension", "extensions", "ext"), "installs and runs extensions"),
    "alias": "defines aliases, which may run shell commands",
    "config": "sets the editor, pager or browser that later commands run",
    **dict.fromkeys(("codespace", "cs"), "runs commands in a codespace and copies files from it"),
    "browse": "runs the configured browser",
}
_VALUES: Final = ("-R", "--repo", "--hostname", "-q", "--jq", "-t", "--template", "-X")

_by_group = _subcommand_tool(
    simple=(*_GROUPS, *_ALONE), runs=_RUNS, values=_VALUES, config_reads=("get", "list")
)


def _gh(program: str, args: Sequence[str], search_path: str) -> Form:
    form = _by_group(program, args, search_path)
    if form.compound is not None or not form.levels or form.levels[0] not in _GROUPS:
        return form
    _, operands = _options_and_operands(args, _VALUES)
    command = operands[1:2]
    if not command or command[0].startswith("-"):
        return form  # `gh pr` alone prints its help
    return Form(None, (form.levels[0], command[0]), form.covers)
