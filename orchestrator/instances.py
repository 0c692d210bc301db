"""Instances prepared with `agents__spawn`, and who asked for them (`agents__list`)."""

from __future__ import annotations

import secrets
import time
from typing import Any

import msgspec


class SpawnedInstance(msgspec.Struct, frozen=True, rename="camel"):
    target: str
    instance_key: str
    owner_agent: str
    owner_instance_key: str
    created_at: float


class InstanceRegistry:
    def __init__(self) -> None:
        self._instances: dict[tuple[str, str], SpawnedInstance] = {}

    def spawn(
        self, target: str, instance_key: str | None, owner: str, owner_key: str
    ) -> SpawnedInstance:
        key = instance_key or f"{target}-instance-{secrets.token_hex(4)}"
        existing = self._instances.get((target, key))
        if existing is not None:
            return existing
        instance = SpawnedInstance(target, key, owner, owner_key, time.time())
        self._instances[(target, key)] = instance
        return instance

    def list(self, owner: str, owner_key: str, include_all: bool) -> list[dict[str, Any]]:
        return [
            msgspec.to_builtins(i)
            for i in self._instances.values()
            if include_all or (i.owner_agent, i.owner_instance_key) == (owner, owner_key)
        ]
