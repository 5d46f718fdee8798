"""The environment variables a contained command gets: an allow-list of what commands need, never
the caller's whole environment.

A deny-list of secret-looking names always misses one (`GITHUB_PAT`, `SSHPASS`,
`BORG_PASSPHRASE`, `SLACK_WEBHOOK_URL`, `SONAR_LOGIN`), so a variable reaches the command only
when it is one of these (`is_allowed_variable`):

    system         PATH, the locale (LANG, LANGUAGE, LC_*, TZ), the terminal (TERM, COLORTERM,
                   COLUMNS, LINES, NO_COLOR, FORCE_COLOR, LS_COLORS ...), USER, LOGNAME, SHELL,
                   EDITOR, VISUAL, PAGER, LESS, CI markers, SOURCE_DATE_EPOCH, DEBIAN_FRONTEND
    builds         make and the C toolchain's (MAKEFLAGS, CC, CXX, CFLAGS, LDFLAGS,
                   PKG_CONFIG_PATH, CMAKE_*, CCACHE_DIR)
    toolchains     each toolchain's own variables: Python (VIRTUAL_ENV, CONDA_*, PYTHON*, PIP_*,
                   UV_*, POETRY_*, PYENV_*), Node (NODE_*, NPM_CONFIG_*/npm_config_*, NVM_*,
                   YARN_*, PNPM_*, COREPACK_*, BUN_*, DENO_*), Rust (CARGO_*, RUSTUP_*, RUST_*),
                   Go (GOPATH, GOROOT, GOFLAGS, GOPROXY ... by name: GOOGLE_* is not Go's), Java
                   (JAVA_*, GRADLE_*, MAVEN_*, M2_HOME, SDKMAN_*), Ruby (GEM_*, RBENV_*, RUBY*,
                   the named BUNDLE_ settings: BUNDLE_<HOST> holds a password), .NET, Perl, Nix
    git            the identity (GIT_AUTHOR_*, GIT_COMMITTER_*), GIT_PAGER, GIT_EDITOR,
                   GIT_TERMINAL_PROMPT, and git's numbered configuration as one group (below)
    TLS            where the CA bundle is (SSL_CERT_FILE, SSL_CERT_DIR, REQUESTS_CA_BUNDLE,
                   CURL_CA_BUNDLE)
    the user's     what the user's own file or a trusted codecoder.json names
                   (`"bwrap": {"env": [...]}`, names or `*` patterns): passed as they are

An allowed variable is still dropped when its name or value says it holds a secret
(`is_secret_variable`: NPM_CONFIG__AUTH, CARGO_REGISTRY_TOKEN, a PIP_INDEX_URL with a password
in it, a `-Dpassword=` in MAVEN_OPTS): a toolchain's family of variables carries its tokens too.

Variables that belong together are kept or dropped together, so a filter never breaks a tool's
own protocol: git reads `GIT_CONFIG_COUNT` and then needs every `GIT_CONFIG_KEY_n` and
`GIT_CONFIG_VALUE_n` below it (a missing one makes every git command fail "missing config key
GIT_CONFIG_KEY_0"; Gemini CLI's shell sets eight). The group is kept whole when it is complete
and none of its entries carries a secret (a `credential.*` or `http.*.extraheader` key, a
secret-looking value), else dropped whole. Inside the sandbox what it configures is contained
(a `core.sshCommand` there runs in the sandbox); the host's git never sees these variables from
here.

HOME is the sandbox's, TMPDIR its private /tmp. Last come the variables the runtime itself
injects (`injected`: the egress proxy, the credential broker's CA bundle; the package
managers' proxy settings belong there too), which no caller's variable can override.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping
from typing import Final

__all__ = [
    "ALLOWED_NAMES",
    "ALLOWED_PREFIXES",
    "contained_environ",
    "is_allowed_variable",
    "is_secret_variable",
]

ALLOWED_NAMES: Final = frozenset(
    {
        # system, locale and terminal
        "PATH", "LANG", "LANGUAGE", "TZ", "TERM", "COLORTERM", "TERMINFO", "TERMINFO_DIRS",
        "TERM_PROGRAM", "TERM_PROGRAM_VERSION", "COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR",
        "CLICOLOR", "CLICOLOR_FORCE", "LS_COLORS", "USER", "LOGNAME", "SHELL", "EDITOR",
        "VISUAL", "PAGER", "LESS", "LESSCHARSET", "MANPATH", "INFOPATH", "XDG_DATA_DIRS",
        "XDG_CONFIG_DIRS", "DEBIAN_FRONTEND", "SOURCE_DATE_EPOCH", "DO_NOT_TRACK",
        # continuous integration markers (never their tokens)
        "CI", "GITHUB_ACTIONS", "GITLAB_CI", "BUILDKITE", "CIRCLECI", "TRAVIS", "TF_BUILD",
        # builds
        "MAKEFLAGS", "MFLAGS", "CC", "CXX", "CPP", "LD", "AR", "CFLAGS", "CXXFLAGS", "CPPFLAGS",
        "LDFLAGS", "PKG_CONFIG_PATH", "CCACHE_DIR",
        # Python
        "VIRTUAL_ENV", "VIRTUAL_ENV_PROMPT",
        # Go (by name: a GO* prefix would take GOOGLE_APPLICATION_CREDENTIALS)
        "GOPATH", "GOROOT", "GOBIN", "GOFLAGS", "GOOS", "GOARCH", "GOAMD64", "GOARM", "GOCACHE",
        "GOMODCACHE", "GOENV", "GOPROXY", "GOPRIVATE", "GONOPROXY", "GONOSUMDB", "GONOSUMCHECK",
        "GOSUMDB", "GOINSECURE", "GOTOOLCHAIN", "GO111MODULE", "GOWORK", "GOEXPERIMENT",
        "GOTELEMETRY", "CGO_ENABLED", "CGO_CFLAGS", "CGO_LDFLAGS",
        # Java, Kotlin, Android
        "M2_HOME", "JDK_HOME", "KOTLIN_HOME", "SCALA_HOME", "ANDROID_HOME", "ANDROID_SDK_ROOT",
        # Ruby's bundler: only its named settings (BUNDLE_GEMS__EXAMPLE__COM holds "user:pass")
        "BUNDLE_PATH", "BUNDLE_GEMFILE", "BUNDLE_WITHOUT", "BUNDLE_WITH", "BUNDLE_BIN",
        "BUNDLE_APP_CONFIG", "BUNDLE_DEPLOYMENT", "BUNDLE_FROZEN", "BUNDLE_JOBS",
        # Nix
        "NIX_PATH", "NIX_PROFILES",
        # git: who commits, and nothing that reaches out
        "GIT_PAGER", "GIT_EDITOR", "GIT_TERMINAL_PROMPT",
        # where TLS clients find their CA bundle
        "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
    }
)  # fmt: skip
ALLOWED_PREFIXES: Final = (
    "LC_", "CMAKE_",
    "PYTHON", "PIP_", "PIPX_", "UV_", "POETRY_", "PYENV_", "CONDA_", "PYTEST_",
    "NODE_", "NPM_CONFIG_", "NVM_", "YARN_", "PNPM_", "COREPACK_", "BUN_", "DENO_",
    "CARGO_", "RUSTUP_", "RUST_",
    "JAVA_", "GRADLE_", "MAVEN_", "SDKMAN_",
    "GEM_", "RBENV_", "RUBY",
    "DOTNET_", "NUGET_", "PERL5", "PERL_",
    "GIT_AUTHOR_", "GIT_COMMITTER_",
)  # fmt: skip

_SECRET_WORDS: Final = frozenset(
    {
        "KEY", "KEYS", "APIKEY", "TOKEN", "TOKENS", "SECRET", "SECRETS", "PASSWORD",
        "PASSWORDS", "PASSWD", "PASS", "PASSPHRASE", "PWD", "AUTH", "CREDENTIAL", "CREDENTIALS",
        "CREDS", "COOKIE", "COOKIES", "SESSION", "PRIVATE", "DSN", "LOGIN", "PAT", "WEBHOOK",
    }
)  # fmt: skip
_SECRET_PARTS: Final = (
    "TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "CREDENTIAL", "APIKEY", "PRIVATE_KEY",
    "AUTHTOKEN",
)  # fmt: skip
_URL_WITH_PASSWORD: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:[^/\s@]+@")
_PRIVATE_KEY: Final = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----")
# An option or setting inside a value: `-Dpassword=x`, `--token x`, `apiKey: x`.
_SECRET_SETTING: Final = re.compile(
    r"(?i)(?:password|passwd|passphrase|token|secret|api[-_]?key)\w*\s*[=:]\s*\S"
)
_GIT_CONFIG_COUNT: Final = "GIT_CONFIG_COUNT"
_GIT_CONFIG_ENTRY: Final = re.compile(r"GIT_CONFIG_(KEY|VALUE)_([0-9]+)")
# git configuration that carries credentials when set through the environment.
_GIT_SECRET_KEYS: Final = re.compile(r"(?i)credential\..*|http\..*extraheader|.*\.(token|password)")


def is_allowed_variable(name: str) -> bool:
    """Whether `name` is on the allow-list above (its value is checked separately)."""
    return name in ALLOWED_NAMES or name.upper().startswith(ALLOWED_PREFIXES)


def _secret_value(value: str) -> bool:
    return bool(
        _URL_WITH_PASSWORD.search(value)
        or _PRIVATE_KEY.search(value)
        or _SECRET_SETTING.search(value)
    )


def is_secret_variable(name: str, value: str = "") -> bool:
    """Whether a variable's name or value says it holds a secret (see the module docstring);
    applied to allowed names, whose families carry their tokens too."""
    upper = name.upper()
    words = re.split(r"[_.\-/:]+", upper)
    if any(word in _SECRET_WORDS for word in words):
        return True
    if any(part in upper for part in _SECRET_PARTS):
        return True
    return _secret_value(value)


def _git_config_group(environ: Mapping[str, str]) -> dict[str, str]:
    """git's numbered configuration, whole: the count and every key and value below it, or
    nothing when it is incomplete or carries a secret."""
    raw = environ.get(_GIT_CONFIG_COUNT)
    if raw is None or not raw.strip().isdigit():
        return {}
    count = int(raw)
    group = {_GIT_CONFIG_COUNT: raw}
    for n in range(count):
        key = environ.get(f"GIT_CONFIG_KEY_{n}")
        value = environ.get(f"GIT_CONFIG_VALUE_{n}")
        if key is None or value is None:
            return {}
        if _GIT_SECRET_KEYS.fullmatch(key) or _secret_value(value):
            return {}
        group[f"GIT_CONFIG_KEY_{n}"] = key
        group[f"GIT_CONFIG_VALUE_{n}"] = value
    return group


def contained_environ(
    environ: Mapping[str, str],
    *,
    home: str,
    passed: Iterable[str] = (),
    injected: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """What a contained command gets of `environ`: the allowed variables without secrets, git's
    configuration group whole or not at all, every variable matching one of `passed` (the
    user's or a trusted file's names or `*` patterns) as it is; HOME set to the sandbox's and
    TMPDIR to /tmp; then `injected`, the runtime's own variables, over everything."""
    patterns = tuple(passed)
    kept: dict[str, str] = {}
    for name, value in environ.items():
        if any(fnmatch.fnmatchcase(name, p) for p in patterns):
            kept[name] = value
        elif name == _GIT_CONFIG_COUNT or _GIT_CONFIG_ENTRY.fullmatch(name):
            continue  # as a group, below
        elif is_allowed_variable(name) and not is_secret_variable(name, value):
            kept[name] = value
    if not any(fnmatch.fnmatchcase(_GIT_CONFIG_COUNT, p) for p in patterns):
        kept.update(_git_config_group(environ))
    kept["HOME"] = home
    kept["TMPDIR"] = "/tmp"
    kept.update(injected or {})
    return kept
