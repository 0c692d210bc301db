"""The question a destructive command asks first, on a terminal only."""

from __future__ import annotations

import sys


def confirm(question: str, *, yes: bool) -> bool:
    """True to go on. Asks `question [y/N]` only when stdin and stderr are terminals (a person
    is there to answer); `yes` (--yes) or a script (no terminal) goes on without asking, as
    these commands always did. An empty answer or end of input is no."""
    if yes or not (sys.stdin.isatty() and sys.stderr.isatty()):
        return True
    sys.stderr.write(f"{question} [y/N] ")
    sys.stderr.flush()
    answer = sys.stdin.readline()
    if not answer:
        sys.stderr.write("\n")  # Ctrl-D: the next output starts on its own line
    return answer.strip().lower() in ("y", "yes")


def declined() -> int:
    print("goondan: nothing deleted", file=sys.stderr)
    return 1
