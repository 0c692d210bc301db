"""`goondan run`: the orchestrator in the foreground, or detached (`--detach`)."""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import select
import sys
import time
import traceback
from typing import TYPE_CHECKING

# Light imports only (`goondan` has asyncio, msgspec and structlog already): the agent
# template is forked from this process before the orchestrator and the bundle are imported.
import structlog

from goondan.envfiles import EnvFileError, EnvFiles
from goondan.logs import LogFile, OutputPipe, configure_logging, rotate_files
from goondan.paths import StatePaths
from goondan.settings import Settings, from_run_args
from orchestrator.systemd import Notifier

if TYPE_CHECKING:
    from orchestrator.daemon import Daemon

# How long `run --detach` waits for the daemon to be ready before it gives up waiting (the
# daemon goes on starting). Start-up takes well under a second; a bundle on a slow network
# file system, longer.
DETACH_READY_TIMEOUT_S = 120.0
# `logs/stderr.log` holds a detached daemon's last words only (its log is `daemon.log`); one
# past this becomes `stderr.log.1` at the next start.
STDERR_LOG_BYTES = 1024 * 1024
# What the detached daemon writes on the launcher's pipe, after anything it printed.
_PID = b"\0pid "
_READY = b"\0ready"


def run(args: argparse.Namespace) -> int:
    # First: the files may set GOONDAN_STATE_ROOT or GOONDAN_LOG_LEVEL (flags still win).
    env_files = EnvFiles(args.path, args.env_file or ())
    try:
        env_files.load()
    except EnvFileError as exc:
        for error in exc.errors:
            print(error.render(), file=sys.stderr)
        print("goondan: the env files have problems; nothing was started", file=sys.stderr)
        return 1
    if args.detach:
        return _detach(args, env_files)
    return _run(args, env_files, detached=False)


def _run(args: argparse.Namespace, env_files: EnvFiles, *, detached: bool) -> int:
    if args.log_level:
        os.environ["GOONDAN_LOG_LEVEL"] = args.log_level  # agent processes inherit it
    settings = from_run_args(args)
    if settings.daemon.spawn == "zygote" and not detached:
        # First, before the heavy imports and before the log writer's thread: the agent
        # template imports the agent runtime while this process imports the orchestrator and
        # loads the bundle. (Detached, the daemon is long-lived: the launcher starts its
        # template later, with the children's output pipe as its stderr.)
        from orchestrator.launcher import start_template_early

        start_template_early(args.path)
    paths = StatePaths.at(args.state_root)
    log_file = LogFile(
        paths.daemon_log,
        max_bytes=settings.storage.daemon_log_rotate_bytes,
        files=settings.storage.daemon_log_files,
    )
    configure_logging(args.log_level, log_file=log_file, stderr=not detached)
    if env_files.layer.files:  # names and files only: values never reach the logs
        structlog.get_logger().info(
            "env files loaded", files=list(env_files.layer.files), names=sorted(env_files.applied)
        )
    output = OutputPipe(log_file) if detached else None
    try:
        return _serve(args, paths, settings, env_files, output)
    finally:
        if output is not None:
            output.close()
        log_file.close()


