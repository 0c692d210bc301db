"""`python -m bench.dispatch_instructions` counts figure 6's paths under cachegrind; the
processes it counts run the same calls figure 6 times."""

import subprocess
import sys

import pytest


@pytest.mark.parametrize("path", ["product", "direct"])
def test_the_counted_child_runs_figure_6_s_calls(path: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bench.dispatch_instructions", "--child", path, "200"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr


def test_an_unknown_path_is_refused_with_what_is_wrong() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bench.dispatch_instructions", "--child", "other", "200"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "--child" in proc.stderr and "Traceback" not in proc.stderr
