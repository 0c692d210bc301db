"""`goondan doctor [PATH] [--state-root DIR] [--online] [--json]`: check what `goondan run`
needs, one line per check (ok / warn / fail, what, how to fix); exit 1 when a check failed.

The checks: Python and dependency versions and the interpreter's build (`doctor_python`), the
state root, the bundle, the environment variables it reads (`doctor_env`), its model endpoints
and connector ports (`doctor_net`), its MCP servers (started, asked for their tools, stopped:
`tools_cmd`), and systemd hints.
Nothing here prints a variable's value.
"""

from __future__ import annotations

import argparse
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

from goondan.bundle import PROBE_TIMEOUT_S, Bundle, BundleInvalid, load_bundle, probe_entries
from goondan.cli.client import daemon_running
from goondan.cli.doctor_env import check_env
from goondan.cli.doctor_net import check_endpoints, check_ports
from goondan.cli.doctor_python import check_python
from goondan.cli.doctor_report import Check, exit_code, fail, ok, print_report, warn
from goondan.cli.tools_cmd import check_mcp
from goondan.envfiles import EnvFileError, EnvFiles
from goondan.paths import StatePaths

LOW_DISK_BYTES = 500 * 1024 * 1024


def run_doctor(args: argparse.Namespace) -> int:
    checks: list[Check] = []
    checks += check_python()
    env_files = EnvFiles(args.path, args.env_file or ())
    try:
        env_files.load()
        if env_files.layer.files:
            checks.append(ok("env", "env files read: " + ", ".join(env_files.layer.files)))
    except EnvFileError as exc:
        fix = "fix the line (NAME=value), or the --env-file path"
        checks += [fail("env", error.render().split("\n")[0], fix) for error in exc.errors]
    paths = StatePaths.at(args.state_root)
    try:
        running = daemon_running(paths)
    except OSError:  # reported by the state-root checks
        running = False
    try:
        checks += check_state_root(paths)
    except OSError as exc:  # e.g. a state root of another user's, not even searchable
        where = exc.filename or paths.root
        fix = "use a state root of your own (--state-root DIR or $GOONDAN_STATE_ROOT)"
        checks.append(fail("state root", f"{where}: {exc.strerror or exc}", fix))
    bundle_checks, bundle = _check_bundle(args.path)
    checks += bundle_checks
    if bundle is not None:
        checks += check_env(bundle, env_files, os.environ)
        checks += check_endpoints(bundle, os.environ, online=args.online)
        checks += check_ports(bundle, os.environ, daemon_running=running)
        checks += check_mcp(bundle)
    checks += check_systemd()
    print_report(checks, sys.stdout, as_json=args.json, colour=sys.stdout.isatty())
    return exit_code(checks)


# -- the state root ------------------------------------------------------------------------


def check_state_root(paths: StatePaths) -> list[Check]:
    root = paths.root
    if not root.exists():
        parent = next((p for p in root.parents if p.exists()), Path("/"))
        if os.access(parent, os.W_OK | os.X_OK):
            return [ok("state root", f"{root} does not exist yet; `goondan run` creates it")]
        fix = f"create it (mkdir -p {root}) or pass --state-root / set GOONDAN_STATE_ROOT"
        return [fail("state root", f"{root} cannot be created ({parent} is not writable)", fix)]
    if not root.is_dir():
        return [fail("state root", f"{root} is not a directory", "pass another --state-root")]
    checks: list[Check] = []
    for directory in (root, paths.run_dir):
        if not directory.exists():
            continue
        info = directory.stat()
        if info.st_uid != os.getuid():
            fix = f"chown -R {os.getuid()} {root}, or use a state root of your own"
            checks.append(fail("state root", f"{directory} is owned by uid {info.st_uid}", fix))
        elif info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            mode = oct(stat.S_IMODE(info.st_mode))
            what = f"{directory} is writable by group or others ({mode})"
            checks.append(fail("state root", what, f"chmod 700 {directory}"))
    if not checks:
        checks.append(ok("state root", f"{root}: owned by you, private"))
    usage = shutil.disk_usage(root)
    free = f"{usage.free / 2**30:.1f} GiB free"
    if usage.free < LOW_DISK_BYTES:
        fix = "free some space: conversations and the journal are written there"
        checks.append(warn("state root", f"{root}: only {free}", fix))
    else:
        checks.append(ok("state root", f"{root}: {free}"))
    checks.append(_check_daemon(paths))
    return checks


