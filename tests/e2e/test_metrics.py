"""`goondan run --metrics`: /metrics scraped over HTTP and parsed as Prometheus text."""

from __future__ import annotations

import os
import signal
import urllib.request
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.conftest import goondan, wait_for, write_bundle
from tests.fakes.fake_orchestrator import free_port

BUNDLE = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: coordinator-script}
spec:
  provider: scripted
  model: coord-model
  options:
    rules:
      - when: "add"
        steps:
          - call: agents__request
            args: {target: worker, input: "add 2 and 3"}
          - reply: "the worker says {{result.response}}"
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: worker-script}
spec:
  provider: scripted
  model: work-model
  options:
    rules:
      - when: "add"
        steps:
          - call: calc__add
            args: {a: 2, b: 3}
          - reply: "the sum is {{result.sum}}, as computed"
      - when: "ping"
        steps:
          - reply: "pong"
---
apiVersion: goondan.ai/v1
kind: Tool
metadata: {name: calc}
spec:
  entry: ./calc.py
  exports:
    - name: add
      description: Adds two numbers.
      parameters: {type: object, properties: {a: {type: number}, b: {type: number}}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: coordinator}
spec:
  modelConfig: {modelRef: Model/coordinator-script}
  tools:
    - ref: {kind: Tool, name: agents, package: "@goondan/base"}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: worker}
spec:
  modelConfig: {modelRef: Model/worker-script}
  tools:
    - ref: Tool/calc
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec:
  entryAgent: Agent/coordinator
  agents:
    - ref: Agent/coordinator
    - ref: Agent/worker
"""

CALC = """\
def add(ctx, args):
    return {"sum": args["a"] + args["b"]}

handlers = {"add": add}
"""

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(port: int) -> tuple[dict[str, Any], Samples]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in families.values()
        for s in f.samples
    }
    return families, samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


LABELS = {
    "goondan_llm_requests_total": ("agent", "model", "outcome"),
    "goondan_tool_calls_total": ("agent", "tool", "outcome"),
    "goondan_requests_total": ("agent", "outcome"),
}


def until(port: int, expected: dict[tuple[str, tuple[str, ...]], float]) -> Samples:
    """Scrape until every expected sample has its value (the agents' counts come on their
    next heartbeat); the last scrape."""

    def seen() -> Samples | None:
        samples = scrape(port)[1]
        for (name, labels), want in expected.items():
            if value(samples, name, **dict(zip(LABELS[name], labels, strict=True))) != want:
                return None
        return samples

    samples = wait_for(seen, 20, what=f"metrics {expected}")
    assert samples is not None
    return samples


def test_metrics_after_a_delegation_with_a_tool_call(start_daemon, tmp_path):
    bundle = write_bundle(tmp_path / "b", BUNDLE, {"calc.py": CALC})
    port = free_port()
    daemon = start_daemon(bundle, "--metrics", f"127.0.0.1:{port}")
    proc = daemon.send("add please")
    assert proc.returncode == 0, proc.stderr
    assert "the sum is 5" in proc.stdout

    families, samples = scrape(port)
    for name, kind in [
        ("goondan_requests", "counter"),
        ("goondan_request_duration_seconds", "histogram"),
        ("goondan_agent_restarts", "counter"),
        ("goondan_processes", "gauge"),
        ("goondan_llm_requests", "counter"),
        ("goondan_llm_tokens", "counter"),
        ("goondan_tool_calls", "counter"),
        ("goondan_inflight_requests", "gauge"),
    ]:
        assert families[name].type == kind, name
    total = "goondan_requests_total"
    assert value(samples, total, agent="coordinator", outcome="ok") == 1
    assert value(samples, total, agent="worker", outcome="ok") == 1  # the delegation
    assert value(samples, "goondan_request_duration_seconds_count", agent="worker") == 1
    assert value(samples, "goondan_request_duration_seconds_bucket", agent="worker", le="+Inf") == 1
    assert value(samples, "goondan_processes", kind="agent", status="idle") == 2
    assert value(samples, "goondan_inflight_requests", agent="worker") == 0
    assert value(samples, "goondan_agent_restarts_total", agent="worker") == 0

    # The agents' own counts come on their next heartbeat (one a second at most).
    llm, tokens, tools = (
        "goondan_llm_requests_total",
        "goondan_llm_tokens_total",
        "goondan_tool_calls_total",
    )
    samples = until(
        port,
        {
            (llm, ("worker", "work-model", "ok")): 2,
            (llm, ("coordinator", "coord-model", "ok")): 2,
            (tools, ("worker", "calc__add", "ok")): 1,
            (tools, ("coordinator", "agents__request", "ok")): 1,
        },
    )
    assert value(samples, tokens, agent="worker", model="work-model", direction="output") > 0

    # SIGKILL the worker: it respawns, and no counter goes backwards.
    worker_pid = daemon.process("worker")["pid"]
    os.kill(worker_pid, signal.SIGKILL)
    wait_for(lambda: daemon.process("worker")["pid"] not in (None, worker_pid), 20)
    after_kill = scrape(port)[1]
    assert value(after_kill, "goondan_agent_restarts_total", agent="worker") == 1
    for key, before in samples.items():
        if key[0].endswith("_total") or key[0].endswith("_count"):
            assert after_kill.get(key, 0.0) >= before, key

    # The respawned worker counts from zero again, and its counts add to the old ones: one
    # model call now, after the two of the killed process.
    proc = daemon.send("ping", "--agent", "worker")
    assert proc.returncode == 0 and proc.stdout.strip() == "pong", proc.stderr
    until(
        port,
        {
            (llm, ("worker", "work-model", "ok")): 3,
            (tools, ("worker", "calc__add", "ok")): 1,
            (total, ("worker", "ok")): 2,
        },
    )


def test_a_bad_metrics_address_is_refused(tmp_path, state_root):
    bundle = write_bundle(tmp_path / "b", BUNDLE, {"calc.py": CALC})
    proc = goondan("run", str(bundle), "--state-root", str(state_root), "--metrics", "nope")
    assert proc.returncode == 2
    assert "HOST:PORT" in proc.stderr
    env = {**os.environ, "GOONDAN_METRICS": "127.0.0.1:x"}
    proc = goondan("run", str(bundle), "--state-root", str(state_root), env=env)
    assert proc.returncode == 2
    assert "HOST:PORT" in proc.stderr


def test_a_metrics_port_in_use_is_refused_with_the_reason(tmp_path, state_root):
    import socket

    bundle = write_bundle(tmp_path / "b", BUNDLE, {"calc.py": CALC})
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = goondan(
            "run", str(bundle), "--state-root", str(state_root), "--metrics", f"127.0.0.1:{port}"
        )
    assert proc.returncode == 1
    assert f"goondan: cannot serve metrics on 127.0.0.1:{port}" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (state_root / "run" / "orchestrator.json").exists()
