"""Small numeric helpers the collectors share.

``statistics`` costs several milliseconds to import (it pulls in ``fractions`` and ``decimal``) for the one
function the collectors use, and start-up time is part of the product."""

from __future__ import annotations

from collections.abc import Iterable


def median(values: Iterable[float]) -> float:
    """The median, as statistics.median: the mean of the two middle values for an even count.

    >>> median([3, 1, 2]), median([4, 1, 3, 2]), median(x for x in (5.0,))
    (2, 2.5, 5.0)
    """
    data = sorted(values)
    n = len(data)
    if n == 0:
        raise ValueError("median of no values")
    mid = n // 2
    return data[mid] if n % 2 else (data[mid - 1] + data[mid]) / 2
