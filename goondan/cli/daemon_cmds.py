"""`send`, `status`, `stop`: thin clients of a running daemon's control socket."""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
import time
from datetime import UTC, datetime

import msgspec

from goondan.cli.client import ControlClient, NotRunning, daemon_running
from goondan.cli.prompt import confirm, declined
from goondan.paths import StatePaths
from ipc import wire, zmtp
from ipc.error_codes import ErrorCode

EXIT_FAILED = 1
EXIT_NOT_RUNNING = 2
EXIT_USAGE = 2


class InputTooLarge(Exception):
    pass


def dispatch(args: argparse.Namespace) -> int:
    paths = StatePaths.at(args.state_root)
    try:
        if args.command == "send":
            args.text = read_input(args.text, args.input_file)
        with ControlClient(paths) as client:
            if args.command == "send":
                return _send(client, args)
            if args.command == "status":
                return _status(client, args)
            if args.command == "restart":
                return _restart(client, args)
            return _stop(client, paths, args)
    except NotRunning as exc:
        print(f"goondan: {exc}", file=sys.stderr)
        return EXIT_NOT_RUNNING
    except TimeoutError as exc:
        print(f"goondan: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except (zmtp.MessageTooLarge, InputTooLarge) as exc:
        print(
            f"goondan: {ErrorCode.MESSAGE_TOO_LARGE}: the request is not sent: {exc}",
            file=sys.stderr,
        )
        return EXIT_FAILED
    except (OSError, UnicodeDecodeError) as exc:  # the input file or stdin
        print(f"goondan: cannot read the input: {exc}", file=sys.stderr)
        return EXIT_USAGE


def read_input(text: str | None, input_file: str | None) -> str:
    """The input of `send`: TEXT, or all of stdin (`-`) or of a file, as UTF-8. One command
    line argument holds at most 128 KiB; these hold up to the message limit, and no more is
    read (an endless or huge stream is refused once it passes the limit)."""
    source = input_file if input_file is not None else text
    if source is None or (input_file is None and source != "-"):
        return source or ""
    limit = zmtp.MAX_MESSAGE_BYTES
    if source == "-":
        where, data = "stdin", sys.stdin.buffer.read(limit + 1)
    else:
        where = source
        with open(source, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size > limit:
                raise InputTooLarge(f"{where} holds {size:,} bytes, over the {limit:,}-byte limit")
            data = f.read(limit + 1)
    if len(data) > limit:
        raise InputTooLarge(f"{where} holds more than the {limit:,}-byte limit")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnicodeDecodeError(
            exc.encoding, exc.object, exc.start, exc.end, f"{where} is not UTF-8 text"
        ) from None


def _send(client: ControlClient, args: argparse.Namespace) -> int:
    json_out = getattr(args, "json", False)
    streaming = args.stream == "on" or (args.stream == "auto" and sys.stdout.isatty())
    show = LiveView() if streaming and not json_out else None
    trace_id = secrets.token_hex(16)
    if getattr(args, "verbose", False):  # before the answer: a long turn can be followed
        print(f"trace {trace_id}  (goondan logs --trace {trace_id[:8]})", file=sys.stderr)
    try:
        result = client.send(
            args.text,
            agent=args.agent,
            instance_key=args.instance,
            timeout_s=args.timeout,
            on_update=show.update if show else None,
            trace_id=trace_id,
        )
    except KeyboardInterrupt:
        # Ctrl-C: the turn is ours to stop, not to leave running. A second Ctrl-C while the
        # daemon confirms raises out of here at once; `main` exits 130 either way.
        print("\ngoondan: cancelling the request (Ctrl-C again to leave at once)", file=sys.stderr)
        cancelled = client.cancel_request(trace_id, timeout_s=5)
        if cancelled is None:
            print("goondan: the daemon did not confirm the cancel", file=sys.stderr)
        else:
            print(f"goondan: cancelled {len(cancelled.turns)} turn(s)", file=sys.stderr)
        raise
    if json_out:
        error = result.error
        answer = {
            "reply": result.response if result.status == "ok" else None,
            "traceId": trace_id,
            "agent": result.target,
            "instanceKey": result.instance_key or args.instance,
        }
        if error is not None:
            answer["error"] = {"code": error.code, "message": error.message}
        print(json.dumps(answer, ensure_ascii=False))
        return 0 if result.status == "ok" else EXIT_FAILED
    if result.status == "ok":
        if show is not None and show.streamed:
            print()  # the text is on screen already
        else:
            print(result.response or "")
        return 0
    error = result.error
    print(
        f"goondan: {error.code}: {error.message}" if error else "goondan: request failed",
        file=sys.stderr,
    )
    return EXIT_FAILED


class LiveView:
    """A turn as it happens: streamed text on stdout, tool progress on stderr."""

    def __init__(self) -> None:
        self.streamed = False

    def update(self, update: wire.TurnUpdate) -> None:
        if update.kind == "text" and update.text:
            self.streamed = True
            sys.stdout.write(update.text)
            sys.stdout.flush()
        elif update.kind == "progress":
            data = update.data
            share = data.get("progress")
            percent = f" {share * 100:.0f}%" if isinstance(share, int | float) else ""
            message = data.get("message") or ""
            print(f"  [{data.get('toolName', 'tool')}{percent}] {message}", file=sys.stderr)


def _status(client: ControlClient, args: argparse.Namespace) -> int:
    reply = client.command("status")
    if args.json or not sys.stdout.isatty():
        print(json.dumps(reply.result, indent=2 if args.json and sys.stdout.isatty() else None))
        return 0
    status = wire.decode_result(reply, wire.Status)
    started = datetime.fromtimestamp(status.started_at, tz=UTC).isoformat(timespec="seconds")
    print(f"orchestrator  pid {status.pid}  swarm {status.swarm}  since {started}")
    print(f"bundle        {status.bundle}")
    print()
    placed = any(p.node for p in status.processes)  # a NODE column for a Ray-placed swarm
    node_header = "  NODE" if placed else ""
    print(f"{'NAME':<24} {'KIND':<10} {'PID':>8}  {'STATUS':<17} {'RESTARTS':>8}{node_header}")
    for p in status.processes:
        pid = p.pid if p.pid is not None else "-"
        node = f"  {p.node or 'local'}" if placed else ""
        print(f"{p.name:<24} {p.kind:<10} {pid:>8}  {p.status:<17} {p.restarts:>8}{node}")
        if p.last_exit is not None:
            print(f"  {_last_exit(p.last_exit, p.status)}")
    return 0


def _last_exit(last: wire.LastExit, status: str) -> str:
    """`could not start at 12:00:01Z: No module named 'x'`, `last stop: SIGKILL at ...`."""
    when = datetime.fromtimestamp(last.at, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if last.signal is not None:
        how = f"killed by {last.signal}"
    elif last.code is not None:
        how = f"exit code {last.code}"
    else:
        how = "never ran"
    what = "could not start" if status == "notStarted" else "last stop"
    error = f": {last.error}" if last.error else ""
    return f"{what}: {how} at {when}{error}"


def _restart(client: ControlClient, args: argparse.Namespace) -> int:
    if args.agent and args.fresh:
        question = f"Delete every conversation of agent '{args.agent}' and restart it?"
        if not confirm(question, yes=args.yes):
            return declined()
    command_args = wire.RestartArgs(args.agent, args.fresh) if args.agent else wire.RestartArgs()
    reply = client.command("restart", command_args, timeout_s=600)
    if not reply.ok:
        error = reply.error
        print(f"goondan: restart refused: {error.message if error else '?'}", file=sys.stderr)
        return EXIT_FAILED
    if args.agent:
        print(f"restarted {args.agent}" + (" (conversations deleted)" if args.fresh else ""))
    else:
        result = wire.decode_result(reply, wire.Reloaded)
        print(f"reloaded; restarted: {', '.join(result.restarted) or 'none'}", end="")
        for key, names in (("added", result.added), ("removed", result.removed)):
            if names:
                print(f"; {key}: {', '.join(names)}", end="")
        print()
    return 0


def _stop(client: ControlClient, paths: StatePaths, args: argparse.Namespace) -> int:
    """Ask the daemon to stop, and return once its process has exited: its lock released and
    its pid gone, so a `goondan run` right after finds nothing of it."""
    pid = _daemon_pid(paths)  # before the daemon removes the file
    reply = client.command("stop")
    if not reply.ok:
        print(f"goondan: {msgspec.json.encode(reply.error).decode()}", file=sys.stderr)
        return EXIT_FAILED
    deadline = time.monotonic() + args.timeout
    while daemon_running(paths) or (pid is not None and _alive(pid)):
        if time.monotonic() > deadline:
            which = f" (pid {pid})" if pid is not None else ""
            print(
                f"goondan: the orchestrator{which} did not exit within {args.timeout:g}s",
                file=sys.stderr,
            )
            return EXIT_FAILED
        time.sleep(0.05)
    print("stopped", file=sys.stderr)
    return 0


def _daemon_pid(paths: StatePaths) -> int | None:
    """The running daemon's pid from `run/orchestrator.json`; None when it cannot be read."""
    try:
        pid = json.loads(paths.info_file.read_bytes()).get("pid")
    except (OSError, ValueError, AttributeError):
        return None
    return pid if isinstance(pid, int) and pid > 0 else None


def _alive(pid: int) -> bool:
    """Whether process `pid` still runs; a zombie (exited, not yet reaped by its parent) has
    exited."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process: it exists
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()[0] != b"Z"
    except (OSError, IndexError):
        return True  # no /proc: kill(0) said it exists
