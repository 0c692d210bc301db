"""Fixtures for the bundle tests: a private copy of @goondan/base, and loaders bound to it."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from goondan.bundle import Bundle, BundleInvalid, ConfigError, load_bundle
from tests.unit.bundle.bundle_testkit import REPO


@pytest.fixture(scope="session")
def base_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """@goondan/base as shipped, copied so tests never depend on (or touch) base_tools/.

    Every Tool entry (`*.py`) is copied with it: the entry check applies to base resources too.
    """
    target = tmp_path_factory.mktemp("base")
    shutil.copy(REPO / "base_tools" / "goondan.yaml", target / "goondan.yaml")
    for entry in (REPO / "base_tools").glob("*.py"):
        shutil.copy(entry, target / entry.name)
    return target


@pytest.fixture
def load(base_dir: Path) -> Callable[[Path], Bundle]:
    return lambda path: load_bundle(path, base_dir=base_dir)


@pytest.fixture
def errors_of(base_dir: Path) -> Callable[[Path], list[ConfigError]]:
    """Load `path`, expecting failure; return the errors."""

    def run(path: Path) -> list[ConfigError]:
        with pytest.raises(BundleInvalid) as info:
            load_bundle(path, base_dir=base_dir)
        assert info.value.errors, "BundleInvalid without errors"
        return info.value.errors

    return run
