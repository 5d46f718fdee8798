"""Capabilities: tools an agent writes for itself, trusted only as far as their sandbox reaches.

A capability is a directory `.codecoder/capabilities/<name>/` holding a manifest,
`capability.json`, and its code:

    {
      "name": "wordcount",                       the directory's name, [a-z][a-z0-9_-]*
      "description": "Count the words of a text.",
      "environment": "@wasm",                    @wasm | @docker | @shell
      "parameters": {"type": "object", ...},     JSON Schema of its arguments (an object)
      "entry": "wordcount.wat",                  see below
      "writable": false,                         may it change the workspace (never the
                                                 protected paths)? not for @shell
      "limits": {"timeout": 10, "max_output": 65536, "memory": "64m", "fuel": 100000000}
    }

`entry` is, per environment: a `.wasm`/`.wat` module file in the capability's directory for
@wasm (a command there is rejected: the manifest would claim a sandbox its code does not run
in); a command for @docker, run in the sandbox image; a command for @shell, run on the host. A
command is an argv list (run as is) or a string (run by bash). `memory` and `fuel` limit @wasm
modules only: a @docker capability gets the project's container limits.

How it runs (see `runtime.tools.capability`): the arguments, validated against `parameters`,
are one JSON object on standard input. A @wasm module sees the workspace read-only at
/workspace (with `writable`, its top-level directories read-write). @docker and @shell commands
start in the capability's own directory, with the workspace in CODECODER_WORKSPACE (/workspace
in the container); a @docker command sees the workspace read-only unless `writable`, and the
protected paths (codecoder.json, .codecoder/, .git/) never writable. So no sandboxed capability
can change its own code, its manifest, its approvals or codecoder.json.

Trust. The *digest* of a capability is a SHA-256 over every file of its directory, manifest
included (`capability_digest`): a change to the code, the environment, the entry or the limits
changes it. A project grant for `run_capability:<name>` is stored in codecoder.json with the
digest the human approved, and holds only while the capability still has that digest. When the
human answers AlwaysThisProject, the runtime also records the approval under
`.codecoder/approvals/<name>/<hex digest>.json` (`record_approval`); an entry whose digest has
no such record was not written by a grant of the runtime (someone edited the digest by hand, or
copied it from elsewhere) and is reported as an error that grants nothing
(`runtime.config.entrychecks`). Both files are protected paths: no sandbox can write them, and
no tool grant covers a write to them beyond Once. The records are meant to be committed with the
project, like codecoder.json, so a grant made by one person holds for the team and in CI.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import os
import re
import secrets
import shutil
import stat
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Final, Literal

import jsonschema
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from codecoder.environments.docker.settings import parse_size
from codecoder.foundation.atomicfile import exclusive_lock, replace_atomically
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.errors import ConfigError
from codecoder.foundation.regularfile import open_regular
from codecoder.foundation.state import workspace_directory
from codecoder.permissions.keys import KeyStyle, PermissionKey

__all__ = [
    "APPROVALS_DIR",
    "CAPABILITIES_DIR",
    "MANIFEST",
    "NAME_PATTERN",
    "RUN_CAPABILITY",
    "Capability",
    "CapabilityLimits",
    "CapabilityManifest",
    "CapabilityProblem",
    "CapabilitySet",
    "argument_problems",
    "capability_digest",
    "field_errors",
    "is_approved",
    "load_capabilities",
    "load_capability",
    "manifest_bytes",
    "normalise_file_path",
    "record_approval",
    "write_capability",
]

RUN_CAPABILITY: Final = "run_capability"  # the tool part of every capability's key
CAPABILITIES_DIR: Final = ".codecoder/capabilities"
APPROVALS_DIR: Final = ".codecoder/approvals"
MANIFEST: Final = "capability.json"
NAME_PATTERN: Final = r"[a-z][a-z0-9_-]*"
# 64 is what the OpenAI and Anthropic APIs accept as a tool name; a capability is one.
NAME_MAX: Final = 64
MAX_FILES: Final = 256
MAX_BYTES: Final = 64 * 1024 * 1024  # all files of one capability together
MODULE_SUFFIXES: Final = (".wasm", ".wat")

_NAME = re.compile(NAME_PATTERN)
_DIGEST = re.compile(r"sha256:([0-9a-f]{64})")
_DIGEST_DOMAIN = b"codecoder-capability/1\0"

CapabilityName = Annotated[
    str, StringConstraints(pattern=f"^{NAME_PATTERN}$", min_length=1, max_length=NAME_MAX)
]


# --- the manifest ----------------------------------------------------------------------------


class CapabilityLimits(BaseModel):
    """What one run of the capability may use; unset values take the project's limits."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)

    timeout: float | None = Field(
        default=None, gt=0, le=3600, description="Seconds before a run is stopped."
    )
    max_output: int | None = Field(
        default=None,
        ge=1024,
        le=64 * 1024 * 1024,
        description="Bytes of output kept per stream (head and tail).",
    )
    memory: str | None = Field(
        default=None, description="@wasm only: the module's memory limit, e.g. `64m`."
    )
    fuel: int | None = Field(
        default=None, gt=0, description="@wasm only: instructions (roughly) before it is stopped."
    )

    @field_validator("memory")
    @classmethod
    def _a_size(cls, value: str | None) -> str | None:
        if value is not None and not 64 * 1024 <= parse_size(value) <= 4 * 1024**3:
            raise ValueError(f"{value!r} is not between 64k and 4g")
        return value

    @property
    def memory_bytes(self) -> int | None:
        return parse_size(self.memory) if self.memory is not None else None


