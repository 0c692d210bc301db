"""Compiled JSON Schema validators, shared by bundle validation and the agent's Tool Registry.

Compiling with fastjsonschema generates and executes code (milliseconds per schema); the cache
means each distinct schema is compiled once per process — and once for all agents forked from
the template process, which warms it up.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import fastjsonschema

Validator = Callable[[Any], Any]


def compile_schema(schema: dict[str, Any]) -> Validator:
    """A validator for `schema`; raises fastjsonschema's errors for an invalid schema."""
    return _compile(json.dumps(schema, sort_keys=True))


@lru_cache(maxsize=1024)
def _compile(schema_json: str) -> Validator:
    validator: Validator = fastjsonschema.compile(json.loads(schema_json))
    return validator
