"""`goondan studio`: the running daemon's web studio URL (with its token), opened in a browser
when there is a display."""

from __future__ import annotations

import argparse
import json
import os
import sys
import webbrowser
from urllib.parse import quote

from goondan.cli.client import daemon_running
from goondan.paths import StatePaths

INFO_FILE = "studio.json"  # written by the daemon's studio in run/ (orchestrator/studio)


def run_studio(args: argparse.Namespace) -> int:
    paths = StatePaths.at(args.state_root)
    if not daemon_running(paths):
        print(f"goondan: no orchestrator running under {paths.root}", file=sys.stderr)
        return 1
    try:
        info = json.loads((paths.run_dir / INFO_FILE).read_text())
        url = f"{info['url']}?token={quote(info['token'])}"
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        print(
            f"goondan: the orchestrator under {paths.root} serves no studio; start it with "
            "`goondan run --studio 127.0.0.1:8765` (or GOONDAN_STUDIO=127.0.0.1:8765)",
            file=sys.stderr,
        )
        return 1
    print(url, flush=True)
    if not args.no_browser and _has_display():
        webbrowser.open(url)
    return 0


def _has_display() -> bool:
    """A browser can show up here: a graphical session, or macOS (which always has one)."""
    return sys.platform == "darwin" or bool(
        os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    )
