"""Output capping shared by the environments: keep the head and the tail, mark what was cut."""

from __future__ import annotations


class CappedBuffer:
    """Collects bytes, keeping at most `limit`: the first half and the last half.

    The head shows how a command started, the tail how it ended (the error is usually last);
    what lies between is dropped and counted, never silently.
    """

    def __init__(self, limit: int) -> None:
        self._head_limit = limit - limit // 2
        self._tail_limit = limit // 2
        self._head = bytearray()
        self._tail = bytearray()
        self.total = 0

    def write(self, data: bytes) -> None:
        self.total += len(data)
        room = self._head_limit - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if data and self._tail_limit:
            self._tail += data
            if len(self._tail) > self._tail_limit:
                del self._tail[: len(self._tail) - self._tail_limit]

    @property
    def truncated(self) -> bool:
        return self.total > len(self._head) + len(self._tail)

    def text(self) -> str:
        head = self._head.decode("utf-8", errors="replace")
        tail = self._tail.decode("utf-8", errors="replace")
        if not self.truncated:
            return head + tail
        dropped = self.total - len(self._head) - len(self._tail)
        return f"{head}\n[... {dropped} bytes of output truncated ...]\n{tail}"
