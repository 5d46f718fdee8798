"""Option matching: whether a program's arguments spell an option in any form its parser would
accept (`-xVALUE`, bundled `-abx`, `--opt=value`, unambiguous abbreviations `--exe`), and the
split of arguments into option words and operands.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def has_option(args: Iterable[str], options: Iterable[str], values: str = "") -> str | None:
    """The first of `options` that `args` spell, or None. See `_spells`."""
    options = tuple(options)
    for word in args:
        if word == "--":
            return None
        for option in options:
            if _spells(word, option, values):
                return option
    return None


def _spells(word: str, option: str, values: str = "") -> bool:
    """Whether `word` spells `option` in any form the program's parser would accept.

    `-xVALUE` and bundles (`-avze`) for a short option: the letter anywhere in a bundle, up to
    the first letter in `values` (an option that takes the rest of the word as its value).
    `--opt=value` and unambiguous abbreviations for a long one (GNU getopt and git's
    parse-options accept them); matching an ambiguous abbreviation only makes a command
    compound, which is the safe side.
    """
    if word == option:
        return True
    if not word.startswith("-") or word == "-":
        return False
    if not option.startswith("--") and len(option) > 2:
        # A long option with one dash (`-exec`, `-fplugin`, `-toolexec`): no bundles.
        return word.startswith(option + "=")
    if option.startswith("--"):
        if not word.startswith("--"):
            return False
        name = word.split("=", 1)[0]
        return len(name) > 3 and option.startswith(name)
    if word.startswith("--") or len(option) != 2:
        return False
    for letter in word[1:]:
        if letter == option[1]:
            return True
        if letter in values:
            return False
    return False


def _options_and_operands(
    args: Sequence[str], values: Iterable[str] = (), *, stop_at_operand: bool = False
) -> tuple[list[str], list[str]]:
    """Split `args` into option words and operands; `values` take the next word as their value."""
    takes_value = frozenset(values)
    options: list[str] = []
    operands: list[str] = []
    i = 0
    while i < len(args):
        word = args[i]
        if word == "--":
            operands.extend(args[i + 1 :])
            break
        if word.startswith("-") and word != "-":
            options.append(word)
            if word in takes_value and i + 1 < len(args):
                options.append(args[i + 1])
                i += 1
        else:
            operands.append(word)
            if stop_at_operand:
                operands.extend(args[i + 1 :])
                break
        i += 1
    return options, operands