class CapabilityManifest(BaseModel):
    """`capability.json`. Fields are validated in order, so `entry`, `writable` and `limits`
    are checked against the environment declared before them."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    name: CapabilityName = Field(description="The capability's name: its directory's name.")
    description: str = Field(
        min_length=1, max_length=4000, description="What the model reads to choose it."
    )
    environment: Literal["@wasm", "@docker", "@shell"] = Field(
        description="Where it runs; its ceiling is that environment's."
    )
    parameters: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object", "properties": {}},
        description="The JSON Schema of its arguments, an object.",
    )
    entry: str | list[str] = Field(
        description=(
            "@wasm: the module file (.wasm or .wat) in its directory; @docker: the command run "
            "in the sandbox image; @shell: the command run on the host. A command is an argv "
            "list or a string run by bash, started in the capability's directory."
        )
    )
    writable: bool = Field(
        default=False,
        description=(
            "Whether a @wasm or @docker capability may change the workspace (never "
            "codecoder.json, .codecoder/ or .git/)."
        ),
    )
    limits: CapabilityLimits = Field(default_factory=CapabilityLimits)

    @field_validator("parameters")
    @classmethod
    def _an_object_schema(cls, value: dict[str, Any]) -> dict[str, Any]:
        if value.get("type") != "object":
            raise ValueError(
                'must be a JSON Schema with "type": "object": the arguments are a JSON object'
            )
        validator = jsonschema.validators.validator_for(value, default=_DEFAULT_DRAFT)
        try:
            validator.check_schema(value)
        except jsonschema.SchemaError as exc:
            where = "/".join(str(p) for p in exc.absolute_path)
            raise ValueError(
                f"is not a valid JSON Schema: {exc.message}" + (f" (at {where})" if where else "")
            ) from None
        return value

    @field_validator("entry")
    @classmethod
    def _fits_the_environment(cls, value: str | list[str], info: ValidationInfo) -> str | list[str]:
        environment = info.data.get("environment")
        if environment == "@wasm":
            if not isinstance(value, str) or not _is_module_path(value):
                raise ValueError(
                    f"a @wasm capability's entry is its module, a .wasm or .wat file in its "
                    f"directory; {value!r} is not one (commands run in @docker or @shell)"
                )
            return normalise_file_path(value)
        if isinstance(value, str):
            if not value.strip():
                raise ValueError("the command is blank")
            if "\0" in value:
                raise ValueError("the command contains a NUL byte")
        elif not value or not all(value) or any("\0" in arg for arg in value):
            raise ValueError("an argv must be non-empty, of non-empty words without NUL bytes")
        return value

    @field_validator("writable")
    @classmethod
    def _a_sandbox_to_open(cls, value: bool, info: ValidationInfo) -> bool:
        if value and info.data.get("environment") == "@shell":
            raise ValueError(
                "a @shell capability runs on the host, unconfined; there is no sandbox to make "
                "writable"
            )
        return value

    @field_validator("limits")
    @classmethod
    def _limits_of_the_environment(
        cls, value: CapabilityLimits, info: ValidationInfo
    ) -> CapabilityLimits:
        environment = info.data.get("environment")
        if environment is not None and environment != "@wasm":
            for name in ("memory", "fuel"):
                if getattr(value, name) is not None:
                    raise ValueError(
                        f"{name} limits @wasm modules only; a {environment} capability gets "
                        "the project's limits"
                    )
        return value

    @property
    def tag(self) -> EnvironmentTag:
        return EnvironmentTag(self.environment)


_DEFAULT_DRAFT = jsonschema.Draft202012Validator


def manifest_bytes(manifest: CapabilityManifest) -> bytes:
    """The manifest as `create_capability` writes it."""
    document = manifest.model_dump(mode="json", exclude_none=True)
    return (json.dumps(document, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def normalise_file_path(value: str) -> str:
    """The canonical relative POSIX form of a path inside a capability's directory.

    Raises ValueError for anything that could leave the directory or name it ambiguously.
    """
    if "\0" in value or "\\" in value:
        raise ValueError(f"{value!r}: NUL and backslash are not allowed in a path")
    if value.startswith("/"):
        raise ValueError(f"{value!r} is absolute; paths are relative to the capability")
    parts = [part for part in value.split("/") if part not in ("", ".")]
    if not parts:
        raise ValueError(f"{value!r} names no file")
    if ".." in parts:
        raise ValueError(f"{value!r} leaves the capability's directory (`..`)")
    return "/".join(parts)


def _is_module_path(value: str) -> bool:
    try:
        path = normalise_file_path(value)
    except ValueError:
        return False
    # A module path has no spaces; `sh -c x.wat` is a command that happens to end well.
    return path.endswith(MODULE_SUFFIXES) and not any(ch.isspace() for ch in path)


# --- arguments -------------------------------------------------------------------------------


def argument_problems(schema: Mapping[str, Any], arguments: Any) -> list[tuple[str, str]]:
    """Every way `arguments` fails `schema`, as (field, message), the field as a dotted path.

    Empty when the arguments fit. A schema that cannot be applied (an unresolvable `$ref`)
    is one problem, not an exception: nothing runs either way.
    """
    validator_class = jsonschema.validators.validator_for(schema, default=_DEFAULT_DRAFT)
    problems: set[tuple[str, str]] = set()
    try:
        for error in validator_class(schema).iter_errors(arguments):
            problems.update(_named(error))
    except Exception as exc:  # jsonschema/referencing raise many kinds when a $ref fails
        return [("(arguments)", f"the capability's schema cannot be applied: {exc}")]
    return sorted(problems)


def field_errors(title: str, problems: list[tuple[str, str]], data: Any) -> ValidationError:
    """A pydantic ValidationError naming each field (a dotted path) with its message.

    Raised from a validator, it keeps these locations (nested under the field the model is in),
    so the dispatcher's InvalidArguments names the fields as for any other tool.
    """
    return ValidationError.from_exception_data(
        title,
        [
            InitErrorDetails(
                # The message goes through the context: its braces are not a template.
                type=PydanticCustomError("invalid", "{reason}", {"reason": message}),
                loc=tuple(field.split(".")) if field != "(arguments)" else (),
                input=data,
            )
            for field, message in problems
        ],
    )


def _named(error: Any) -> Iterator[tuple[str, str]]:
    path = [str(part) for part in error.absolute_path]
    instance = error.instance
    if error.validator == "required" and isinstance(instance, dict):
        for missing in error.validator_value:
            if missing not in instance:
                yield ".".join([*path, str(missing)]), "Field required"
        return
    if error.validator == "additionalProperties" and isinstance(instance, dict):
        known = error.schema.get("properties", {})
        extra = [key for key in instance if key not in known]
        if extra and not error.schema.get("patternProperties"):
            for key in extra:
                yield ".".join([*path, str(key)]), "Extra inputs are not permitted"
            return
    yield ".".join(path) or "(arguments)", error.message


# --- a capability on disk --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Capability:
    """One capability as read from its directory; `files` is exactly what `digest` covers."""

    manifest: CapabilityManifest
    directory: Path
    digest: str
    files: Mapping[str, bytes] = field(repr=False)

    @property
    def name(self) -> str:
        return self.manifest.name

    @property
    def environment(self) -> EnvironmentTag:
        return self.manifest.tag

    def permission_key(self, subject: str = "") -> PermissionKey:
        """`run_capability:<name>`, pinned to this digest."""
        return PermissionKey.named(
            RUN_CAPABILITY, self.name, style=KeyStyle.NAME, subject=subject, digest=self.digest
        )


@dataclass(frozen=True, slots=True)
class CapabilityProblem:
    """A directory under .codecoder/capabilities/ that is not a usable capability, and why."""

    name: str
    message: str


@dataclass(frozen=True, slots=True)
class CapabilitySet:
    """The project's capabilities as loaded, and the ones that could not be."""

    capabilities: Mapping[str, Capability] = field(default_factory=dict)
    problems: tuple[CapabilityProblem, ...] = ()

    def get(self, name: str) -> Capability | None:
        return self.capabilities.get(name)

    def with_capability(self, capability: Capability) -> CapabilitySet:
        """This set with `capability` added or replacing the one of its name."""
        return CapabilitySet(
            {**self.capabilities, capability.name: capability},
            tuple(p for p in self.problems if p.name != capability.name),
        )


