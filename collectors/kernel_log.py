"""Parse kernel log lines (dmesg, ``dmesg -T``, ``journalctl -k -o short-iso``, /var/log/kern.log) into facts.

One parser serves every provider: a live ``dmesg``, a run directory's ``dmesg.txt``, or a bundle.

>>> [(k, a["pid"], a["process"], a["anon_rss_kb"]) for k, a, _ in parse_line(
...   "[ 8123.456789] Out of memory: Killed process 31337 (python) total-vm:98765432kB, "
...   "anon-rss:87654321kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:171234kB oom_score_adj:0")]
[('kernel.oom_kill', 31337, 'python', 87654321)]
>>> [(k, a["code"], a["pci"], a["pid"]) for k, a, _ in parse_line(
...   "[Tue Mar  5 10:12:01 2024] NVRM: Xid (PCI:0000:3b:00): 79, pid=2741, name=python, "
...   "GPU has fallen off the bus.")]
[('kernel.xid', 79, '0000:3b:00', 2741)]
>>> [(k, a["server"], a["state"]) for k, a, _ in parse_line(
...   "2024-03-05T10:12:01+0000 node17 kernel: nfs: server fs01 not responding, still trying")]
[('kernel.nfs', 'fs01', 'not_responding')]
>>> line_time("2024-03-05T10:12:01+0000 node17 kernel: nfs: server fs01 OK")
1709633521.0
>>> [(k, a["event"], a["pci"], a["fatal"]) for k, a, _ in parse_line(
...   "[  12.5] NVRM: GPU 0000:3b:00.0: RmInitAdapter failed! (0x26:0x56:1463)")]
[('kernel.nvrm', 'init_failed', '0000:3b:00.0', True)]
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any

from . import lineinfo

_PREFIX_ISO = re.compile(r"^(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?)\s")
_PREFIX_CTIME = re.compile(r"^\[(\w{3} \w{3} [ \d]\d \d{2}:\d{2}:\d{2} \d{4})\]")

_OOM_KILLED = re.compile(
    r"(?:(?:Out of memory|Memory cgroup out of memory)(?: \(oom_kill_allocating_task\))?: |\] |kernel: |^)"
    r"Kill(?:ed)? process (\d+) \(([^)]*)\)"
    r"(?:.*?anon-rss:(\d+)kB)?"
)
_OOM_KILL_SUMMARY = re.compile(r"oom-kill:constraint=(\w+)(?:,.*?)?,task=([^,\s]+),pid=(\d+)")
# Searched on its own: as an optional group inside the summary pattern, a lazy ".*?" always skipped it.
_OOM_MEMCG = re.compile(r",oom_memcg=([^,\s]*)")
_OOM_REAPER = re.compile(r"oom_reaper: reaped process (\d+) \(([^)]*)\)")
_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9a-fA-F:.]+)\): (\d+)(?:, pid=(\d+|'<unknown>'))?")
_NFS = re.compile(r"\bnfs: server (\S+) (not responding|OK)")
_STALE = re.compile(r"(?:NFS|nfs).*(?:[Ss]tale (?:file|NFS file) handle|ESTALE)")
_LUSTRE = re.compile(r"LustreError: .*?(?:connection to (\S+) .*?lost|timed out)")
_HUNG = re.compile(r"INFO: task (.+?):(\d+) blocked for more than (\d+) seconds")
_SEGV = re.compile(r"(\S+?)\[(\d+)\]: segfault at \S+ ip \S+ sp \S+ error \d+(?: in ([^\[\s]+))?")
_MCE = re.compile(
    r"(mce: \[Hardware Error\].*|mce: Uncorrected hardware memory error.*|EDAC \S+(?: \S+)?: .*\b(?:CE|UE)\b.*"
    r"|\{\d+\}\[Hardware Error\]: event severity: \w+.*|Machine check.*)"
)
# Corrected events: EDAC "CE", an APEI/GHES record of severity "corrected", and the mce summary that CMCI
# (corrected-error interrupts) prints. Everything else (UE, "Machine Check Exception", fatal) is not.
_MCE_CORRECTED = re.compile(r"\bCE\b|event severity: corrected|Machine check events logged")
_NVRM_PCI = re.compile(r"(?:PCI:)?([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.\d)?)")
# NVRM events worth a fact (most NVRM lines are start-up chatter). Order matters: first match wins.
_NVRM_EVENTS = (
    (
        re.compile(r"RmInitAdapter failed|rm_init_adapter failed|failed to init\w* (?:the )?GPU"),
        "init_failed",
        True,
    ),
    (re.compile(r"fallen off the bus"), "fallen_off_bus", True),
    (re.compile(r"GSP.*(?:heartbeat timed out|[Tt]imeout)|[Tt]imeout.*GSP"), "gsp_timeout", True),
    (re.compile(r"GPU crash dump has been created"), "crash_dump", False),
)


@lru_cache(maxsize=1)
def xid_catalog() -> dict[int, dict[str, Any]]:
    """NVIDIA Xid codes, kept as data (``xid_catalog.yaml``), so rules match on the class, not the code."""
    from ..engine.yamlload import load_data  # only when a log holds an Xid

    data = load_data((Path(__file__).parent / "xid_catalog.yaml").read_text("utf-8")) or {}
    return {int(e["code"]): e for e in data.get("xids", [])}


def line_time(line: str) -> float | None:
    """POSIX time from an ISO (journalctl short-iso) or ``dmesg -T`` prefix; None for uptime stamps."""
    m = _PREFIX_ISO.match(line)
    if m:
        raw = m.group(1).replace(",", ".").replace(" ", "T", 1)
        raw = re.sub(r"([+-]\d{2})(\d{2})$", r"\1:\2", raw)
        try:
            dt = datetime.fromisoformat(raw.replace("Z", "+00:00"))
            if dt.tzinfo is None:
                dt = dt.replace(tzinfo=timezone.utc)
            return lineinfo.sane_time(dt.timestamp())
        except (ValueError, OverflowError, OSError):  # a bad stamp costs this line its time, nothing more
            return None
    m = _PREFIX_CTIME.match(line)
    if m:
        try:
            return lineinfo.sane_time(
                datetime.strptime(m.group(1), "%a %b %d %H:%M:%S %Y").replace(tzinfo=timezone.utc).timestamp()
            )
        except (ValueError, OverflowError, OSError):
            return None
    return None


def parse_line(line: str) -> Iterator[tuple[str, dict[str, Any], float | None]]:
    """Facts (kind, attrs, time) in one kernel log line."""
    if "oom" in line.lower() or "Out of memory" in line or "Killed process" in line:
        m = _OOM_KILLED.search(line)
        # Before 4.19 the victim line stood alone: "Killed process N (name) total-vm:..., anon-rss:...".
        if m and ("ut of memory" in line or "total-vm:" in line):
            attrs: dict[str, Any] = {"pid": int(m.group(1)), "process": m.group(2)}
            if m.group(3):
                attrs["anon_rss_kb"] = int(m.group(3))
            attrs["constraint"] = "CONSTRAINT_MEMCG" if "Memory cgroup" in line else ""
            yield "kernel.oom_kill", attrs, line_time(line)
            return
        m = _OOM_KILL_SUMMARY.search(line)
        if m:
            yield (
                "kernel.oom_kill",
                {
                    "pid": int(m.group(3)),
                    "process": m.group(2),
                    "constraint": m.group(1),
                    "cgroup": memcg.group(1) if (memcg := _OOM_MEMCG.search(line)) else "",
                },
                line_time(line),
            )
            return
    if "Xid" in line:
        m = _XID.search(line)
        if m:
            code = int(m.group(2))
            entry = xid_catalog().get(code, {})
            pid = m.group(3)
            yield (
                "kernel.xid",
                {
                    "code": code,
                    "pci": m.group(1),
                    "pid": int(pid) if pid and pid.isdigit() else -1,
                    "xid_class": entry.get("class", "unknown"),
                    "hardware": bool(entry.get("hardware", False)),
                    "sympathetic": bool(entry.get("sympathetic", False)),
                },
                line_time(line),
            )
            return
    if "NVRM" in line:
        for rx, event, fatal in _NVRM_EVENTS:
            if rx.search(line):
                m = _NVRM_PCI.search(line)
                yield (
                    "kernel.nvrm",
                    {"pci": m.group(1) if m else "", "event": event, "fatal": fatal},
                    line_time(line),
                )
                return
    if "nfs" in line or "NFS" in line or "Lustre" in line:
        m = _NFS.search(line)
        if m:
            state = "ok" if m.group(2) == "OK" else "not_responding"
            yield "kernel.nfs", {"server": m.group(1), "state": state}, line_time(line)
            return
        if _STALE.search(line):
            yield "kernel.nfs", {"state": "stale"}, line_time(line)
            return
        m = _LUSTRE.search(line)
        if m:
            yield "kernel.nfs", {"server": m.group(1) or "", "state": "not_responding"}, line_time(line)
            return
    if "blocked for more than" in line:
        m = _HUNG.search(line)
        if m:
            yield (
                "kernel.hung_task",
                {"process": m.group(1), "pid": int(m.group(2)), "seconds": int(m.group(3))},
                line_time(line),
            )
            return
    if "segfault at" in line:
        m = _SEGV.search(line)
        if m:
            yield (
                "kernel.segfault",
                {"process": m.group(1), "pid": int(m.group(2)), "library": m.group(3) or ""},
                line_time(line),
            )
            return
    if "mce" in line or "EDAC" in line or "Machine check" in line or "[Hardware Error]" in line:
        m = _MCE.search(line)
        if m:
            detail = m.group(1)
            yield (
                "kernel.mce",
                {"detail": detail[:200], "corrected": bool(_MCE_CORRECTED.search(detail))},
                line_time(line),
            )


Event = tuple[int, str, dict[str, Any], float | None, str]
# The summary and the "Killed process" line of one kill are adjacent in every kernel since 4.19.
_OOM_PAIR_LINES = 5


def merge_oom(events: Iterable[Event]) -> Iterator[Event]:
    """One kernel.oom_kill per kill. The kernel prints a summary (``oom-kill:constraint=...,oom_memcg=...``)
    and then ``Killed process PID (name) ... anon-rss:...`` for the same victim: each line alone lacks half of
    the story (the cgroup, the memory). Merged, the fact cites the "Killed process" line.

    >>> evs = [(80, "kernel.oom_kill", {"pid": 7, "process": "python", "constraint": "CONSTRAINT_MEMCG",
    ...         "cgroup": "/job_9"}, None, "oom-kill:..."),
    ...        (81, "kernel.oom_kill", {"pid": 7, "process": "python", "anon_rss_kb": 512, "constraint":
    ...         "CONSTRAINT_MEMCG"}, None, "Memory cgroup out of memory: Killed process 7 (python) ...")]
    >>> [(no, a["cgroup"], a["anon_rss_kb"]) for no, _, a, _, _ in merge_oom(evs)]
    [(81, '/job_9', 512)]
    """
    pending: Event | None = None
    for ev in events:
        no, kind, attrs = ev[0], ev[1], ev[2]
        if pending is not None:
            if (
                kind == "kernel.oom_kill"
                and attrs.get("pid") == pending[2].get("pid")
                and (0 <= no - pending[0] <= _OOM_PAIR_LINES)
            ):
                merged = dict(pending[2])
                merged.update({k: v for k, v in attrs.items() if v not in ("", None)})
                yield no, kind, merged, ev[3] if ev[3] is not None else pending[3], ev[4]
                pending = None
                continue
            yield pending
            pending = None
        if kind == "kernel.oom_kill" and "anon_rss_kb" not in attrs:
            pending = ev  # a summary line: wait for its "Killed process" line
            continue
        yield ev
    if pending is not None:
        yield pending


def parse_lines(lines: Iterable[tuple[int, str]]) -> Iterator[Event]:
    """(line number, kind, attrs, time, text) for every fact in numbered lines."""
    yield from merge_oom(
        (no, kind, attrs, ts, text) for no, text in lines for kind, attrs, ts in parse_line(text)
    )
