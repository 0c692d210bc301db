"""Process titles: `ps`, `top` and `/proc/PID/cmdline` show what each goondan process is.

`goondan: orchestrator SWARM`, `goondan: template`, `goondan: agent NAME (SWARM)` and
`goondan: connector NAME`, instead of `python -m ...` with the same arguments for all. Set once
per process at its start (an agent forked from the template sets its own after the fork).
"""

from __future__ import annotations

from setproctitle import setproctitle


def set_title(title: str) -> None:
    setproctitle(title)
