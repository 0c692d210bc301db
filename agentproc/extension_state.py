"""Extension state: one JSON object per extension and instance, saved at turn end.

    <instance dir>/<agent>/extensions/<extension>.json

Read lazily on first `api.state.get()`, written (atomically) at the end of each turn and at
shutdown, and only for extensions whose state was set. The turn makes its instance's store
current (`current_state`), which is how `api.state` — one object per extension, shared by
all instances of the agent — knows whose state to use.
"""

from __future__ import annotations

import functools
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import msgspec
import structlog

from goondan.files import replace_file

_MISSING = object()
_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder()


class ExtensionStateStore:
    def __init__(self, home: Path, *, durable: bool = False) -> None:
        """The state of the instance whose directory is `home` (`<agent>/`), kept in its
        `extensions/`. `durable`: every save is fsync'd before it returns (`--durability
        fsync`)."""
        self._home = home
        self._durable = durable
        self._values: dict[str, bytes | None] = {}  # encoded, so callers cannot alias it
        self._dirty: set[str] = set()

    @functools.cached_property
    def directory(self) -> Path:
        """Made on first use: most turns neither read nor set any extension's state."""
        return self._home / "extensions"

    def get(self, extension: str) -> dict[str, Any] | None:
        raw = self._values.get(extension, _MISSING)
        if raw is _MISSING:
            raw = self._values[extension] = self._read(extension)
        if raw is None:
            return None
        value: dict[str, Any] = _decoder.decode(raw)  # type: ignore[arg-type]
        return value

    def set(self, extension: str, value: dict[str, Any] | None) -> None:
        if value is not None and not isinstance(value, dict):
            raise TypeError(
                f"extension state must be a JSON object (dict) or None, got {type(value).__name__}"
            )
        try:
            raw = None if value is None else _encoder.encode(value)
        except (TypeError, ValueError, OverflowError) as exc:
            raise TypeError(f"extension state is not JSON-serializable: {exc}") from None
        self._values[extension] = raw
        self._dirty.add(extension)

    def save(self) -> None:
        """Write every state set since the last save (write + rename per file)."""
        for extension in sorted(self._dirty):
            path = self.directory / f"{_file_name(extension)}.json"
            raw = self._values.get(extension)
            if raw is None:
                path.unlink(missing_ok=True)
                continue
            replace_file(path, raw, durable=self._durable)
        self._dirty.clear()

    def _read(self, extension: str) -> bytes | None:
        path = self.directory / f"{_file_name(extension)}.json"
        try:
            raw = path.read_bytes()
            value = _decoder.decode(raw)
        except FileNotFoundError:
            return None
        except msgspec.DecodeError as exc:
            structlog.get_logger().warning(
                "unreadable extension state ignored", extension=extension, error=str(exc)
            )
            return None
        return raw if isinstance(value, dict) else None


current_state: ContextVar[ExtensionStateStore | None] = ContextVar(
    "goondan_extension_state", default=None
)


def _file_name(extension: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in extension)
