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
>>> rank_of_line("[default5]:[rank5]: RuntimeError: x"), rank_of_line("[rank: 6] Epoch 1"), rank_of_line("3: step 10")
(5, 6, 3)
>>> rank_of_line("failed (exitcode: 1) local_rank: 2 (pid: 4321)"), rank_of_line("[global rank 7] loss")
(2, 7)
>>> host_of_line("node-3: [rank12]: boom"), rank_of_line("node-3: [rank12]: boom")
('node-3', 12)
>>> time_of_line("[rank3]: 2024-05-01 12:00:03 oom"), time_of_line("0: [2024-05-01 12:00:03,5] x")
(1714564803.0, 1714564803.5)
>>> rank_of_path("slurm-123_4.out"), rank_of_path("out/train_rank_3_of_8.log"), rank_of_path("slurm-99.out")
(4, 3, None)
>>> host_of_path("node-017/logs/rank3.log"), host_of_path("slurm-12-gpu-a17.out"), host_of_path("rank3.log")
('node-017', 'gpu-a17', '')
"""

from __future__ import annotations

import re
from datetime import datetime, timezone

_RANK_LINE = re.compile(
    r"^\s*\[(?:rank|Rank|RANK)\s?(\d+)\]|^\s*(?:rank|Rank)\s?(\d+)\s*[:|]|\[(?:Rank|rank) (\d+)\]"
    r"|\[(?:global )?rank[:=]? ?(\d+)\]|\bRANK=(\d+)\b|\blocal_rank: (\d+) \(pid"
)
# Launcher prefixes that come before everything else: srun --label "3: ", torchrun --tee "[default3]:",
# pdsh/DeepSpeed multi-node "node-017: " (a host), in any nesting.
_LAUNCH_PREFIX = re.compile(
    r"^\s*(?:(\d{1,5}): |\[default(\d+)\]:|([A-Za-z][A-Za-z0-9_.-]*[0-9][A-Za-z0-9_.-]*): (?=\S))"
)
_RANK_TAG = re.compile(r"^\s*\[(?:rank|Rank)\s?\d+\]:\s?")
_NCCL_PREFIX = re.compile(r"^\s*([A-Za-z0-9_.-]+):(\d+):(\d+) \[(\d+)\] NCCL")
_RANK_PATH = re.compile(
    r"(?:^|[^a-z])(?:rank|r|proc|worker|local_rank|node_rank)[_-]?(\d+)(?:[^0-9]|$)", re.I
)
_SLURM_TASK = re.compile(r"^slurm-\d+[_-](\d+)\.(?:out|err)$")
_HOST_DIR = re.compile(r"^(?:[a-z0-9]+-)*(?:node|host|gpu|worker|compute|nid|ip)[-_]?[a-z0-9-]*\d$", re.I)
_SLURM_HOST = re.compile(r"^slurm-\d+-([A-Za-z][A-Za-z0-9.-]*\d)\.(?:out|err)$")
_TS = re.compile(
    r"^\s*\[?(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2}:\d{2})(?:[.,](\d{1,6}))?(Z|[+-]\d{2}:?\d{2})?\]?"
)


def _prefixes(line: str) -> tuple[int | None, str, str]:
    """(rank from a launcher prefix, host from a launcher prefix, the line without launcher/rank prefixes)."""
    rank: int | None = None
    host = ""
    rest = line
    for _ in range(3):
        m = _LAUNCH_PREFIX.match(rest)
        if not m:
            break
        task, default, name = m.groups()
        if name and _NCCL_PREFIX.match(rest):
            break
        if task is not None or default is not None:
            rank = int(task if task is not None else default) if rank is None else rank
        elif name and not host:
            host = name
        rest = rest[m.end() :]
    m = _RANK_TAG.match(rest)
    if m:
        rest = rest[m.end() :]
    return rank, host, rest


def rank_of_line(line: str) -> int | None:
    """The rank a line was printed by: an explicit rank tag wins over a launcher's task prefix."""
    prefix_rank, _, rest = _prefixes(line)
    m = _RANK_LINE.search(line[:240])
    if m:
        return int(next(g for g in m.groups() if g is not None))
    m = _NCCL_PREFIX.match(rest)
    if m:
        return int(m.group(4))
    return prefix_rank


def host_of_line(line: str) -> str:
    _, host, rest = _prefixes(line)
    m = _NCCL_PREFIX.match(rest)
    return m.group(1) if m else host


def rank_of_path(path: str) -> int | None:
    name = path.replace("\\", "/").rsplit("/", 1)[-1]
    m = _SLURM_TASK.match(name)
    if m:
        return int(m.group(1))
    m = _RANK_PATH.search(name)
    return int(m.group(1)) if m else None


def host_of_path(path: str) -> str:
    """A host named by the file (``slurm-%j-%N.out``) or by a directory (``node-017/rank3.log``)."""
    parts = [p for p in path.replace("\\", "/").split("/") if p and p not in (".", "..")]
    if not parts:
        return ""
    m = _SLURM_HOST.match(parts[-1])
    if m:
        return m.group(1)
    for d in reversed(parts[:-1]):
        skip = d.lower().startswith(("rank", "run", "step", "epoch"))
        if _HOST_DIR.match(d) and not skip and not _RANK_PATH.fullmatch(d):
            return d
    return ""


def time_of_line(line: str) -> float | None:
    """Leading ISO-like timestamps (after launcher and rank prefixes); without a zone they are read as UTC."""
    m = _TS.match(line) or _TS.match(_prefixes(line)[2])
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
