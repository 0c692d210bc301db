"""`goondan package add|remove|list|install`: a bundle's Goondan packages, installed with pip
into the environment goondan runs in, declared in goondan.yaml and pinned in goondan.lock.yaml.

A package is a Python distribution (docs/packages.md): `add` gets its wheel (`pip wheel
--no-deps`, or the wheel file given), records the wheel's sha256, installs it with pip, checks
that the distribution declares the package's entry point and that its version satisfies the
range, then edits goondan.yaml and the lock. `install` does the same from the lock, refusing a
wheel whose sha256 differs.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from goondan.bundle.depedit import EditError, read_dependencies, remove_dependency, set_dependency
from goondan.bundle.discover import main_file
from goondan.bundle.lockfile import LockEntry, LockError, read_lock, write_lock
from goondan.bundle.names import PACKAGE_NAME, PACKAGE_NAME_RULE
from goondan.bundle.packages import (
    BASE_PACKAGE,
    InstalledPackage,
    default_distribution,
    installed_packages,
    refresh,
)
from goondan.bundle.semver import Range, SemverError, Version

PIP_TAIL_LINES = 15


class PackageError(Exception):
    """What went wrong and where; printed as `goondan package: <message>`, exit 1."""


@dataclass
class Context:
    root: Path  # the bundle directory
    main: Path  # its goondan.yaml


def run_package(args: argparse.Namespace) -> int:
    try:
        ctx = _bundle(args.bundle)
        if args.action == "add":
            return _add(ctx, args.spec, args.pip_spec)
        if args.action == "remove":
            return _remove(ctx, args.name, args.uninstall)
        if args.action == "list":
            return _list(ctx)
        return _install(ctx, args.frozen_lockfile)
    except PackageError as exc:
        print(f"goondan package: {exc}", file=sys.stderr)
        return 1


# -- commands ------------------------------------------------------------------------------------


def _add(ctx: Context, spec: str, pip_spec: str | None) -> int:
    name, wanted = parse_spec(spec)
    if name == BASE_PACKAGE:
        if pip_spec:
            raise PackageError(f"{BASE_PACKAGE} comes with goondan; it takes no --pip-spec")
        package = _require_installed(name)
        base_range = wanted or f"^{package.version}"
        _check_range(package, base_range)
        _edit(ctx, lambda text: set_dependency(text, name, base_range, _default_name(ctx)))
        print(f"{name} {package.version} (built in): dependency {name}@{base_range}")
        return 0
    entry, package = _fetch_and_install(name, wanted, pip_spec, ctx.root)
    new_range = wanted or f"^{package.version}"
    _edit(ctx, lambda text: set_dependency(text, name, new_range, _default_name(ctx)))
    lock = _read_lock(ctx)
    lock[name] = entry
    write_lock(ctx.root, lock)
    print(
        f"added {name} {package.version} (distribution {package.distribution}, "
        f"sha256 {entry.sha256[:12]}…) as {name}@{new_range}; locked in goondan.lock.yaml"
    )
    return 0


def _remove(ctx: Context, name: str, uninstall: bool) -> int:
    lock = _read_lock(ctx)
    entry = lock.pop(name, None)
    _edit(ctx, lambda text: remove_dependency(text, name))
    write_lock(ctx.root, lock)
    print(f"removed {name} from {ctx.main.name}" + (" and goondan.lock.yaml" if entry else ""))
    if uninstall and entry is not None:
        _pip("uninstall", "-y", entry.distribution)
        print(f"uninstalled distribution {entry.distribution}")
    return 0


def _list(ctx: Context) -> int:
    deps = _dependencies(ctx)
    lock = _read_lock(ctx)
    installed = installed_packages()
    rows = [("PACKAGE", "RANGE", "INSTALLED", "LOCKED", "DISTRIBUTION", "STATUS")]
    problems = 0
    for name, wanted in deps:
        package = installed.get(name)
        entry = lock.get(name)
        status = _status(name, wanted, package, entry)
        problems += status != "ok"
        rows.append(
            (
                name,
                wanted,
                package.version if package else "-",
                entry.version if entry else "-",
                package.distribution if package else (entry.distribution if entry else "-"),
                status,
            )
        )
    if len(rows) == 1:
        print(f"{ctx.main} declares no dependencies")
        return 0
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return 1 if problems else 0


def _install(ctx: Context, frozen: bool) -> int:
    deps = _dependencies(ctx)
    lock = _read_lock(ctx)
    declared = {name for name, _ in deps}
    if frozen:
        missing = [n for n, _ in deps if n != BASE_PACKAGE and n not in lock]
        extra = [n for n in lock if n not in declared]
        stale = [n for n, w in deps if n in lock and not _satisfies(lock[n].version, w)]
        if missing or extra or stale:
            parts = [
                f"not locked: {', '.join(missing)}" if missing else "",
                f"locked but not a dependency: {', '.join(extra)}" if extra else "",
                f"locked outside its range: {', '.join(stale)}" if stale else "",
            ]
            raise PackageError(
                f"goondan.lock.yaml does not match {ctx.main.name} "
                f"({'; '.join(p for p in parts if p)}); run `goondan package install` "
                "without --frozen-lockfile to update it"
            )
    new_lock: dict[str, LockEntry] = {}
    for name, wanted in deps:
        if name == BASE_PACKAGE:
            _check_range(_require_installed(name), wanted)
            continue
        entry = lock.get(name)
        if entry is not None and _satisfies(entry.version, wanted):
            new_lock[name] = _install_locked(entry, ctx.root)
        else:
            new_lock[name], _ = _fetch_and_install(name, wanted, None, ctx.root)
    write_lock(ctx.root, new_lock)
    print(f"{len(new_lock)} package(s) installed as goondan.lock.yaml says")
    return 0


# -- pieces --------------------------------------------------------------------------------------


def parse_spec(spec: str) -> tuple[str, str | None]:
    """`@acme/search@^1.2` -> ("@acme/search", "^1.2"); the range is checked here."""
    at = spec.find("@", 1)
    name, wanted = (spec, None) if at < 0 else (spec[:at], spec[at + 1 :])
    if not PACKAGE_NAME.match(name):
        raise PackageError(f"'{name}' is not a package name: {PACKAGE_NAME_RULE}")
    if wanted is not None:
        try:
            Range.parse(wanted)
        except SemverError as exc:
            raise PackageError(str(exc)) from exc
    return name, wanted or None


def _bundle(path: str | None) -> Context:
    root = Path(path or ".").resolve()
    if root.is_file():
        root = root.parent
    main = main_file(root)
    if main is None:
        raise PackageError(f"{root} has no goondan.yaml (give the bundle with --bundle PATH)")
    return Context(root=root, main=main)


def _dependencies(ctx: Context) -> list[tuple[str, str]]:
    try:
        return read_dependencies(ctx.main.read_text(encoding="utf-8"))
    except (OSError, EditError) as exc:
        raise PackageError(f"{ctx.main}: {exc}") from exc


def _read_lock(ctx: Context) -> dict[str, LockEntry]:
    try:
        return read_lock(ctx.root)
    except LockError as exc:
        raise PackageError(str(exc)) from exc


def _edit(ctx: Context, change: Callable[[str], str]) -> None:
    text = ctx.main.read_text(encoding="utf-8")
    try:
        new = change(text)
    except EditError as exc:
        raise PackageError(f"{ctx.main}: {exc}") from exc
    if new != text:
        ctx.main.write_text(new, encoding="utf-8")


def _default_name(ctx: Context) -> str:
    """A Package name for a bundle that has no Package document yet: its directory's name."""
    name = re.sub(r"[^a-z0-9._-]+", "-", ctx.root.name.lower()).strip("-._")
    return name or "bundle"


