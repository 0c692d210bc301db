"""The OS-level jail of every tool subprocess: new user, mount, PID and IPC namespaces.

Inside, /proc is fresh (no other process's environ or memory is visible), the state root is
covered by an empty tmpfs with only the instance's own workdir bound back at its path (so other
instances' files and the run/*.sock sockets are gone), and the command runs with every
capability dropped and no_new_privs, so it cannot unmount the cover. The wrapper process gets
PR_SET_PDEATHSIG SIGKILL and the namespace's init is killed with it, so the whole tool process
tree dies with the agent. Where namespaces cannot be made the call fails with E_TOOL_SANDBOX
rather than run unconfined.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from base_tools._policy import TOOL_SANDBOX, tool_sandbox_enabled
from goondan import ErrorCode, ToolError

# Runs as root of the new user namespace, before the command: covers the state root, binds the
# workdir back (opened first, so it is still reachable under the cover; --no-canonicalize makes
# mount(2) follow the fd, not the path now under the cover), then drops privileges.
_SETUP = """set -e
root=$1 work=$2 cwd=$3
shift 3
if [ -d "$root" ]; then
  case "$work/" in
    "$root"/*) exec 3<"$work"; inside=1 ;;
    *) inside= ;;
  esac
  mount -t tmpfs -o mode=0755,size=64k goondan-hidden "$root"
  if [ -n "$inside" ]; then
    mkdir -p "$work"
    mount --no-canonicalize --bind /proc/self/fd/3 "$work"
    exec 3<&-
  fi
fi
cd "$cwd"
exec "$@"
"""


class SandboxError(ToolError):
    code = ErrorCode.E_TOOL_SANDBOX


def hidden_root() -> Path:
    """The state root the tools must not see (the agent exports GOONDAN_STATE_ROOT at start)."""
    raw = os.environ.get("GOONDAN_STATE_ROOT") or "~/.goondan"
    return Path(os.path.realpath(os.path.expanduser(raw)))


def wrap(argv: Sequence[str], *, workdir: Path, cwd: Path) -> Sequence[str]:
    """`argv` as it must be started: inside the jail, unless the operator turned it off (then
    `argv` itself)."""
    if not tool_sandbox_enabled():
        return argv
    setpriv, unshare = _tools()
    return [
        setpriv,
        "--pdeathsig=KILL",  # the wrapper dies with the agent; --kill-child then ends the tree
        "--",
        unshare,
        "--user",
        "--map-root-user",
        "--mount",
        "--pid",
        "--ipc",
        "--fork",
        "--kill-child",
        "--mount-proc",
        "--",
        "/bin/sh",
        "-c",
        _SETUP,
        "goondan-sandbox",
        str(hidden_root()),
        os.path.realpath(workdir),
        str(cwd),
        setpriv,
        "--no-new-privs",
        "--inh-caps=-all",
        "--ambient-caps=-all",
        "--bounding-set=-all",
        "--",
        *argv,
    ]


@functools.cache
def _tools() -> tuple[str, str]:
    setpriv, unshare = shutil.which("setpriv"), shutil.which("unshare")
    if not setpriv or not unshare:
        raise _unavailable("setpriv and unshare (util-linux) are not on PATH")
    probe = subprocess.run(
        [unshare, "--user", "--map-root-user", "--mount", "--pid", "--ipc", "--fork"]
        + ["--mount-proc", "--", setpriv, "--bounding-set=-all", "--", "true"],
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode != 0:
        raise _unavailable(f"cannot create namespaces: {probe.stderr.strip()}")
    return setpriv, unshare


def _unavailable(why: str) -> SandboxError:
    return SandboxError(
        f"the tool sandbox is unavailable: {why}",
        suggestion="enable unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone"
        "=1, user.max_user_namespaces > 0), or the operator may run tools unconfined with "
        f"{TOOL_SANDBOX}=off",
    )
