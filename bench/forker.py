"""`python -m bench.forker ENDPOINT`: the plain `os.fork` baseline.

It imports what an agent process imports (the product's `agentproc.main` when it imports, else
asyncio, uvloop, zmq, msgspec, structlog, yaml) but creates no ZeroMQ context, thread or loop.
For each `fork N` line on stdin it forks N children at once; each child creates a context,
connects a DEALER to ENDPOINT, sends `{pid, t0}` (t0 = time.monotonic() just before the first
fork of the burst; the clock is system-wide) and then idles until it is killed. Children die
with the forker (parent-death signal), and the forker with the bench.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time


def _die_with_parent() -> None:
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def main() -> None:
    _die_with_parent()
    endpoint = sys.argv[1]
    try:
        import agentproc.main  # noqa: F401  (the agent runtime, as a zygote would hold it)

        preloaded = "agentproc.main"
    except Exception:  # noqa: BLE001 - the product may be mid-change: fall back to the libraries
        preloaded = "libraries"
    import asyncio  # noqa: F401

    import msgspec
    import uvloop  # noqa: F401
    import zmq

    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    print(f"up {preloaded}", flush=True)
    for line in sys.stdin:
        parts = line.split()
        if len(parts) != 2 or parts[0] != "fork":
            continue
        t0 = time.monotonic()
        for _ in range(int(parts[1])):
            if os.fork() == 0:
                try:
                    _die_with_parent()
                    ctx = zmq.Context()
                    sock = ctx.socket(zmq.DEALER)
                    sock.connect(endpoint)
                    sock.send(msgspec.msgpack.encode({"pid": os.getpid(), "t0": t0}))
                    while True:
                        signal.pause()
                finally:
                    os._exit(0)


if __name__ == "__main__":
    main()
