"""File contents as the tools show them: binary files told apart, lines split, long lines and
long outputs clipped, whole text files read for the tools that need all of one."""

from __future__ import annotations

from codecoder.foundation.errors import ExecutionFailed
from codecoder.tools.files import limits
from codecoder.tools.files.backend import ReadBackend


def _is_binary(data: bytes) -> bool:
    return b"\0" in data[: limits.BINARY_SNIFF_BYTES]


def _lines(text: str) -> list[str]:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if "\r" not in text:
        return lines
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def _clip(line: str, limit: int = limits.MAX_LINE_CHARS) -> str:
    return line if len(line) <= limit else line[:limit] + f"… [{len(line) - limit} more chars]"


def _cap(text: str, limit: int) -> tuple[str, bool]:
    if len(text) <= limit:
        return text, False
    cut = text.rfind("\n", 0, limit)
    cut = cut + 1 if cut > 0 else limit
    return text[:cut] + f"[... output truncated at {limit} characters]\n", True


def _read_text(files: ReadBackend, path: str) -> str:
    """A whole text file, for tools that must see all of it (diff, edit_file)."""
    content = files.read(path)
    if not content.complete:
        raise ExecutionFailed(f"{path} is larger than {limits.MAX_READ_BYTES} bytes")
    if _is_binary(content.data):
        raise ExecutionFailed(f"{path} is a binary file")
    try:
        return content.data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ExecutionFailed(f"{path} is not UTF-8 text ({exc.reason} at {exc.start})") from exc
