"""Walking a regex's source text: what the pack loader and the log scanner both need to rewrite patterns."""

from __future__ import annotations


def class_end(regex: str, i: int) -> int:
    """The index after the character class that starts at regex[i] ("["); a "]" first in it (after an optional
    "^") is a literal. Linear: a regex with many classes must not cost a parse of its rest per class."""
    n = len(regex)
    i += 1
    if regex[i : i + 1] == "^":
        i += 1
    if regex[i : i + 1] == "]":
        i += 1
    while i < n and regex[i] != "]":
        i += 2 if regex[i] == "\\" else 1
    return i + 1