def _serve(
    args: argparse.Namespace,
    paths: StatePaths,
    settings: Settings,
    env_files: EnvFiles,
    output: OutputPipe | None,
) -> int:
    import uvloop

    from goondan.bundle import BundleInvalid, load_bundle
    from ipc.endpoints import EndpointError
    from orchestrator.daemon import Daemon
    from orchestrator.lock import AlreadyRunning

    try:
        bundle = load_bundle(args.path)
        daemon = Daemon(bundle, args.swarm, paths, settings, watch=args.watch, env_files=env_files)
    except BundleInvalid as exc:
        for error in exc.errors:
            print(error.render(), file=sys.stderr)
        print(
            f"goondan: {len(exc.errors)} problem(s) in the bundle; nothing was started",
            file=sys.stderr,
        )
        return 1
    except LookupError as exc:
        print(f"goondan: {exc}", file=sys.stderr)
        return 1
    if getattr(args, "metrics", None) is not None:
        daemon.metrics_address = args.metrics
        host, port = args.metrics
        os.environ["GOONDAN_METRICS"] = f"{host}:{port}"  # agents then send their counts
    if (problem := _placement(args, daemon)) is not None:
        print(f"goondan: {problem}", file=sys.stderr)
        return 1
    studio = args.studio or os.environ.get("GOONDAN_STUDIO")
    if studio:
        code = _bind_studio(daemon, studio, args.studio_allow_remote)
        if code:
            return code
    if output is not None:
        daemon.child_output = output.write_fd
        daemon.notifier = _DetachedNotifier(paths)
    live = None
    if args.input and sys.stdout.isatty() and not args.transcript:
        from goondan.cli.daemon_cmds import LiveView

        live = LiveView()
    daemon.on_update = live.update if live else None
    printed = False

    def on_answer(code: int, answer: str | None) -> None:
        # The answer goes out as soon as it is known, before the daemon's shutdown (its agents
        # drained, its sockets closed); the exit code still waits for the shutdown.
        nonlocal printed
        if answer is not None and live is None and not args.transcript:
            print(answer, file=sys.stdout if code == 0 else sys.stderr, flush=True)
            printed = True

    daemon.on_answer = on_answer
    try:
        code, answer = uvloop.run(daemon.serve(args.input))
    except (AlreadyRunning, EndpointError) as exc:
        print(f"goondan: {exc}", file=sys.stderr)
        return 1
    if args.transcript and daemon.input_trace_id:
        from goondan.cli.transcript import render_transcript

        print(render_transcript(daemon.paths, daemon.swarm.name, daemon.input_trace_id))
        print()
    if answer is not None and not printed:
        if live is not None and live.streamed and code == 0:
            print()  # the answer is on screen already
        else:
            print(answer, file=sys.stdout if code == 0 else sys.stderr)
    return code


def _placement(args: argparse.Namespace, daemon: Daemon) -> str | None:
    """Sets the daemon's Ray placement for `--placement ray`; the reason it cannot run, or None."""
    from goondan.bundle.placement import PlacementError, ray_agents

    mode = getattr(args, "placement", "local")
    try:
        ray_agents(daemon.bundle, daemon.swarm, mode)
    except PlacementError as exc:
        return str(exc)
    if mode != "ray":
        if args.listen or args.ray_address:
            return "--listen and --ray-address are for --placement ray"
        return None  # a local run: the Ray placement module is not even imported
    missing = [name for name in ("ray", "pathspec") if importlib.util.find_spec(name) is None]
    if missing:
        return (
            f"--placement ray needs {' and '.join(missing)}, not installed in {sys.prefix}: "
            "install goondan's `ray` extra (pip install 'goondan[ray]')"
        )
    from orchestrator.ray_placement import RayPlacement

    listen = args.listen or RayPlacement().listen
    host, sep, port = listen.rpartition(":")
    if not sep or not host or not port.isdigit():
        return f"--listen {listen}: expected HOST:PORT"
    daemon.placement = RayPlacement(args.ray_address, listen)
    return None


def _bind_studio(daemon: Daemon, address: str, allow_remote: bool) -> int:
    """Bind the studio's socket now, so a bad address or a port in use stops the start."""
    from orchestrator.studio.server import StudioAddressError, bind, parse_address

    try:
        host, port = parse_address(address, allow_remote=allow_remote)
    except StudioAddressError as exc:
        print(f"goondan: --studio: {exc}", file=sys.stderr)
        return 2
    try:
        daemon.studio_socket = bind(host, port)
    except OSError as exc:
        print(f"goondan: the studio cannot listen on {address}: {exc}", file=sys.stderr)
        return 1
    return 0


# -- detached mode -------------------------------------------------------------------------


