"""Nothing a contained call leaves in the workspace carries privileges it did not have before the
call (issue 33, class 1): a set-uid or set-gid file made by chmod, cp -p, install -m, tar -p,
an open or mknod with the bits in its mode, a file capability, a hard link to a set-uid program
of the system. Inside, bubblewrap's nosuid and no_new_privs make such a file harmless; the host
would run it with its owner's ids afterwards (codecoder runs as root here: `nobody` running it
would get euid 0). Each attack is checked by its effect on the host, with a control: the same
file made set-uid by the host does give `nobody` root.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from codecoder.environments.bwrap.environment import BwrapEnvironment
from tests.environments.bwrap_support import bwrap, need_bwrap, repo, run

__all__ = ["bwrap", "repo"]  # fixtures

PY = "/usr/bin/python3"


def py(code: str) -> str:
    return f'{PY} -c "{code}"'


ROUTES = {
    "chmod": "cp /usr/bin/id made && chmod 4755 made",
    "chmod-symbolic": "cp /usr/bin/id made && chmod u+s,g+s made",
    "chmod-setgid": "cp /usr/bin/id made && chmod 2755 made",
    "cp-p": "cp -p /usr/bin/su made",
    "cp-a": "cp -a /usr/bin/su made",
    "install-m": "install -m 4755 /usr/bin/id made",
    "tar-p": "tar -C /usr/bin -cf /tmp/a.tar su && tar -xpf /tmp/a.tar && mv su made",
    "python-open": py("import os; os.close(os.open('made', os.O_CREAT|os.O_WRONLY, 0o4755))"),
    "python-chmod": py(
        "import shutil, os; shutil.copy('/usr/bin/id', 'made'); os.chmod('made', 0o6755)"
    ),
    "fchmod": py(
        "import os, shutil; shutil.copy('/usr/bin/id', 'made'); "
        "os.fchmod(os.open('made', os.O_RDONLY), 0o4755)"
    ),
    "mknod": py("import os, stat; os.mknod('made', stat.S_IFREG | 0o4755)"),
    "o-tmpfile": py(
        "import os; fd = os.open('.', os.O_TMPFILE|os.O_WRONLY, 0o4755); "
        "os.link(f'/proc/self/fd/{fd}', 'made')"
    ),
    "hard-link": "ln /usr/bin/su made",
    "setcap": "cp /usr/bin/id made && "
    + py(
        "import os; os.setxattr('made', 'security.capability', "
        "bytes.fromhex('0100000200200000000000000000000000000000'))"
    ),
}


def set_id_files(root: Path) -> list[str]:
    """The files under `root` that run with other ids or capabilities than their caller's."""
    found = []
    for path in root.rglob("*"):
        info = path.lstat()
        if stat.S_ISREG(info.st_mode) and info.st_mode & (stat.S_ISUID | stat.S_ISGID):
            found.append(str(path.relative_to(root)))
        else:
            try:
                os.getxattr(path, "security.capability", follow_symlinks=False)
            except OSError:
                continue
            found.append(str(path.relative_to(root)) + " (capabilities)")
    return found


def euid_as_nobody(program: Path) -> str:
    """What `id -u` says when `nobody` runs a copy of `program` (mode, owner and all)."""
    place = Path(tempfile.mkdtemp(prefix="codecoder-setid-"))
    try:
        place.chmod(0o755)
        copy = place / "program"
        # Copied by another process: a copy written here could be held open for writing by a
        # child another thread forks meanwhile (the warm pool's), and its exec fail ETXTBSY.
        subprocess.run(["cp", str(program), str(copy)], check=True)
        os.chown(copy, program.stat().st_uid, program.stat().st_gid)
        copy.chmod(stat.S_IMODE(program.stat().st_mode))
        done = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", str(copy), "-u"],
            capture_output=True,
            text=True,
            check=False,
        )
        return done.stdout.strip() or done.stderr.strip()
    finally:
        shutil.rmtree(place)


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_no_file_a_call_leaves_carries_a_set_id_bit_or_a_capability(
    bwrap: BwrapEnvironment, repo: Path, route: str
) -> None:
    run(bwrap, ROUTES[route] + "; true")
    assert set_id_files(repo) == []
    made = repo / "made"
    if os.geteuid() == 0 and made.is_file() and made.stat().st_size and made.stat().st_mode & 0o1:
        assert euid_as_nobody(made) == "65534"  # nobody stays nobody


def test_the_control_a_set_uid_copy_made_on_the_host_gives_nobody_root(repo: Path) -> None:
    """What the attacks above would have left: the check sees it, and it is a real escalation."""
    if os.geteuid() != 0:
        pytest.skip("only a root-owned set-uid file gives root")
    made = repo / "made"
    shutil.copy("/usr/bin/id", made)
    made.chmod(0o4755)
    assert set_id_files(repo) == ["made"]
    assert euid_as_nobody(made) == "0"


def test_ordinary_modes_still_change(bwrap: BwrapEnvironment, repo: Path) -> None:
    """chmod +x, 600, a sticky directory, cp -p and tar -p of ordinary files all still work."""
    said = run(
        bwrap,
        """set -e
printf '#!/bin/sh\\necho ran\\n' > script.sh && chmod +x script.sh && ./script.sh
echo s > secret && chmod 600 secret
mkdir -p shared && chmod 1777 shared
cp -p script.sh copy.sh && tar -cf /tmp/t.tar script.sh
mkdir -p out && tar -C out -xpf /tmp/t.tar
install -m 755 script.sh installed.sh
stat -c '%a %n' script.sh secret shared copy.sh out/script.sh installed.sh
""",
    )
    assert said.exit_code == 0, said.stderr
    assert said.stdout.split("\n")[1:-1] == [
        "755 script.sh",
        "600 secret",
        "1777 shared",
        "755 copy.sh",
        "755 out/script.sh",
        "755 installed.sh",
    ]


def test_confined_refuses_the_same(repo: Path) -> None:
    """@confined (Landlock and seccomp without namespaces) runs the same helper."""
    from codecoder.environments.base import CommandRequest
    from codecoder.environments.bwrap.confined import ConfinedEnvironment

    need_bwrap()
    env = ConfinedEnvironment(repo)
    script = "; ".join(ROUTES[r] for r in ("chmod", "cp-p", "install-m", "python-open")) + "; true"
    env.run(CommandRequest(cwd=repo, script=script, writable=True, timeout=30))
    assert set_id_files(repo) == []
