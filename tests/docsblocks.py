"""The code blocks of README.md and docs/, and what each says it is.

A block is a fenced code block (```` ```sh ````, ```` ```json ```` ...) at the start of a line.
What it is comes from an HTML comment on the line right before its fence (docs/writing-docs.md):

    <!-- no-run: REASON -->        shown, not run: a shell block is only syntax-checked, a JSON or
                                   TOML block only parsed; REASON says why it cannot run
    <!-- recipe: NAME -->          an agent's set-up, run as written by tests/integrations/
    <!-- set-up -->                the README's install and test commands (run by the install tests)
    <!-- codecoder.json -->        a project file: validated by the schema and by `codecoder check`
    <!-- user config -->           the user's own file: the same, as ~/.config/codecoder/config.json
    <!-- output: COMMAND -->       text shown: every line of it is a line COMMAND prints
    <!-- run: with the codecoder.json above -->   a shell block run in a project holding the
                                   page's last codecoder.json block before it (or `user config`,
                                   or both: `with the codecoder.json and user config above`)

A shell or Python block with no comment is run; a JSON block must say what it is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The codecoder the agents' recipes name, as `codecoder hook install` writes it for a clone at
# /home/you/codecoder set up by scripts/install.sh (tests/test_docs.py checks the recipes are
# what it writes; tests/integrations/ run them with this checkout's codecoder in its place).
DOCS_CODECODER = "/home/you/codecoder/.venv/bin/codecoder"
LANGUAGES = ("sh", "json", "toml", "python", "text")
_FENCE = re.compile(r"^```([A-Za-z0-9_-]*)\s*$")
_MARKER = re.compile(r"^<!--\s*(.*?)\s*-->\s*$")


def pages() -> list[Path]:
    """README.md and every page of the site."""
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # the line of the opening fence, from 1
    language: str
    marker: str  # the comment's text before it, or ""
    text: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"

    @property
    def kind(self) -> str:
        """The marker's first word: no-run, recipe, set-up, codecoder.json, user config, run."""
        kinds = ("no-run", "recipe", "set-up", "codecoder.json", "user config", "run", "output")
        for kind in kinds:
            if self.marker == kind or self.marker.startswith(kind + ":"):
                return kind
        return self.marker

    @property
    def argument(self) -> str:
        """What follows the marker's colon: the reason, the recipe's name, the run's project."""
        return self.marker.split(":", 1)[1].strip() if ":" in self.marker else ""


def blocks(page: Path) -> list[Block]:
    lines = page.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        marker = _MARKER.match(lines[i - 1]) if i > 0 else None
        end = i + 1
        while end < len(lines) and lines[end].rstrip() != "```":
            end += 1
        assert end < len(lines), f"{page}:{i + 1}: a code block that never ends"
        found.append(
            Block(
                page=page,
                line=i + 1,
                language=opening[1],
                marker=marker[1] if marker else "",
                text="\n".join(lines[i + 1 : end]) + "\n",
            )
        )
        i = end + 1
    return found


def every_block() -> list[Block]:
    return [block for page in pages() for block in blocks(page)]


def recipe(name: str) -> str:
    """The text of the block marked `<!-- recipe: NAME -->`: wherever the README and the docs
    show it, it is the same text, and the tests run exactly that."""
    shown = {b.text for b in every_block() if b.kind == "recipe" and b.argument == name}
    assert shown, f"no page has a recipe {name!r}"
    assert len(shown) == 1, f"the recipe {name!r} is shown differently on different pages"
    return shown.pop()


def the_one_above(block: Block, kind: str) -> Block:
    """The page's last block of `kind` before `block`."""
    before = [b for b in blocks(block.page) if b.kind == kind and b.line < block.line]
    assert before, f"{block.where}: no {kind} block above it"
    return before[-1]