def _require_installed(name: str) -> InstalledPackage:
    refresh()
    package = installed_packages().get(name)
    if package is None:
        raise PackageError(f"package {name} is not installed in {sys.prefix}")
    return package


def _satisfies(version: str, wanted: str) -> bool:
    try:
        return Range.parse(wanted).satisfied_by(Version.parse(version))
    except SemverError:
        return False


def _check_range(package: InstalledPackage, wanted: str) -> None:
    if not _satisfies(package.version, wanted):
        raise PackageError(
            f"{package.name} {package.version} (distribution {package.distribution}) does "
            f"not satisfy the range {wanted}"
        )


def _status(
    name: str, wanted: str, package: InstalledPackage | None, entry: LockEntry | None
) -> str:
    if package is None:
        return "not installed"
    if not _satisfies(package.version, wanted):
        return f"{package.version} outside {wanted}"
    if entry is not None and entry.version != package.version:
        return f"lock says {entry.version}"
    if entry is None and name != BASE_PACKAGE:
        return "not locked"
    return "ok"


def _fetch_and_install(
    name: str, wanted: str | None, pip_spec: str | None, root: Path
) -> tuple[LockEntry, InstalledPackage]:
    """Get the wheel for `name` (from `pip_spec`, else its distribution by convention,
    constrained by the range), install it, check it, and return its lock entry."""
    if pip_spec is None:
        specifier = Range.parse(wanted).pep440() if wanted else ""
        pip_spec = default_distribution(name) + (specifier or "")
    local = Path(pip_spec).expanduser()
    with tempfile.TemporaryDirectory(prefix="goondan-wheel-") as tmp:
        wheel = _wheel(pip_spec, Path(tmp))
        digest = _sha256(wheel)
        package = _install_wheel(wheel, name)
        if wanted is not None:
            _check_range(package, wanted)
    if local.exists():
        # Inside the bundle (say, a wheels/ directory committed with it): relative, so the
        # lock works wherever the bundle is checked out.
        resolved = local.resolve()
        source = str(resolved.relative_to(root) if resolved.is_relative_to(root) else resolved)
    else:
        source = f"{package.distribution}=={package.version}"
    entry = LockEntry(
        name=name,
        version=package.version,
        distribution=package.distribution,
        wheel=wheel.name,
        sha256=digest,
        source=source,
    )
    return entry, package


