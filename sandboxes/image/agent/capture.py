"""Output is capped per stream: the head and the tail are kept and the cut is marked."""

from __future__ import annotations


class Capture:
    """Keep the first and the last bytes of a stream, counting what falls in between."""

    def __init__(self, cap: int) -> None:
        self.head_cap = cap // 2
        self.tail_cap = cap - self.head_cap
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            excess = len(self.tail) - self.tail_cap
            if excess > 0:
                del self.tail[:excess]

    @property
    def truncated(self) -> bool:
        return self.total > len(self.head) + len(self.tail)

    def text(self) -> str:
        if not self.truncated:
            # Decoded in one piece, so a character split between head and tail stays whole.
            return (self.head + self.tail).decode(errors="replace")
        dropped = self.total - len(self.head) - len(self.tail)
        return (
            self.head.decode(errors="replace")
            + f"\n[... {dropped} bytes truncated ...]\n"
            + self.tail.decode(errors="replace")
        )
