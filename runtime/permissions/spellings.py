"""What a person probably meant by a key codecoder cannot use: "did you mean".

A user coming from another agent writes its permission rules: Claude Code's `Bash(git status)`,
`Bash(npm run test:*)`, `Edit(src/**)`, `Read(...)`; Gemini
CLI's `run_shell_command(git status)`. `foreign_key` turns such a rule into the codecoder key
that grants the same call (for a command, the narrowest grant its question would offer), and
`close_names` finds a name that was mistyped. Nothing here grants anything: the caller refuses
the spelling it was given and names the one that would work.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable

from codecoder.permissions.commandkey import key_command

__all__ = ["close_names", "did_you_mean", "foreign_key", "one_keystroke_apart"]

# `Tool(specifier)`, the shape of Claude Code's and Gemini CLI's permission rules.
_RULE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*\((.*)\)\s*$", re.DOTALL)
_COMMAND_TOOLS = frozenset({"bash", "run_shell_command", "shell", "shelltool"})
_PATH_TOOLS = {
    "edit": "edit_file",
    "multiedit": "edit_file",
    "replace": "edit_file",
    "write": "write_file",
    "write_file": "write_file",
    "read": "read_file",
    "read_file": "read_file",
}


def foreign_key(text: str) -> str | None:
    """The codecoder key that grants what another agent's rule `text` grants, or None when
    `text` is not such a rule. A command's rule maps to its narrowest key
    (`Bash(git status)` → `run_command:git:status`); a prefix rule (`Bash(npm test:*)`,
    `Bash(npm test *)`) to the key of the prefix."""
    found = _RULE.match(text)
    if found is None:
        return None
    tool, inside = found.group(1).lower(), found.group(2).strip()
    if tool in _COMMAND_TOOLS:
        command = re.sub(r"(:\*|\s\*)$", "", inside).strip()
        if not command:
            return None
        return key_command(command).permission_key().grant_levels[0].entry
    if tool in _PATH_TOOLS and inside:
        return f"{_PATH_TOOLS[tool]}:{inside.removeprefix('./')}"
    return None


def close_names(name: str, names: Iterable[str]) -> list[str]:
    """The names closest to `name` (a typo of a tool or a command), best first: similar as a
    whole, or one keystroke away (a letter added, dropped, changed, or two swapped: `gti`,
    which the similarity of short names misses)."""
    names = list(names)
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.8)
    if len(name) >= 3:
        slips = [other for other in names if one_keystroke_apart(name, other)]
        close += [other for other in slips if other not in close]
    return close[:3]


def one_keystroke_apart(a: str, b: str) -> bool:
    """Whether `b` is `a` with one letter added, dropped or changed, or two neighbours
    swapped (Damerau-Levenshtein distance 1)."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        differ = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
        if len(differ) == 1:
            return True
        i = differ[0]
        return differ == [i, i + 1] and (a[i], a[i + 1]) == (b[i + 1], b[i])
    short, long = (a, b) if len(a) < len(b) else (b, a)
    return any(long[:i] + long[i + 1 :] == short for i in range(len(long)))


def did_you_mean(name: str, names: Iterable[str]) -> str:
    """` (did you mean X?)` for the closest of `names`, or "" when none is close."""
    close = close_names(name, names)
    return f" (did you mean {close[0]}?)" if close else ""
