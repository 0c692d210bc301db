"""A third-party Goondan package, end to end: examples/acme-search is built into a wheel,
`goondan package add` installs it into a fresh venv, and a swarm there uses its Tool,
Extension and Connector. Offline: the venv sees this environment's packages through a .pth
file, and pip installs only the wheel built here."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentproc.conversation import read_messages
from tests.e2e.conftest import REPO, wait_for

# Several pip runs and swarm runs in a row: far more than the default per-test limit.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

ACME = REPO / "examples" / "acme-search"
# pip must never reach for a package index here: everything it installs is a local file.
OFFLINE = {"PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}

BUNDLE = """\
# A bundle that uses @acme/search; this comment must survive `goondan package add`.
apiVersion: goondan.ai/v1
kind: Package
metadata:
  name: searcher
spec:
  version: "0.1.0"
  dependencies:
    - name: "@goondan/base"
      version: "*"
---
apiVersion: goondan.ai/v1
kind: Model
metadata:
  name: script
spec:
  provider: scripted
  model: scripted-v1
  options:
    rules:
      - when: "search (.+)"
        steps:
          - call: search__query
            args: {query: "{{match.1}}"}
          - reply: "{{result.count}} hit(s) for '{{result.query}}': {{result.hits.0}}"
      - when: "^(.+)$"
        steps:
          - reply: "feed says: {{match.1}}"
---
apiVersion: goondan.ai/v1
kind: Agent
metadata:
  name: librarian
spec:
  modelConfig:
    modelRef: Model/script
  tools:
    - ref: Tool/search
  extensions:
    - ref: {kind: Extension, name: query-normalizer, package: "@acme/search"}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata:
  name: default
