"""`goondan doctor`'s Python checks: the version, each dependency against goondan's lower
bound, and whether the interpreter was built for speed.

An agent's turn is Python from end to end, so the interpreter's build decides much of its CPU.
A CPython that runs from its shared library (`libpython3.X.so`) and was built without
optimisations (pyenv's default, `./configure --enable-shared`) makes every call between the
interpreter's own functions through the library's PLT and every look at the thread's state
through `__tls_get_addr`: measured here, the agents spent ~15-20 % more CPU per turn than on the
same CPython linked statically (docs/performance.md, "The interpreter's build"). Distribution
packages (Debian's `/usr/bin/python3` is linked statically), python.org's and Docker's images
(`--enable-optimizations`, which adds `-fno-semantic-interposition`) do not pay it.
"""

from __future__ import annotations

import importlib.metadata
import re
import sys
import sysconfig
from collections.abc import Callable

from goondan.cli.doctor_report import Check, fail, ok, warn

MIN_PYTHON = (3, 11)
_REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*>=\s*([\w.]+)")
# A mapped file's path ends its line, " (deleted)" after it once the file was replaced.
_LIBPYTHON = re.compile(r"\S*/(libpython3\.\d+t?\.so[.\d]*)(?: \(deleted\))?$")
# Where a build for speed says so: configure's arguments, and the flags it compiled with.
_BUILD_VARS = ("CONFIG_ARGS", "CFLAGS_NODIST", "PY_CFLAGS_NODIST", "CONFIGURE_CFLAGS_NODIST")
_FOR_SPEED = ("--enable-optimizations", "-fno-semantic-interposition")
SLOW_BUILD_FIX = (
    "use the distribution's python3, or a CPython built with PYTHON_CONFIGURE_OPTS="
    "'--enable-optimizations --with-lto' (pyenv install), then recreate the venv"
)


def check_python() -> list[Check]:
    version = ".".join(map(str, sys.version_info[:3]))
    if sys.version_info[:2] < MIN_PYTHON:
        need = ".".join(map(str, MIN_PYTHON))
        checks = [fail("python", f"Python {version} is older than {need}", f"use Python {need}+")]
    else:
        checks = [ok("python", f"Python {version} ({sys.executable})")]
    mappings = _own_mappings()
    if mappings:  # Linux's /proc; elsewhere nothing to tell
        checks.append(check_interpreter_build(mappings, sysconfig.get_config_var))
    try:
        requirements = importlib.metadata.requires("goondan") or []
    except importlib.metadata.PackageNotFoundError:
        return [*checks, warn("python", "goondan is not installed", "pip install -e .")]
    for requirement in requirements:
        if "extra ==" in requirement:
            continue
        match = _REQUIREMENT.match(requirement)
        if match is None:
            continue
        name, lower = match.groups()
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            checks.append(
                fail("python", f"{name} is not installed", f"pip install '{name}>={lower}'")
            )
            continue
        if _version_tuple(installed) < _version_tuple(lower):
            fix = f"pip install -U '{name}>={lower}'"
            checks.append(fail("python", f"{name} {installed} is older than {lower}", fix))
        else:
            checks.append(ok("python", f"{name} {installed} (>= {lower})"))
    return checks


def check_interpreter_build(mappings: str, config_var: Callable[[str], object]) -> Check:
    """`mappings`: the process's `/proc/self/maps`; `config_var`: `sysconfig.get_config_var`
    (what the interpreter was configured and compiled with)."""
    library = next(
        (found[1] for line in mappings.splitlines() if (found := _LIBPYTHON.search(line))), None
    )
    if library is None:
        return ok("python", "the interpreter is linked statically (no libpython to call through)")
    built = " ".join(str(config_var(name) or "") for name in _BUILD_VARS)
    if any(flag in built for flag in _FOR_SPEED):
        return ok("python", f"the interpreter runs from {library}, built with optimisations")
    return warn(
        "python",
        f"the interpreter runs from {library}, built without optimisations (pyenv's default): "
        "agents spend ~15-20 % more CPU per turn than on a statically linked or optimised build",
        SLOW_BUILD_FIX,
    )


def _own_mappings() -> str:
    try:
        with open("/proc/self/maps") as maps:
            return maps.read()
    except OSError:  # not Linux, or no /proc mounted
        return ""


def _version_tuple(version: str) -> tuple[int, ...]:
    parts = []
    for piece in version.split("."):
        digits = re.match(r"\d+", piece)
        if digits is None:
            break
        parts.append(int(digits.group()))
    return tuple(parts)
