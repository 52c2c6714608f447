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
>>> rank_of_path("slurm-123-4.out"), rank_of_path("out/train_rank_3_of_8.log"), rank_of_path("slurm-99.out")
(4, 3, None)
>>> rank_of_path("slurm-123_4.out"), rank_of_path("train-3.log"), rank_of_path("train-2024.log")
(None, 3, None)
>>> time_of_line("[E1201 10:05:33.5 12 ProcessGroupNCCL.cpp:1234] x", ref=1733011200.0)  # ref: 2024-12-01
1733047533.5
>>> time_of_line("[rank3]:[E101 00:00:01.000000001 ProcessGroupNCCL.cpp:1] x", ref=1733011200.0)  # next January
1735689601.0
>>> time_of_line("[E1231 23:59:59.5 ProcessGroupNCCL.cpp:1] x", ref=1735776000.0, until_ref=True)  # mtime 2025-01-02
1735689599.5
>>> host_of_path("node-017/logs/rank3.log"), host_of_path("slurm-12-gpu-a17.out"), host_of_path("rank3.log")
('node-017', 'gpu-a17', '')
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterable
from datetime import datetime, timezone

MAX_SANE_TIME = 7258118400.0  # 2200-01-01 UTC

_RANK_LINE = re.compile(
    r"^\s*\[(?:rank|Rank|RANK)\s?(\d+)\]|^\s*(?:rank|Rank)\s?(\d+)\s*[:|]|\[(?:Rank|rank|RANK) (\d+)\]"
    r"|\[(?:global )?rank[:=]? ?(\d+)\]|\bRANK=(\d+)\b"
    r"|\[PG (?:ID )?\d+ (?:PG GUID \S+ )?Rank (\d+)\]"  # c10d: "[PG ID 0 PG GUID 0(default_pg) Rank 1]", "[PG 1 Rank 0]"
    r"|^\s*rank\s+: (\d+) \(local_rank"  # elastic's ChildFailedError summary: "  rank      : 3 (local_rank: 3)"
    r"|^\[\d+,(\d+)\]<std(?:out|err)>:"  # Open MPI --tag-output (mpirun-launched DeepSpeed/Horovod): [job,rank]
)
# Launcher prefixes that come before everything else: srun --label "3: ", torchrun --tee "[default3]:",
# Open MPI --tag-output "[1,3]<stderr>:", pdsh/DeepSpeed multi-node "node-017: " (a host), in any nesting.
_LAUNCH_PREFIX = re.compile(
    r"^\s*(?:(\d{1,5}): |\[default(\d+)\]:|\[\d+,(\d+)\]<std(?:out|err)>: ?"
    r"|([A-Za-z][A-Za-z0-9_.-]*[0-9][A-Za-z0-9_.-]*): (?=\S))"
)
# Markers of a *local* rank (the process's index on its node): elastic's "local_rank: 2 (pid: ...)". They name
# the rank only when the file does not (a node's merged log); in rank12.log they are that rank's local index.
_LOCAL_RANK_LINE = re.compile(r"\blocal_rank: (\d+) \(pid")
_RANK_TAG = re.compile(r"^\s*\[(?:rank|Rank)\s?\d+\]:\s?")
# NCCL's "host:pid:tid [cudaDev] NCCL ...", newer versions with "file.cc:line (func) " before NCCL and an optional
# NCCL_DEBUG_TIMESTAMP_FORMAT stamp in front. [cudaDev] is the local GPU index: a local rank (see above).
_NCCL_PREFIX = re.compile(
    r"^\s*(?:\[[0-9:. T-]+\] )?([A-Za-z0-9_.-]+):(\d+):(\d+) \[(\d+)\] (?:[\w./-]+:\d+ (?:\([^)]*\) )?)?NCCL "
)
_RANK_PATH = re.compile(
    r"(?:^|[^a-z])(?:rank|r|proc|procid|task|worker|local_rank|node_rank)[_-]?(\d+)(?:[^0-9]|$)", re.I
)
# slurm-%j-%t.out / slurm-%j.%t.out: %t is the task id (SLURM_PROCID). Not slurm-%A_%a.out: that "_" is an array
# job's task index (separate runs), not a rank.
_SLURM_TASK = re.compile(r"^slurm-\d+[-.](\d+)\.(?:out|err|log)$")
_SLURM_ARRAY = re.compile(r"^slurm-\d+_\d+\.")
# A bare trailing number (train-3.log, log.3.txt, train-%j-%t.log): a rank when short and not a year or a job id.
_BARE_NUMBER = re.compile(r"^([A-Za-z][A-Za-z0-9_.-]*?)[-_.](\d{1,4})\.(?:log|out|err|txt)$")
_NOT_RANK_STEM = re.compile(
    r"(?:epoch|step|iter|run|v|version|ckpt|checkpoint|part|slurm|job|attempt|day)$", re.I
)
# torchrun --log-dir: <log_dir>/<run_id>/attempt_<n>/<local_rank>/{stdout,stderr}.log
_ELASTIC_FILE = re.compile(r"^(?:stdout|stderr)\.log$|^error\.json$")
_HOST_DIR = re.compile(r"^(?:[a-z0-9]+-)*(?:node|host|gpu|worker|compute|nid|ip)[-_]?[a-z0-9-]*\d$", re.I)
_SLURM_HOST = re.compile(r"^slurm-\d+-([A-Za-z][A-Za-z0-9.-]*\d)\.(?:out|err)$")
_TS = re.compile(
    r"^\s*\[?(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2}:\d{2})(?:[.,](\d{1,6}))?(Z|[+-]\d{2}:?\d{2})?\]?"
)
# glog / c10 logging (PyTorch C++, the NCCL watchdog): "[rank1]:[E1206 18:44:12.715298746 ProcessGroupNCCL.cpp:607] ..."
# (c10 pads neither the month nor the thread id in: "[E321 02:07:08.408271257 ...]" is March 21) or glog's
# "E1201 10:05:33.123456 12345 file.cc:12] ...". No year unless glog's log_year_in_prefix ("E20241201 ...").
_GLOG = re.compile(
    r"^\s*\[?[IWEF](\d{4})?(\d{1,2})(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?(?:\s+-?\d+)?\s+[^\s\]]+:\d+\]"
)


