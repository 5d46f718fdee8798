"""Bundle the interpreter that runs the sandbox agent, so that it needs nothing of its image.

Run by the first stage of the top-level Dockerfile, with the base image's own python3:

    python3 -I -S bundle.py SOURCE_DIR TARGET_DIR

TARGET_DIR (/opt/codecoder) receives the agent (the directory agent/, run by its __main__.py), its
install step (install.py) and the static runas helpers from SOURCE_DIR, and `python/`: the
interpreter, its dynamic loader, the shared libraries it and the bundled extension modules link
against, and the standard library without what the agent can never use (tests, IDLE, Tk, ...).
The agent is started through the bundled loader (`python/ld.so --library-path python/lib
python/bin/python3`), so it runs the same in an image with another C library (Alpine's musl), an
older glibc, or none at all (a `FROM scratch` image): every file it loads comes from the bundle.
Commands the agent starts are the image's own programs, loaded by the image's own loader.

An extension module is bundled only when every library it links against is bundled too (the
interpreter's own, plus libffi for ctypes): `_ssl`, `_sqlite3`, `readline` and the like are left
out, and an `import` of them fails in the agent as it would anywhere without them.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig

# Standard library parts that neither the agent nor anything it imports ever loads (the agent
# speaks JSON over a pipe: no HTTP, e-mail, XML or event loop); everything else is kept, so that
# a lazily imported module (a codec, a helper of subprocess) is never missing at run time.
LEFT_OUT = {
    "asyncio",
    "concurrent",
    "email",
    "html",
    "http",
    "multiprocessing",
    "unittest",
    "wsgiref",
    "xml",
    "xmlrpc",
    "test",
    "idlelib",
    "tkinter",
    "turtledemo",
    "turtle.py",
    "lib2to3",
    "ensurepip",
    "pydoc_data",
    "distutils",
    "venv",
    "site-packages",
    "dist-packages",
    "__phello__",
    "sqlite3",
    "curses",
    "dbm",
}
# Extension modules needed beyond what links against the interpreter's libraries alone.
EXTRA_EXTENSIONS = ("_ctypes",)
AGENT_DIR = "agent"
AGENT_FILES = ("install.py", "runas-x86_64", "runas-aarch64")
_LDD_LINE = re.compile(r"^\s*(?:\S+ => )?(/\S+) \(0x[0-9a-f]+\)$")


def linked_libraries(path: str) -> list[str]:
    """The shared objects `path` loads (ldd's answer), the dynamic loader included."""
    done = subprocess.run(["ldd", path], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return []  # "not a dynamic executable": a pure-Python or static file
    found = []
    for line in done.stdout.splitlines():
        match = _LDD_LINE.match(line)
        if match:
            found.append(match[1])
    return found


def loader_of(libraries: list[str]) -> str:
    for library in libraries:
        if os.path.basename(library).startswith("ld-"):
            return library
    raise SystemExit("bundle: the interpreter has no dynamic loader (is it static?)")


def main(source: str, target: str) -> None:
    interpreter = os.path.realpath(sys.executable)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    stdlib = sysconfig.get_paths()["stdlib"]
    dynload = os.path.join(stdlib, "lib-dynload")
    bundle = os.path.join(target, "python")
    lib = os.path.join(bundle, "lib")
    os.makedirs(os.path.join(bundle, "bin"), exist_ok=True)
    os.makedirs(lib, exist_ok=True)

    libraries = linked_libraries(interpreter)
    loader = loader_of(libraries)
    allowed = {os.path.basename(p) for p in libraries}
    extensions = sorted(os.listdir(dynload))
    for name in EXTRA_EXTENSIONS:
        for extension in extensions:
            if extension.startswith(name + "."):
                extra = linked_libraries(os.path.join(dynload, extension))
                libraries += extra
                allowed |= {os.path.basename(p) for p in extra}

    shutil.copy2(interpreter, os.path.join(bundle, "bin", "python3"))
    shutil.copy2(loader, os.path.join(bundle, "ld.so"))
    for library in dict.fromkeys(libraries):
        if library != loader:
            shutil.copy2(library, os.path.join(lib, os.path.basename(library)))

    kept_stdlib = os.path.join(lib, version)
    shutil.copytree(
        stdlib,
        kept_stdlib,
        symlinks=True,
        ignore=lambda directory, names: (
            [n for n in names if directory == stdlib and (n in LEFT_OUT or n.startswith("config-"))]
            + (names if directory == dynload else [])
        ),
    )
    kept_dynload = os.path.join(kept_stdlib, "lib-dynload")
    os.makedirs(kept_dynload, exist_ok=True)
    for extension in extensions:
        path = os.path.join(dynload, extension)
        needs = {os.path.basename(p) for p in linked_libraries(path)}
        if needs <= allowed:
            shutil.copy2(path, os.path.join(kept_dynload, extension))

    shutil.copytree(
        os.path.join(source, AGENT_DIR),
        os.path.join(target, AGENT_DIR),
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    for name in AGENT_FILES:
        shutil.copy2(os.path.join(source, name), os.path.join(target, name))
        os.chmod(os.path.join(target, name), 0o755 if name.startswith("runas") else 0o644)
    os.makedirs(os.path.join(target, "capability"), exist_ok=True)
    for directory, _, files in os.walk(target):
        os.chmod(directory, 0o755)
        for name in files:
            path = os.path.join(directory, name)
            if not os.path.islink(path):
                mode = os.stat(path).st_mode
                os.chmod(path, 0o755 if mode & 0o111 else 0o644)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: bundle.py SOURCE_DIR TARGET_DIR")
    main(sys.argv[1], sys.argv[2])
