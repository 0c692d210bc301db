"""`goondan` / `gdn`: the command line. Parsing only; each command lives in its own module."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import textwrap
from collections.abc import Sequence

from goondan.settings import DEFAULTS

DESCRIPTION = """\
Run Goondan swarms: one orchestrator daemon, one process per agent, ZeroMQ between them.

  goondan init ./my-bundle              write a starter bundle (--list: the templates)
  goondan validate ./my-bundle          check a bundle (goondan.yaml) and exit
  goondan run ./my-bundle               run the swarm in the foreground until Ctrl-C
  goondan run ./my-bundle --input "hi"  answer one input, then stop
  goondan run ./my-bundle --detach      run the swarm in the background (logs: ~/.goondan/logs)
  goondan send "hello"                  ask the running swarm (the reply goes to stdout)
  goondan status                        processes of the running swarm
  goondan restart [--agent NAME]        reload the bundle / restart one agent
  goondan stop                          stop the running swarm cleanly
  goondan cancel --instance KEY         stop running turns (also --agent, --trace, --all)
  goondan logs [-f] [--trace ID]        turns, steps and tool calls as they happen
  goondan studio                        open the web studio (run with --studio HOST:PORT)
  goondan instance list|show|delete     stored conversations
  goondan approvals|approve|deny ID     tool calls waiting for a human
  goondan doctor [./my-bundle]          check everything `run` needs, one line per check
  goondan tools list --agent NAME       an agent's tools (starts its MCP servers to ask them)
  goondan package add @acme/search      install a Goondan package and depend on it

