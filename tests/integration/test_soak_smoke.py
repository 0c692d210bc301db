"""`make soak` in small: ~20 s of delegations with every attack at a high rate, as a real
`python -m bench.soak` run (root: it mounts a tmpfs for the state root)."""

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from bench.soak import RATES

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_soak_runs_every_attack_and_counts_every_request() -> None:
    with tempfile.TemporaryDirectory(prefix="soak-smoke-") as tmp:
        report_path = Path(tmp) / "soak.json"
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "bench.soak",
                "--minutes",
                "0.3",
                "--rate-scale",
                "15",
                "--clients",
                "4",
                "--think-ms",
                "20",
                "--request-timeout",
                "5",
                "--half-open",
                "100",
                "--disk-hold",
                "1",
                "--report",
                str(report_path),
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=55,
            check=False,
        )
        assert report_path.exists(), run.stderr[-3000:]
        report = json.loads(report_path.read_text())
    context = run.stdout[-4000:]
    assert report["fatal"] == "", context
    for attack in RATES:
        assert report["attacks"][attack] >= 1, (attack, context)
    assert not [name for name in report["attacks"] if name.endswith("(failed)")], context
    fates = report["fates"]
    assert fates["answered"] > 0, context
    # Every request sent has exactly one fate.
    kinds = ("accepted", "refused", "unacknowledged")
    assert sum(fates[kind] for kind in kinds) == fates["sent"], context
    kinds = ("answered", "failed", "lost")
    assert sum(fates[kind] for kind in kinds) == fates["accepted"], context
    if report["duplicated"]:  # in full: pytest would shorten an assertion's long message
        pytest.fail(
            f"{report['duplicated']} duplicated:\n"
            + "\n".join(report["fates"]["duplicatedDetails"])
            + f"\ncrashes at {report['crashTimes']}\ndisk freed at {report['diskFreedTimes']}",
            pytrace=False,
        )
    assert report["journalDrained"], context
    assert report["peakRssKiB"]["orchestrator"] > 0 and report["peakRssKiB"]["agents"] > 0
    assert fates["forgedAnswers"] == 0, context  # only the target's own answer counts
    assert fates["hung"] == 0, context
    assert not report["unexpectedDaemonExits"] and report["orphanedAgents"] == 0, context
    assert report["lost"] == 0, report["fates"]["lostDetails"]
    assert run.returncode == 0, context