def _prefixes(line: str) -> tuple[int | None, int | None, str, str]:
    """(global rank from a launcher prefix, local rank from one, host from one, the line without them)."""
    rank: int | None = None
    local: int | None = None
    host = ""
    rest = line
    for _ in range(3):
        m = _LAUNCH_PREFIX.match(rest)
        if not m:
            break
        task, default, mpi, name = m.groups()
        if name and _NCCL_PREFIX.match(rest):
            break
        if task is not None or mpi is not None:  # srun --label task id, Open MPI rank: global
            rank = int(task if task is not None else mpi) if rank is None else rank
        elif default is not None:  # torchrun --tee "[default3]:" is the local rank
            local = int(default) if local is None else local
        elif name and not host:
            host = name
        rest = rest[m.end() :]
    m = _RANK_TAG.match(rest)
    if m:
        rest = rest[m.end() :]
    return rank, local, host, rest


def rank_of_line(line: str, file_rank: int | None = None) -> int | None:
    """The rank a line was printed by: an explicit rank tag, else a launcher's task id, else the rank the file
    is named for (``file_rank``), else a local-rank marker (torchrun ``[default3]:``, NCCL's ``[cudaDev]``,
    elastic ``local_rank: 3 (pid``), which equals the rank on one node."""
    m = _RANK_LINE.search(line[:240])
    if m:  # the common case, and the metrics parser asks on every metric line: no prefix walk
        return int(next(g for g in m.groups() if g is not None))
    prefix_rank, local, _, rest = _prefixes(line)
    if prefix_rank is not None:
        return prefix_rank
    if file_rank is not None:
        return file_rank
    m = _NCCL_PREFIX.match(rest)
    if m:
        return int(m.group(4))
    m = _LOCAL_RANK_LINE.search(line[:240])
    if m:
        return int(m.group(1))
    return local


def host_of_line(line: str) -> str:
    _, _, host, rest = _prefixes(line)
    m = _NCCL_PREFIX.match(rest)
    return m.group(1) if m else host


def rank_of_path(path: str) -> int | None:
    """The rank a file name (or its directory, for torchrun's ``--log-dir`` layout) names."""
    parts = [p for p in path.replace("\\", "/").split("/") if p]
    name = parts[-1] if parts else ""
    m = _SLURM_TASK.match(name)
    if m:
        return int(m.group(1))
    m = _RANK_PATH.search(name)
    if m:
        return int(m.group(1))
    m = _BARE_NUMBER.match(name) if not _SLURM_ARRAY.match(name) else None
    if m and not _NOT_RANK_STEM.search(m.group(1)) and not re.fullmatch(r"(?:19|20)\d\d", m.group(2)):
        return int(m.group(2))
    if (
        len(parts) >= 3
        and _ELASTIC_FILE.match(name)
        and parts[-2].isdigit()
        and parts[-3].startswith("attempt_")
    ):
        return int(parts[-2])
    if len(parts) >= 2 and (d := re.fullmatch(r"(?:rank|local_rank|worker)[_-]?(\d+)", parts[-2], re.I)):
        return int(d.group(1))
    return None


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


