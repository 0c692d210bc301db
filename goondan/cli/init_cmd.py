"""`goondan init`: write a starter bundle from a template shipped inside the package.

A template is a directory under `goondan/templates/`, one entry in `TEMPLATES` and its two
package names in pyproject.toml. Its files are copied as they are, except for two renames, so
that the source tree holds them as inert data: `dot-NAME` is written as `.NAME` (a real
`.gitignore` there would act on this repository) and `NAME.py-tpl` as `NAME.py` (a `.py` file
would be linted, type-checked and installed as a module of goondan; Django's templates do
the same).
"""

from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable


@dataclass(frozen=True)
class Template:
    name: str
    description: str  # one line, for `--list`
    next_steps: tuple[str, ...]  # printed after writing; `{dir}` is the bundle directory


DEFAULT_TEMPLATE = "quickstart"

TEMPLATES: dict[str, Template] = {
    t.name: t
    for t in (
        Template(
            "quickstart",
            "two agents on the offline scripted model, a tool and a delegation; no key",
            (
                "goondan validate {dir}",
                'goondan run {dir} --transcript --input "What is 19 plus 23? '
                'Ask the researcher for a fun fact too."',
            ),
        ),
        Template(
            "openai",
            "one agent on an OpenAI or OpenAI-compatible model, with a tool; OPENAI_API_KEY",
            (
                "export OPENAI_API_KEY=sk-...   # or fill in {dir}/.env (see .env.example)",
                'goondan run {dir} --transcript --input "What is 1234 times 5678?"',
            ),
        ),
        Template(
            "anthropic",
            "one agent on an Anthropic model, with a tool; ANTHROPIC_API_KEY",
            (
                "export ANTHROPIC_API_KEY=sk-ant-...   # or fill in {dir}/.env (see .env.example)",
                'goondan run {dir} --transcript --input "What is 1234 times 5678?"',
            ),
        ),
        Template(
            "webhook",
            "a swarm behind the @goondan/base webhook connector, offline model; WEBHOOK_SECRET",
            (
                "export WEBHOOK_SECRET=$(openssl rand -hex 32)",
                "goondan run {dir}            # listens on 127.0.0.1:8080",
                "# then POST a signed request: {dir}/README.md shows one with curl",
            ),
        ),
        Template(
            "mcp",
            "an agent whose tools come from an MCP server written with the mcp SDK; no key",
            (
                "goondan tools list --agent assistant {dir}",
                'goondan run {dir} --transcript --input "How many words are in '
                "'the quick brown fox jumps'?\"",
            ),
        ),
    )
}


def run_init(
    directory: str,
    template: str | None,
    list_only: bool,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    if list_only:
        print_templates(out, indent="")
        return 0
    name = template or DEFAULT_TEMPLATE
    chosen = TEMPLATES.get(name)
    if chosen is None:
        print(f"goondan init: unknown template {name!r}; the templates are:", file=err)
        print_templates(err, indent="  ")
        return 2
    try:
        files = template_files(name)
    except OSError as exc:  # an installation without its package data
        print(f"goondan init: the {name} template cannot be read: {exc}", file=err)
        return 1
    root = Path(directory)
    if root.exists() and not root.is_dir():
        print(f"goondan init: {directory} exists and is not a directory", file=err)
        return 1
    in_the_way = conflicts(root, files)
    if in_the_way:
        print(
            f"goondan init: nothing written, these already exist in {directory}: "
            + ", ".join(in_the_way),
            file=err,
        )
        return 1
    try:
        write_files(root, files)
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename else ""
        print(f"goondan init: nothing written: {exc.strerror or exc}{where}", file=err)
        return 1
    shown = shlex.quote(directory)
    place = "the current directory" if root == Path() else directory
    print(f"Wrote the {name} template to {place}:", file=out)
    for rel in files:
        print(f"  {root / rel}", file=out)
    print("\nNext:", file=out)
    for step in chosen.next_steps:
        print("  " + step.format(dir=shown), file=out)
    return 0


def print_templates(out: TextIO, indent: str) -> None:
    width = max(len(name) for name in TEMPLATES)
    for t in TEMPLATES.values():
        default = " (default)" if t.name == DEFAULT_TEMPLATE else ""
        print(f"{indent}{t.name:<{width}}  {t.description}{default}", file=out)


def template_files(name: str) -> dict[str, bytes]:
    """The template's files as {relative path in the bundle: content}, sorted by path."""
    from importlib.resources import files

    found: dict[str, bytes] = {}

    def walk(node: Traversable, prefix: PurePosixPath) -> None:
        for child in node.iterdir():
            if child.name == "__pycache__" or child.name.endswith(".pyc"):
                continue  # left by a tool run from the source tree
            target = child.name.removesuffix("-tpl")
            if target.startswith("dot-"):
                target = "." + target.removeprefix("dot-")
            if child.is_dir():
                walk(child, prefix / target)
            else:
                found[str(prefix / target)] = child.read_bytes()

    source = files("goondan") / "templates" / name
    walk(source, PurePosixPath())
    if "goondan.yaml" not in found:
        raise FileNotFoundError(f"no goondan.yaml in {source}: is goondan installed completely?")
    return dict(sorted(found.items()))


def conflicts(root: Path, files: dict[str, bytes]) -> list[str]:
    """Paths (relative to root) that already exist where a file or its directory would go."""
    clashes: set[str] = set()
    for rel in files:
        parts = PurePosixPath(rel).parts
        for depth in range(1, len(parts)):  # a parent directory that is a file
            prefix = root.joinpath(*parts[:depth])
            if os.path.lexists(prefix) and not prefix.is_dir():
                clashes.add(str(PurePosixPath(*parts[:depth])))
        if os.path.lexists(root / rel):
            clashes.add(rel)
    return sorted(clashes)


def write_files(root: Path, files: dict[str, bytes]) -> None:
    """Create every file, never replacing one (mode "xb"); on a failure, remove what this call
    created, so the directory is as it was."""
    made_dirs: list[Path] = []
    made_files: list[Path] = []
    try:
        for rel, content in files.items():
            target = root / rel
            missing = [p for p in (target.parent, *target.parent.parents) if not p.exists()]
            for directory in reversed(missing):
                directory.mkdir()
                made_dirs.append(directory)
            with open(target, "xb") as f:
                made_files.append(target)
                f.write(content)
    except BaseException:
        for path in reversed(made_files):
            path.unlink(missing_ok=True)
        for directory in reversed(made_dirs):
            try:
                directory.rmdir()
            except OSError:
                pass
        raise