def _detach(args: argparse.Namespace, env_files: EnvFiles) -> int:
    """Start the daemon in a session of its own and return once it is ready.

    The daemon is a grandchild (fork, setsid, fork): not a session leader, so it can never get
    a controlling terminal, and in no process group of the launching shell, so the terminal's
    SIGHUP and Ctrl-C do not reach it. Until it is ready its stdout and stderr are a pipe to
    us, so whatever the foreground run would have printed (a bundle error, another daemon
    running) is printed here; then they become `logs/stderr.log`."""
    paths = StatePaths.at(args.state_root)
    read_fd, write_fd = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child; the e2e tests see what it does
        code = 1
        try:
            os.close(read_fd)
            os.setsid()
            if os.fork() != 0:
                os._exit(0)
            devnull = os.open(os.devnull, os.O_RDWR)
            os.dup2(devnull, 0)
            os.dup2(write_fd, 1)
            os.dup2(write_fd, 2)
            for fd in {devnull, write_fd} - {0, 1, 2}:
                os.close(fd)
            os.write(2, _PID + f"{os.getpid()}\n".encode())  # a line of its own
            code = _run(args, env_files, detached=True)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:  # noqa: BLE001 - say why on stderr, then exit like a crash
            traceback.print_exc()
        finally:
            with contextlib.suppress(OSError):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)
    os.close(write_fd)
    os.waitpid(pid, 0)  # the first child exits at once; the daemon is reparented
    return _wait_ready(read_fd, paths)


def _wait_ready(read_fd: int, paths: StatePaths) -> int:
    """Relay what the starting daemon prints, until it is ready or gone."""
    daemon_pid: int | None = None
    printed = False
    ready = False
    partial = b""
    deadline = time.monotonic() + DETACH_READY_TIMEOUT_S
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([read_fd], [], [], remaining)[0]:
                where = f"pid {daemon_pid}" if daemon_pid else "pid not known yet"
                print(
                    f"goondan: the orchestrator ({where}) was not ready within "
                    f"{DETACH_READY_TIMEOUT_S:g}s; it may still be starting: see "
                    f"{paths.daemon_log} and {paths.stderr_log}",
                    file=sys.stderr,
                )
                return 1
            chunk = os.read(read_fd, 65536)
            *lines, partial = (partial + chunk).split(b"\n")
            if not chunk and partial:  # the end: a last line without its newline
                lines, partial = [*lines, partial], b""
            for line in lines:
                if line.startswith(_PID):
                    daemon_pid = int(line[len(_PID) :])
                elif line.endswith(_READY):  # after what the daemon left unfinished, if anything
                    ready = True
                    sys.stderr.buffer.write(line[: -len(_READY)])
                else:
                    printed = printed or bool(line.strip())
                    sys.stderr.buffer.write(line + b"\n")
            sys.stderr.flush()
            if not chunk:
                break
    except KeyboardInterrupt:
        print(
            f"goondan: stopped waiting; the orchestrator goes on starting (see {paths.daemon_log})",
            file=sys.stderr,
        )
        return 130
    finally:
        os.close(read_fd)
    if not ready:
        if not printed:
            print(
                f"goondan: the orchestrator exited during start-up; see {paths.stderr_log}",
                file=sys.stderr,
            )
        return 1
    print(f"pid {daemon_pid}")
    print(f"log {paths.daemon_log}")
    return 0


class _DetachedNotifier(Notifier):
    """systemd's readiness, also told to `run --detach` that waits for it: at the moment the
    daemon says READY=1 (after `run/orchestrator.json` is written) its stdout and stderr
    leave the launcher's pipe for `logs/stderr.log`, and the launcher returns."""

    def __init__(self, paths: StatePaths) -> None:
        super().__init__()
        self._paths = paths
        self._told = False

    def ready(self, status: str) -> None:
        super().ready(status)
        if self._told:
            return  # a reload's READY=1
        self._told = True
        with contextlib.suppress(OSError):  # the launcher may have gone (Ctrl-C)
            sys.stdout.flush()
            sys.stderr.flush()
            os.write(2, _READY + b"\n")
        # The launcher's pipe is replaced (it sees the end) even when the file cannot be made
        # (a full disk): a daemon that could start does not fail for its last-words file.
        try:
            fd = self._open_stderr_log()
        except OSError:
            fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)

    def _open_stderr_log(self) -> int:
        path = self._paths.stderr_log
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with contextlib.suppress(OSError):
            if path.stat().st_size > STDERR_LOG_BYTES:
                rotate_files(path, 2)
        return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
