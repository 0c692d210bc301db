"""Figure 8 (diagnostic): the memory an agent touches to answer one delegate.

Why figure 7's turns cost about twice what they cost warm: with 200 agents on 2 cores each turn
starts with cold caches, so it costs about what it touches, and a forked agent's Python objects
are its own copies (reference counts write to them). The kernel marks each page a process
touches (the accessed bit of its page table entry): `/proc/PID/clear_refs` clears the marks, the
agent answers one delegate, and `/proc/PID/smaps` sums the `Referenced` pages, private ones
(anonymous memory, heap, stack) apart from shared ones (the libraries' code). "Private" is the
kind of mapping: where the template's objects are immortal (`agentproc/immortal_heap.py`)
most of those anonymous pages are still the template's, shared by every agent, and nothing
here tells them apart page by page (this kernel has no idle-page tracking). The count moves by
about 1 % between runs, so it shows what a change to the turn does where the timed figures'
noise would hide it.

Product: a real agent behind a real daemon, after 100 delegates in one conversation (no new
files). Baseline: the bare agent (`bench/bare.py`) behind the same daemon. Median of 7.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path

from bench import baselines, product
from bench.driver import Driver
from bench.harness import Row, log

NAME = "touch"
WARM = 100
SAMPLES = 7
_PRIVATE = ("", "[heap]", "[stack]")  # anonymous mappings have no name


def referenced_kib(pid: int) -> tuple[int, int]:
    """(private, shared) KiB of `pid`'s pages marked referenced since the last clear."""
    private = shared = 0
    name = ""
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head, _, rest = line.partition(" ")
        if "-" in head and not head.endswith(":"):  # "lo-hi perms offset dev inode [name]"
            fields = rest.split(None, 4)
            name = fields[4].strip() if len(fields) > 4 else ""
        elif head == "Referenced:":
            kib = int(rest.split()[0])
            if name in _PRIVATE:
                private += kib
            else:
                shared += kib
    return private, shared


def _touched(pid: int, ask: Callable[[], None]) -> tuple[float, float]:
    private: list[int] = []
    shared: list[int] = []
    for _ in range(SAMPLES):
        time.sleep(0.05)  # let the last answer's follow-ups (timers, heartbeats) pass
        Path(f"/proc/{pid}/clear_refs").write_text("1")
        ask()
        p, s = referenced_kib(pid)
        private.append(p)
        shared.append(s)
    return statistics.median(private), statistics.median(shared)


def _ask(drv: Driver, target: str) -> Callable[[], None]:
    payload = product.delegate_payload("ping", "touch", "driver")

    def ask() -> None:
        reply = drv.ask(target, payload)
        if not reply.ok:
            raise RuntimeError(f"{target} answered {reply.code}")

    return ask


def run(quick: bool) -> list[Row]:
    with product.driven_run(["driver", "a", "bb"], "a") as (procs, daemon, drv):
        reply = product.result_payload("bb", "ping", "touch")
        bare = baselines.start_agents(procs, daemon.agents_endpoint, ["bb"], reply, "--product")[0]
        if not daemon.wait_status(["bb"], {"idle", "processing"}, 10):
            raise RuntimeError("the orchestrator did not take the bare agent's `ready`")
        log(f"touch: {WARM} delegates to each agent, then {SAMPLES} measured")
        for target in ("a", "bb"):
            ask = _ask(drv, target)
            for _ in range(WARM):
                ask()
        pid = daemon.agent_pids()["a"]
        prod_private, prod_shared = _touched(pid, _ask(drv, "a"))
        bare_private, bare_shared = _touched(bare.pid, _ask(drv, "bb"))
    return [
        Row(
            "8 private memory an agent touches per delegate",
            "KiB",
            prod_private,
            bare_private,
            "bare agent",
            goal="(diagnostic)",
            note=f"shared (libraries' code) {prod_shared:,.0f} KiB, bare agent {bare_shared:,.0f}",
            details={
                "product": {"privateKiB": prod_private, "sharedKiB": prod_shared},
                "bare": {"privateKiB": bare_private, "sharedKiB": bare_shared},
                "samples": SAMPLES,
                "warmDelegates": WARM,
            },
        )
    ]
