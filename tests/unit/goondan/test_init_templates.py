"""`goondan init`'s templates: each one registered and packaged, the quickstart the same swarm as
`configs/quickstart`, and a write that fails half-way leaves nothing behind."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
import yaml

from goondan.cli.init_cmd import DEFAULT_TEMPLATE, TEMPLATES, template_files, write_files

REPO = Path(__file__).resolve().parents[3]
SOURCE = REPO / "goondan" / "templates"


def test_every_template_directory_is_registered_and_packaged() -> None:
    directories = sorted(p.name for p in SOURCE.iterdir() if p.is_dir() and p.name[0] != "_")
    assert directories == sorted(TEMPLATES)
    assert DEFAULT_TEMPLATE in TEMPLATES
    packages = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"][
        "packages"
    ]
    for name in directories:
        # Listed, or setuptools warns on every install that it sees an unlisted package.
        assert f"goondan.templates.{name}" in packages
        for sub in (SOURCE / name).rglob("*"):
            if sub.is_dir() and sub.name != "__pycache__":
                dotted = ".".join(sub.relative_to(REPO).parts)
                assert dotted in packages


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_template_files_are_renamed_and_hold_no_python_module(name: str) -> None:
    files = template_files(name)
    assert "goondan.yaml" in files and ".gitignore" in files and "README.md" in files
    assert not any(Path(rel).name.startswith("dot-") or rel.endswith("-tpl") for rel in files)
    # Source files stay inert data (`.py-tpl`), or goondan would install them as its modules.
    assert not list((SOURCE / name).rglob("*.py"))


def test_the_quickstart_template_is_configs_quickstart() -> None:
    files = template_files("quickstart")
    config = REPO / "configs" / "quickstart"
    assert list(yaml.safe_load_all(files["goondan.yaml"])) == list(
        yaml.safe_load_all((config / "goondan.yaml").read_text())
    )
    tools = sorted(p.name for p in (config / "tools").iterdir() if p.suffix == ".py")
    assert sorted(rel for rel in files if rel.startswith("tools/")) == [f"tools/{t}" for t in tools]
    for tool in tools:
        assert files[f"tools/{tool}"] == (config / "tools" / tool).read_bytes()


def test_a_write_that_fails_half_way_removes_what_it_wrote(tmp_path: Path) -> None:
    (tmp_path / "mine.txt").write_text("kept")
    files = {"a.txt": b"1", "sub/deeper/b.txt": b"2", "sub/c\0.txt": b"never"}
    with pytest.raises(ValueError):  # the NUL byte: after two files and two directories
        write_files(tmp_path, files)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.txt"]


def test_write_never_replaces_a_file(tmp_path: Path) -> None:
    (tmp_path / "b.txt").write_text("mine")
    with pytest.raises(FileExistsError):
        write_files(tmp_path, {"a.txt": b"1", "b.txt": b"theirs"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.txt"]
    assert (tmp_path / "b.txt").read_text() == "mine"
