"""Fixtures for the bundle tests: a private copy of @goondan/base, and loaders bound to it."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from bundle_testkit import REPO

from goondan.bundle import Bundle, BundleInvalid, ConfigError, load_bundle


@pytest.fixture(scope="session")
def base_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """@goondan/base as shipped, copied so tests never depend on (or touch) base_tools/.

    The Tool entry `agents.py` is copied when present, else a placeholder stands in for it:
    the entry check applies to base resources too, and this suite tests the loader, not it.
    """
    target = tmp_path_factory.mktemp("base")
    shutil.copy(REPO / "base_tools" / "goondan.yaml", target / "goondan.yaml")
    agents = REPO / "base_tools" / "agents.py"
    if agents.is_file():
        shutil.copy(agents, target / "agents.py")
    else:
        (target / "agents.py").write_text("handlers = {}\n", encoding="utf-8")
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