spec:
  entryAgent: Agent/librarian
  agents:
    - ref: Agent/librarian
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(out), str(ACME)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (built,) = out.glob("acme_search-1.2.0-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new, empty venv that also sees this environment's site-packages (goondan, pip)."""
    root = tmp_path_factory.mktemp("venv") / "v"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    site = Path(
        subprocess.run(
            [
                str(root / "bin" / "python"),
                "-c",
                "import sysconfig; print(sysconfig.get_path('purelib'))",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    parent = sysconfig.get_path("purelib")
    # `addsitedir` (not a plain path line) so the parent's own .pth files, goondan's
    # editable install among them, are processed too.
    (site / "_parent_env.pth").write_text(f"import site; site.addsitedir({parent!r})\n")
    return root


def gd(venv: Path, *args: str, cwd: Path | None = None, timeout: float = 120):
    return subprocess.run(
        [str(venv / "bin" / "python"), "-m", "goondan.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env={**os.environ, **OFFLINE},
    )


def pip(venv: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **OFFLINE},
    )


@pytest.fixture
def short_root() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="gd-"))  # unix socket paths are short
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_add_run_lock_and_reinstall(wheel: Path, venv: Path, tmp_path: Path, short_root: Path):
    bundle = tmp_path / "searcher"
    bundle.mkdir()
    (bundle / "goondan.yaml").write_text(BUNDLE)

    # Before: the dependency is missing, so the references to it fail to validate.
    proc = gd(venv, "validate", str(bundle), "--no-import")
    assert proc.returncode == 1 and "Tool/search is not declared" in proc.stdout

    proc = gd(venv, "package", "add", "@acme/search", "--pip-spec", str(wheel), cwd=bundle)
    assert proc.returncode == 0, proc.stderr
    assert "added @acme/search 1.2.0 (distribution acme-search" in proc.stdout
    text = (bundle / "goondan.yaml").read_text()
    assert text.startswith("# A bundle that uses @acme/search; this comment must survive")
    assert '    - name: "@acme/search"\n      version: "^1.2.0"\n---' in text
    lock = (bundle / "goondan.lock.yaml").read_text()
    assert '"@acme/search":' in lock and 'distribution: "acme-search"' in lock
    assert f'sha256: "{hashlib.sha256(wheel.read_bytes()).hexdigest()}"' in lock

    proc = gd(venv, "validate", str(bundle))
    assert proc.returncode == 0, proc.stdout
    proc = gd(venv, "package", "list", "--bundle", str(bundle))
    assert proc.returncode == 0, proc.stdout
    assert "@acme/search   ^1.2.0  1.2.0      1.2.0   acme-search   ok" in proc.stdout

    # The swarm calls the package's tool; its extension lower-cased the query on the way.
    proc = gd(
        venv,
        "run",
        str(bundle),
        "--state-root",
        str(short_root),
        "--input",
        "search Goondan  PACKAGES",
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == (
        "1 hit(s) for 'goondan packages': Goondan packages are ordinary Python "
        "distributions found through entry points."
    )

    # Gone from the environment: validate says the lock disagrees; install puts it back.
    assert pip(venv, "uninstall", "-y", "acme-search").returncode == 0
    proc = gd(venv, "validate", str(bundle), "--no-import", "--format", "json")
    report = json.loads(proc.stdout)
    codes = {e["code"] for e in report["errors"]}
    assert "E_CONFIG_PACKAGE_LOCK_MISMATCH" in codes and "E_CONFIG_PACKAGE_NOT_INSTALLED" in codes
    mismatch = next(e for e in report["errors"] if e["code"] == "E_CONFIG_PACKAGE_LOCK_MISMATCH")
    assert mismatch["file"].endswith("goondan.lock.yaml") and mismatch["line"] == 5
    assert "@acme/search 1.2.0 is locked but not installed" in mismatch["message"]

    proc = gd(venv, "package", "install", "--frozen-lockfile", "--bundle", str(bundle))
    assert proc.returncode == 0, proc.stderr
    assert "@acme/search 1.2.0: installed (sha256 checked)" in proc.stdout
    assert gd(venv, "validate", str(bundle), "--no-import").returncode == 0

    # A wheel that is not the locked one is refused, and nothing is installed.
    assert pip(venv, "uninstall", "-y", "acme-search").returncode == 0
    locked = bundle / "goondan.lock.yaml"
    locked.write_text(locked.read_text().replace('sha256: "', 'sha256: "0'))
    proc = gd(venv, "package", "install", "--bundle", str(bundle))
    assert proc.returncode == 1
    assert "has sha256" in proc.stderr and "nothing was installed" in proc.stderr
    assert pip(venv, "show", "acme-search").returncode != 0


def test_the_packages_connector_feeds_the_swarm(
    wheel: Path, venv: Path, tmp_path: Path, short_root: Path
):
    bundle = tmp_path / "fed"
    bundle.mkdir()
    (bundle / "goondan.yaml").write_text(BUNDLE)
    feed = tmp_path / "feed.txt"
    feed.write_text("first item\n\nsecond item\n")
    (bundle / "connections.yaml").write_text(
        textwrap.dedent(
            f"""\
            apiVersion: goondan.ai/v1
            kind: Connection
            metadata:
              name: feed-in
            spec:
              connectorRef: Connector/feed
              config:
                FEED_PATH: {{value: "{feed}"}}
              ingress:
                rules:
                  - match: {{event: feed_item}}
                    route: {{agentRef: Agent/librarian}}
            """
        )
    )
    # A wheel kept inside the bundle is locked by its relative path.
    (bundle / "wheels").mkdir()
    shutil.copy(wheel, bundle / "wheels" / wheel.name)
    spec = f"wheels/{wheel.name}"
    proc = gd(venv, "package", "add", "@acme/search@~1.2", "--pip-spec", spec, cwd=bundle)
    assert proc.returncode == 0, proc.stderr
    assert f'    source: "{spec}"\n' in (bundle / "goondan.lock.yaml").read_text()
    log = tmp_path / "daemon.stderr"
    with log.open("w") as stderr:
        daemon = subprocess.Popen(
            [str(venv / "bin" / "python"), "-m", "goondan.cli.main", "run", str(bundle)]
            + ["--state-root", str(short_root)],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env={**os.environ, **OFFLINE},
        )
    try:

        def answered() -> list[str]:
            replies = []
            for key_dir in short_root.glob("swarms/default/instances/*"):
                agent_dir = key_dir / "librarian"
                replies += [
                    m.content or "" for m in read_messages(agent_dir) if m.role == "assistant"
                ]
            return sorted(replies)

        wait_for(lambda: len(answered()) == 2 or daemon.poll() is not None, timeout=60)
        assert answered() == ["feed says: first item", "feed says: second item"], log.read_text()
    finally:
        daemon.terminate()
        try:
            daemon.wait(30)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()

    # Removing it restores goondan.yaml as it was, drops the lock and, asked to, uninstalls.
    proc = gd(venv, "package", "remove", "@acme/search", "--uninstall", cwd=bundle)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "removed @acme/search from goondan.yaml and goondan.lock.yaml",
        "uninstalled distribution acme-search",
    ]
    assert (bundle / "goondan.yaml").read_text() == BUNDLE
    assert not (bundle / "goondan.lock.yaml").exists()
    assert pip(venv, "show", "acme-search").returncode != 0


def test_a_wheel_without_the_named_entry_point(wheel: Path, venv: Path, tmp_path: Path):
    bundle = tmp_path / "other"
    bundle.mkdir()
    (bundle / "goondan.yaml").write_text("kind: Model\nmetadata: {name: m}\n")
    proc = gd(venv, "package", "add", "@acme/other", "--pip-spec", str(wheel), cwd=bundle)
    assert proc.returncode == 1
    assert proc.stderr.strip() == (
        f"goondan package: pip installed {wheel.name}, but it declares no `goondan.packages` "
        "entry point named @acme/other (it declares: @acme/search); see docs/packages.md, "
        "'Writing a package'"
    )
    assert (bundle / "goondan.yaml").read_text() == "kind: Model\nmetadata: {name: m}\n"
    assert not (bundle / "goondan.lock.yaml").exists()
