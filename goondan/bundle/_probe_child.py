"""The throwaway process of `goondan.bundle.probe`: import each entry file, report what it has.

`python -m goondan.bundle._probe_child TIMEOUT_S` reads a JSON list of entries on stdin
(`path`, `module`, `kind`, `root`) and writes one JSON line per event on the stdout it was
started with: `{"start": i}` before importing entry `i` (so a parent that has to kill a hanging
import knows which file it was), then `{"i": i, ...facts}`, and `{"done": true}` at the end.
User code's own prints go to stderr: fd 1 is pointed there before anything is imported. It
reports facts only and the parent turns them into errors, so it needs nothing of goondan's
itself (`-m` imports the `goondan` package, which entries import anyway).
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import math
import os
import signal
import sys
import traceback
from pathlib import Path
from typing import Any, TextIO

_MESSAGE_LIMIT = 2000  # an exception's text: enough to act on, and one short protocol line


def main() -> None:
    # A backstop for a parent that died before it could kill us at the time limit: SIGALRM's
    # default action ends the process, whatever the import is doing.
    signal.alarm(math.ceil(float(sys.argv[1])) + 5 if len(sys.argv) > 1 else 60)
    entries = json.loads(sys.stdin.read())
    # The protocol keeps the real stdout; whatever user code prints goes to stderr instead.
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    for index, entry in enumerate(entries):
        _emit(out, {"start": index})
        _emit(out, {"i": index, **_probe(entry)})
    _emit(out, {"done": True})
    # Threads or atexit hooks that user code started must not keep the probe alive.
    os._exit(0)


def _emit(out: TextIO, event: dict[str, Any]) -> None:
    out.write(json.dumps(event) + "\n")
    out.flush()


def _probe(entry: dict[str, str]) -> dict[str, Any]:
    path = entry["path"]
    spec = importlib.util.spec_from_file_location(entry["module"], path)
    if spec is None or spec.loader is None:
        return {"error": {"type": "ImportError", "message": "not an importable .py file"}}
    module = importlib.util.module_from_spec(spec)
    sys.modules[entry["module"]] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:  # user code: SystemExit and KeyboardInterrupt are reports too
        return {"error": _describe(exc, path, entry["root"])}
    kind = entry["kind"]
    if kind == "Tool":
        handlers = getattr(module, "handlers", None)
        if not isinstance(handlers, dict):
            return {"handlers": None, "handlers_type": type(handlers).__name__}
        return {
            "handlers": [str(k) for k, v in handlers.items() if callable(v)],
            "not_callable": [str(k) for k, v in handlers.items() if not callable(v)],
        }
    if kind == "Extension":
        return {"register": callable(getattr(module, "register", None))}
    main_fn = getattr(module, "main", None)
    return {
        "main": "missing"
        if main_fn is None
        else ("async" if inspect.iscoroutinefunction(main_fn) else "sync")
    }


def _describe(exc: BaseException, entry_path: str, root: str) -> dict[str, Any]:
    """The error, and where it is in the user's code: a SyntaxError's own file and line, else
    the deepest frame in the resource's own files (its root, outside installed packages),
    else in the entry file."""
    error: dict[str, Any] = {
        "type": type(exc).__name__,
        "message": (str(exc) if not isinstance(exc, SyntaxError) else exc.msg or str(exc))[
            :_MESSAGE_LIMIT
        ],
    }
    if isinstance(exc, SyntaxError) and exc.filename and exc.lineno:
        error["file"], error["line"] = exc.filename, exc.lineno
        return error
    frames = traceback.extract_tb(exc.__traceback__)
    entry = os.path.realpath(entry_path)
    root_dir = Path(os.path.realpath(root))

    def own(filename: str) -> bool:
        real = Path(os.path.realpath(filename))
        return root_dir in real.parents and "site-packages" not in real.parts

    in_entry = [f for f in frames if os.path.realpath(f.filename) == entry]
    in_root = [f for f in frames if own(f.filename)]
    chosen = in_root or in_entry
    if chosen:
        error["file"], error["line"] = chosen[-1].filename, chosen[-1].lineno
    return error


if __name__ == "__main__":
    main()
