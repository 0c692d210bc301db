"""Env files: `<bundle dir>/.env`, `<bundle dir>/.env.local` and `--env-file FILE` (repeatable).

Precedence, highest first: the process environment > `--env-file` (a later file wins over an
earlier one) > `.env.local` > `.env`. The result is written into `os.environ`, only for names the
process environment does not have, so agent and connector processes inherit it like any other
variable. `${NAME}` in a value expands from the process environment, then the files.

`EnvFiles` remembers which names it set, so a reload can read the files again without ever
overriding the process environment, and can unset a name that left the files. Values are never
put into messages or logs; only names and the file (and line) they came from.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dotenv.parser import parse_stream
from dotenv.variables import parse_variables

from goondan.bundle import ConfigError, codes

BUNDLE_FILES = (".env", ".env.local")
MAX_ENV_FILE_BYTES = 1 << 20  # a larger "env file" is a mistake, not configuration


class EnvFileError(Exception):
    """An env file that cannot be used: missing (`--env-file` only), unreadable or malformed."""

    def __init__(self, errors: list[ConfigError]) -> None:
        self.errors = errors
        super().__init__("\n".join(e.render() for e in errors))


@dataclass(frozen=True)
class EnvLayer:
    """What the env files say: name -> value, and name -> the file that gave it."""

    values: dict[str, str] = field(default_factory=dict)
    origin: dict[str, str] = field(default_factory=dict)
    files: tuple[str, ...] = ()  # the files that exist and were read, lowest precedence first


def bundle_dir(path: str | Path) -> Path:
    """The directory of a bundle given as a directory or as its goondan.yaml."""
    p = Path(path)
    return p.parent if p.is_file() else p


def env_file_paths(bundle: str | Path, extra: Sequence[str] = ()) -> list[tuple[Path, bool]]:
    """(path, required) in precedence order, lowest first."""
    root = bundle_dir(bundle)
    return [*((root / name, False) for name in BUNDLE_FILES), *((Path(f), True) for f in extra)]


def read_layer(
    bundle: str | Path, extra: Sequence[str] = (), process_env: Mapping[str, str] | None = None
) -> EnvLayer:
    """Read the env files of `bundle` plus `extra`. Raises `EnvFileError` naming every problem."""
    process = os.environ if process_env is None else process_env
    errors: list[ConfigError] = []
    raw: list[tuple[str, str, str]] = []  # (name, value, file), in precedence order
    files: list[str] = []
    for path, required in env_file_paths(bundle, extra):
        shown = str(path)
        try:
            if not required and not path.exists():
                continue
            if path.is_dir():
                raise IsADirectoryError(f"{shown} is a directory")
            with path.open("rb") as f:
                data = f.read(MAX_ENV_FILE_BYTES + 1)
        except FileNotFoundError:
            errors.append(
                ConfigError(
                    code=codes.FILE_NOT_FOUND,
                    message="env file not found",
                    file=shown,
                    suggestion="check the --env-file path (relative to the current directory)",
                )
            )
            continue
        except OSError as exc:
            errors.append(
                ConfigError(
                    code=codes.FILE_NOT_FOUND,
                    message=f"env file cannot be read: {exc.strerror or exc}",
                    file=shown,
                )
            )
            continue
        if len(data) > MAX_ENV_FILE_BYTES:
            errors.append(
                ConfigError(
                    code=codes.PARSE_ERROR,
                    message=f"env file is larger than {MAX_ENV_FILE_BYTES} bytes",
                    file=shown,
                )
            )
            continue
        files.append(shown)
        text = data.decode("utf-8", errors="replace")
        for binding in parse_stream(io.StringIO(text)):
            if binding.error:
                errors.append(
                    ConfigError(
                        code=codes.PARSE_ERROR,
                        message="env file line is not NAME=value",
                        file=shown,
                        line=binding.original.line,
                        suggestion="write NAME=value (quotes optional, `#` starts a comment)",
                    )
                )
            elif binding.key is not None and binding.value is not None:
                raw.append((binding.key, binding.value, shown))
    if errors:
        raise EnvFileError(errors)
    values: dict[str, str] = {}
    origin: dict[str, str] = {}
    for name, value, shown in raw:
        # `${NAME}` expands from the process environment first, then the files read so far.
        lookup: dict[str, str | None] = {**values, **process}
        values[name] = "".join(atom.resolve(lookup) for atom in parse_variables(value))
        origin[name] = shown
    return EnvLayer(values, origin, tuple(files))


class EnvFiles:
    """The env files of one `goondan run` (or validate / doctor), applied to an environment."""

    def __init__(
        self,
        bundle: str | Path,
        extra: Sequence[str] = (),
        environ: MutableMapping[str, str] | None = None,
    ) -> None:
        self.bundle = Path(bundle)
        self.extra = tuple(extra)
        self.environ: MutableMapping[str, str] = os.environ if environ is None else environ
        self.applied: dict[str, str] = {}  # what we set, so a reload never touches the rest
        self.layer = EnvLayer()

    def bundle_root(self) -> Path:
        return bundle_dir(self.bundle)

    def process_env(self) -> dict[str, str]:
        """The environment without what the files put there: the layer above every file."""
        return {
            k: v for k, v in self.environ.items() if k not in self.applied or self.applied[k] != v
        }

    def read(self) -> EnvLayer:
        """The files as they are now (nothing applied). Raises `EnvFileError`."""
        return read_layer(self.bundle, self.extra, self.process_env())

    def apply(self, layer: EnvLayer) -> list[str]:
        """Put `layer` into the environment under the process environment; the names whose
        value changed (set, changed or unset), sorted."""
        process = self.process_env()
        changed: list[str] = []
        for name in list(self.applied):
            if name not in layer.values or name in process:
                if self.environ.get(name) == self.applied[name]:
                    del self.environ[name]
                    changed.append(name)
                del self.applied[name]
        for name, value in layer.values.items():
            if name in process or self.applied.get(name) == value:
                continue
            self.environ[name] = value
            if name not in changed:
                changed.append(name)
            self.applied[name] = value
        self.layer = layer
        return sorted(changed)

    def load(self) -> list[str]:
        """Read and apply; the names set. Raises `EnvFileError`."""
        return self.apply(self.read())

    def source_of(self, name: str) -> str | None:
        """Where `name` comes from: "process environment", an env file's path, or None."""
        if name in self.applied and self.environ.get(name) == self.applied[name]:
            return self.layer.origin.get(name, "env file")
        if name in self.environ:
            return "process environment"
        return None


def render_errors(errors: Iterable[ConfigError]) -> str:
    return "\n".join(e.render() for e in errors)