def capability_digest(files: Mapping[str, bytes]) -> str:
    """`sha256:<hex>` over every (path, content) pair, in path order, each length-prefixed.

    The same files give the same digest on any machine, whatever order they were read in.
    """
    hasher = hashlib.sha256(_DIGEST_DOMAIN)
    for path in sorted(files):
        name, data = path.encode("utf-8"), files[path]
        hasher.update(len(name).to_bytes(8, "big") + name)
        hasher.update(len(data).to_bytes(8, "big"))
        hasher.update(data)
    return "sha256:" + hasher.hexdigest()


def load_capability(project_dir: Path, name: str) -> Capability:
    """Read and check `.codecoder/capabilities/<name>/`; ConfigError says what is wrong."""
    if not _NAME.fullmatch(name) or len(name) > NAME_MAX:
        raise ConfigError(
            f"capability name {name!r} is not {NAME_PATTERN} (at most {NAME_MAX} characters)"
        )
    directory = _real_directory(project_dir, f"{CAPABILITIES_DIR}/{name}")
    files = _read_tree(directory)
    manifest_path = directory / MANIFEST
    data = files.get(MANIFEST)
    if data is None:
        raise ConfigError(f"capability {name!r} has no {MANIFEST}", manifest_path)
    manifest = _parse_manifest(data, manifest_path)
    if manifest.name != name:
        raise ConfigError(
            f"name: {manifest.name!r} is not the name of its directory, {name!r}", manifest_path
        )
    if manifest.environment == "@wasm":
        assert isinstance(manifest.entry, str)  # the manifest's validator made sure
        if manifest.entry not in files:
            raise ConfigError(
                f"entry: the module {manifest.entry!r} is not a file in {directory}", manifest_path
            )
    return Capability(manifest, directory, capability_digest(files), files)


