"""What the program table says about a command (`Form`), the signature of the rule that says
it for one program (`Rule`), and `ANY`, the word that stands for one the parser could not read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

# A word the parser could not read literally (an expansion): in a deny view it stands for any
# word, so a deny rule is not dodged by `git $SUB`.
ANY = "\x00"


@dataclass(frozen=True, slots=True)
class Form:
    """What the table says about one command: compound (and why) or simple (and its levels).

    `levels` are the words after the program that name what it does (`("status",)`); `None`
    when the table cannot name them safely. `covers` says in words what a grant for the program
    alone covers; `workspace`, what code from the workspace a simple form runs.
    """

    compound: str | None
    levels: tuple[str, ...] | None = ()
    covers: str = ""
    workspace: str = ""  # the code in the workspace it runs (`WORKSPACE_CODE`), if any


Rule = Callable[[str, Sequence[str], str], Form]
