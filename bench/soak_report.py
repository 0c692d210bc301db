"""What the soak counts, and how: every request's fate from the clients' answers, the journal
snapshots and the ledger; then the table and the JSON file.

- accepted: the daemon journaled it: the client got an answer other than a refusal, or a
  journal snapshot held it, or the ledger shows a turn for it.
- refused: answered with a typed refusal (`E_STORAGE`, `MESSAGE_TOO_LARGE`) and no turn ran.
- answered: accepted, and a coordinator turn finished for it: the client got an `ok`
  answer, or the ledger holds the coordinator's line (a replay after a restart finished it),
  or the stored conversation shows the turn finished after a crash cut its own
  `ledger__record` call short (`E_TOOL_INTERRUPTED`: tools run at most once, so that line is
  never written; counted apart as `answeredAfterInterruptedTool`).
- failed: accepted, not answered, but the client got a typed error (it was told).
- lost: accepted and none of the above. Must be 0.
- unacknowledged: the daemon died before the client got any answer and nothing shows it was
  journaled: never accepted, so not lost.
- duplicated: the client got two answers for one request, or one agent process ran the same
  request's turn twice with no crash (harness kill, daemon death, agent respawn) since the
  request was sent, nor, for a journaled input, the end of a disk-full episode. Since the
  request, not since the first run's line: a coordinator killed while its delegate ran
  delegates again once redelivered, and the worker's first line comes after that kill.
  Redelivery after a crash is at-least-once by design and is not a duplicate; so is the
  journal's delivery again of an input whose replay failed on the full disk (`E_STORAGE`):
  once space returns it runs again, from its input if other turns of its instance followed
  it (`Replay.superseded`).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec

from bench.soak_bundle import CoordinatorTurn, LedgerLine
from bench.soak_load import REFUSAL_CODES, Request


class Fates(msgspec.Struct):
    sent: int = 0
    accepted: int = 0
    answered: int = 0
    answered_by_replay: int = 0  # answered, though the client saw no answer
    answered_after_interrupted_tool: int = 0  # its coordinator's ledger call was cut short
    refused: int = 0
    failed: int = 0
    lost: int = 0
    unacknowledged: int = 0
    duplicated_answers: int = 0
    duplicated_turns: int = 0
    forged_answers: int = 0  # an `ok` answer the real agents did not write
    wrong_answers: int = 0  # `ok`, but not the expected text (e.g. the worker's error)
    hung: int = 0  # no answer within the request's timeout while the daemon stayed up
    client_outcomes: dict[str, int] = {}
    error_codes: dict[str, int] = {}
    lost_ids: list[str] = []
    wrong_samples: list[str] = []  # the first few unexpected `ok` texts
    lost_details: list[str] = []  # "<id>: client saw <outcome>, ledger <roles>" (first 50)
    duplicated_ids: list[str] = []
    # "<id>: client saw <outcome>, <n> answers, journaled or not; ledger <role> pid <pid> at
    # <time> turn <id>, ..." (first 50): what tells a redelivery from a turn run twice
    duplicated_details: list[str] = []

    @property
    def duplicated(self) -> int:
        return self.duplicated_answers + self.duplicated_turns


def classify(
    requests: list[Request],
    journal_ids: Mapping[str, str],
    ledger: list[LedgerLine],
    crash_times: list[tuple[float, float]],
    turns: Mapping[str, CoordinatorTurn] | None = None,
    disk_freed_times: list[float] | None = None,
) -> Fates:
    """`crash_times`: when each crash may have happened, (earliest, latest); `turns`: what
    the coordinators' conversations show (`soak_bundle.coordinator_turns`);
    `disk_freed_times`: when each disk-full episode ended."""
    turns = turns or {}
    freed = [(t, t) for t in disk_freed_times or []]
    redelivered_journaled = crash_times + freed
    fates = Fates(sent=len(requests))
    by_id: dict[str, list[LedgerLine]] = defaultdict(list)
    for line in ledger:
        by_id[line.request_id].append(line)
    outcomes: Counter[str] = Counter()
    codes: Counter[str] = Counter()
    for req in requests:
        outcomes[req.outcome] += 1
        lines = by_id.get(req.request_id, [])
        coordinator_done = any(line.role == "coordinator" for line in lines)
        if req.outcome == "error":
            codes[req.code] += 1
        if req.outcome == "error" and req.code in REFUSAL_CODES and not lines:
            fates.refused += 1
            continue
        told = req.outcome in ("ok", "forged", "wrong", "error")
        if not (told or req.request_id in journal_ids or lines):
            fates.unacknowledged += 1
            continue
        fates.accepted += 1
        fates.forged_answers += req.outcome == "forged"
        fates.wrong_answers += req.outcome == "wrong"
        if req.outcome == "wrong" and len(fates.wrong_samples) < 5:
            fates.wrong_samples.append(f"{req.request_id}: {req.code}")
        fates.hung += req.outcome == "no_answer"
        turn = turns.get(req.request_id)
        cut_short = not coordinator_done and turn is not None and turn.answered and turn.cut_short
        if req.outcome in ("ok", "forged", "wrong") or coordinator_done or cut_short:
            fates.answered += 1
            fates.answered_by_replay += not told
            fates.answered_after_interrupted_tool += cut_short
        elif req.outcome == "error":
            fates.failed += 1
        else:
            fates.lost += 1
            fates.lost_ids.append(req.request_id)
            roles = ",".join(line.role for line in lines) or "empty"
            journal_id = journal_ids.get(req.request_id)
            journaled = f"journaled as {journal_id}" if journal_id else "not in a snapshot"
            stored = turn.summary if turn is not None else "no turn stored"
            fates.lost_details.append(
                f"{req.request_id}: client saw {req.outcome}, {journaled}, ledger {roles}; "
                f"coordinator: {stored}"
            )
        if req.answers > 1:
            fates.duplicated_answers += 1
        elif _turn_twice_without_crash(
            lines,
            req.sent_at,
            redelivered_journaled if req.request_id in journal_ids else crash_times,
        ):
            fates.duplicated_turns += 1
        else:
            continue
        fates.duplicated_ids.append(req.request_id)
        journaled = "journaled" if req.request_id in journal_ids else "not journaled"
        shown = ", ".join(
            f"{line.role} pid {line.pid} at {line.at:.3f} turn {line.turn_id}" for line in lines
        )
        fates.duplicated_details.append(
            f"{req.request_id}: client saw {req.outcome}, {req.answers} answers, {journaled}; "
            f"ledger {shown or 'empty'}"
        )
    fates.client_outcomes = dict(outcomes)
    fates.error_codes = dict(codes)
    return fates


def _turn_twice_without_crash(
    lines: list[LedgerLine], sent_at: float, redeliveries: list[tuple[float, float]]
) -> bool:
    """One process ran the request's turn again, and nothing that redelivers (each given as
    the span it may have happened in) can have happened between the request and the run."""
    seen: set[tuple[str, int]] = set()
    for line in sorted(lines, key=lambda item: item.at):
        key = (line.role, line.pid)
        if key in seen and not any(lo <= line.at and hi >= sent_at for lo, hi in redeliveries):
            return True
        seen.add(key)
    return False


def render(report: dict[str, Any]) -> str:
    fates = report["fates"]
    disk = report["stateRootKiB"]
    rows = [
        ("duration", f"{report['minutes']:g} min ({report['elapsedSeconds']:.0f} s)"),
        ("requests sent", fates["sent"]),
        ("accepted", fates["accepted"]),
        ("answered once", fates["answered"] - fates["duplicatedAnswers"]),
        ("  of which finished by a replay", fates["answeredByReplay"]),
        ("  of which its own tool call was cut short", fates["answeredAfterInterruptedTool"]),
        ("refused (typed: E_STORAGE, MESSAGE_TOO_LARGE)", fates["refused"]),
        ("failed (typed error answer)", fates["failed"]),
        ("unacknowledged (daemon died before journaling)", fates["unacknowledged"]),
        ("LOST (must be 0)", fates["lost"]),
        ("DUPLICATED (must be 0)", fates["duplicatedAnswers"] + fates["duplicatedTurns"]),
        ("  two answers to one request", fates["duplicatedAnswers"]),
        ("  a turn twice without a crash", fates["duplicatedTurns"]),
        ("forged answers delivered", fates["forgedAnswers"]),
        ("wrong answers (ok, unexpected text)", fates["wrongAnswers"]),
        ("hung (no answer, daemon up)", fates["hung"]),
        ("daemon restarts", report["daemonRestarts"]),
        ("  of which unexpected daemon deaths", len(report["unexpectedDaemonExits"])),
        ("agent kills", report["agentKills"]),
        ("agents outliving the orchestrator", report["orphanedAgents"]),
        ("disk-full episodes", report["diskFullEpisodes"]),
        ("peak RSS orchestrator", f"{report['peakRssKiB']['orchestrator'] / 1024:.1f} MiB"),
        ("peak RSS agents (total)", f"{report['peakRssKiB']['agents'] / 1024:.1f} MiB"),
        ("journal drained at the end", report["journalDrained"]),
        (
            "state root used by the daemon (peak / size)",
            f"{disk['peakUsedByTheDaemon'] / 1024:.1f} / {disk['size'] / 1024:.0f} MiB",
        ),
    ]
    width = max(len(name) for name, _ in rows)
    out = [f"| {'figure'.ljust(width)} | value |", f"|{'-' * (width + 2)}|-------|"]
    out.extend(f"| {name.ljust(width)} | {value} |" for name, value in rows)
    out.append("")
    out.append("attacks run:")
    for name, count in sorted(report["attacks"].items()):
        out.append(f"- {name}: {count}")
    if fates["errorCodes"]:
        out.append(f"error answers by code: {fates['errorCodes']}")
    if report["fatal"]:
        out.append(f"RUN CUT SHORT: {report['fatal']}")
    for death in report["unexpectedDaemonExits"]:
        out.append(f"unexpected daemon exit: {death}")
    return "\n".join(out)


def write(report: dict[str, Any], path: Path) -> None:
    path.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")


def to_json(fates: Fates) -> dict[str, Any]:
    data: dict[str, Any] = msgspec.to_builtins(fates)
    camel = {_camel(key): value for key, value in data.items()}
    camel["lostIds"] = camel["lostIds"][:50]
    camel["duplicatedIds"] = camel["duplicatedIds"][:50]
    camel["lostDetails"] = camel["lostDetails"][:50]
    camel["duplicatedDetails"] = camel["duplicatedDetails"][:50]
    return camel


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)