def load_capabilities(project_dir: Path, taken: Collection[str] = ()) -> CapabilitySet:
    """Every capability of the project; `taken` are tool names a capability may not shadow."""
    root = project_dir / CAPABILITIES_DIR
    if not os.path.lexists(root):
        return CapabilitySet()
    try:
        _real_directory(project_dir, CAPABILITIES_DIR)
        names = sorted(entry.name for entry in os.scandir(root))
    except (ConfigError, OSError) as exc:
        return CapabilitySet(problems=(CapabilityProblem("*", f"{root}: {_reason(exc)}"),))
    loaded: dict[str, Capability] = {}
    problems: list[CapabilityProblem] = []
    for name in names:
        if name.startswith("."):
            continue  # the lock file, and directories being written or replaced
        if name in taken:
            problems.append(
                CapabilityProblem(
                    name, f"{root / name}: {name!r} is the name of a built-in tool; rename it"
                )
            )
            continue
        try:
            loaded[name] = load_capability(project_dir, name)
        except ConfigError as exc:
            where = "" if exc.path is not None else f"{root / name}: "
            problems.append(CapabilityProblem(name, where + str(exc)))
    return CapabilitySet(loaded, tuple(problems))


def _parse_manifest(data: bytes, path: Path) -> CapabilityManifest:
    try:
        document = json.loads(data.decode("utf-8"), object_pairs_hook=_no_duplicate_keys)
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not UTF-8 (byte {exc.start})", path) from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"not JSON: {exc.msg}", path, exc.lineno, exc.colno) from None
    except _DuplicateKey as exc:
        raise ConfigError(str(exc), path) from None
    try:
        return CapabilityManifest.model_validate(document)
    except ValidationError as exc:
        raise ConfigError(_describe(exc), path) from None