Every command's --help says what it prints on a terminal and on a pipe, and its exit codes.
Ctrl-C ends a command with exit 130 (`run` stops the swarm cleanly; `logs -f` exits 0).
"""

STATE_ROOT_HELP = "state directory (default: $GOONDAN_STATE_ROOT, else ~/.goondan)"
EXIT_INTERRUPTED = 130  # what a shell reports for a command ended by SIGINT (128 + 2)
CONFIRM_HELP = "do not ask before deleting (on a terminal it asks; elsewhere it never does)"


class HelpFormatter(argparse.HelpFormatter):
    """Wraps each line of a description or epilog on its own: long descriptions still flow,
    and the `prints:` / `exit:` lines of an epilog stay lines (continued under a hanging
    indent)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return "\n".join(
            textwrap.fill(
                line,
                width,
                initial_indent=indent,
                subsequent_indent=indent + ("  " if line.startswith(("prints:", "exit:")) else ""),
            )
            for line in text.splitlines()
        )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="goondan",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-V", "--version", action=_Version, nargs=0, help="print the version")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser(
        "init",
        help="write a starter bundle from a template",
        description="Write a bundle that validates and runs at once into DIR, from a template "
        "shipped with goondan. Nothing is overwritten: if any file it would write exists, it "
        "writes nothing. --list prints each template's name and a one-line description.",
        formatter_class=HelpFormatter,
        epilog="prints: the files written and the commands to try next, the same on a terminal "
        "and on a pipe\n"
        "exit: 0 written, 1 nothing written (a file is in the way, or cannot be written), "
        "2 bad usage, such as an unknown template (the list goes to stderr)",
    )
    p.add_argument(
        "dir",
        nargs="?",
        default=".",
        help="directory to write into, created if needed (default: .)",
    )
    p.add_argument(
        "-t", "--template", metavar="NAME", help="the template (default: quickstart; see --list)"
    )
    p.add_argument("--list", action="store_true", help="list the templates and exit")

    p = sub.add_parser(
        "validate",
        help="check a bundle and report every problem",
        description="Load the bundle and its env files (.env, .env.local, --env-file), then "
        "import its Python entries (tools, extensions, connectors) in a throwaway process with "
        "a time limit, and report every problem with its file:line: syntax and import errors, "
        "Tool exports without a handler, Extensions without `register`, Connectors without "
        "`main`; a handler no export declares is a warning.",
        formatter_class=HelpFormatter,
        epilog="prints: each problem with its file:line, then the verdict; the same text on a "
        "terminal and on a pipe (--format json: {valid, errors, warnings})\n"
        "exit: 0 valid (warnings allowed), 1 not valid, 2 bad usage",
    )
    p.add_argument(
        "path", nargs="?", default=".", help="bundle directory or goondan.yaml (default: .)"
    )
    p.add_argument("--format", choices=("text", "json"), default="text", help="output format")
    _env_file_argument(p)
    p.add_argument(
        "--no-import",
        dest="deep",
        action="store_false",
        help="check the YAML and the files only: do not import the Python entries",
    )
    p.add_argument(
        "--import-timeout",
        type=_seconds,
        default=DEFAULTS.daemon.import_timeout_s,
        metavar="SECONDS",
        help="time limit for importing all entries (default: %(default)g)",
    )

    p = sub.add_parser("package", help="add, remove, list or install the bundle's packages")
    pkg = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    bundle_help = "the bundle directory or its goondan.yaml (default: .)"
    q = pkg.add_parser(
        "add",
        help="install a Goondan package with pip and add it to the bundle's dependencies",
        description="Install package NAME (a Python distribution that declares NAME in the "
        "`goondan.packages` entry point group; see docs/packages.md) into the environment "
        "goondan runs in, with pip. Without --pip-spec the distribution is NAME without its "
        "'@' and with '/' as '-' (`@acme/search`: acme-search), constrained by RANGE. Then "
        "add {name, version: RANGE} to the Package's spec.dependencies in goondan.yaml "
        "(default range: ^ the installed version; the rest of the file is kept) and record "
        "the version and the wheel's sha256 in goondan.lock.yaml.",
        formatter_class=HelpFormatter,
        epilog="prints: one line naming the version, distribution and range added, the same "
        "on a terminal and on a pipe; errors (unknown package, pip's failure and the tail of "
        "its output, a range the version does not satisfy) go to stderr\n"
        "exit: 0 added, 1 failed (nothing is written to goondan.yaml or the lock), "
        "2 bad usage",
    )
    q.add_argument("spec", metavar="NAME[@RANGE]", help="e.g. @acme/search or @acme/search@^1.2")
    q.add_argument(
        "--pip-spec",
        metavar="SPEC",
        help="what pip installs instead: a wheel file, a directory, or a requirement such as "
        "'acme-search==1.2.0'",
    )
    q.add_argument("--bundle", metavar="PATH", help=bundle_help)
    q = pkg.add_parser(
        "remove",
        help="remove a package from the bundle's dependencies and lock",
        formatter_class=HelpFormatter,
        epilog="prints: one line saying what was removed, on a terminal and on a pipe\n"
        "exit: 0 removed, 1 not a dependency (or pip failed with --uninstall), 2 bad usage",
    )
    q.add_argument("name", help="the package name, e.g. @acme/search")
    q.add_argument("--uninstall", action="store_true", help="also pip-uninstall its distribution")
    q.add_argument("--bundle", metavar="PATH", help=bundle_help)
    q = pkg.add_parser(
        "list",
        help="the bundle's dependencies: range, installed and locked versions",
        formatter_class=HelpFormatter,
        epilog="prints: a table (package, range, installed, locked, distribution, status), "
        "the same on a terminal and on a pipe\n"
        "exit: 0 every dependency installed, in range and locked, 1 otherwise, 2 bad usage",
    )
    q.add_argument("--bundle", metavar="PATH", help=bundle_help)
    q = pkg.add_parser(
        "install",
        help="install every dependency as goondan.lock.yaml says (sha256 checked)",
        description="For each dependency in goondan.yaml: reinstall the locked wheel (its "
        "sha256 must match the lock) unless that version is installed already; a dependency "
        "not locked, or locked outside its range, is resolved as `add` would and locked.",
        formatter_class=HelpFormatter,
        epilog="prints: one line per package, then a summary, on a terminal and on a pipe\n"
        "exit: 0 installed, 1 failed (a sha256 mismatch, pip's failure, a lock that does not "
        "match goondan.yaml with --frozen-lockfile), 2 bad usage",
    )
    q.add_argument(
        "--frozen-lockfile",
        action="store_true",
        help="refuse to change the lock: fail when it does not match goondan.yaml (for CI)",
    )
    q.add_argument("--bundle", metavar="PATH", help=bundle_help)

    p = sub.add_parser(
        "run",
        help="run the orchestrator (in the foreground, or in the background with --detach)",
        description="Run the orchestrator in the foreground until SIGTERM/SIGINT or "
        "`goondan stop`. "
        "Agent processes start on demand (first input or first delegate to them). "
        "Logs go to stderr (JSON lines when stderr is not a terminal) and, as JSON lines, "
        "to <state-root>/logs/daemon.log (rotated). With --detach: in the background. "
        "Env files: <bundle dir>/.env, .env.local and --env-file, under the process "
        "environment.",
        formatter_class=HelpFormatter,
        epilog="prints: logs on stderr, readable on a terminal, JSON lines on a pipe or file; "
        "with --input the answer on stdout (on a terminal, streamed as it is written); with "
        "--detach `pid N` and `log PATH`\n"
        "exit: 0 stopped cleanly (--input: answered; --detach: running), 1 could not start "
        "(the reason on stderr; --input: the request failed), 2 bad usage",
    )
    p.add_argument(
        "path", nargs="?", default=".", help="bundle directory or goondan.yaml (default: .)"
    )
    p.add_argument(
        "--swarm", help="swarm to run (default: the one named `default`, or the only one)"
    )
    p.add_argument("--state-root", help=STATE_ROOT_HELP)
    once = p.add_mutually_exclusive_group()
    once.add_argument("--input", help="answer this one input on stdout, then shut down")
    once.add_argument(
        "--detach",
        action="store_true",
        help="start the orchestrator in the background and return once it is ready: prints "
        "`pid N` and `log PATH` (the same on a pipe and a terminal), exits 0; exits 1 with "
        "the reason when it cannot start (the bundle's errors, another orchestrator "
        "running...). Its log is <state-root>/logs/daemon.log; stop it with `goondan stop`",
    )
    _env_file_argument(p)
    p.add_argument(
        "--transcript",
        action="store_true",
        help="with --input: first print every agent's messages, tool calls and results",
    )
    p.add_argument(
        "--watch",
        action="store_true",
        help="reload when a file of the bundle changes (restarts only the changed agents)",
    )
    p.add_argument(
        "--spawn",
        choices=("zygote", "subprocess"),
        default=DEFAULTS.daemon.spawn,
        help="how agent processes start: forked from a preloaded template process (fast, "
        "the default) or as fresh interpreters (simplest to debug)",
    )
    p.add_argument(
        "--durability",
        choices=("os", "fsync"),
        default=DEFAULTS.storage.durability,
        help="os (default): conversation events are written to the OS before a turn answers "
        "or runs a tool (safe when a process crashes) and fsync'd once the instance is quiet "
        "for 5 s, and an input from `goondan send` is fsync'd if still unanswered 10 ms after "
        "it was accepted; fsync: every event, a new conversation's directory entries, "
        "extension state, long-running tool records and every `send` input are flushed to "
        "disk before the loop goes on (safe from power loss at any moment, slower)",
    )
    p.add_argument(
        "--hang-timeout",
        type=_seconds,
        default=DEFAULTS.daemon.hang_timeout_s,
        metavar="SECONDS",
        help="kill and respawn an agent whose event loop sent no heartbeat for this long "
        "(default: %(default)g)",
    )
    p.add_argument(
        "--import-timeout",
        type=_seconds,
        default=DEFAULTS.daemon.import_timeout_s,
        metavar="SECONDS",
        help="a reload first imports the bundle's Python entries in a throwaway process and is "
        "refused when that takes longer (default: %(default)g)",
    )
    p.add_argument(
        "--agent-nice",
        type=_nice,
        default=DEFAULTS.daemon.agent_nice,
        metavar="N",
        help="run agents N steps lower in CPU priority than the daemon, 0 to 19 "
        "(default: %(default)s), "
        "so routing, heartbeats and the control socket get their turn while agents compute",
    )
    p.add_argument(
        "--log-level", help="debug, info, warning or error (default: $GOONDAN_LOG_LEVEL or info)"
    )
    p.add_argument(
        "--log-rotate-bytes",
        type=_positive_int,
        default=DEFAULTS.storage.daemon_log_rotate_bytes,
        metavar="BYTES",
        help="<state-root>/logs/daemon.log becomes daemon.log.1 past this size; "
        f"{DEFAULTS.storage.daemon_log_files} files are kept (default: %(default)s)",
    )
    p.add_argument(
        "--metrics",
        type=_host_port,
        default=os.environ.get("GOONDAN_METRICS") or None,
        metavar="HOST:PORT",
        help="serve Prometheus metrics at http://HOST:PORT/metrics (default: $GOONDAN_METRICS, "
        "else off); see docs/metrics.md",
    )
    p.add_argument(
        "--placement",
        choices=("local", "ray"),
        default="local",
        help="where agents run by default: local child processes (the default), or actors on "
        "a Ray cluster (the `ray` extra); an agent's spec.placement overrides it",
    )
    p.add_argument(
        "--ray-address",
        metavar="ADDR",
        help="with --placement ray: the Ray cluster to join, HOST:PORT of its head or "
        "ray://HOST[:PORT] of a Ray Client server; one nothing listens at is an error at the "
        "first launch (default: $GOONDAN_RAY_ADDRESS, else Ray's own default)",
    )
    p.add_argument(
        "--listen",
        metavar="HOST:PORT",
        help="with --placement ray: where Ray-placed agents connect back, over mutual TLS "
        "(default: 127.0.0.1:0, any free port; firewall it to the cluster's nodes)",
    )
    p.add_argument(
        "--studio",
        metavar="HOST:PORT",
        help="serve the web studio (the swarm's graph, traces, conversations, live events) "
        "on HOST:PORT, a loopback address (port 0: any free one); `goondan studio` prints "
        "its URL with the token (default: $GOONDAN_STUDIO, or off)",
    )
    p.add_argument(
        "--studio-allow-remote",
        action="store_true",
        help="let --studio listen on an address other hosts can reach (it shows every "
        "conversation; anyone with the token can read them)",
    )

    p = sub.add_parser(
        "send",
        help="send text to the running swarm and print the reply",
        description="Deliver an input to an agent of the running swarm (default: its entry "
        "agent) and print the reply on stdout. The input is TEXT, stdin (TEXT '-') or a file "
        "(--input-file), up to the 64 MiB message limit.",
        formatter_class=HelpFormatter,
        epilog="prints: the reply on stdout; on a terminal it appears as a streaming model "
        "writes it, with tool progress on stderr (--stream); on a pipe, the whole reply once; "
        "--json: one JSON line with reply, traceId, agent, instanceKey (and error); -v: "
        "`trace ID` on stderr first\n"
        "exit: 0 answered, 1 the request failed (the error on stderr), 2 no orchestrator "
        "running or bad usage, 130 Ctrl-C",
    )
    p.add_argument("text", nargs="?", help="the input for the agent; '-' reads it from stdin")
    p.add_argument(
        "--input-file",
        metavar="FILE",
        help="read the input from FILE (UTF-8; '-' is stdin) instead of TEXT",
    )
    p.add_argument("--agent", help="agent to ask (default: the swarm's entry agent)")
    p.add_argument(
        "--instance", default="cli", help="conversation (instanceKey) to use (default: cli)"
    )
    p.add_argument(
        "--stream",
        choices=("auto", "on", "off"),
        default="auto",
        help="show the reply as a streaming model writes it, and tool progress "
        "(auto: when stdout is a terminal)",
    )
    p.add_argument(
        "--timeout",
        type=_seconds,
        default=DEFAULTS.daemon.input_timeout_ms / 1000,
        help="seconds to wait for the reply (default: %(default)g)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help='print {"reply", "traceId", "agent", "instanceKey"} (and "error" when it '
        "failed) as one JSON line instead of the reply; nothing is streamed",
    )
    p.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="print the request's trace id on stderr first (for `goondan logs --trace`)",
    )
    p.add_argument("--state-root", help=STATE_ROOT_HELP)

    p = sub.add_parser(
        "status",
        help="show the orchestrator and its processes",
        formatter_class=HelpFormatter,
        epilog="prints: a table on a terminal; one line of JSON on a pipe or file (--json: "
        "JSON on a terminal too, indented)\n"
        "exit: 0 done, 1 failed, 2 no orchestrator running or bad usage, 130 Ctrl-C",
    )
    p.add_argument("--json", action="store_true", help="print JSON even on a terminal")
    p.add_argument("--state-root", help=STATE_ROOT_HELP)

    p = sub.add_parser(
        "restart",
        help="reload the bundle, or restart one agent",
        description="Without --agent: reload the bundle (like SIGHUP) and restart only the "
        "agents whose resources changed; a bundle that does not validate is refused and the "
        "swarm keeps running as it was. With --agent: drain and restart that agent.",
        formatter_class=HelpFormatter,
        epilog="prints: one line saying what was restarted, the same on a terminal and on a "
        "pipe. --fresh asks first when stdin and stderr are terminals; elsewhere (scripts) it "
        "deletes without asking\n"
        "exit: 0 done, 1 refused or failed (or answered no), 2 no orchestrator running or bad "
        "usage, 130 Ctrl-C",
    )
    p.add_argument("--agent", help="restart only this agent")
    p.add_argument(
        "--fresh", action="store_true", help="with --agent: also delete its conversations"
    )
    p.add_argument("-y", "--yes", action="store_true", help=CONFIRM_HELP)
    p.add_argument("--state-root", help=STATE_ROOT_HELP)

    p = sub.add_parser(
        "cancel",
        help="cancel running turns, and the delegations they wait on",
        description="Cancel the running turns that match every filter given (--all: every "
        "running turn), and the turns of other agents they wait on, down the chain. A "
        "cancelled turn stops its model call and tool calls, is recorded as cancelled in its "
        "conversation, and answers its requester with E_TURN_CANCELLED.",
        formatter_class=HelpFormatter,
        epilog="prints: one `cancelled AGENT/INSTANCE trace TRACE` line per turn, on a "
        "terminal and on a pipe (--json: a list of objects with agent, instanceKey, traceId, "
        "requestId)\n"
        "exit: 0 something was cancelled, 1 nothing matched, 2 no orchestrator running or bad "
        "usage, 130 Ctrl-C",
    )
    p.add_argument("--agent", help="only this agent's turns")
    p.add_argument("--instance", help="only the turns of this instanceKey")
    p.add_argument("--trace", help="only the turns of this traceId (one request across agents)")
    p.add_argument("--all", action="store_true", help="every running turn (no filter needed)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--state-root", help=STATE_ROOT_HELP)

    p = sub.add_parser(
        "logs",
        help="show runtime events (turns, steps, tool calls)",
        description="Show the runtime events of stored instances. Works with or without a "
        "running daemon; with one, its agents first write the events they hold (they write "
        "them in batches, up to a second after a turn). The daemon's own log (start, stop, "
        "crashes; a detached daemon's agents' output too) is another file, shown with --daemon: "
        "<state-root>/logs/daemon.log, JSON lines, rotated to daemon.log.1, .2, ...",
        formatter_class=HelpFormatter,
        epilog="prints: one readable line per event on a terminal; JSON lines on a pipe or "
        "file (--json: JSON lines on a terminal too). Piping into `head` is fine. --daemon: "
        "the daemon log's JSON lines as written\n"
        "exit: 0 done (Ctrl-C ends -f with 0 too), 1 no runtime events stored (--trace: none "
        "of that trace; --daemon: no daemon log), 2 bad usage (a --trace prefix shorter "
        "than 6, or matching several traces)",
    )
    p.add_argument("--agent", help="only this agent")
    p.add_argument("--instance", help="only this instanceKey")
    p.add_argument(
        "--trace",
        help="only this traceId (one request across agents): the whole id or any unique "
        "prefix of 6 or more characters, as `send -v` and `logs` print it",
    )
    p.add_argument(
        "--daemon",
        action="store_true",
        help="show the daemon's own log (<state-root>/logs/daemon.log) instead; -f and -n work",
    )
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new events")
    p.add_argument("-n", "--lines", type=int, default=200, help="last N events (0: all)")
    p.add_argument("--json", action="store_true", help="JSON lines even on a terminal")
    p.add_argument("--state-root", help=STATE_ROOT_HELP)

    p = sub.add_parser("instance", help="list, show or delete stored conversations")
    inst = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    q = inst.add_parser(
        "list",
        help="stored instances: swarm, key, agents, messages",
        formatter_class=HelpFormatter,
        epilog="prints: a table on a terminal; one line of JSON on a pipe or file (--json: "
        "JSON on a terminal too)\n"
        "exit: 0 done (also when none is stored), 2 bad usage",
    )
    q.add_argument("--json", action="store_true", help="print JSON even on a terminal")
    q.add_argument("--state-root", help=STATE_ROOT_HELP)
    q = inst.add_parser(
        "show",
        help="print a stored conversation: messages, tool calls and results",
        description="Print the conversation of instance KEY, agent by agent: each message's "
        "role and text, the tool calls (name and arguments) and their results. Long contents "
        "are cut (--full shows them whole). Works with or without a running daemon.",
        formatter_class=HelpFormatter,
        epilog="prints: the same readable text on a terminal and on a pipe (--json: the "
        "messages as JSON, complete)\n"
        "exit: 0 done, 1 no such instance (or agent) stored, 2 bad usage",
    )
    q.add_argument("key", help="the instanceKey")
    q.add_argument("--agent", help="only this agent's conversation")
    q.add_argument("--swarm", help="only in this swarm")
    q.add_argument("--full", action="store_true", help="do not cut long contents")
    q.add_argument("--json", action="store_true", help="print the messages as JSON")
    q.add_argument("--state-root", help=STATE_ROOT_HELP)
    q = inst.add_parser(
        "delete",
        help="delete an instance's conversations (a running daemon drops it first)",
        formatter_class=HelpFormatter,
        epilog="prints: one `deleted SWARM/KEY` line per instance deleted, on a terminal and on "
        "a pipe. Asks first when stdin and stderr are terminals; elsewhere (scripts) it "
        "deletes without asking\n"
        "exit: 0 deleted, 1 nothing stored under that key, or answered no, 2 bad usage, "
        "130 Ctrl-C",
    )
    q.add_argument("key", help="the instanceKey")
    q.add_argument("--swarm", help="only in this swarm")
    q.add_argument("--workdir", action="store_true", help="also delete its tool workdir")
    q.add_argument("-y", "--yes", action="store_true", help=CONFIRM_HELP)
    q.add_argument("--state-root", help=STATE_ROOT_HELP)

    p = sub.add_parser(
        "approvals",
        help="list the tool calls waiting for a human (toolPolicy.requireApproval)",
        formatter_class=HelpFormatter,
        epilog="prints: a table (id, agent, instance, tool, age, arguments) on a terminal; "
        "one line of JSON on a pipe or file (--json: JSON on a terminal too; a list of "
        "objects with id, agent, instanceKey, tool, args, createdAt, expiresAt)\n"
        "exit: 0 done (also when none waits), 1 failed, 2 no orchestrator running or bad usage",
    )
    p.add_argument("--json", action="store_true", help="print JSON even on a terminal")
    p.add_argument("--state-root", help=STATE_ROOT_HELP)
    for name, what in (("approve", "let a waiting tool call run"), ("deny", "refuse it")):
        p = sub.add_parser(
            name,
            help=what,
            formatter_class=HelpFormatter,
            epilog="prints: `ID approved|denied by USER (uid N)`, the same on a terminal and "
            "on a pipe\n"
            "exit: 0 decided, 1 no such waiting call (decided, expired or unknown), 2 no "
            "orchestrator running or bad usage",
        )
        p.add_argument("id", help="the approval's id (see `goondan approvals`)")
        if name == "deny":
            p.add_argument("--reason", help="told to the model with E_TOOL_DENIED")
        p.add_argument("--state-root", help=STATE_ROOT_HELP)

    p = sub.add_parser(
        "doctor",
        help="check the installation, state root, bundle, env vars, endpoints and ports",
        description="Check what `goondan run` needs, one line per check: ok, warn or fail, "
        "what was checked, and how to fix it. Checks: Python and dependency versions and "
        "the interpreter's build (one that costs agents CPU is a warning), the "
        "state root (owner, permissions, free space, a stale lock, a running daemon), the "
        "bundle, every environment variable it reads (set or not, and from where: never the "
        "value), each model endpoint (which one and why, reachable), connector ports (free), "
        "and systemd hints. Env files are read as `goondan run` reads them. Without --online "
        "nothing is sent to an endpoint but a TCP connect: no credentials leave the machine; "
        "with --online, one authenticated call lists its models.",
        formatter_class=HelpFormatter,
        epilog="prints: aligned text, coloured on a terminal and plain on a pipe (--json: "
        "the checks as JSON)\n"
        "exit: 0 no check failed (warnings do not fail), 1 a check failed, 2 bad usage",
    )
    p.add_argument(
        "path", nargs="?", default=".", help="bundle directory or goondan.yaml (default: .)"
    )
    p.add_argument("--state-root", help=STATE_ROOT_HELP)
    p.add_argument(
        "--online",
        action="store_true",
        help="also make one cheap authenticated call per model endpoint (lists its models) "
        "to check that the API key is accepted",
    )
    p.add_argument("--json", action="store_true", help="print the checks as JSON")
    _env_file_argument(p)

    p = sub.add_parser("tools", help="list an agent's tools (MCP servers are started and asked)")
    tools = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    q = tools.add_parser(
        "list",
        help="an agent's tools: Python exports, and what its MCP servers answer",
        description="List the tools an agent gets from its Tool resources: a Python Tool's "
        "declared exports, and what each MCP Tool's server answers (the server is started as "
        "the agent would start it, with the env files read as `goondan run` reads them, then "
        "stopped). Tools that extensions register at run time are not listed.",
        formatter_class=HelpFormatter,
        epilog="prints: one line per tool (name, source, first line of its description), the "
        "same on a terminal and on a pipe (--json: {agent, tools, errors}); a server that "
        "cannot start on stderr, with its stderr's tail\n"
        "exit: 0 listed, 1 a server could not start, the agent is unknown or the bundle does "
        "not validate, 2 bad usage",
    )
    q.add_argument(
        "path", nargs="?", default=".", help="bundle directory or goondan.yaml (default: .)"
    )
    q.add_argument("--agent", required=True, metavar="NAME", help="the agent whose tools to list")
    q.add_argument("--json", action="store_true", help="print the tools as JSON")
    _env_file_argument(q)

    p = sub.add_parser(
        "studio",
        help="print the running swarm's web studio URL and open it in a browser",
        description="Print the URL of the running orchestrator's web studio, with its token "
        "(`goondan run --studio HOST:PORT` turns it on), and open it in a browser when there "
        "is a display.",
        formatter_class=HelpFormatter,
        epilog="prints: the URL with its token on stdout, the same on a terminal and on a pipe\n"
        "exit: 0 printed, 1 no orchestrator running or it serves no studio (the reason on "
        "stderr), 2 bad usage",
    )
    p.add_argument("--state-root", help=STATE_ROOT_HELP)
    p.add_argument("--no-browser", action="store_true", help="print the URL only")

    p = sub.add_parser(
        "stop",
        help="stop the running orchestrator cleanly",
        description="Ask the running orchestrator to stop (it drains its agents) and wait "
        "until its process has exited (the pid in run/orchestrator.json).",
        formatter_class=HelpFormatter,
        epilog="prints: `stopped` on stderr once its process has exited, the same on a terminal "
        "and on a pipe\n"
        "exit: 0 stopped, 1 it did not exit within --timeout, 2 no orchestrator running or bad "
        "usage",
    )
    p.add_argument("--state-root", help=STATE_ROOT_HELP)
    p.add_argument(
        "--timeout",
        type=_seconds,
        default=330.0,
        help="seconds to wait for it to exit (default: %(default)g)",
    )
    return parser


