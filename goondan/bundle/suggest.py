"""Suggestions ("did you mean ...?") for misspelt field names, kinds and resource names."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def closest(word: str, candidates: Iterable[str]) -> str | None:
    """The candidate most like `word`, if any is close enough to be a plausible typo."""
    pool = list(candidates)
    hits = difflib.get_close_matches(word, pool, n=1, cutoff=0.6)
    if hits:
        return hits[0]
    # Case-only typos ("toolcalling" vs "toolCalling") score low in difflib; catch them here.
    lowered = {c.lower(): c for c in pool}
    return lowered.get(word.lower())


def did_you_mean(word: str, candidates: Iterable[str]) -> str | None:
    hit = closest(word, candidates)
    return f"did you mean '{hit}'?" if hit else None
