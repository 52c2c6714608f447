"""Rank, host and time read off a training log line or its file name.

>>> rank_of_line("[rank3]:[E ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation timeout")
3
>>> rank_of_line("node-017:51212:51544 [5] NCCL INFO Channel 00/32"), host_of_line("node-017:51212:51544 [5] NCCL INFO x")
(5, 'node-017')
>>> rank_of_path("logs/rank_12.log"), rank_of_path("train-r2.out"), rank_of_path("worker.log")
(12, 2, None)
>>> time_of_line("2024-05-01 12:00:03,120 - INFO - step 5")
1714564803.12
>>> time_of_line("[2024-05-01 12:00:03] loss=1.0"), time_of_line("loss=1.0")
(1714564803.0, None)
"""

from __future__ import annotations

import re
from datetime import datetime, timezone

_RANK_LINE = re.compile(r"^\s*\[(?:rank|Rank|RANK)\s?(\d+)\]|^\s*(?:rank|Rank)\s?(\d+)\s*[:|]|\[(?:Rank|rank) (\d+)\]")
_NCCL_PREFIX = re.compile(r"^\s*([A-Za-z0-9_.-]+):(\d+):(\d+) \[(\d+)\] NCCL")
_RANK_PATH = re.compile(r"(?:^|[^a-z])(?:rank|r|proc|worker|local_rank|node_rank)[_-]?(\d+)(?:[^0-9]|$)", re.I)
_TS = re.compile(
    r"^\s*\[?(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2}:\d{2})(?:[.,](\d{1,6}))?(Z|[+-]\d{2}:?\d{2})?\]?"
)


def rank_of_line(line: str) -> int | None:
    m = _RANK_LINE.search(line[:200])
    if m:
        return int(next(g for g in m.groups() if g is not None))
    m = _NCCL_PREFIX.match(line)
    if m:
        return int(m.group(4))
    return None


def host_of_line(line: str) -> str:
    m = _NCCL_PREFIX.match(line)
    return m.group(1) if m else ""


def rank_of_path(path: str) -> int | None:
    name = path.replace("\\", "/").rsplit("/", 1)[-1]
    m = _RANK_PATH.search(name)
    return int(m.group(1)) if m else None


def time_of_line(line: str) -> float | None:
    """Leading ISO-like timestamps only; times without a date or zone are read as UTC."""
    m = _TS.match(line)
    if not m:
        return None
    date, clock, frac, zone = m.groups()
    raw = f"{date}T{clock}"
    if frac:
        raw += "." + frac.ljust(6, "0")
    if zone and zone != "Z":
        zone = zone if ":" in zone else zone[:3] + ":" + zone[3:]
        raw += zone
    try:
        dt = datetime.fromisoformat(raw)
    except ValueError:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return round(dt.timestamp(), 6)
