"""The Ray actor that holds one launch of an agent placed on a Ray cluster
(`orchestrator.ray_placement` creates it; `goondan run --placement ray`).

The actor runs the same agent process as a local launch (`python -m agentproc`), as its child:
the process dies with the actor (parent-death signal), and the actor with the orchestrator's
Ray driver, which owns it. The agent connects back over the orchestrator's TLS listener. Its
credential and TLS certificate come in the constructor's arguments and go to the child on
inherited pipes, never in argv or the environment. The bundle comes as a zip archive through
Ray's object store, unpacked once per node and per content (`unpacked_bundle`): the agent's
`--bundle` and working directory.

Imported by Ray on the node (this module must be installed there, as goondan is): no Ray import
at the top, so the class is plain Python that `ray.remote` wraps on the driver.
"""

from __future__ import annotations

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
        bundle = unpacked_bundle(bundle_digest, bundle_archive)
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


def unpacked_bundle(digest: str, archive: bytes) -> Path:
    """The bundle's directory on this node: `<tmp>/goondan-bundles-<uid>/<digest>`, unpacked
    from `archive` by the first actor that needs it (a rename makes it whole or absent, so
    actors starting at once on one node never see half of it). The directory must be this
    user's alone: in a shared temporary directory anyone could otherwise put a bundle of
    their own, tools included, where ours is looked for."""
    root = Path(tempfile.gettempdir()) / f"goondan-bundles-{os.getuid()}"
    root.mkdir(mode=0o700, exist_ok=True)
    status = root.lstat()
    if root.is_symlink() or status.st_uid != os.getuid() or status.st_mode & 0o077:
        raise PermissionError(
            f"{root} is not this user's alone (a link, another owner, or open to others): "
            "refusing to run a bundle from it"
        )
    target = root / digest
    if target.is_dir():
        return target
    partial = Path(tempfile.mkdtemp(prefix=f"{digest}.", dir=root))
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
    return target
