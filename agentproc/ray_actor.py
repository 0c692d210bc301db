"""The Ray actor that holds one launch of an agent placed on a Ray cluster
(`orchestrator.ray_placement` creates it; `goondan run --placement ray`).

The actor runs the same agent process as a local launch (`python -m agentproc`), as its child:
the process dies with the actor (parent-death signal), and the actor with the orchestrator's
Ray driver, which owns it. The agent connects back over the orchestrator's TLS listener. Its
credential and TLS certificate come in the constructor's arguments and go to the child on
inherited pipes, never in argv or the environment. The bundle comes as a zip archive through
Ray's object store, unpacked once per node and per content (`unpacked_bundle`): the agent's
`--bundle` and working directory, kept while an actor runs from it.

Imported by Ray on the node (this module must be installed there, as goondan is): no Ray import
at the top, so the class is plain Python that `ray.remote` wraps on the driver.
"""

from __future__ import annotations

import fcntl
import io
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any


class VersionMismatch(RuntimeError):
    pass


class AgentActor:
    def __init__(
        self,
        driver_version: str,
        argv: list[str],
        credential: bytes,
        tls_credentials: bytes,
        environment: dict[str, str],
        bundle_digest: str,
        bundle_archive: bytes,
    ) -> None:
        """Start the agent process. `argv` is the agent's (its `--parent-pid` becomes ours);
        `environment` is set over this node's (see `RayLauncher`); the bundle is
        `bundle_archive` (a zip, `orchestrator.ray_bundle.pack_bundle`), unpacked on this
        node once per `bundle_digest`, its sha256."""
        import goondan

        here = goondan.__version__
        if here != driver_version:
            raise VersionMismatch(
                f"goondan {here} is installed on node {socket.gethostname()}, but the "
                f"orchestrator runs goondan {driver_version}: install the same version on "
                "every node"
            )
        argv = list(argv)
        self._bundle = unpacked_bundle(bundle_digest, bundle_archive)
        bundle = self._bundle.path
        argv[argv.index("--bundle") + 1] = str(bundle)
        argv[argv.index("--parent-pid") + 1] = str(os.getpid())  # it dies with this actor
        read_cred, write_cred = os.pipe()
        read_tls, write_tls = os.pipe()
        for fd, data in ((write_cred, credential), (write_tls, tls_credentials)):
            try:
                os.write(fd, data)  # a few KB: fits the pipe's buffer
            finally:
                os.close(fd)
        try:
            self._process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "agentproc",
                    *argv,
                    "--credential-fd",
                    str(read_cred),
                    "--tls-fd",
                    str(read_tls),
                ],  # fmt: skip
                stdin=subprocess.DEVNULL,
                pass_fds=(read_cred, read_tls),
                cwd=bundle,
                env={**os.environ, **environment},
            )
        finally:
            os.close(read_cred)
            os.close(read_tls)

    def info(self) -> dict[str, Any]:
        """Where it runs: the agent's pid, and the node's id, address and host name."""
        import ray

        context = ray.get_runtime_context()
        return {
            "pid": self._process.pid,
            "nodeId": context.get_node_id(),
            "nodeIp": ray.util.get_node_ip_address(),  # type: ignore[no-untyped-call]
            "host": socket.gethostname(),
        }

    def wait(self) -> int:
        """The agent process's exit code (negative: a signal), once it has exited."""
        return self._process.wait()

    def signal(self, signum: int) -> None:
        if self._process.poll() is None:
            self._process.send_signal(signal.Signals(signum))


class UnpackedBundle:
    """A bundle's directory on this node, and a shared lock on it: while the lock is held, no
    other actor's unpacking of a newer bundle removes the directory. The actor holds it for
    its life (the kernel lets go when the actor's process ends)."""

    def __init__(self, path: Path, lock_fd: int) -> None:
        self.path = path
        self._lock_fd = lock_fd

    def close(self) -> None:
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1


def unpacked_bundle(digest: str, archive: bytes) -> UnpackedBundle:
    """The bundle's directory on this node: `<tmp>/goondan-bundles-<uid>/<digest>`, unpacked
    from `archive` by the first actor that needs it (a rename makes it whole or absent, so
    actors starting at once on one node never see half of it). The directory must be this
    user's alone: in a shared temporary directory anyone could otherwise put a bundle of
    their own, tools included, where ours is looked for. Unpacking a bundle removes the
    older ones no actor runs from any more: a long run that reloads does not fill the node's
    disk with every bundle it ever ran."""
    root = Path(tempfile.gettempdir()) / f"goondan-bundles-{os.getuid()}"
    root.mkdir(mode=0o700, exist_ok=True)
    status = root.lstat()
    if root.is_symlink() or status.st_uid != os.getuid() or status.st_mode & 0o077:
        raise PermissionError(
            f"{root} is not this user's alone (a link, another owner, or open to others): "
            "refusing to run a bundle from it"
        )
    lock_fd = _lock(root / f"{digest}.lock", fcntl.LOCK_SH)
    target = root / digest
    if not target.is_dir():
        _unpack(archive, root, target)
        _remove_unused_bundles(root, keep=digest)
    return UnpackedBundle(target, lock_fd)


def _unpack(archive: bytes, root: Path, target: Path) -> None:
    partial = Path(tempfile.mkdtemp(prefix=f"{target.name}.", dir=root))
    with zipfile.ZipFile(io.BytesIO(archive)) as unpacked:
        unpacked.extractall(partial)
        for entry in unpacked.infolist():  # zipfile drops the modes: a script stays runnable
            mode = (entry.external_attr >> 16) & 0o777
            if mode:
                (partial / entry.filename).chmod(mode)
    try:
        partial.rename(target)
    except OSError:  # another actor of this node was first: use its copy
        shutil.rmtree(partial, ignore_errors=True)


def _lock(path: Path, how: int) -> int:
    """A descriptor holding `how` (flock) on the lock file `path`, made if missing
    (BlockingIOError if `how` does not block and the lock is taken). The file may be removed
    by whoever held it exclusively while we waited: then the lock is on a file no one else
    will see, and the new file is locked instead."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, how)
        except BaseException:
            os.close(fd)
            raise
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)


def _remove_unused_bundles(root: Path, keep: str) -> None:
    """Every bundle under `root` but `keep` that no actor holds (an exclusive lock is had at
    once), with what a failed unpacking of it left (`<digest>.<random>`)."""
    names = os.listdir(root)
    for digest in {name.split(".", 1)[0] for name in names} - {keep}:
        lock_path = root / f"{digest}.lock"
        try:
            fd = _lock(lock_path, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            continue  # an actor runs from it, or is unpacking it
        try:
            for name in names:
                if name.split(".", 1)[0] == digest and name != lock_path.name:
                    shutil.rmtree(root / name, ignore_errors=True)
            lock_path.unlink()
        finally:
            os.close(fd)
