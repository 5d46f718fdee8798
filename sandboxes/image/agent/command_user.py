"""Work the agent must not do with its own identity, done in a child that is the command user.

The agent holds no capability to read what the command uid keeps private (it is root without
CAP_DAC_OVERRIDE), nor should it remove what that uid owns as root: listing the workspace,
writing its changes and removing paths of it happen in a fork that has become the command user.
"""

from __future__ import annotations

import json
import os
from typing import Any

from channel import READ_CHUNK, log


def become(uid: int, gid: int) -> None:
    """Drop to `uid`:`gid` alone, for good (in a child of the agent)."""
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid):
        os._exit(3)


def as_user(uid: int, gid: int, function: Any, *args: Any) -> Any:
    """`function(*args)`, run in a child that is the command user: what it returns (as JSON).

    Used for what the agent must not do with its own identity: reading and removing what the
    command user owns, which may be private to it."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(read)
            become(uid, gid)
            data = json.dumps(function(*args)).encode()
            view = memoryview(data)
            while view:
                view = view[os.write(write, view) :]
            code = 0
        except BaseException as exc:  # the child must never return into the agent's loop
            log(f"{function.__name__} failed as the command user: {type(exc).__name__}: {exc}")
        finally:
            os._exit(code)
    os.close(write)
    chunks = []
    while True:
        chunk = os.read(read, READ_CHUNK)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(read)
    _, status = os.waitpid(pid, 0)
    if status != 0:
        raise RuntimeError(f"{function.__name__} failed as the command user (status {status})")
    return json.loads(b"".join(chunks))