def _install_locked(entry: LockEntry, root: Path) -> LockEntry:
    """Reinstall the locked wheel unless that exact version is installed already."""
    refresh()
    current = installed_packages().get(entry.name)
    if current is not None and (current.version, current.distribution) == (
        entry.version,
        entry.distribution,
    ):
        print(f"{entry.name} {entry.version}: already installed")
        return entry
    source = entry.source
    if (root / source).exists():  # a path relative to the bundle
        source = str(root / source)
    with tempfile.TemporaryDirectory(prefix="goondan-wheel-") as tmp:
        wheel = _wheel(source, Path(tmp))
        digest = _sha256(wheel)
        if digest != entry.sha256:
            raise PackageError(
                f"{entry.name}: the wheel {wheel.name} from {entry.source} has sha256 "
                f"{digest}, but goondan.lock.yaml says {entry.sha256}; nothing was installed"
            )
        package = _install_wheel(wheel, entry.name)
    if package.version != entry.version:
        raise PackageError(
            f"{entry.name}: installed {package.version}, but goondan.lock.yaml says {entry.version}"
        )
    print(f"{entry.name} {entry.version}: installed (sha256 checked)")
    return entry


def _wheel(pip_spec: str, directory: Path) -> Path:
    """The wheel file for `pip_spec`: the file itself, or what `pip wheel --no-deps` saves."""
    local = Path(pip_spec).expanduser()
    if local.is_file() and local.suffix == ".whl":
        return local.resolve()
    _pip("wheel", "--no-deps", "--wheel-dir", str(directory), pip_spec)
    wheels = sorted(directory.glob("*.whl"))
    if len(wheels) != 1:
        raise PackageError(f"pip wheel {pip_spec} saved {len(wheels)} wheels, expected one")
    return wheels[0]


def _install_wheel(wheel: Path, name: str) -> InstalledPackage:
    """pip-install `wheel` (and its own requirements); then find package `name` in it."""
    dist_name = wheel.name.split("-", 1)[0]
    refresh()
    before = {(p.distribution, p.version) for p in installed_packages().values() if p.name == name}
    _pip("install", str(wheel))
    version = wheel.name.split("-")[1] if wheel.name.count("-") >= 2 else ""
    if (dist_name.replace("_", "-"), version) in {(d.replace("_", "-"), v) for d, v in before}:
        # pip keeps an installed distribution of the same version: make it this very wheel.
        _pip("install", "--force-reinstall", "--no-deps", str(wheel))
    refresh()
    found = installed_packages()
    package = found.get(name)
    if package is None or _norm(package.distribution) != _norm(dist_name):
        ours = _norm(dist_name)
        provided = sorted(p.name for p in found.values() if _norm(p.distribution) == ours)
        raise PackageError(
            f"pip installed {wheel.name}, but it declares no `goondan.packages` entry point "
            f"named {name} (it declares: {', '.join(provided) or 'none'}); "
            "see docs/packages.md, 'Writing a package'"
        )
    if package.root is None:
        raise PackageError(
            f"{name}: distribution {package.distribution} names module {package.module}, "
            "which cannot be found after installing it"
        )
    return package


def _norm(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 16), b""):
            digest.update(block)
    return digest.hexdigest()


def _pip(*args: str) -> None:
    """`python -m pip ARGS` in goondan's own environment; its output's tail on failure."""
    command = [sys.executable, "-m", "pip", *args, "--disable-pip-version-check"]
    proc = subprocess.run(command, capture_output=True, text=True)
    if proc.returncode != 0:
        lines = (proc.stdout + proc.stderr).strip().splitlines()
        tail = "\n  ".join(lines[-PIP_TAIL_LINES:])
        raise PackageError(
            f"pip {' '.join(args)} failed (exit {proc.returncode}) in {sys.prefix}:\n  {tail}"
        )