def time_of_line(line: str, ref: float | None = None, until_ref: bool = False) -> float | None:
    """Leading ISO-like or glog timestamps (after launcher and rank prefixes); zone-less times read as UTC.

    A glog stamp has no year: it takes the year that puts it nearest ``ref`` (a dated line of the same file), or
    with ``until_ref`` (``ref`` is the file's mtime, when it was last written) the latest year not after it; so
    December lines of a log written in January get last year. Without ``ref`` it is None.
    """
    m = _TS.match(line)
    rest = None
    if not m:
        rest = _prefixes(line)[3]
        m = _TS.match(rest)
    if not m:
        g = _GLOG.match(line) or _GLOG.match(rest if rest is not None else _prefixes(line)[3])
        return _glog_time(g, ref, until_ref) if g else None
    date, clock, frac, zone = m.groups()
    raw = f"{date}T{clock}"
    if frac:
        raw += "." + frac.ljust(6, "0")
    if zone and zone != "Z":
        zone = zone if ":" in zone else zone[:3] + ":" + zone[3:]
        raw += zone
    try:
        dt = datetime.fromisoformat(raw)
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=timezone.utc)
        return sane_time(dt.timestamp())
    except (ValueError, OverflowError, OSError):  # a bad stamp costs this line its time, nothing more
        return None


def sane_time(t: float | None) -> float | None:
    """`t` rounded, or None outside 1970..2200: a stamp out there is garbage, and as a year reference it would
    push datetime past year 9999 (an exception that once cost a whole log its facts).

    >>> sane_time(1.7e9), sane_time(253402300799.0), sane_time(float("nan"))
    (1700000000.0, None, None)
    """
    if t is None or not (0.0 <= t <= MAX_SANE_TIME):
        return None
    return round(t, 6)


def _glog_time(m: re.Match[str], ref: float | None, until_ref: bool) -> float | None:
    year, mon, day, hh, mi, ss, frac = m.groups()
    if year:
        years = [int(year)]
    elif ref is None:
        return None
    else:
        if sane_time(ref) is None:  # a reference (a dated line, the file's mtime) out of range: no year
            return None
        y = datetime.fromtimestamp(ref, timezone.utc).year
        years = [y - 1, y, y + 1]
    micro = int(frac[:6].ljust(6, "0")) if frac else 0
    best: float | None = None
    for y in years:
        try:
            t = datetime(
                y, int(mon), int(day), int(hh), int(mi), int(ss), micro, tzinfo=timezone.utc
            ).timestamp()
        except (ValueError, OverflowError, OSError):  # Feb 29 in a year without one, or not a date at all
            continue
        if ref is not None and until_ref:
            if t <= ref + 86400 and (best is None or t > best):  # a day's slack for zones (stamps are local)
                best = t
        elif best is None or (ref is not None and abs(t - ref) < abs(best - ref)):
            best = t
    return sane_time(best)


class FileClock:
    """Timestamps of one file's lines. Year-less (glog) stamps take their year from the dated line nearest
    them in the same file (by line number), else from the file's mtime (see ``time_of_line``)."""

    def __init__(self, dated_lines: Callable[[], Iterable[tuple[int, str]]], mtime: float | None) -> None:
        self._dated_lines = dated_lines  # (line_no, text) pairs to look for full dates in, read on first need
        self._anchors: list[tuple[int, float]] | None = None
        self.mtime = mtime

    def time(self, line_no: int, text: str) -> float | None:
        t = time_of_line(text)
        if t is not None or "] " not in text[:300]:
            return t
        if self._anchors is None:
            found = {(n, ts) for n, s in self._dated_lines() if (ts := time_of_line(s)) is not None}
            self._anchors = sorted(found)
        if not self._anchors:
            return time_of_line(text, self.mtime, until_ref=True)
        i = bisect.bisect_left(self._anchors, (line_no, float("-inf")))
        near = self._anchors[max(0, i - 1) : i + 1]
        return time_of_line(text, min(near, key=lambda a: abs(a[0] - line_no))[1])
