"""Bash's brace expansion, for what deny rules see of a compound command
(`runtime.permissions.commandkey.compound_views`): `{git,push}` and `g{i,}t push` are built
into words before anything runs, so a deny rule must see the words they become."""

from __future__ import annotations

import itertools
import re

from codecoder.permissions.programs import ANY

__all__ = ["brace_expanded"]

# Beyond this many words, a brace expansion stands for any word.
_BRACE_LIMIT = 256
_SEQUENCE = re.compile(r"(-?[0-9]+|[A-Za-z])\.\.(-?[0-9]+|[A-Za-z])(?:\.\.(-?[0-9]+))?")


def brace_expanded(argv: tuple[str, ...]) -> tuple[str, ...]:
    """`argv` with bash's brace expansion done on each word (`{a,b}`, `{1..3}`, nested), each
    expansion becoming several words; a word whose expansion would be huge becomes ANY.
    Quoted braces were removed with the quotes by then, so this expands a little more than
    bash does: the safe side, for deny rules."""
    words: list[str] = []
    for word in argv:
        if word == ANY or "{" not in word:
            words.append(word)
            continue
        expanded = _braces(word, [0])
        words.extend(expanded if expanded is not None else [ANY])
    return tuple(words)


def _braces(word: str, budget: list[int]) -> list[str] | None:
    for open_at, char in enumerate(word):
        if char != "{":
            continue
        depth, commas, close = 0, [], -1
        for j in range(open_at + 1, len(word)):
            if word[j] == "{":
                depth += 1
            elif word[j] == "}":
                if depth == 0:
                    close = j
                    break
                depth -= 1
            elif word[j] == "," and depth == 0:
                commas.append(j)
        if close < 0:
            return [word]
        body = word[open_at + 1 : close]
        cuts = [open_at, *commas, close]
        choices = [word[a + 1 : b] for a, b in itertools.pairwise(cuts)] if commas else None
        if choices is None:
            choices = _sequence(body)
            if choices is None:
                continue  # `{}`, `{x}`: not an expansion; look further on
        prefix, suffix = word[:open_at], word[close + 1 :]
        result: list[str] = []
        for choice in choices:
            rest = _braces(choice + suffix, budget)
            if rest is None:
                return None
            result.extend(prefix + tail for tail in rest)
            budget[0] += len(rest)
            if budget[0] > _BRACE_LIMIT:
                return None
        return result
    return [word]


def _sequence(body: str) -> list[str] | None:
    match = _SEQUENCE.fullmatch(body)
    if match is None:
        return None
    start, end, step_text = match.groups()
    step = abs(int(step_text or 1)) or 1
    if start.isalpha() != end.isalpha():
        return None
    if start.isalpha():
        first, last = ord(start), ord(end)
    else:
        first, last = int(start), int(end)
    if abs(last - first) // step > _BRACE_LIMIT:
        return None
    values = range(first, last + (1 if last >= first else -1), step if last >= first else -step)
    return [chr(v) if start.isalpha() else str(v) for v in values]
