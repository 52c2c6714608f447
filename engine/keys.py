"""Content keys: one digest of ordered parts, for caches keyed by what they were built from (file bytes,
versions, options), never by modification times."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable


def digest(parts: Iterable[bytes | str]) -> str:
    """A key from ordered parts; each part is length-prefixed so that parts cannot run into each other.

    >>> digest(["ab", "c"]) != digest(["a", "bc"])
    True
    """
    h = hashlib.sha256()
    for p in parts:
        b = p.encode("utf-8", "surrogateescape") if isinstance(p, str) else p
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()
