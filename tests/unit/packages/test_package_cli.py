"""`goondan package` without pip installing anything into this environment: the built-in
package, argument and range errors, pip failures (the installs themselves: tests/e2e)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from goondan.bundle.depedit import read_dependencies
from goondan.cli.main import build_parser

REPO = Path(__file__).resolve().parents[3]
QUICKSTART = REPO / "configs" / "quickstart"
OFFLINE = {"PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PATH": "/usr/bin:/bin"}


def gd(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "goondan.cli.main", "package", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env=OFFLINE,
    )


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    target = tmp_path / "qs"
    target.mkdir()
    text = (QUICKSTART / "goondan.yaml").read_text()
    (target / "goondan.yaml").write_text(text)
    return target


@pytest.mark.parametrize("action", ["add", "remove", "list", "install"])
def test_help_says_what_it_prints_and_its_exit_codes(action, capsys) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["package", action, "--help"])
    lines = capsys.readouterr().out.splitlines()
    prints = next(i for i, line in enumerate(lines) if line.startswith("prints: "))
    exits = next(i for i, line in enumerate(lines) if line.startswith("exit: 0 "))
    assert prints < exits and "pipe" in " ".join(lines[prints:exits])


def test_the_built_in_package_is_added_without_pip(bundle: Path) -> None:
    text = (bundle / "goondan.yaml").read_text()
    proc = gd("add", "@goondan/base@^0.1", "--bundle", str(bundle))
    assert proc.returncode == 0, proc.stderr
    assert "@goondan/base 0.1.0 (built in): dependency @goondan/base@^0.1" in proc.stdout
    assert (bundle / "goondan.yaml").read_text() == text.replace(
        'name: "@goondan/base"\n      version: "*"', 'name: "@goondan/base"\n      version: "^0.1"'
    )
    assert not (bundle / "goondan.lock.yaml").exists()
    listed = gd("list", cwd=bundle)
    assert listed.returncode == 0
    assert "@goondan/base  ^0.1   0.1.0      -       goondan       ok" in listed.stdout


def test_a_range_the_installed_version_misses_is_refused(bundle: Path) -> None:
    text = (bundle / "goondan.yaml").read_text()
    proc = gd("add", "@goondan/base@^2.0.0", "--bundle", str(bundle))
    assert proc.returncode == 1
    assert proc.stderr.strip() == (
        "goondan package: @goondan/base 0.1.0 (distribution goondan) does not satisfy "
        "the range ^2.0.0"
    )
    assert (bundle / "goondan.yaml").read_text() == text


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("@Acme/Search", "'@Acme/Search' is not a package name"),
        ("@acme/search@^1.x.q", "'^1.x.q' is not a valid version range"),
    ],
)
def test_bad_names_and_ranges(bundle: Path, spec: str, message: str) -> None:
    proc = gd("add", spec, "--bundle", str(bundle))
    assert proc.returncode == 1 and message in proc.stderr


def test_pip_failure_shows_the_tail_of_its_output(bundle: Path, tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "acme_search-1.0.0-py3-none-any.whl"
    proc = gd("add", "@acme/search", "--pip-spec", str(missing), "--bundle", str(bundle))
    assert proc.returncode == 1
    first, *tail = proc.stderr.splitlines()
    assert first.startswith("goondan package: pip wheel --no-deps --wheel-dir ")
    assert re.search(rf"failed \(exit \d+\) in {re.escape(sys.prefix)}:$", first)
    assert any("nowhere" in line for line in tail)
    assert "@acme/search" not in (bundle / "goondan.yaml").read_text()


def test_an_unknown_package_is_a_pip_failure_naming_its_distribution(bundle: Path) -> None:
    proc = gd("add", "@acme/not-published", "--bundle", str(bundle))
    assert proc.returncode == 1
    assert "pip wheel --no-deps" in proc.stderr and "acme-not-published" in proc.stderr


def test_remove_and_the_missing_bundle(bundle: Path, tmp_path: Path) -> None:
    proc = gd("remove", "@acme/search", "--bundle", str(bundle))
    assert proc.returncode == 1 and "has no dependency @acme/search" in proc.stderr
    proc = gd("remove", "@goondan/base", "--bundle", str(bundle))
    assert proc.returncode == 0
    assert read_dependencies((bundle / "goondan.yaml").read_text()) == []
    proc = gd("list", cwd=tmp_path)
    assert proc.returncode == 1 and "has no goondan.yaml (give the bundle with --bundle" in (
        proc.stderr
    )
