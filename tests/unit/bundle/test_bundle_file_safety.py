"""A bundle's files are read only when they are regular files of a bounded size inside the
bundle: a FIFO, a device, a link out of the bundle or a huge file is a clear error, at once."""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import pytest

from goondan.bundle import BundleInvalid, ConfigError, codes, load_bundle

QUICKSTART = Path(__file__).resolve().parents[3] / "configs" / "quickstart"


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    target = tmp_path / "bundle"
    shutil.copytree(QUICKSTART, target)
    return target


def errors(root: Path) -> list[ConfigError]:
    """The bundle's errors, from a thread: a read that blocks fails the test instead of
    hanging it."""
    found: list[list[ConfigError]] = []

    def load() -> None:
        try:
            load_bundle(root)
            found.append([])
        except BundleInvalid as exc:
            found.append(exc.errors)

    thread = threading.Thread(target=load, daemon=True)
    thread.start()
    thread.join(20)
    assert found, "loading the bundle blocked"
    return found[0]


def only(found: list[ConfigError], code: str) -> ConfigError:
    hits = [e for e in found if e.code == code]
    assert len(hits) == 1, [e.render() for e in found]
    return hits[0]


def test_a_fifo_among_the_resource_files_is_refused_without_blocking(bundle: Path) -> None:
    os.mkfifo(bundle / "tools.yaml")
    err = only(errors(bundle), codes.NOT_A_REGULAR_FILE)
    assert "tools.yaml" in err.message and "FIFO" in err.message


def test_a_resource_file_linked_to_a_device_is_refused(bundle: Path) -> None:
    (bundle / "agents.yaml").symlink_to("/dev/zero")
    err = only(errors(bundle), codes.NOT_A_REGULAR_FILE)
    assert "agents.yaml" in err.message and "character device" in err.message


def test_a_tool_entry_linked_outside_the_bundle_is_refused(bundle: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere.py"
    outside.write_text("handlers = {}\n")
    entry = bundle / "tools" / "calc.py"
    entry.unlink()
    entry.symlink_to(outside)
    err = only(errors(bundle), codes.PATH_OUTSIDE_BUNDLE)
    assert "./tools/calc.py" in err.message and str(outside) in err.message
    assert err.line is not None and err.file is not None


def test_a_link_that_stays_inside_the_bundle_is_fine(bundle: Path) -> None:
    entry = bundle / "tools" / "calc.py"
    (bundle / "tools" / "real_calc.py").write_bytes(entry.read_bytes())
    entry.unlink()
    entry.symlink_to("real_calc.py")
    assert errors(bundle) == []


def test_a_tool_entry_that_is_a_fifo_is_refused(bundle: Path) -> None:
    entry = bundle / "tools" / "calc.py"
    entry.unlink()
    os.mkfifo(entry)
    err = only(errors(bundle), codes.NOT_A_REGULAR_FILE)
    assert "FIFO" in err.message


def test_a_prompt_file_that_is_a_fifo_is_refused(bundle: Path) -> None:
    text = (bundle / "goondan.yaml").read_text()
    marker = "system: "
    assert marker in text
    start = text.index(marker)
    end = text.index("\n", start)
    (bundle / "goondan.yaml").write_text(text[:start] + "systemRef: ./prompt.md" + text[end:])
    os.mkfifo(bundle / "prompt.md")
    err = only(errors(bundle), codes.NOT_A_REGULAR_FILE)
    assert "prompt.md" in err.message


def test_an_entry_over_the_size_limit_is_refused(bundle: Path) -> None:
    entry = bundle / "tools" / "calc.py"
    with entry.open("a") as out:
        out.write("#" * (codes.MAX_ENTRY_BYTES + 1) + "\n")
    err = only(errors(bundle), codes.FILE_TOO_LARGE)
    assert "./tools/calc.py" in err.message


@pytest.mark.parametrize("value", [".nan", ".inf", "-5"])
def test_a_duration_that_is_not_a_positive_finite_number_is_refused(
    bundle: Path, value: str
) -> None:
    main = bundle / "goondan.yaml"
    main.write_text(
        main.read_text().replace("gracePeriodSeconds: 10", f"gracePeriodSeconds: {value}")
    )
    [err] = errors(bundle)
    assert err.code == codes.SCHEMA_INVALID and "gracePeriodSeconds" in (err.path or "")
