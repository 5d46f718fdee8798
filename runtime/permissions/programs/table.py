"""The table itself: `PROGRAMS` (every program the table knows, by canonical name, with the rule
for its forms), `DEPTHS`, `WORKSPACE_CODE`, and `canonical_name`, the name a program is known by.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from codecoder.permissions.programs.archives import _tar, _unzip
from codecoder.permissions.programs.awk import _awk
from codecoder.permissions.programs.codehost import _gh
from codecoder.permissions.programs.compilers import _compiler
from codecoder.permissions.programs.editors import _editor, _pager
from codecoder.permissions.programs.find import _find
from codecoder.permissions.programs.form import Rule
from codecoder.permissions.programs.git import _git
from codecoder.permissions.programs.make import _make
from codecoder.permissions.programs.modules import module_runner
from codecoder.permissions.programs.package_managers import (
    _CARGO_ALIASES,
    _CARGO_SIMPLE,
    _NODE_PM_OPTIONS,
    _NODE_PM_RUNS,
    _NPM_ALIASES,
    _NPM_SIMPLE,
    _PIP_SIMPLE,
    _go,
)
from codecoder.permissions.programs.rules import (
    _interpreter,
    _launcher,
    _plain,
    _subcommand_tool,
)
from codecoder.permissions.programs.sed import _sed
from codecoder.permissions.programs.sqlite import _sqlite


def canonical_name(program: str) -> str:
    """`/usr/bin/Python3.11` → `python`: the name the table and deny rules know a program by."""
    name = program.rsplit("/", 1)[-1].lower()
    if name in PROGRAMS:
        return name
    stripped = _VERSION_SUFFIX.sub("", name)
    return stripped if stripped in PROGRAMS else name


# `bash5.2`, `python3.11`: a version suffix does not make a program something else.
_VERSION_SUFFIX = re.compile(r"[-._]?[0-9][0-9._-]*$")

_SHELL = "is a shell: it runs whatever its script or -c string says"
_RUNS_ARGUMENT = "runs the program given in its arguments"


def _table() -> tuple[dict[str, Rule], dict[str, int], dict[str, str]]:
    table: dict[str, Rule] = {}
    depths: dict[str, int] = {}
    code: dict[str, str] = {}

    def add(names: Iterable[str], rule: Rule, depth: int = 0, workspace: str = "") -> None:
        for name in names:
            table[name] = rule
            depths[name] = depth
            if workspace:
                code[name] = workspace

    # Shells, whatever their arguments.
    add(
        (
            *("bash", "sh", "dash", "zsh", "ksh", "mksh", "ash", "yash", "posh", "rbash"),
            *("fish", "csh", "tcsh", "pwsh", "busybox", "toybox", "nu", "xonsh", "elvish"),
        ),
        _launcher(_SHELL),
    )
    # Launchers: the program to run is an argument.
    add(
        (
            *("sudo", "sudoedit", "doas", "su", "runuser", "pkexec", "setpriv", "sg", "newgrp"),
            *("chroot", "unshare", "nsenter", "firejail", "bwrap", "proot", "fakeroot"),
            *("runcon", "capsh", "gosu", "su-exec", "chpst", "systemd-run", "cgexec", "env"),
            *("nice", "renice", "ionice", "chrt", "taskset", "numactl", "cpulimit", "prlimit"),
            *("timeout", "nohup", "setsid", "stdbuf", "unbuffer", "flock", "faketime"),
            *("eatmydata", "nocache", "torsocks", "proxychains", "proxychains4", "tini"),
            *("dumb-init", "dbus-launch", "dbus-run-session", "xvfb-run", "catchsegv"),
            *("setarch", "linux32", "linux64", "i386", "x86_64", "aarch64", "arm64", "uname26"),
            *("ssh-agent", "logsave", "perf", "script", "expect", "strace", "ltrace"),
            *("valgrind", "gdb", "lldb", "npx", "pnpx", "bunx", "uvx", "pipx", "xargs"),
            *("parallel", "sem", "watch", "time", "exec", "eval", "command", "builtin"),
            *("entr", "run-parts", "start-stop-daemon", "daemonize", "screen", "tmux"),
            *("rlwrap", "chronic", "ifne", "pee", "vipe", "lckdo", "mispipe", "ld.so"),
            *("ld-linux.so.2", "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1"),
        ),
        _launcher(_RUNS_ARGUMENT),
    )
    add(("at", "batch", "crontab"), _launcher("schedules commands to run later"))
    add(("systemctl", "service"), _launcher("starts services, which run programs"))
    add(
        ("xdg-open", "open", "sensible-browser", "sensible-editor", "sensible-pager"),
        _launcher("runs whichever program is configured for what it opens"),
    )
    add(("x-www-browser", "www-browser"), _launcher("runs a browser"))
    add(("patch",), _launcher("hands ed-style patches to ed, which runs `!` commands"))
    # Container and cluster clients run programs (and, through the Docker socket, as root).
    add(
        ("docker", "podman", "nerdctl", "kubectl", "lxc", "vagrant", "nix", "nix-shell"),
        _launcher("runs programs in containers, machines or environments it manages"),
    )
    add(("ssh", "slogin"), _launcher("runs a command on another host"))
    # Interpreters: the script they name is their level; inline code is compound.
    add(
        ("python", "pypy", "python3m"),
        _interpreter(
            ("-c",),
            flags=(
                *("-b", "-bb", "-B", "-d", "-E", "-h", "-i", "-I", "-O", "-OO", "-P", "-q"),
                *("-s", "-S", "-u", "-v", "-V", "-x", "--version", "--help", "-R"),
            ),
            values=("-X", "--check-hash-based-pycs"),
            module="-m",
            bundles="WX",
            loads=("-W",),  # a warning category names a module, which is imported
        ),
        depth=2,
    )
    add(
        ("node", "nodejs"),
        _interpreter(
            ("-e", "--eval", "-p", "--print"),
            compound=("--inspect", "--inspect-brk", "--inspect-port", "--inspect-wait"),
            flags=("--version", "-v", "--help", "-h", "--check", "-c", "--no-warnings"),
            values=("-C",),
            loads=("-r", "--require", "--import", "--loader", "--experimental-loader"),
        ),
        depth=1,
    )
    add(
        ("perl",),
        _interpreter(
            ("-e", "-E"),
            compound=("-M", "-m", "-d", "-x", "-S"),
            flags=("-w", "-W", "-X", "-c", "-n", "-p", "-a", "-l", "-s", "-T", "-t", "-v"),
            values=("-I",),
            bundles="IiFlC0",
        ),
        depth=1,
    )
    add(
        ("ruby",),
        _interpreter(
            ("-e",),
            compound=("-x", "-S"),
            flags=("-w", "-W", "-c", "-n", "-p", "-a", "-l", "-s", "-v", "--version"),
            values=("-I",),
            bundles="rIFCEKTx0",
            loads=("-r",),
        ),
        depth=1,
    )
    add(
        ("php",),
        _interpreter(
            ("-r", "-R", "-B", "-E"),
            compound=("-d", "-a", "-S", "-t", "-z", "-c"),
            flags=("-n", "-l", "-v", "-i", "-m", "-q", "-h", "-H", "-w", "-s"),
            values=("-f",),
            bundles="rRBEFdcft",
        ),
        depth=1,
    )
    add(
        ("lua", "luajit"),
        _interpreter(("-e",), flags=("-i", "-v", "-W", "-E"), loads=("-l",)),
        depth=1,
    )
    add(("rscript",), _interpreter(("-e", "--expr"), flags=("--vanilla", "--verbose")), depth=1)
    add(("r",), _interpreter(("-e",), compound=("CMD",), flags=("--vanilla", "--no-save")), depth=1)
    add(
        ("julia",),
        _interpreter(("-e", "--eval", "-E", "--print"), loads=("-L", "--load")),
        depth=1,
    )
    add(("osascript", "jshell", "groovy", "scala"), _interpreter(("-e",)), depth=1)
    add(("tclsh", "wish"), _interpreter(()), depth=1)
    add(
        ("deno",),
        _subcommand_tool(
            simple=("fmt", "lint", "test", "check", "info", "doc", "bench", "cache"),
            runs={
                "eval": "runs inline code",
                "repl": "starts a REPL",
                "task": "runs a task's shell command",
                "install": "installs a script as a command",
            },
            scripts=("run",),
        ),
        depth=2,
    )
    # Stream editors and text processors that read their program from the arguments.
    add(("sed", "gsed"), _sed)
    add(("awk", "gawk", "mawk", "nawk"), _awk)
    add(("find", "gfind"), _find)
    add(("make", "gmake"), _make, depth=1)
    add(("tar", "gtar", "bsdtar"), _tar)
    add(("sqlite3",), _sqlite)
    add(
        (
            *("vim", "vi", "nvim", "ex", "view", "gvim", "rvim", "rview", "vimdiff", "evim"),
            *("emacs", "emacsclient", "nano", "pico", "micro", "joe", "mg", "kak", "hx"),
        ),
        _editor,
    )
    add(("less", "more", "most"), _pager)
    add(("git",), _git, depth=1)
    add(
        ("npm",),
        _subcommand_tool(
            simple=_NPM_SIMPLE,
            runs=_NODE_PM_RUNS,
            options=_NODE_PM_OPTIONS,
            aliases=_NPM_ALIASES,
            scripts=("run",),
            config_reads=("get", "list", "ls"),
        ),
        depth=2,
    )
    add(
        ("pnpm", "yarn", "bun"),
        _subcommand_tool(
            simple=(*_NPM_SIMPLE, "why", "import", "store", "patch-commit", "workspaces"),
            runs={**_NODE_PM_RUNS, "node": "runs node with the arguments it is given"},
            options=(*_NODE_PM_OPTIONS, "-e", "--eval"),
            aliases=_NPM_ALIASES,
            scripts=("run",),
            unknown_is_script=True,
            config_reads=("get", "list"),
        ),
        depth=2,
    )
    add(
        ("cargo",),
        _subcommand_tool(
            simple=_CARGO_SIMPLE,
            runs={"config": "writes configuration (runners, linkers) later commands use"},
            options=("--config", "-Z"),
            values=("--manifest-path", "--target-dir", "-p", "--package", "-j", "--jobs"),
            aliases=_CARGO_ALIASES,
        ),
        depth=1,
    )
    add(("go",), _go, depth=1)
    add(("gh",), _gh, depth=2)  # programs.codehost
    add(
        ("pip", "pip3"),
        _subcommand_tool(
            simple=_PIP_SIMPLE,
            runs={"config": "writes configuration later commands use"},
            values=("--python", "--log", "--cache-dir", "--proxy", "--cert", "--client-cert"),
            config_reads=("get", "list", "debug"),
        ),
        depth=2,
    )
    # Programs whose operands are data; the options that run or write something else.
    add(
        (
            *("ls", "cat", "head", "tail", "wc", "grep", "egrep", "fgrep", "cut", "tr", "uniq"),
            *("diff", "cmp", "comm", "file", "stat", "du", "df", "pwd", "echo", "printf", "true"),
            *("false", "test", "[", "basename", "dirname", "realpath", "readlink", "mkdir"),
            *("rmdir", "touch", "cp", "mv", "rm", "ln", "chmod", "tee", "cal", "whoami", "id"),
            *("uname", "hostname", "which", "tree", "jq", "nl", "tac", "rev", "seq", "yes"),
            *("sleep", "expr", "base64", "md5sum", "sha1sum", "sha256sum", "sha512sum", "xxd"),
            *("od", "hexdump", "strings", "column", "fmt", "fold", "paste", "join", "split"),
            *("csplit", "shuf", "kill", "date", "nproc", "free", "uptime", "ps", "printenv"),
            *("locale", "truncate", "dd", "mktemp", "sum", "cksum", "b2sum", "numfmt", "tsort"),
            *("unexpand", "expand", "pr", "look", "gzip", "gunzip", "zcat", "bzip2", "bunzip2"),
            *("xz", "unxz", "zstd", "pytest", "py.test", "black", "isort", "flake8", "ruff"),
            *("tsc", "eslint", "prettier", "jest", "vitest", "rustfmt", "gofmt", "clang-format"),
            *("shellcheck", "yamllint", "tokei", "chown", "chgrp", "sync", "getconf", "tput"),
        ),
        _plain(),
    )
    table["pylint"] = _plain("runs inline Python", ("--init-hook",))
    table["split"] = _plain("runs a shell command for each piece", ("--filter",))
    table["install"] = _plain("runs a strip program", ("--strip-program",))
    for name in ("diff3", "sdiff"):
        table[name] = _plain("runs the diff program it is given", ("--diff-program",))
    for name in ("fd", "fdfind"):
        table[name] = _plain("runs a command", ("-x", "--exec", "-X", "--exec-batch"), "edEtScj")
    for name in ("ag", "ack"):
        table[name] = _plain("runs a pager", ("--pager",))
    table["mypy"] = _plain("runs the Python it is given", ("--python-executable",))
    table["rg"] = _plain(
        "runs a preprocessor or decompressor",
        ("--pre", "--hostname-bin", "--search-zip", "-z"),
        "egmtTAfBCMrEj",
    )
    table["sort"] = _plain("runs a compressor", ("--compress-program",))
    table["rsync"] = _plain(
        "runs a remote shell or command",
        ("-e", "--rsh", "--rsync-path", "--config", "--daemon", "-M", "--remote-option"),
        "eBfT",
    )
    for name in ("scp", "sftp"):
        table[name] = _plain(
            "runs a program through ssh options", ("-o", "-F", "-S", "-D"), "oFSDiPlJc"
        )
    table["zip"] = _plain("runs an unzip command", ("-TT", "--unzip-command"), "bnt")
    table["unzip"] = _unzip
    table["curl"] = _plain(
        "reads options from a file, loads an engine or lets the server name the file",
        ("-K", "--config", "--engine", "-J", "--remote-header-name"),
        "odeHuxAbcCDEKrTwXYyz",
    )
    table["wget"] = _plain(
        "runs commands or a program, or writes files the server names",
        (
            *("-e", "--execute", "--use-askpass", "--config", "-r", "--recursive", "-m"),
            *("--mirror", "-i", "--input-file", "--content-disposition", "--trust-server-names"),
        ),
        "oOaeiPUAIDX",
    )
    for name in ("gzip", "gunzip"):
        table[name] = _plain("writes a file named inside the archive", ("-N", "--name"))
    add(
        ("cpio", "pax", "7z", "7za", "7zr", "unrar", "ar", "bsdcpio"),
        _launcher("extracts archives, whose members name the files it writes"),
    )
    add(("gcc", "cc", "clang", "g++", "c++", "clang++"), _compiler)
    # Python's module runners: what `-m MODULE` runs is judged by the module (`modules`).
    for name in ("python", "pypy", "python3m"):
        table[name] = module_runner(table[name], table)
    for name in table:
        depths.setdefault(name, 0)
    # What each program that runs the project's code runs of it: build tools, package
    # managers, interpreters (their script), and programs whose operands are data but that run
    # code their configuration in the workspace names (plugins, hooks, JavaScript configs).
    script = "the script it is given and whatever that loads"
    code.update(
        {
            **dict.fromkeys(
                (
                    *("python", "pypy", "python3m", "node", "nodejs", "perl", "ruby", "php"),
                    *("lua", "luajit", "rscript", "r", "julia", "osascript", "jshell"),
                    *("groovy", "scala", "tclsh", "wish", "deno"),
                ),
                script,
            ),
            **dict.fromkeys(("make", "gmake"), "the recipes of the makefile in the workspace"),
            **dict.fromkeys(
                ("npm", "pnpm", "yarn", "bun"),
                "package.json's scripts (and the install scripts of what it installs), .npmrc",
            ),
            "cargo": "build.rs, procedural macros and the runners .cargo/config.toml names",
            "go": "tests, go:generate lines and cgo directives of the packages it builds",
            **dict.fromkeys(("pip", "pip3"), "the build scripts of local packages it installs"),
            **dict.fromkeys(
                ("pytest", "py.test"),
                "conftest.py, the tests and the plugins its configuration names",
            ),
            **dict.fromkeys(("jest", "vitest"), "its JavaScript configuration and the tests"),
            **dict.fromkeys(("eslint", "prettier"), "its JavaScript configuration and plugins"),
            "pylint": "the init-hook and plugins its rc file names",
            "flake8": "the local plugins its configuration names",
            "mypy": "the plugins its configuration names",
        }
    )
    return table, depths, code


PROGRAMS: Mapping[str, Rule]
"""Every program the table knows, by canonical name, with the rule for its forms."""
DEPTHS: Mapping[str, int]
"""How many levels after the program its keys can have (a program the table does not know: 1)."""
WORKSPACE_CODE: Mapping[str, str]
"""What code from the workspace a program runs in its simple forms (the Makefile's recipes,
package.json's scripts, conftest.py …), for the programs the table knows to do so. Anything
that may write the workspace (a sandboxed tool, a write grant) can change that code, so the
prompt says it for a command that runs on the host; a program the table does not know is said
to run whatever it reads there."""
PROGRAMS, DEPTHS, WORKSPACE_CODE = _table()