class _DuplicateKey(ValueError):
    pass


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # A reviewer reads the first occurrence and json.loads keeps the last: refuse both.
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise _DuplicateKey(f"{key!r} appears twice in one object")
        seen[key] = value
    return seen


def _describe(exc: ValidationError) -> str:
    problems = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"]) or "(manifest)"
        message = error["msg"].removeprefix("Value error, ")
        problems.append(f"{where}: {message}")
    return "; ".join(problems)


def _real_directory(project_dir: Path, relative: str) -> Path:
    """`project_dir/relative`, checked to be a directory reached through no symbolic link.

    A link anywhere on the way could point the runtime's reads and writes somewhere else.
    """
    path = project_dir
    for part in relative.split("/"):
        path = path / part
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            raise ConfigError(f"{path} does not exist") from None
        if stat.S_ISLNK(mode):
            raise ConfigError(f"{path} is a symbolic link; it must be a real directory")
        if not stat.S_ISDIR(mode):
            raise ConfigError(f"{path} is not a directory")
    return path


def _read_tree(directory: Path) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    total = 0
    pending = [("", directory)]
    while pending:
        prefix, current = pending.pop()
        with os.scandir(current) as entries:
            for entry in entries:
                relative = prefix + entry.name
                try:
                    relative.encode("utf-8")
                except UnicodeEncodeError:
                    raise ConfigError(f"{entry.path}: the name is not UTF-8") from None
                if entry.is_symlink():
                    # A link's target could change what runs without changing the digest.
                    raise ConfigError(
                        f"{entry.path} is a symbolic link; a capability's files must be its own"
                    )
                if entry.is_dir(follow_symlinks=False):
                    pending.append((relative + "/", Path(entry.path)))
                    continue
                if not entry.is_file(follow_symlinks=False):
                    raise ConfigError(f"{entry.path} is not a regular file")
                if len(files) >= MAX_FILES:
                    raise ConfigError(f"{directory} has more than {MAX_FILES} files")
                data = _read_file(Path(entry.path), MAX_BYTES - total)
                total += len(data)
                files[relative] = data
    return files


