"""A command's output on a terminal as it comes: pieces split anywhere are shown as the whole
would be, escapes and hiding characters neutralised, and the whole bounded."""

from __future__ import annotations

import io

import pytest

from codecoder.interfaces.liveview import TerminalView


def shown(pieces: list[tuple[str, bytes]], limit: int = 64 * 1024) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    view = TerminalView(out, err, limit=limit)
    for stream, data in pieces:
        view(stream, data)  # type: ignore[arg-type]
    view.finish()
    return out.getvalue(), err.getvalue()


def test_a_character_split_between_pieces_is_shown_whole_and_neutralised() -> None:
    rlo = "\u202e".encode()  # a right-to-left override, three bytes
    text = b"safe " + rlo + b"txt.exe\n"
    cut = text.index(rlo) + 1
    assert shown([("stdout", text[:cut]), ("stdout", text[cut:])]) == (
        "safe \\u{202e}txt.exe\n",
        "",
    )


def test_escapes_and_carriage_returns_cannot_repaint_what_was_shown() -> None:
    pieces = [
        ("stdout", b"rm -rf / \x1b"),
        ("stdout", b"[2K\rls\n"),
        ("stderr", b"\x1b]0;title\x07warn\n"),
    ]
    assert shown(pieces) == ("rm -rf / \\e[2K\\rls\n", "\\e]0;title\\x07warn\n")


def test_a_long_run_of_blanks_split_across_pieces_is_one_marker() -> None:
    pieces = [("stdout", b"a" + b" " * 50), ("stdout", b" " * 50 + b"hidden\n")]
    assert shown(pieces) == ("a[100 spaces]hidden\n", "")


def test_output_past_the_bound_shows_its_head_then_its_end_with_the_cut_counted() -> None:
    lines = b"".join(b"line %05d\n" % n for n in range(1000))  # 11,000 bytes
    out, err = shown([("stdout", lines[i : i + 700]) for i in range(0, len(lines), 700)], 2000)
    head, cut, rest = out.partition(
        "\n[... the output goes on; its end is shown when the command ends ...]\n"
    )
    assert cut and lines.decode().startswith(head) and len(head) == 1000
    count, tail = rest.split(" bytes of output not shown ...]\n")
    assert count == "[... 9000" and lines.decode().endswith(tail) and len(tail) == 1000
    assert err == ""


def test_the_view_ends_at_the_start_of_a_line() -> None:
    assert shown([("stdout", b"no newline at the end")]) == ("no newline at the end\n", "")
    assert shown([]) == ("", "")


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_a_colour_code_split_between_pieces_is_read_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    out = _Terminal()
    view = TerminalView(out, limit=64 * 1024)
    for data in (b"\x1b[3", b"1mred\n\x1b", b"[8mhidden \x1b[", b"2Jcleared\n"):
        view("stdout", data)
    view.finish()
    # Red is shown as red, reset before its line ends; conceal and clear-screen are shown.
    assert out.getvalue() == "\x1b[31mred\x1b[0m\n\\e[8mhidden \\e[2Jcleared\n"
