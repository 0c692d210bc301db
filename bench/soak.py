"""`make soak`: real delegations for N minutes while the daemon is attacked, then a count.

    python -m bench.soak --minutes 10 [--state-root DIR] [--report soak.json]

Several clients send `req <id>` to a coordinator that delegates to a worker (scripted model,
offline). Meanwhile, at random: agents and the orchestrator are SIGKILLed (the orchestrator is
started again on the same state root, which replays its journal), the state root's small
tmpfs is filled and freed, and hostile peers connect to `agents.sock` and `control.sock`. At
the end the daemon is stopped, started once more to drain its journal, and every request's fate
is counted (see `bench/soak_report.py`). Exit 1 when a request was lost or duplicated.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench import soak_attacks as attacks
from bench import soak_report
from bench.soak_bundle import (
    AGENTS,
    CoordinatorTurn,
    coordinator_turns,
    read_ledger,
    write_bundle,
)
from bench.soak_daemon import SoakDaemon, StartFailed, disk_used_kib, largest_files, rss_kib
from bench.soak_load import Clients

# Episodes per minute of each attack, by default; `--rate-scale` multiplies them all.
RATES = {
    "kill_agent": 6.0,
    "kill_orchestrator": 1.5,
    "disk_full": 1.0,
    "half_open": 2.0,
    "garbage": 3.0,
    "huge_frame": 2.0,
    "forged_results": 3.0,
}
# A peer attack's episode started this long after its time is dropped (`Soak._peers`).
LATE_S = 1.0


class Soak:
    def __init__(self, args: argparse.Namespace, workdir: Path, state_root: Path) -> None:
        self.args = args
        self.ledger = workdir / "ledger.txt"
        bundle = write_bundle(workdir / "bundle", self.ledger, int(args.request_timeout * 500))
        self.daemon = SoakDaemon(bundle, state_root, workdir / "daemon.log")
        self.clients = Clients(
            args.clients,
            state_root / "run" / "control.sock",
            self.daemon.generation,
            args.request_timeout,
            args.think_ms / 1000,
        )
        self.rng = random.Random(args.seed)
        self.attacks: Counter[str] = Counter()
        self.notes: dict[str, str] = {}
        # When each crash (a kill, a death, a respawn seen) may have happened: (earliest,
        # latest), one moment for the harness's own kills, a span for what it only noticed.
        self.crash_times: list[tuple[float, float]] = []
        self._alive_at = time.time()  # the sampler last saw the orchestrator alive
        self.disk_freed_times: list[float] = []  # when each disk-full episode ended
        self.unexpected_exits: list[str] = []
        self.orphans = 0
        self.peak = {"orchestrator": 0, "agents": 0}
        self.disk_peak_kib = 0  # outside the harness's own filler episodes
        self.filling = False
        self.fatal = ""
        self.disk_at_end: tuple[int, list[str]] = (0, [])
        self.turns: dict[str, CoordinatorTurn] = {}  # read from the state root at the end
        self._last_agents: list[int] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()  # kills and restarts vs the hostile peers' thread

    # -- the run -------------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        started = time.monotonic()
        self.daemon.start()
        sampler = threading.Thread(target=self._sample, name="soak-sampler", daemon=True)
        peers = threading.Thread(target=self._peers, name="soak-peers", daemon=True)
        sampler.start()
        self.clients.start()
        peers.start()
        try:
            self._chaos(started + self.args.minutes * 60)
        except StartFailed as exc:  # the run cannot go on; the count still tells what it saw
            self.fatal = str(exc)
        self._stop.set()
        peers.join(30)
        self.clients.stop(self.args.request_timeout + 10)
        try:
            drained = self._drain()
        except StartFailed as exc:
            self.fatal = self.fatal or str(exc)
            drained = False
        sampler.join(5)
        return self._report(time.monotonic() - started, drained)

    def _schedule(self, names: list[str], until: float) -> list[tuple[float, str, bool]]:
        """Every attack once in the first half of the run (marked True: never skipped),
        then at its rate."""
        now = time.monotonic()
        span = until - now
        plan = [(now + self.rng.uniform(0.1, 0.5) * span, name, True) for name in names]
        for name in names:
            per_s = RATES[name] * self.args.rate_scale / 60
            at = now
            while per_s > 0:
                at += self.rng.expovariate(per_s)
                if at >= until:
                    break
                plan.append((at, name, False))
        return sorted(plan)

    def _chaos(self, until: float) -> None:
        plan = self._schedule(["kill_agent", "kill_orchestrator", "disk_full"], until)
        while time.monotonic() < until:
            with self._lock:
                self._watch_daemon()
                if plan and plan[0][0] <= time.monotonic():
                    self._attack(plan.pop(0)[1])
            time.sleep(0.05)

    def _peers(self) -> None:
        until = time.monotonic() + self.args.minutes * 60
        names = ["half_open", "garbage", "huge_frame", "forged_results"]
        for at, name, first in self._schedule(names, until):
            while time.monotonic() < at and not self._stop.is_set():
                time.sleep(0.05)
            if self._stop.is_set():
                return
            # One thread runs them in turn, and some hold for seconds (half-open sockets):
            # an episode the thread reaches late is dropped, so that the rest keep to the
            # plan and every attack's first episode comes within the run.
            if not first and time.monotonic() - at > LATE_S:
                continue
            with self._lock:
                self._watch_daemon()
            self._attack(name)

    def _attack(self, name: str) -> None:
        run = self.daemon.state_root / "run"
        sockets = [run / "agents.sock", run / "control.sock"]
        note = ""
        try:
            if name == "kill_agent":
                pids = self.daemon.agent_pids()
                if not pids:
                    return  # none running now; the next one will find one
                agent = self.rng.choice(sorted(pids))
                now = time.time()
                self.crash_times.append((now, now))
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pids[agent], 9)
                note = agent
            elif name == "kill_orchestrator":
                now = time.time()
                self.crash_times.append((now, now))
                self.orphans += len(self.daemon.kill())
                self.daemon.start()
            elif name == "disk_full":
                self.filling = True
                try:
                    _, note = attacks.fill_disk(self.daemon.state_root, self.args.disk_hold)
                finally:
                    self.filling = False
                    self.disk_freed_times.append(time.time())
            elif name == "half_open":
                note = attacks.half_open(sockets, self.args.half_open, hold_s=2.0)
            elif name == "garbage":
                note = attacks.garbage(sockets, 20)
            elif name == "huge_frame":
                note = attacks.huge_frame(sockets)
            elif name == "forged_results":
                identity = self.rng.choice(AGENTS)
                ids = self.daemon.journal_correlation_ids()
                note = attacks.forged_results(sockets[0], identity, ids)
        except Exception as exc:  # an attack that could not run is reported, not fatal
            note = f"failed: {type(exc).__name__}: {exc}"
            self.attacks[f"{name} (failed)"] += 1
        else:
            self.attacks[name] += 1
        self.notes[name] = note

    def _watch_daemon(self) -> None:
        """A daemon that died of something else is recorded and started again."""
        if self.daemon.alive() or self.daemon.proc is None:
            return
        code = self.daemon.proc.returncode
        self.crash_times.append((self._alive_at, time.time()))
        self.unexpected_exits.append(f"exit {code}: {self.daemon.log_tail(3)}")
        self.daemon.generation.went_down()
        self.orphans += len(self.daemon.after_death(self._last_agents))
        self.daemon.start()

    def _sample(self) -> None:
        """Peak RSS (sampled each 0.5 s; the orchestrator's own high-water mark too) and the
        moments an agent was replaced by something other than the harness."""
        seen: dict[str, int] = {}
        read_at = time.time()  # when the agents' pids were last read
        while not self._stop.is_set() or self.daemon.alive():
            pid = self.daemon.pid
            if pid is not None and self.daemon.alive():
                self._alive_at = time.time()
                orchestrator = max(rss_kib(pid), rss_kib(pid, "VmHWM"))
                self.peak["orchestrator"] = max(self.peak["orchestrator"], orchestrator)
                pids = self.daemon.agent_pids()
                replaced_since, read_at = read_at, time.time()
                self._last_agents = list(pids.values())
                total = sum(rss_kib(p) for p in pids.values())
                self.peak["agents"] = max(self.peak["agents"], total)
                if not self.filling:
                    used = disk_used_kib(self.daemon.state_root)
                    self.disk_peak_kib = max(self.disk_peak_kib, used)
                for name, agent_pid in pids.items():
                    if seen.get(name, agent_pid) != agent_pid:  # since the last read
                        self.crash_times.append((replaced_since, read_at))
                    seen[name] = agent_pid
            if self._stop.wait(0.5) and not self.daemon.alive():
                return

    # -- the end -------------------------------------------------------------------------------

    def _drain(self) -> bool:
        """Stop, start once more on the same root, wait until the journal has no open input."""
        with self._lock:
            self._watch_daemon()
            self.daemon.stop()
            self.daemon.start()
            deadline = time.monotonic() + self.args.request_timeout * 2 + 10
            drained = False
            while time.monotonic() < deadline:
                if not self.daemon.snapshot_journal():
                    drained = True
                    break
                time.sleep(0.25)
            self.daemon.stop()
            self.turns = coordinator_turns(self.daemon.state_root)
            self.disk_at_end = (
                disk_used_kib(self.daemon.state_root),
                largest_files(self.daemon.state_root),
            )
            return drained

    def _report(self, elapsed: float, drained: bool) -> dict[str, Any]:
        fates = soak_report.classify(
            list(self.clients.requests.values()),
            self.daemon.journal_ids,
            read_ledger(self.ledger),
            self.crash_times,
            self.turns,
            self.disk_freed_times,
        )
        attacks_run = {name: self.attacks.get(name, 0) for name in RATES}
        attacks_run.update({k: v for k, v in self.attacks.items() if k not in RATES})
        return {
            "minutes": self.args.minutes,
            "elapsedSeconds": elapsed,
            "clients": self.args.clients,
            "fates": soak_report.to_json(fates),
            "lost": fates.lost,
            "duplicated": fates.duplicated,
            "daemonRestarts": self.daemon.starts - 1,
            "unexpectedDaemonExits": self.unexpected_exits,
            "agentKills": self.attacks["kill_agent"],
            "orphanedAgents": self.orphans,
            "diskFullEpisodes": self.attacks["disk_full"],
            # When each crash (a kill, a death, a respawn seen) may have happened, as
            # [earliest, latest], and when each disk-full episode ended: what a duplicate's
            # ledger lines are read against.
            "crashTimes": [[round(lo, 3), round(hi, 3)] for lo, hi in self.crash_times],
            "diskFreedTimes": [round(t, 3) for t in self.disk_freed_times],
            "peakRssKiB": dict(self.peak),
            "attacks": attacks_run,
            "lastAttackNotes": self.notes,
            "journalDrained": drained,
            "stateRootKiB": {
                "size": self.args.tmpfs_mib * 1024,
                "peakUsedByTheDaemon": self.disk_peak_kib,
                "usedAtEnd": self.disk_at_end[0],
                "largestFilesAtEnd": self.disk_at_end[1],
            },
            "fatal": self.fatal,
        }


# -- the state root on its own small tmpfs ---------------------------------------------------


@contextlib.contextmanager
def tmpfs(path: Path, size_mib: int) -> Any:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mib}m,mode=0700", "tmpfs", str(path)],
        check=True,
    )
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--state-root", type=Path, help="mount point of the tmpfs (default: a temp dir)")
    p.add_argument("--report", type=Path, default=Path("soak.json"), help="the JSON report")
    p.add_argument("--clients", type=int, default=6)
    p.add_argument("--request-timeout", type=float, default=20.0, help="seconds per request")
    p.add_argument("--rate-scale", type=float, default=1.0, help="multiplies every attack rate")
    p.add_argument("--half-open", type=int, default=200, help="connections per socket held")
    p.add_argument("--disk-hold", type=float, default=3.0, help="seconds the disk stays full")
    # The daemon's own state outgrows 64 MiB: runtime events keep up to 2 x 16 MiB per agent,
    # and conversations take ~2 KiB per request (~100 MiB in 10 minutes at the default pace).
    p.add_argument("--tmpfs-mib", type=int, default=256, help="size of the state root's tmpfs")
    p.add_argument("--think-ms", type=float, default=100.0, help="each client's pause per request")
    p.add_argument("--seed", type=int, default=None)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))
    workdir = Path(tempfile.mkdtemp(prefix="soak-"))
    state_root = args.state_root or workdir / "s"
    try:
        with tmpfs(state_root, args.tmpfs_mib):
            report = Soak(args, workdir, state_root).run()
    finally:
        with contextlib.suppress(OSError):
            shutil.copy(workdir / "daemon.log", args.report.with_suffix(".daemon.log"))
        shutil.rmtree(workdir, ignore_errors=True)
    soak_report.write(report, args.report)
    print(soak_report.render(report))
    print(f"\nreport: {args.report}")
    return 1 if report["lost"] or report["duplicated"] else 0


if __name__ == "__main__":
    sys.exit(main())