def _env_file_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--env-file",
        action="append",
        metavar="FILE",
        help="read environment variables from FILE (repeatable; a later file wins); "
        "<bundle dir>/.env and .env.local are always read; the process environment wins "
        "over every file",
    )


def _seconds(text: str) -> float:
    """A time limit: a positive, finite number of seconds."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, not {text!r}")
    return value


def _host_port(text: str) -> tuple[str, int]:
    """`HOST:PORT` (`[::1]:9464` for IPv6; `:9464` means 127.0.0.1)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"must be HOST:PORT (e.g. 127.0.0.1:9464), not {text!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive number")
    return value


def _nice(text: str) -> int:
    """A nice increment: 0 (the daemon's own priority) to 19 (the lowest)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number") from None
    if not 0 <= value <= 19:
        raise argparse.ArgumentTypeError(f"{value} is not between 0 and 19")
    return value


class _Version(argparse.Action):
    """`--version`, looked up only when asked: importlib.metadata is slow to import."""

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> None:
        print(f"goondan {_version()}")
        parser.exit()


def _version() -> str:
    import goondan

    return goondan.__version__


def main(argv: Sequence[str] | None = None) -> int:
    """The command line, with the endings of a shell tool: a reader that stops reading (`|
    head`) ends it quietly, Ctrl-C ends it with exit 130; neither prints a traceback."""
    try:
        try:
            return _run_command(argv)
        finally:
            # Here, where a closed pipe is caught, not at the interpreter's exit (also after
            # `--help` or a usage error, which argparse ends with SystemExit).
            sys.stdout.flush()
    except BrokenPipeError:
        # Python's "Note on SIGPIPE": stdout is pointed at /dev/null, so the flush at exit
        # does not fail (and print) again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 0
    except KeyboardInterrupt:
        # A second Ctrl-C from here on would raise in the middle of the exit.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        return EXIT_INTERRUPTED


def _run_command(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "init":
        from goondan.cli.init_cmd import run_init

        return run_init(args.dir, args.template, args.list)
    if args.command == "validate":
        from goondan.cli.validate_cmd import run_validate

        return run_validate(
            args.path,
            args.format,
            sys.stdout,
            args.env_file or (),
            deep=args.deep,
            import_timeout_s=args.import_timeout,
        )
    if args.command == "package":
        from goondan.cli.package_cmd import run_package

        return run_package(args)
    if args.command == "run":
        from goondan.cli.run_cmd import run

        return run(args)
    if args.command == "studio":
        from goondan.cli.studio_cmd import run_studio

        return run_studio(args)
    if args.command == "doctor":
        from goondan.cli.doctor_cmd import run_doctor

        return run_doctor(args)
    if args.command == "tools":
        from goondan.cli.tools_cmd import run_tools

        return run_tools(args)
    if args.command == "logs":
        from goondan.cli.logs_cmd import run_logs

        return run_logs(args)
    if args.command == "instance":
        from goondan.cli.instance_cmd import run_instance

        return run_instance(args)
    if args.command in ("approvals", "approve", "deny"):
        from goondan.cli.approvals_cmd import run_approvals

        return run_approvals(args)
    if args.command == "send" and (args.text is None) == (args.input_file is None):
        print(
            "goondan send: give one input: TEXT, '-' (stdin) or --input-file FILE", file=sys.stderr
        )
        return 2
    if args.command == "cancel":
        from goondan.cli.cancel_cmd import run_cancel

        return run_cancel(args)
    from goondan.cli import daemon_cmds

    return daemon_cmds.dispatch(args)


if __name__ == "__main__":
    raise SystemExit(main())
