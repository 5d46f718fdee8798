"""The environment variables a contained command gets: the caller's, without its secrets.

A variable is dropped when its name says it holds a secret, when it belongs to a cloud's or a CI
provider's credentials, when it points at something the sandbox must not reach (an agent's
socket, a session bus, the runtime's own directories), or when its value carries one (a URL with
a password in it, a private key):

    names          a word of the name (split at `_`, `-` and `.`) is KEY, KEYS, APIKEY, TOKEN,
                   SECRET, PASSWORD, PASSWD, PASS, PWD (not PWD itself, the working
                   directory), AUTH, CREDENTIAL(S), CREDS, COOKIE, SESSION, PRIVATE, DSN, or the
                   name holds TOKEN, SECRET, PASSWORD, PASSWD, CREDENTIAL, APIKEY or PRIVATE_KEY
                   anywhere (GITHUB_AUTHTOKEN, MYSECRETVALUE); GIT_AUTHOR_NAME, SSL_CERT_FILE
                   and the like stay
    prefixes       the clouds' and credential tools' own, whose other variables name accounts,
                   profiles and endpoints: AWS_, AMAZON_, GOOGLE_, GCLOUD_, GCP_, CLOUDSDK_,
                   AZURE_, DIGITALOCEAN_, HEROKU_, NETLIFY_, VERCEL_, CLOUDFLARE_, LINODE_,
                   HCLOUD_, SCW_, ALIBABA_, ALICLOUD_, IBMCLOUD_, OCI_, VAULT_, CONSUL_, NOMAD_,
                   DOCKER_, KUBE, HELM_, TF_VAR_, TWINE_, PYPI_, NPM_CONFIG_, GH_, GITLAB_,
                   CI_JOB_ (a CI provider's secrets say TOKEN, KEY or SECRET in their names)
    reaching out   SSH_AUTH_SOCK, SSH_AGENT_PID, GPG_AGENT_INFO, DBUS_SESSION_BUS_ADDRESS,
                   DBUS_SYSTEM_BUS_ADDRESS, XDG_RUNTIME_DIR, DISPLAY, WAYLAND_DISPLAY,
                   KRB5CCNAME, KRB5_KTNAME, CODECODER_*, the XDG_*_HOME directories (tools find
                   their defaults under $HOME, which is the sandbox's), BASH_ENV and ENV (a
                   file bash would run first), LD_PRELOAD and LD_LIBRARY_PATH of the runtime
    values         a URL with a user and a password (`scheme://user:secret@host`), a PEM private
                   key

A project's trusted `"bwrap": {"env": [...]}` (names or `*` patterns) passes named variables
through whatever the rules say: a widening, obeyed only when the file is trusted.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping
from typing import Final

__all__ = ["contained_environ", "is_secret_variable"]

_SECRET_WORDS: Final = frozenset(
    {
        "KEY",
        "KEYS",
        "APIKEY",
        "TOKEN",
        "TOKENS",
        "SECRET",
        "SECRETS",
        "PASSWORD",
        "PASSWORDS",
        "PASSWD",
        "PASS",
        "PWD",
        "AUTH",
        "CREDENTIAL",
        "CREDENTIALS",
        "CREDS",
        "COOKIE",
        "COOKIES",
        "SESSION",
        "PRIVATE",
        "DSN",
    }
)
_SECRET_PARTS: Final = (
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "CREDENTIAL",
    "APIKEY",
    "PRIVATE_KEY",
)
_SECRET_PREFIXES: Final = (
    "AWS_", "AMAZON_", "GOOGLE_", "GCLOUD_", "GCP_", "CLOUDSDK_", "AZURE_", "DIGITALOCEAN_",
    "HEROKU_", "NETLIFY_", "VERCEL_", "CLOUDFLARE_", "LINODE_", "HCLOUD_", "SCW_", "ALIBABA_",
    "ALICLOUD_", "IBMCLOUD_", "OCI_", "VAULT_", "CONSUL_", "NOMAD_", "DOCKER_", "KUBE", "HELM_",
    "TF_VAR_", "TWINE_", "PYPI_", "NPM_CONFIG_", "GH_", "GITLAB_", "CI_JOB_", "CODECODER_",
)  # fmt: skip
_REACHING_OUT: Final = frozenset(
    {
        "SSH_AUTH_SOCK",
        "SSH_AGENT_PID",
        "GPG_AGENT_INFO",
        "DBUS_SESSION_BUS_ADDRESS",
        "DBUS_SYSTEM_BUS_ADDRESS",
        "XDG_RUNTIME_DIR",
        "XDG_CONFIG_HOME",
        "XDG_STATE_HOME",
        "XDG_DATA_HOME",
        "XDG_CACHE_HOME",
        "DISPLAY",
        "WAYLAND_DISPLAY",
        "KRB5CCNAME",
        "KRB5_KTNAME",
        "BASH_ENV",
        "ENV",
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
    }
)
_URL_WITH_PASSWORD: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:[^/\s@]+@")
_PRIVATE_KEY: Final = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----")


def is_secret_variable(name: str, value: str = "") -> bool:
    """Whether a variable is kept out of a contained command by the rules above."""
    upper = name.upper()
    if upper == "PWD":
        return False
    if upper in _REACHING_OUT or upper.startswith(_SECRET_PREFIXES):
        return True
    words = re.split(r"[_.\-]+", upper)
    if any(word in _SECRET_WORDS for word in words):
        return True
    if any(part in upper for part in _SECRET_PARTS):
        return True
    return bool(_URL_WITH_PASSWORD.search(value) or _PRIVATE_KEY.search(value))


def contained_environ(
    environ: Mapping[str, str],
    *,
    home: str,
    passed: Iterable[str] = (),
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """`environ` without its secrets, with HOME set to the sandbox's and TMPDIR to /tmp; names
    matching one of `passed` (names or `*` patterns) are kept whatever the rules say; `extra`
    is set last (the egress proxy's variables)."""
    patterns = tuple(passed)
    kept = {
        name: value
        for name, value in environ.items()
        if any(fnmatch.fnmatchcase(name, p) for p in patterns)
        or not is_secret_variable(name, value)
    }
    kept["HOME"] = home
    kept["TMPDIR"] = "/tmp"
    kept.update(extra or {})
    return kept
