"""The scale figures' correctness: every answer's content is checked, bare agents forked from
one bare template answer like bare agents started one by one, and a correctness row that is not
met makes `python -m bench` exit 1."""

import json
import sys
import time
from pathlib import Path

import pytest

from bench import __main__ as bench_main
from bench import baselines, product
from bench.driver import WRONG_ANSWER, Driver
from bench.fig_scale import REPLY, bare_wave
from bench.fig_scale1000 import _bare_swarm
from bench.procs import Procs, short_tmpdir


def test_a_forked_bare_swarm_answers_and_wrong_content_is_counted() -> None:
    names = [f"s{i}" for i in range(12)]
    with short_tmpdir() as tmp, Procs() as procs:
        endpoint = f"ipc://{tmp / 'bare.sock'}"
        baselines.start_broker(procs, endpoint)
        with _bare_swarm(procs, endpoint, names) as pids, Driver(endpoint, "driver") as drv:
            assert len(pids) == len(names)
            payload = product.delegate_payload("ping", "start", "driver")
            baselines.wait_routable(drv, names, payload, timeout_s=30)
            requests, expected = bare_wave(names, 3)
            right = drv.wave(requests, 30, expected)
            assert right.ok == len(names) and not right.errors and not right.wrong
            # The bare agents answer `You said: ping` for agent `w` in conversation `k0`:
            # expecting another agent, text or conversation makes each answer a wrong one.
            wrong = [("w", "You said: pong", None), ("s1", REPLY, None), (None, REPLY, "k9")]
            result = drv.wave(requests[:3], 30, wrong)
            assert result.ok == 0 and result.errors == {WRONG_ANSWER: 3}
            assert sorted(w.split(":")[0] for w in result.wrong) == ["s0", "s1", "s2"]
            assert any("pong" in w for w in result.wrong)


def test_a_failed_correctness_row_makes_the_bench_exit_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "lossy_figure.py").write_text(
        "from bench.harness import Row\n"
        "def run(quick):\n"
        "    return [\n"
        "        Row('x lost', '', 3, 0, goal='0', judge=lambda p, b, r: p == 0,\n"
        "            correctness=True),\n"
        "        Row('x p99', 'ms', 9.0, 1.0, goal='<= 2x', judge=lambda p, b, r: False),\n"
        "    ]\n"
    )
    (tmp_path / "fine_figure.py").write_text(
        "from bench.harness import Row\n"
        "def run(quick):\n"
        "    return [Row('y lost', '', 0, 0, goal='0', judge=lambda p, b, r: p == 0,\n"
        "                correctness=True),\n"
        "            Row('y p99', 'ms', 9.0, 1.0, goal='<= 2x', judge=lambda p, b, r: False)]\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(bench_main.FIGURES, "lossy", "lossy_figure")
    monkeypatch.setitem(bench_main.FIGURES, "fine", "fine_figure")
    monkeypatch.setitem(bench_main.GOALS, "lossy", "0 lost")
    monkeypatch.setitem(bench_main.GOALS, "fine", "0 lost")
    out = tmp_path / "results.json"
    assert bench_main.main(["--only", "lossy", "--json", str(out)]) == 1
    assert json.loads(out.read_text())["rows"][0]["met"] is False
    # A missed timed goal alone is reported in the table, not a failure of the run.
    assert bench_main.main(["--only", "fine", "--json", str(out)]) == 0
    sys.modules.pop("lossy_figure", None)
    sys.modules.pop("fine_figure", None)


def test_a_forked_bare_swarm_behind_the_real_orchestrator_answers() -> None:
    names = [f"o{i}" for i in range(6)]
    with product.driven_run(["driver", *names], names[0]) as (procs, daemon, drv):
        with _bare_swarm(procs, daemon.agents_endpoint, names, "--product"):
            assert daemon.wait_status(names, {"idle", "processing"}, 30)
            requests, expected = bare_wave(names, 0)
            result = drv.wave(requests, 30, expected)
            assert result.ok == len(names) and not result.errors
            # Idle for longer than a heartbeat interval, still alive and routed to.
            time.sleep(2.5)
            assert daemon.wait_status(names, {"idle"}, 5)
            again = drv.wave(requests, 30, expected)
            assert again.ok == len(names) and not again.errors
