"""The names of the 26 built-in tools, which a capability may not take.

Kept apart from the catalogue (`runtime.tools.catalogue`), which imports every tool module,
the capability tools among them; a test holds the two to the same names.
"""

from __future__ import annotations

from typing import Final

BUILTIN_TOOL_NAMES: Final = frozenset(
    {
        "read_file", "list_dir", "glob", "grep", "diff",
        "write_file", "edit_file", "move_file", "delete_file", "run_wasm",
        "run_command", "run_container", "commit",
        "git_status", "git_diff", "git_log",
        "web_fetch", "web_search", "github_search",
        "agent", "reason", "todo", "memory",
        "create_capability", "run_capability", "list_capabilities",
    }
)  # fmt: skip