def _check_daemon(paths: StatePaths) -> Check:
    lock = paths.lock_file
    if not lock.exists():
        return ok("daemon", "no daemon is running (none has run on this state root)")
    try:
        holder = lock.read_text(errors="replace").strip() or "?"
        running = daemon_running(paths)
    except OSError as exc:
        return fail(
            "daemon", f"{lock} cannot be read: {exc.strerror}", f"check the owner of {lock}"
        )
    if running:
        return ok("daemon", f"a daemon is running (pid {holder}); `goondan status` shows it")
    if paths.info_file.exists():
        return warn(
            "daemon",
            f"stale lock: the daemon (pid {holder}) did not stop cleanly and none runs now",
            "nothing to do: the next `goondan run` takes the lock and redelivers journaled "
            "inputs; look at the logs for why it died",
        )
    return ok("daemon", "no daemon is running (the last one stopped cleanly)")


# -- the bundle ----------------------------------------------------------------------------


def _check_bundle(path: str) -> tuple[list[Check], Bundle | None]:
    """Load and validate the bundle, and import its entries: its checks, and the bundle when
    it loaded."""
    try:
        bundle = load_bundle(path)
    except BundleInvalid as exc:
        fix = f"run `goondan validate {path}` for the details"
        return [fail("bundle", error.render().split("\n")[0], fix) for error in exc.errors], None
    except OSError as exc:
        return [fail("bundle", f"{path}: {exc.strerror or exc}", "pass the bundle's path")], None
    # The same deep check as `goondan validate`: each Python entry imported in a throwaway
    # process, so a SyntaxError or a missing handler shows here, not on the first request.
    problems = probe_entries(bundle, PROBE_TIMEOUT_S)
    checks = [
        (warn if problem.severity == "warning" else fail)(
            "bundle", problem.render().split("\n")[0], f"run `goondan validate {path}`"
        )
        for problem in problems
    ]
    if not any(check.status == "fail" for check in checks):
        swarms = ", ".join(bundle.swarm_names()) or "none"
        what = f"{path} is valid ({len(bundle.resources)} resources; swarms: {swarms})"
        checks.insert(0, ok("bundle", what))
    return checks, bundle


# -- systemd -------------------------------------------------------------------------------

UNIT_DIRS = (
    Path("/etc/systemd/system"),
    Path("/usr/lib/systemd/system"),
    Path("/lib/systemd/system"),
    Path.home() / ".config/systemd/user",
)


def check_systemd() -> list[Check]:
    """Hints only: never a failure."""
    docs = "see configs/systemd/goondan.service and docs/operations.md (Running as a service)"
    if not Path("/run/systemd/system").is_dir() or shutil.which("systemctl") is None:
        return [ok("systemd", f"systemd is not running here; to run goondan as a service, {docs}")]
    units = sorted({p for d in UNIT_DIRS if d.is_dir() for p in d.glob("goondan*.service")})
    if not units:
        return [warn("systemd", "no goondan unit is installed", docs)]
    checks = []
    for unit in units:
        user = str(unit).startswith(str(Path.home()))
        argv = ["systemctl", *(["--user"] if user else []), "is-enabled", unit.name]
        try:
            state = subprocess.run(
                argv, capture_output=True, text=True, timeout=5, check=False
            ).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            state = "unknown"
        if state == "enabled":
            checks.append(ok("systemd", f"{unit} is installed and enabled"))
        else:
            fix = f"systemctl {'--user ' if user else ''}enable --now {unit.name}"
            checks.append(warn("systemd", f"{unit} is installed but {state or 'not enabled'}", fix))
    return checks
