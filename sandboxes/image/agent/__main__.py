"""The in-container half of codecoder's @docker environment: run requests arriving on stdin.

The host starts one long-lived container per workspace mode and attaches to its stdin/stdout;
this agent is the container's main process (under docker-init). Dispatching a call is then one
write and one read on an already-open stream, instead of an `exec_create`/`exec_start` round trip
through the engine or a whole `docker run`. The stream is the only way in or out (but for the
egress relay, egress.py, when the project allows hosts). The agent needs nothing of its image but a
Linux kernel, /proc and starting as root: it runs on the interpreter bundled with it
(`bundle.py`: its own loader, C library and standard library, under /opt/codecoder/python), so
any image can be made a sandbox (`install.py`); it brings runas (runas.c), a static helper it
starts commands through, and does without it (slower) where it cannot run.

Out of reach of what it runs. The container starts as root with only CAP_SETUID, CAP_SETGID,
CAP_KILL and CAP_SETPCAP, under no-new-privileges (the agent refuses to run with any other
set). The agent refuses set-id bits to everything it starts (a seccomp filter, setid.py: a
set-uid file left in a bound workspace would run with its owner's ids on the host), makes itself
non-dumpable (so its /proc/PID/{fd,mem,environ} are closed and ptrace refused even to root
without capabilities), empties the capability bounding set but for
what runas needs (SETUID, SETGID, SETPCAP), and runs every command through runas (runas.c) as
the unprivileged workspace uid: an empty bounding set, no supplementary groups, no capability
left, a new session, no descriptor but its own pipes. A command can therefore not signal, trace
or read the agent or docker-init (both root), nor reach their stdin and stdout.

Where each part lives, beside this entry point (the interpreter runs this directory with it as
sys.path[0], so the modules import one another by their bare names; none may share a name with a
module of the standard library):

    channel.py       the protocol: authenticated lines on stdin and stdout
    hardening.py     what the agent drops and checks of itself at start
    setid.py         the seccomp filter refusing set-uid and set-gid bits to every command
    calls.py         the agent across calls: each request served in turn
    command.py       one command, run as the workspace user through runas
    processes.py     ending every process of a call
    capture.py       the head and the tail kept of each output stream
    exitwatch.py     knowing when a command's main process exits
    cgroups.py       the limits and counters the kernel keeps for the container
    leftovers.py     what one grant's calls could leave for another's, and emptying it
    command_user.py  work done as the command user, in a child
    sync.py          the workspace volume's changes, listed and written to the outbox
    egress.py        the relay to the host's egress proxy
    procfs.py        reading /proc and /sys
    image.py         where things are in the image, and the check install.py makes of it
"""

from __future__ import annotations

import json

from calls import Agent
from channel import Channel, log
from egress import Relay
from hardening import harden
from processes import end_everything, kill_all


def main() -> None:
    channel = Channel()
    first = channel.next_line()
    if first is None:
        return
    try:
        setup = json.loads(first)
        channel.key = bytes.fromhex(setup["key"])
        uid, gid = int(setup["uid"]), int(setup["gid"])
        egress = setup.get("egress")
        outbox = setup.get("outbox")
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        log(f"unreadable set-up line: {exc}")
        return
    if len(channel.key) < 32:
        log("the session key is too short")
        return
    problem = harden()
    if problem is None and (uid == 0 or gid == 0):
        problem = "commands never run as root (uid or gid 0): the agent must stay out of reach"
    agent = Agent(channel, uid, gid, outbox if isinstance(outbox, str) else None)
    if problem is None:
        problem = agent.choose_launcher()
    if problem is None and egress:
        try:
            agent.relay = Relay(int(egress["port"]), str(egress["socket"]))
        except (OSError, KeyError, TypeError, ValueError) as exc:
            problem = f"cannot listen for the egress relay: {exc}"
    channel.send(agent.hello(problem))
    if problem is not None:
        return
    while True:
        request = channel.next_request()
        if request is None:
            break
        try:
            response = agent.serve(request)
        except Exception as exc:  # one bad request must not take the warm container down
            response = {
                "error": f"agent failure: {type(exc).__name__}: {exc}",
                "discard": end_everything() > 0,
            }
        response["id"] = request["id"]
        channel.send(response)
    # stdin closes when the host detaches (it attached with stdin_once) or dies.
    kill_all()


if __name__ == "__main__":
    main()
