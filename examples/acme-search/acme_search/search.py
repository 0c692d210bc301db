"""`search__query`: the corpus lines (corpus.txt, next to this file) holding every query word."""

from __future__ import annotations

from pathlib import Path
from typing import Any

CORPUS = [
    line.strip()
    for line in (Path(__file__).parent / "corpus.txt").read_text().splitlines()
    if line.strip()
]


def query(ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
    text = str(args["query"])
    words = text.split()
    limit = int(args.get("limit", 5))
    hits = [line for line in CORPUS if all(w.lower() in line.lower() for w in words)]
    return {"query": text, "count": len(hits), "hits": hits[:limit]}


handlers = {"query": query}
