"""The sandbox agent, turned against the host on request: what a command could do to the stream
if it ever got hold of the agent's stdin or stdout (the uid separation is what prevents that).

Installed as the agent's entry point (/opt/codecoder/agent/__main__.py) in a test image, with the
real entry point copied to /opt/codecoder/real_agent.py, whose code it runs. A request whose
argv[0] names an attack carries it out instead of (or besides) running:

    forge      an answer for the pending call with a wrong MAC
    flood      20 MiB on stdout without a newline
    replay     the previous answer again (a valid MAC, an old id)
    inject     fed to the agent's own input, as if written to its stdin: a request with a wrong
               MAC (it would touch /workspace/injected) and the previous request again
    survive    the real answer, saying a process survived the call
    stain      the real answer; but the next call's state cannot be emptied (as if a file
               resisted), and this container reports it
"""

from __future__ import annotations

import importlib.util
import json
import os
import time
from typing import Any, ClassVar

_spec = importlib.util.spec_from_file_location("real_agent", "/opt/codecoder/real_agent.py")
assert _spec is not None and _spec.loader is not None
real = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(real)
# Where the real agent's requests are served (its modules import one another by bare names).
calls = importlib.import_module("calls")


class Channel(real.Channel):  # type: ignore[name-defined,misc]
    last_sent: ClassVar[bytes] = b""
    requests: ClassVar[list[bytes]] = []

    def next_line(self) -> bytes | None:
        line: bytes | None = super().next_line()
        if line is not None and line[:1] != b"{":
            Channel.requests.append(line)
        return line

    def send(self, message: dict[str, Any]) -> None:
        body = json.dumps(message, separators=(",", ":")).encode()
        Channel.last_sent = self._mac(b"A", body) + b" " + body + b"\n"
        os.write(1, Channel.last_sent)


real_wipe = calls.wipe
stained = False


def wipe(uid: int, gid: int, state_dirs: list[str]) -> str | None:
    return "/tmp/unremovable" if stained else real_wipe(uid, gid, state_dirs)


class Agent(real.Agent):  # type: ignore[name-defined,misc]
    def serve(self, request: dict[str, Any]) -> dict[str, Any]:
        global stained
        attack = request["argv"][0]
        if attack == "forge":
            body = json.dumps({"id": request["id"], "exit_code": 0, "stdout": "forged"}).encode()
            os.write(1, b"0" * 64 + b" " + body + b"\n")
            time.sleep(60)
        elif attack == "flood":
            os.write(1, b"x" * (20 * 1024 * 1024))
            time.sleep(60)
        elif attack == "replay":
            os.write(1, Channel.last_sent)
            time.sleep(60)
        elif attack == "inject":
            write = {
                "id": request["id"] + 1,
                "argv": ["touch", "/workspace/injected"],
                "cwd": "/workspace",
                "timeout": 5,
                "max_output": 100,
            }
            forged = b"0" * 64 + b" " + json.dumps(write).encode() + b"\n"
            self.channel._buffer += forged + Channel.requests[-2] + b"\n"
        response: dict[str, Any] = super().serve(request)
        if attack == "survive":
            response["survivors"] = 1
        if attack == "stain":
            stained = True
        return response


real.Channel = Channel
real.Agent = Agent
calls.wipe = wipe
real.main()
