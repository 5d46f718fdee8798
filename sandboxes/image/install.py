"""Make an image a codecoder sandbox image: the last build step, run by the bundled interpreter.

    RUN ["/opt/codecoder/python/ld.so", "--library-path", "/opt/codecoder/python/lib",
         "/opt/codecoder/python/bin/python3", "-I", "-S", "/opt/codecoder/install.py"]

It needs nothing of the image (no shell, no useradd, no python3): it adds the unprivileged user
and group 10001 (`sandbox`) to /etc/passwd and /etc/group unless those ids exist, creates
/workspace, lets git read a workspace owned by someone else (`safe.directory`) when the image
has git, and then loads the agent and checks what it needs: that its modules import with the
bundled interpreter, that a runas helper exists for this machine, that /proc is there. Anything
missing stops the build with a message that says what.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import shutil
import subprocess
import sys

HOME = "/opt/codecoder"
AGENT = f"{HOME}/agent"
USER, GROUP, ID = "sandbox", "sandbox", 10001
READY_FILE = "/etc/codecoder-image"  # what the install found, read back after a cached build


def fail(message: str) -> None:
    raise SystemExit(f"codecoder image: {message}")


def ids_in(path: str) -> set[int]:
    found = set()
    try:
        with open(path) as file:
            for line in file:
                fields = line.split(":")
                if len(fields) > 2 and fields[2].isdigit():
                    found.add(int(fields[2]))
    except FileNotFoundError:
        pass
    return found


def append(path: str, line: str) -> None:
    exists = os.path.exists(path)
    with open(path, "a") as file:
        if exists and os.path.getsize(path):
            with open(path) as current:
                if not current.read().endswith("\n"):
                    file.write("\n")
        file.write(line + "\n")
    if not exists:
        os.chmod(path, 0o644)


def add_user(shell: str) -> None:
    os.makedirs("/etc", exist_ok=True)
    if not os.path.exists("/etc/passwd"):
        append("/etc/passwd", "root:x:0:0:root:/root:" + shell)
    if not os.path.exists("/etc/group"):
        append("/etc/group", "root:x:0:")
    if ID not in ids_in("/etc/group"):
        append("/etc/group", f"{GROUP}:x:{ID}:")
    if ID not in ids_in("/etc/passwd"):
        append("/etc/passwd", f"{USER}:x:{ID}:{ID}::/tmp:{shell}")


def trust_any_workspace_owner() -> str | None:
    """git refuses a repository owned by another user; the workspace's owner is not known when
    the image is built. Where the image has git, tell its system config to trust any owner."""
    git = shutil.which("git", path="/usr/local/bin:/usr/bin:/bin")
    if git is None:
        return None
    done = subprocess.run(
        [git, "config", "--system", "--add", "safe.directory", "*"],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        fail(f"`git config --system --add safe.directory '*'` failed: {done.stderr.strip()}")
    return git


def check_agent() -> str:
    sys.dont_write_bytecode = True  # nothing of the check is left in the image
    # The agent's modules import one another by their bare names, from its own directory (the
    # interpreter's sys.path[0] when it runs the directory); its entry point imports them all.
    sys.path.insert(0, AGENT)
    spec = importlib.util.spec_from_file_location("codecoder_agent", f"{AGENT}/__main__.py")
    if spec is None or spec.loader is None:
        raise SystemExit(f"codecoder image: {AGENT}/__main__.py is missing")
    agent = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(agent)
        image = importlib.import_module("image")
    except ImportError as exc:
        fail(f"the agent cannot import what it needs with the bundled interpreter: {exc}")
    problem = image.self_check()
    if problem is not None:
        fail(problem)
    if os.path.exists(image.BASH):
        return "run by bash"
    return f"refused (no {image.BASH}; simple commands run)"


def main() -> None:
    if os.geteuid() != 0:
        fail("install.py must run as root (it writes /etc/passwd and /etc/group)")
    if platform.machine() not in ("x86_64", "aarch64"):
        fail(f"no runas helper is built for {platform.machine()} (only x86_64 and aarch64)")
    shell = next((s for s in ("/bin/bash", "/bin/sh") if os.path.exists(s)), "/nonexistent")
    try:
        add_user(shell)
    except OSError as exc:
        fail(f"cannot add the user {USER} ({ID}) to /etc/passwd and /etc/group: {exc}")
    for directory in ("/workspace", f"{HOME}/capability"):
        try:
            os.makedirs(directory, mode=0o755, exist_ok=True)
        except OSError as exc:
            fail(f"cannot prepare {directory}: {exc}")
    git = trust_any_workspace_owner()
    found = check_agent()
    ready = (
        f"codecoder image: agent ready (user {ID}, compound commands: {found}, "
        f"git: {git or 'none'})"
    )
    print(ready, file=sys.stderr)
    # Kept in the image too: a build whose steps come from the cache prints nothing.
    with open(READY_FILE, "w", encoding="utf-8") as out:
        out.write(ready + "\n")


if __name__ == "__main__":
    main()
