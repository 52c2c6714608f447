"""Training processes on the live machine (psutil): which belong to the run, their state, duplicates, and
whether the process writing the log is still alive.

The analysis works on a *snapshot*, a list of plain dicts, so it can be fed a recorded one. A snapshot entry::

    {"pid": 4242, "ppid": 1, "name": "python", "cmdline": ["python", "train.py", "--lr", "3e-4"],
     "cwd": "/runs/r7", "status": "sleeping", "create_time": 1700000000.0, "cpu_percent": 0.0,
     "rss": 2147483648, "num_threads": 31, "open_files": [["/runs/r7/train.log", "a"]],
     "num_fds": 57, "fd_limit": 1024}

>>> snap = [
...   {"pid": 10, "ppid": 1, "name": "bash", "cmdline": ["bash"], "cwd": "/runs/r7"},
...   {"pid": 11, "ppid": 10, "name": "python3.11", "cwd": "/runs/r7", "status": "sleeping",
...    "cmdline": ["/usr/bin/python3.11", "train.py", "--api-key", "sk-abc"], "create_time": 0.0,
...    "open_files": [["/runs/r7/train.log", "a"]]},
...   {"pid": 12, "ppid": 11, "name": "python3.11", "cwd": "/runs/r7", "status": "sleeping",
...    "cmdline": ["/usr/bin/python3.11", "train.py", "--api-key", "sk-abc"], "create_time": 5.0},
...   {"pid": 13, "ppid": 10, "name": "python3.11", "cwd": "/runs/r7", "status": "disk-sleep",
...    "cmdline": ["python3.11", "train.py", "--api-key", "sk-xyz"], "create_time": 9.0},
... ]
>>> found = analyse(snap, ["/runs/r7"], ["/runs/r7/train.log"], now=60.0)
>>> [(p.attrs["pid"], p.attrs["in_run_dir"], p.attrs["writes_log"], p.attrs["instances"], p.attrs["children"])
...  for p in found.processes]
[(11, True, True, 2, 1), (12, True, False, 2, 0), (13, True, False, 2, 0)]
>>> found.processes[0].text
'python train.py --api-key [REDACTED]'
>>> found.writers["/runs/r7/train.log"][0]["pid"]
11
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..redact import redact
from . import lineinfo
from .base import Context, ProbeOutput, ProbeUnavailable
from .deadlines import hostname
from .numeric import median

# Executables that run training directly or launch it.
_PYTHON = re.compile(r"^(?:python|pypy)(?:\d+(?:\.\d+)*)?[mtd]?$")
LAUNCHERS = frozenset(
    {
        "torchrun",
        "accelerate",
        "deepspeed",
        "srun",
        "mpirun",
        "mpiexec",
        "horovodrun",
        "colossalai",
        "composer",
    }
)
# Not training, but they hold a training log open for writing (`| tee train.log`, Slurm's step daemon).
LOG_HOLDERS = frozenset({"tee", "slurmstepd", "bash", "sh", "dash", "zsh", "nohup", "script"})
_WRITE_MODES = ("w", "a", "r+", "a+", "w+")
_SAMPLE_CPU_S = 0.25
TAIL_BYTES = 64 * 1024
MAX_FACTS = 64


@dataclass
class ProcFinding:
    attrs: dict[str, Any]
    text: str


@dataclass
class Analysis:
    processes: list[ProcFinding] = field(default_factory=list)
    writers: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # log path -> live writer entries


def exe_name(entry: Mapping[str, Any]) -> str:
    cmd = entry.get("cmdline") or []
    base = os.path.basename(cmd[0]) if cmd else ""
    return base or str(entry.get("name") or "")


def is_training_like(entry: Mapping[str, Any]) -> bool:
    """Python interpreters and the launchers that start training (torchrun, accelerate, srun...)."""
    names = {exe_name(entry), str(entry.get("name") or "")}
    return any(_PYTHON.match(n) or n in LAUNCHERS for n in names if n)


def normalise_cmdline(cmdline: Sequence[str]) -> str:
    """The command with secrets masked, the interpreter's path and version dropped, and per-rank arguments
    (``--local_rank=N``) removed, so that two launches of one command compare equal.

    >>> normalise_cmdline(["/opt/conda/bin/python3.10", "-u", "train.py", "--local_rank=3", "--token", "t0p"])
    'python -u train.py --token [REDACTED]'
    """
    parts: list[str] = []
    skip_next = False
    for i, arg in enumerate(cmdline):
        if skip_next:
            skip_next = False
            continue
        if i == 0:
            base = os.path.basename(arg)
            parts.append("python" if _PYTHON.match(base) else base)
            continue
        if re.match(r"^--?local[-_]rank$", arg):
            skip_next = True
            continue
        if re.match(r"^--?local[-_]rank=\d+$", arg):
            continue
        parts.append(arg)
    return redact(" ".join(parts))


def _under(path: str, roots: Sequence[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


_FILE_ARG = re.compile(r"/|\.[A-Za-z][\w-]{0,9}$")  # a path, or a name with a file extension (train.py)


def _belongs(entry: Mapping[str, Any], roots: Sequence[str]) -> bool:
    """A process belongs to the run by what it runs and what it holds open: a file open under the run
    directory, or an argument naming a file there (``train.py`` resolved against its working directory,
    ``--output_dir /runs/r7``). A working directory alone is not enough: any interpreter started from the
    run directory (a notebook kernel, ``python -m http.server``) would count as a trainer."""
    cwd = str(entry.get("cwd") or "")
    for path, _mode in entry.get("open_files") or []:
        if _under(os.path.normpath(path), roots):
            return True
    args = (entry.get("cmdline") or [])[1:]
    for i, arg in enumerate(args):
        if i > 0 and args[i - 1] == "-m":
            continue  # a module name, not a file
        value = arg.split("=", 1)[1] if arg.startswith("-") and "=" in arg else arg
        if not value or value.startswith("-") or not _FILE_ARG.search(value):
            continue
        if not os.path.isabs(value) and not cwd:
            continue
        full = value if os.path.isabs(value) else os.path.join(cwd, value)
        if _under(os.path.normpath(full), roots):
            return True
    return False


def _is_launcher(entry: Mapping[str, Any] | None) -> bool:
    if entry is None:
        return False
    if exe_name(entry) in LAUNCHERS or str(entry.get("name") or "") in LAUNCHERS:
        return True
    cmd = " ".join(entry.get("cmdline") or [])
    return any(
        s in cmd for s in ("torch.distributed.run", "torch.distributed.launch", "torchrun", "deepspeed")
    )


def _instances(group: list[Mapping[str, Any]], by_pid: Mapping[int, Mapping[str, Any]]) -> int:
    """Independent launches of one command. Forked workers (a member's descendants) are not launches, and
    ranks that one launcher started side by side count once; two starts from one shell count twice."""
    pids = {e["pid"] for e in group}

    def has_member_ancestor(e: Mapping[str, Any]) -> bool:
        seen: set[int] = set()
        ppid = e.get("ppid")
        while isinstance(ppid, int) and ppid > 1 and ppid not in seen:
            if ppid in pids:
                return True
            seen.add(ppid)
            parent = by_pid.get(ppid)
            ppid = parent.get("ppid") if parent else None
        return False

    clusters: set[tuple[str, int]] = set()
    for e in group:
        if has_member_ancestor(e):
            continue
        parent = by_pid.get(e.get("ppid", -1))
        if _is_launcher(parent):
            clusters.add(("launcher", int(e["ppid"])))
        else:
            clusters.add(("own", int(e["pid"])))
    return max(1, len(clusters))


def analyse(
    snapshot: Sequence[Mapping[str, Any]], run_roots: Sequence[str], logs: Iterable[str], now: float
) -> Analysis:
    """Training processes (those of the run first) and the live writers of each log path."""
    by_pid = {int(e["pid"]): e for e in snapshot}
    roots = [os.path.normpath(r) for r in run_roots]
    log_set = {os.path.normpath(p) for p in logs}
    children: dict[int, int] = {}
    for e in snapshot:
        children[e.get("ppid", -1)] = children.get(e.get("ppid", -1), 0) + 1
    out = Analysis()
    for e in snapshot:
        if e.get("status") in ("zombie", "dead"):
            continue
        for path, mode in e.get("open_files") or []:
            norm = os.path.normpath(path)
            if norm in log_set and mode in _WRITE_MODES:
                out.writers.setdefault(norm, []).append(e)
    trainers = [e for e in snapshot if is_training_like(e)]
    groups: dict[str, list[Mapping[str, Any]]] = {}
    keys: dict[int, str] = {}
    for e in trainers:
        norm = normalise_cmdline(e.get("cmdline") or [e.get("name") or ""])
        key = hashlib.sha1(f"{norm}\0{e.get('cwd') or ''}".encode()).hexdigest()[:12]
        keys[e["pid"]] = key
        groups.setdefault(key, []).append(e)
    instances = {k: _instances(g, by_pid) for k, g in groups.items()}
    found: list[tuple[bool, int, ProcFinding]] = []
    for e in trainers:
        in_run = bool(roots) and _belongs(e, roots)
        if roots and not in_run:
            continue
        writes = any(
            os.path.normpath(p) in log_set and m in _WRITE_MODES for p, m in e.get("open_files") or []
        )
        created = e.get("create_time")
        fds, limit = e.get("num_fds", -1), e.get("fd_limit", -1)
        attrs: dict[str, Any] = {
            "pid": int(e["pid"]),
            "name": exe_name(e),
            "state": str(e.get("status") or ""),
            "age_s": round(max(0.0, now - created), 1) if isinstance(created, (int, float)) else -1.0,
            "cpu_pct": float(e.get("cpu_percent", -1.0) if e.get("cpu_percent") is not None else -1.0),
            "rss_mb": round(e["rss"] / 2**20, 1) if isinstance(e.get("rss"), int) else -1.0,
            "threads": int(e.get("num_threads") or -1),
            "children": children.get(e["pid"], 0),
            "in_run_dir": in_run,
            "writes_log": writes,
            "cmd_key": keys[e["pid"]],
            "instances": instances[keys[e["pid"]]],
            "fds": int(fds) if isinstance(fds, int) else -1,
            "fd_limit": int(limit) if isinstance(limit, int) else -1,
            "fd_used_pct": round(100.0 * fds / limit, 1)
            if isinstance(fds, int) and isinstance(limit, int) and fds >= 0 and limit > 0
            else -1.0,
        }
        text = normalise_cmdline(e.get("cmdline") or [e.get("name") or ""])[:300]
        found.append((not in_run, int(e["pid"]), ProcFinding(attrs, text)))
    out.processes = [f for _, _, f in sorted(found, key=lambda t: (t[0], t[1]))][:MAX_FACTS]
    return out


def usual_interval(tail_text: str) -> float:
    """Median seconds between consecutive timestamped lines (-1 when fewer than three stamps).

    >>> usual_interval("2024-05-01 12:00:00 step 1\\n2024-05-01 12:00:30 step 2\\n"
    ...                "2024-05-01 12:01:00 step 3\\n")
    30.0
    """
    stamps = [t for t in (lineinfo.time_of_line(line) for line in tail_text.splitlines()) if t is not None]
    gaps = [b - a for a, b in itertools.pairwise(stamps) if b > a]
    if len(stamps) < 3 or not gaps:
        return -1.0
    return round(float(median(gaps)), 3)


def _read_tail(path: str) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - TAIL_BYTES))
            return f.read(TAIL_BYTES).decode("utf-8", "replace")
    except OSError:
        return ""


# --- the live snapshot -------------------------------------------------------------------------------------
def _own_family() -> set[int]:
    """This tool, its ancestors and its descendants: never reported as training processes."""
    import psutil

    out = {os.getpid()}
    try:
        me = psutil.Process()
        out |= {p.pid for p in me.parents()}
        out |= {p.pid for p in me.children(recursive=True)}
    except psutil.Error:
        pass
    return out


def descendants_of(roots: set[int], parent: Mapping[int, Any]) -> set[int]:
    """``roots`` and every pid whose parent chain (pid -> ppid, as listed) reaches one of them.

    >>> sorted(descendants_of({10}, {10: 1, 11: 10, 12: 11, 13: 1, 14: 13}))
    [10, 11, 12]
    """
    out = set(roots)
    for pid in parent:
        chain: list[int] = []
        cur: Any = pid
        while isinstance(cur, int) and cur not in out and cur not in chain and cur > 1:
            chain.append(cur)
            cur = parent.get(cur)
        if cur in out:
            out.update(chain)
    return out


def live_snapshot() -> list[dict[str, Any]]:
    """Read-only psutil snapshot. Per-process details (cwd, open files, CPU%) only for the processes that
    matter, because they cost a few syscalls each; access errors leave the field out."""
    import psutil

    skip = _own_family()
    listed: list[tuple[dict[str, Any], Any]] = []
    for p in psutil.process_iter(["pid", "ppid", "name", "cmdline", "status", "create_time", "num_threads"]):
        listed.append((dict(p.info), p))
    # Probes run on threads beside this one and start children of their own (the disk worker is a python
    # whose argument is the run directory): one started after _own_family() ran is still ours by its parent.
    # (From this process only: its ancestors' other children, the user's shell's jobs, are not ours.)
    skip |= descendants_of({os.getpid()}, {int(i["pid"]): i.get("ppid") for i, _ in listed})
    base: list[dict[str, Any]] = []
    handles: dict[int, Any] = {}
    for info, p in listed:
        if info["pid"] in skip:
            continue
        info["cmdline"] = list(info.get("cmdline") or [])
        base.append(info)
        if is_training_like(info) or info.get("name") in LOG_HOLDERS:
            handles[info["pid"]] = p
    for p in handles.values():
        with contextlib.suppress(psutil.Error):
            p.cpu_percent(None)  # the first call only primes the counter
    time.sleep(_SAMPLE_CPU_S)
    for info in base:
        p = handles.get(info["pid"])
        if p is None:
            continue
        for name, getter in (
            ("cwd", p.cwd),
            ("cpu_percent", lambda p=p: p.cpu_percent(None)),
            ("rss", lambda p=p: p.memory_info().rss),
            ("open_files", lambda p=p: [[f.path, getattr(f, "mode", "r")] for f in p.open_files()]),
            ("num_fds", p.num_fds),
            ("fd_limit", lambda p=p: p.rlimit(psutil.RLIMIT_NOFILE)[0]),
        ):
            try:
                info[name] = getter()
            except (psutil.Error, OSError, AttributeError):
                continue
    return base


def trainer_environ(pid: int) -> dict[str, str]:
    import psutil

    try:
        return dict(psutil.Process(pid).environ())
    except (psutil.Error, OSError):
        return {}


# --- the probe ---------------------------------------------------------------------------------------------
def _run_logs(ctx: Context) -> list[tuple[str, str, Path]]:
    """(real path, display name, path) of every training and scheduler log in the run directories."""
    out = []
    for root in ctx.run_dirs:
        files = ctx.files_of(root)
        prefix = "" if len(ctx.run_dirs) == 1 else root.name.rstrip("/") + "/"
        for role in ("train", "scheduler"):
            for p in files.files(role):
                out.append((os.path.realpath(p), prefix + files.rel(p), p))
    return out


def probe_processes(ctx: Context) -> ProbeOutput:
    snapshot = ctx.options.get("recorded", {}).get("processes")
    if snapshot is None:
        try:
            snapshot = live_snapshot()
        except ImportError:
            raise ProbeUnavailable("psutil is not installed") from None
    roots = [os.path.realpath(r) for r in ctx.run_dirs]
    logs = _run_logs(ctx)
    found = analyse(snapshot, roots, [real for real, _, _ in logs], ctx.now)
    out = ProbeOutput("processes")
    host = hostname()
    reg = ctx.registry
    for f in found.processes:
        out.facts.append(reg.make("process", f.attrs, probe="processes", text=f.text, host=host))
    for real, display, path in logs:
        writers = sorted(
            found.writers.get(os.path.normpath(real), []), key=lambda e: e.get("create_time") or 0
        )
        try:
            mtime = os.stat(path).st_mtime
        except OSError:
            continue
        silent = round(max(0.0, ctx.now - mtime), 1)
        interval = usual_interval(_read_tail(str(path)))
        attrs = {
            "alive": bool(writers),
            "pid": int(writers[0]["pid"]) if writers else -1,
            "state": str(writers[0].get("status") or "") if writers else "",
            "writers": len(writers),
            "silent_s": silent,
            "interval_s": interval,
            "silence_factor": round(silent / interval, 2) if interval > 0 else -1.0,
        }
        out.facts.append(
            reg.make(
                "log.writer", attrs, file=display, ts=mtime, rank=lineinfo.rank_of_path(display), host=host
            )
        )
    writer = next((f.attrs["pid"] for f in found.processes if f.attrs["writes_log"]), None)
    if writer is not None and "processes" not in ctx.options.get("recorded", {}):
        from .environment import env_facts

        out.facts += env_facts(ctx, trainer_environ(writer), scope=f"pid:{writer}")
    n_run = sum(1 for f in found.processes if f.attrs["in_run_dir"])
    out.detail = f"{len(found.processes)} training process(es), {n_run} in the run directory"
    return out
