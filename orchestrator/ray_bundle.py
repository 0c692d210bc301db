"""The bundle as Ray-placed agents get it: a zip archive of the bundle directory, put in Ray's
object store by the orchestrator at the first launch and again after each reload, and unpacked
once per node and content by the actor (`agentproc.ray_actor.unpacked_bundle`). Ray's own
runtime_env working_dir cannot do this: it uploads a local directory once, at `ray.init`, and
an actor's working_dir must be a remote URI."""

from __future__ import annotations

import fnmatch
import io
import os
import zipfile
from pathlib import Path

# Not shipped to the nodes with the bundle: what only this machine needs, or is large (names
# of directories, and patterns of file names).
BUNDLE_EXCLUDES = [".git", ".venv", "__pycache__", ".goondan", "*.sock"]
MiB = 1024 * 1024
MAX_BUNDLE_BYTES = 512 * MiB  # as Ray's working_dir allowed (its gRPC message limit)


class BundleTooLarge(OSError):
    """The bundle's files add up to more than the nodes are sent (`MAX_BUNDLE_BYTES`)."""


def pack_bundle(bundle: Path, state_root: Path, limit: int = MAX_BUNDLE_BYTES) -> bytes:
    """The bundle directory as a zip archive, in a stable order: what its agents read (the
    YAML, the tools' code, their data), without `BUNDLE_EXCLUDES`, the state root, or what a
    `.gitignore` or `.rayignore` in the bundle leaves out (as Ray's working_dir did: an
    ignored `.env` or data set stays on this machine). Raises `BundleTooLarge` past `limit`
    bytes of files."""
    import pathspec

    skip_dirs = {name for name in BUNDLE_EXCLUDES if "*" not in name}
    skip_files = [name for name in BUNDLE_EXCLUDES if "*" in name]
    ignores: list[tuple[Path, pathspec.GitIgnoreSpec]] = []  # each from its file's directory

    def kept(path: Path, is_dir: bool) -> bool:
        for base, spec in ignores:
            if path.is_relative_to(base):
                relative = path.relative_to(base).as_posix() + ("/" if is_dir else "")
                if spec.match_file(relative):
                    return False
        return True

    out = io.BytesIO()
    total = 0
    sizes: list[tuple[int, str]] = []
    seen: set[str] = set()  # directories followed through links, each once (no loops)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for directory, dirs, files in os.walk(bundle, followlinks=True):
            here = Path(directory)
            seen.add(os.path.realpath(here))
            for ignore_file in (here / ".gitignore", here / ".rayignore"):
                if ignore_file.is_file():
                    lines = ignore_file.read_text(encoding="utf-8", errors="replace")
                    ignores.append((here, pathspec.GitIgnoreSpec.from_lines(lines.splitlines())))
            dirs[:] = sorted(
                d
                for d in dirs
                if d not in skip_dirs
                and here / d != state_root
                and os.path.realpath(here / d) not in seen
                and kept(here / d, True)
            )
            for name in sorted(files):
                path = here / name
                if (
                    path.is_file()
                    and not any(fnmatch.fnmatch(name, p) for p in skip_files)
                    and kept(path, False)
                ):
                    relative = path.relative_to(bundle).as_posix()
                    size = path.stat().st_size
                    total += size
                    sizes.append((size, relative))
                    if total > limit:
                        raise BundleTooLarge(_too_large(total, limit, sizes))
                    archive.write(path, relative)
    return out.getvalue()


def _too_large(total: int, limit: int, sizes: list[tuple[int, str]]) -> str:
    largest = ", ".join(f"{name} {size / MiB:.0f} MiB" for size, name in sorted(sizes)[-3:][::-1])
    return (
        f"the bundle has more than {limit / MiB:.0f} MiB of files to send to the Ray nodes "
        f"({total / MiB:.0f} MiB so far; the largest: {largest}): leave large files out with a "
        ".gitignore or .rayignore in the bundle"
    )
