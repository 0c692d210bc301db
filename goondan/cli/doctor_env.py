"""`goondan doctor`: the environment variables a bundle needs, and whether each is set (and from
where). Values are never read into a message."""

from __future__ import annotations

from collections.abc import Mapping

from goondan.bundle import Bundle
from goondan.bundle.env_needs import env_needs
from goondan.cli.doctor_report import Check, fail, ok, warn
from goondan.envfiles import EnvFiles


def check_env(bundle: Bundle, env_files: EnvFiles, environ: Mapping[str, str]) -> list[Check]:
    checks: list[Check] = []
    for need in env_needs(bundle):
        found = next((name for name in need.names if name in environ), None)
        if found is not None:
            source = env_files.source_of(found) or "process environment"
            checks.append(ok("env", f"{found} is set ({source}), for {need.where}"))
            continue
        names = " / ".join(need.names)
        fix = (
            f"export {need.names[0]}=... or add it to {env_files.bundle_root() / '.env'} "
            "(or an --env-file)"
        )
        if need.required:
            checks.append(fail("env", f"{names} is not set, needed by {need.where}", fix))
        else:
            checks.append(warn("env", f"{names} is not set, read by {need.where}", fix))
    if not checks:
        checks.append(ok("env", "the bundle reads no environment variables"))
    return checks
