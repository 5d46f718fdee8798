"""File names that are not UTF-8: one spelling that the tools show and take back."""

from __future__ import annotations

import os

import pytest

from codecoder.foundation.display import spelled, unspelled, visible


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        (b"n\xe9e.txt", "n\\xe9e.txt"),
        (b"caf\xc3\xa9.txt", "café.txt"),
        (b"a\\xe9", "a\\\\xe9"),  # a real backslash before what would read as an escape
        (b"a\\b", "a\\b"),
        (b"a\\\\b", "a\\\\\\b"),
        (b"\\\xe9", "\\\\\\xe9"),
        (b"\xff\xfe", "\\xff\\xfe"),
        (b"plain.txt", "plain.txt"),
    ],
)
def test_a_name_is_spelled_so_that_it_reads_back_as_the_same_bytes(raw: bytes, shown: str) -> None:
    assert spelled(raw) == shown
    assert spelled(os.fsdecode(raw)) == shown
    assert os.fsencode(unspelled(shown)) == raw


@pytest.mark.parametrize("raw", [b"n\xe9e.txt", b"a\\b", b"a\\\\b", b"\\\xe9x"])
def test_what_a_question_shows_of_a_name_reads_back_too(raw: bytes) -> None:
    assert os.fsencode(unspelled(visible(os.fsdecode(raw)))) == raw


@pytest.mark.parametrize(
    "text", ["\\x2e\\x2e/secret", "\\x2fetc/passwd", "\\x00", "\\x41", "\\u002e", "%2e%2e"]
)
def test_no_ascii_character_can_be_slipped_in_as_an_escape(text: str) -> None:
    assert unspelled(text) == text