def _read_file(path: Path, limit: int) -> bytes:
    try:
        descriptor = open_regular(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise ConfigError(f"{path}: {_reason(exc)}") from None
    with os.fdopen(descriptor, "rb") as file:
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            raise ConfigError(f"{path} is not a regular file")
        data = file.read(limit + 1)
    if len(data) > limit:
        raise ConfigError(f"{path.parent}: its files are larger than {MAX_BYTES} bytes together")
    return data


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    return str(exc)


# --- writing one (create_capability) ---------------------------------------------------------


def write_capability(
    project_dir: Path, manifest: CapabilityManifest, files: Mapping[str, bytes]
) -> Capability:
    """Write (or replace) `.codecoder/capabilities/<name>/` and return it as read back.

    `files` maps checked relative paths (`normalise_file_path`) to contents; the manifest is
    written from `manifest`. The new directory is assembled beside the old one and renamed into
    place under a lock, so a reader sees the old capability or the new one, never a mixture.
    Raises ConfigError when it cannot be written.
    """
    name = manifest.name
    try:
        root = _make_directories(project_dir, CAPABILITIES_DIR)
        with exclusive_lock(root / ".lock"):
            staging = root / f".{name}.{secrets.token_hex(8)}.new"
            os.mkdir(staging)  # 0777 less umask: the @docker sandbox user must read it
            retired: Path | None = None
            try:
                for relative, data in sorted({**files, MANIFEST: manifest_bytes(manifest)}.items()):
                    _write_new_file(staging, relative, data)
                target = root / name
                if os.path.lexists(target):
                    if not stat.S_ISDIR(os.lstat(target).st_mode):
                        raise ConfigError(f"{target} exists and is not a directory")
                    retired = root / f".{name}.{secrets.token_hex(8)}.old"
                    os.rename(target, retired)
                os.rename(staging, target)
                _fsync_directory(root)
            finally:
                for leftover in (staging, retired):
                    if leftover is not None and os.path.lexists(leftover):
                        shutil.rmtree(leftover, ignore_errors=True)
    except OSError as exc:
        raise ConfigError(f"cannot write capability {name!r}: {_reason(exc)}") from exc
    return load_capability(project_dir, name)


def _make_directories(project_dir: Path, relative: str) -> Path:
    workspace_directory(project_dir)  # .codecoder/ with its .gitignore
    path = project_dir
    for part in relative.split("/"):
        path = path / part
        with contextlib.suppress(FileExistsError):
            os.mkdir(path)
    return _real_directory(project_dir, relative)


def _write_new_file(directory: Path, relative: str, data: bytes) -> None:
    path = directory / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    with os.fdopen(os.open(path, flags, 0o666), "wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())


def _fsync_directory(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


# --- approvals -------------------------------------------------------------------------------


def _approval_path(project_dir: Path, name: str, digest: str) -> Path | None:
    match = _DIGEST.fullmatch(digest)
    if match is None or not _NAME.fullmatch(name):
        return None
    return project_dir / APPROVALS_DIR / name / f"{match[1]}.json"


def record_approval(project_dir: Path, capability: Capability) -> Path:
    """Record that the human granted `capability`, as it now is, for the project.

    Called by the runtime right after such a grant was written to codecoder.json. Raises
    ConfigError when the record cannot be written (the grant then asks again next time).
    """
    path = _approval_path(project_dir, capability.name, capability.digest)
    assert path is not None  # a loaded capability has a valid name and digest
    record = {
        "capability": capability.name,
        "digest": capability.digest,
        "environment": capability.environment.value,
        "approved_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    try:
        _make_directories(project_dir, f"{APPROVALS_DIR}/{capability.name}")
        if not path.exists():
            data = (json.dumps(record, indent=2) + "\n").encode("utf-8")
            replace_atomically(path, data)
    except OSError as exc:
        raise ConfigError(f"cannot record the approval: {_reason(exc)}", path) from exc
    return path


def is_approved(project_dir: Path, name: str, digest: str) -> bool:
    """Whether the runtime recorded a project grant of capability `name` at `digest`."""
    path = _approval_path(project_dir, name, digest)
    if path is None:
        return False
    try:
        _real_directory(project_dir, f"{APPROVALS_DIR}/{name}")
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC), "rb") as file:
            record = json.loads(file.read(64 * 1024))
    except (ConfigError, OSError, ValueError):
        return False
    return (
        isinstance(record, dict)
        and record.get("capability") == name
        and record.get("digest") == digest
    )
