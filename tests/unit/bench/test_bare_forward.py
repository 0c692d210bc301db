"""The front-door figure's baseline: a bare agent with `--forward` passes each delegate on to
another bare agent through the bare broker and answers once that agent's result is back."""

import json

from bench import baselines, product
from bench.driver import Driver
from bench.procs import Procs, short_tmpdir


def test_a_forwarding_bare_agent_answers_after_its_target() -> None:
    forward = product.delegate_payload("ping", "k", "a")
    result = product.result_payload("a", "ping", "k")
    with short_tmpdir() as tmp, Procs() as procs:
        endpoint = f"ipc://{tmp / 'bare.sock'}"
        baselines.start_broker(procs, endpoint)
        (b,) = baselines.start_agents(procs, endpoint, ["b"], result)
        (a,) = baselines.start_agents(
            procs, endpoint, ["a"], result, "--forward", "b", "--delegate", forward.hex()
        )
        with Driver(endpoint, "driver") as drv:
            baselines.wait_routable(drv, ["a"], forward)
            latencies, failures = drv.round_trips("a", lambda i: forward, 20, 0)
        assert failures == 0 and len(latencies) == 20
        counts: dict[str, int] = {}
        for name, proc in (("a", a), ("b", b)):
            baselines.tell(proc, "stop")
            line = baselines.read_line(proc, 10)
            counts[name] = json.loads(line.removeprefix("stats "))["answered"]
        # Every request the driver got an answer to went through b first.
        assert counts["a"] >= 20 and counts["b"] == counts["a"]
