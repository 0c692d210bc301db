"""`goondan doctor`'s verdicts and how they are printed: one line per check."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Literal, TextIO

Status = Literal["ok", "warn", "fail"]

_COLOURS = {"ok": "\033[32m", "warn": "\033[33m", "fail": "\033[31m"}
_RESET = "\033[0m"


@dataclass(frozen=True)
class Check:
    status: Status
    area: str  # "python", "state root", "bundle", "env", "endpoint", "port", "systemd"
    what: str
    fix: str | None = None


def ok(area: str, what: str) -> Check:
    return Check("ok", area, what)


def warn(area: str, what: str, fix: str | None = None) -> Check:
    return Check("warn", area, what, fix)


def fail(area: str, what: str, fix: str | None = None) -> Check:
    return Check("fail", area, what, fix)


def exit_code(checks: list[Check]) -> int:
    return 1 if any(c.status == "fail" for c in checks) else 0


def print_report(checks: list[Check], out: TextIO, *, as_json: bool, colour: bool) -> None:
    if as_json:
        report = {"ok": exit_code(checks) == 0, "checks": [asdict(c) for c in checks]}
        out.write(json.dumps(report, ensure_ascii=False, indent=2) + "\n")
        return
    width = max((len(c.area) for c in checks), default=0)
    for check in checks:
        status = f"{check.status:<4}"
        if colour:
            status = f"{_COLOURS[check.status]}{status}{_RESET}"
        out.write(f"{status} {check.area:<{width}}  {check.what}\n")
        if check.fix and check.status != "ok":
            out.write(f"     {'':<{width}}  fix: {check.fix}\n")
    counts = {s: sum(1 for c in checks if c.status == s) for s in ("ok", "warn", "fail")}
    out.write(f"{counts['ok']} ok, {counts['warn']} warnings, {counts['fail']} failed\n")
