"""Live stacks of the run's processes: where every stuck process waits, read twice a few seconds apart.

For each training process of the run (ranks, DataLoader workers, launchers), the probe takes every thread's
Python stack with ``py-spy dump --nonblocking`` (the process is not paused), waits, then takes a second dump
with ``--native`` (a pause of milliseconds, which names the C/C++ frame a thread blocks in), and reads
``/proc/PID/{status,wchan,syscall,stack,stat,fd}`` at both times. It never signals or kills a process:
py-spy only reads memory (ptrace), each dump has its own timeout, and a dump that does not answer is itself
evidence (a process in uninterruptible I/O). Without py-spy or ptrace permission the /proc half still runs,
and the missing half is said as evidence.

The recording (what was read) is a plain JSON document, kept in ``collect`` bundles; ``analyse`` turns it into
``stack.process`` facts, so recorded stacks replay without ptrace. What a thread waits on is read from the
frame table ``stack_frames.yaml``; which wait is a hang, a data stall or a desync is decided by the rules
(``rules/core/hangs.yaml``), never here.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..redact import redact
from .base import Context, ProbeOutput, ProbeUnavailable, Runner, runner_of
from .deadlines import command_timeout, hostname
from .procinfo import read_proc
from .stack_parse import (
    Table,
    Thread,
    classify,
    hot_frame,
    load_table,
    main_thread,
    moved,
    parse_pyspy_json,
    role_of,
)

SCHEMA = "mldebug-rules/stacks/v1"
INTERVAL_S = 2.0  # between the two samples: long enough for a working loop to move, short for a 30 s budget
DUMP_TIMEOUT_S = 4.0
MAX_PROCESSES = 64
_RANK_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")


def find_pyspy() -> str | None:
    """py-spy on PATH, else beside this interpreter (a venv's bin/ that is not on PATH)."""
    found = shutil.which("py-spy")
    if found:
        return found
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.is_file() and os.access(beside, os.X_OK) else None


def dump(
    pyspy: str | None, pid: int, native: bool, run: Runner, timeout_s: float = DUMP_TIMEOUT_S
) -> dict[str, Any]:
    """One py-spy dump: {"status": ok|timeout|no_ptrace|no_pyspy|gone|error, "detail": str, "threads": json}."""
    if not pyspy:
        return {"status": "no_pyspy", "detail": "py-spy is not installed", "threads": None}
    argv = [pyspy, "dump", "--pid", str(pid), "--json", "--native" if native else "--nonblocking"]
    res = run(argv, timeout_s)
    if res.status == "ok":
        try:
            return {"status": "ok", "detail": "", "threads": json.loads(res.stdout or "null")}
        except ValueError:
            return {"status": "error", "detail": "py-spy printed no JSON", "threads": None}
    err = (res.stderr or "").strip().splitlines()
    detail = err[-1][:300] if err else res.status
    low = " ".join(err).lower()
    if res.status == "timeout":
        status = "timeout"
    elif "permission" in low or "not permitted" in low or "ptrace" in low:
        status = "no_ptrace"
    elif "no such process" in low or not os.path.exists(f"/proc/{pid}"):
        status = "gone"
    elif native and "native" in low:
        # Some builds or platforms cannot unwind native frames: the Python stack alone still answers.
        return dump(pyspy, pid, False, run, timeout_s)
    else:
        status = "error"
    return {"status": status, "detail": detail, "threads": None}


# --- analysis (pure: a recording in, fact attributes out) --------------------------------------------------
def _int(v: Any, default: int = -1) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return default


def _threads(sample: Mapping[str, Any]) -> list[Thread]:
    return parse_pyspy_json(sample.get("threads")) if sample.get("status") == "ok" else []


def _describe(pid: int, rank: int, role: str, worker: int, ppid: int) -> str:
    who = f"pid {pid}"
    if rank >= 0:
        who += f" rank {rank}"
    if role == "worker":
        who += f" DataLoader worker {worker} of pid {ppid}" if worker >= 0 else f" worker of pid {ppid}"
    else:
        who += f" {role}"
    return who


def analyse(rec: Mapping[str, Any], table: Table | None = None) -> list[tuple[dict[str, Any], str, int]]:
    """(attrs, text, rank) of one ``stack.process`` fact per recorded process."""
    table = table or load_table()
    interval = float(rec.get("interval_s") or INTERVAL_S)
    # On a loaded node a spinning process gets less than a core: its CPU share is compared with what any
    # runnable process gets there now (cores / load, at most 1).
    cores, load = float(rec.get("cores") or 0), float(rec.get("load") or 0)
    fair = min(1.0, cores / load) if cores > 0 and load > 0 else 1.0
    silent = float(rec.get("silent_s", -1.0))
    procs = [p for p in rec.get("processes") or [] if isinstance(p, Mapping)][:MAX_PROCESSES]
    rows: list[dict[str, Any]] = []
    for p in procs:
        samples = [s for s in p.get("samples") or [] if isinstance(s, Mapping)][:2]
        first = _threads(samples[0]) if samples else []
        second = _threads(samples[1]) if len(samples) > 1 else []
        threads = second or first
        main2, main1 = main_thread(second), main_thread(first)
        main = main2 or main1
        role = role_of(threads, table) or ("launcher" if p.get("launcher") else "trainer")
        wait = classify(main, table) if main else None
        # Threads waiting on a lock (read from the native sample: Lock.acquire is a C call, invisible in a
        # Python-only stack) whose Python stack had the same shape in the first sample: stuck there.
        shapes = {t.tid: t.shape() for t in first}
        lockers = [t for t in second if shapes.get(t.tid) == t.shape() and classify(t, table).wait == "lock"]
        procs_state = [s.get("proc") or {} for s in samples]
        cpu = [float(ps.get("cpu_s", -1.0)) for ps in procs_state]
        cpu_s = round(cpu[1] - cpu[0], 3) if len(cpu) == 2 and min(cpu) >= 0 else -1.0
        # The CPU time is divided by the time that really passed between the two /proc reads (the
        # interval plus the first dump's own time), when it was recorded.
        at = [float(ps.get("at", -1.0)) for ps in procs_state]
        elapsed = round(at[1] - at[0], 3) if len(at) == 2 and min(at) >= 0 and at[1] > at[0] else interval
        last = procs_state[-1] if procs_state else {}
        statuses = [str(s.get("status") or "") for s in samples]
        ok = sum(1 for s in statuses if s == "ok")
        hot = hot_frame(main1, main2)
        rows.append(
            {
                "pid": _int(p.get("pid")),
                "ppid": _int(p.get("ppid")),
                "role": role,
                "worker": -1,
                "rank": _int(p.get("rank")),
                "local_rank": _int(p.get("local_rank")),
                "world_size": _int(p.get("world_size")),
                "local_world": _int(p.get("local_world")),
                "peers_missing": -1,
                "state": str(last.get("state") or ""),
                "wchan": str(last.get("wchan") or "")[:100],
                "syscall": str(last.get("syscall") or ""),
                "blocked_path": str(last.get("blocked_path") or "")[:300],
                "blocked_fs": str(last.get("blocked_fs") or ""),
                "network_fs": str(last.get("blocked_fs") or "") in table.network_filesystems
                or str(last.get("blocked_fs") or "").startswith("fuse."),
                "threads_d": _int(last.get("threads_d"), 0),
                "cpu_s": cpu_s,
                "interval_s": elapsed,
                "cpu_frac": round(cpu_s / elapsed, 3) if cpu_s >= 0 and elapsed > 0 else -1.0,
                "cpu_busy": round(cpu_s / elapsed / fair, 3) if cpu_s >= 0 and elapsed > 0 else -1.0,
                "method": "py-spy" if ok else "proc",
                "dumps_ok": ok,
                "dump_status": statuses[-1] if statuses else "",
                "native": any(f.native for t in second for f in t.frames),
                "moved": moved(first, second) if len(samples) == 2 and ok == 2 else False,
                "sampled_twice": len(samples) == 2 and ok == 2,
                "main_state": ("idle" if main.idle else "active") if main else "",
                "wait": wait.wait if wait else "",
                "wait_frame": wait.describe(main) if wait and main and wait.frame else "",
                "wait_package": wait.frame.package if wait and wait.frame else "",
                "user_frame": wait.user_frame.text if wait and wait.user_frame else "",
                "hot_frame": hot.text if hot else "",
                "lock_waiters": len(lockers),
                "threads": len(threads),
                "silent_s": silent,
                "_lockers": [f"thread {t.name!r} in {classify(t, table).describe(t)}" for t in lockers],
                "_details": [s.get("detail") for s in samples if s.get("detail")],
                "_mount": str(last.get("blocked_mount") or ""),
            }
        )
    # DataLoader workers: numbered by start order under their parent (the order the loader starts them).
    by_parent: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        if r["role"] == "worker":
            by_parent.setdefault(r["ppid"], []).append(r)
    for kids in by_parent.values():
        for i, r in enumerate(sorted(kids, key=lambda r: r["pid"])):
            r["worker"] = i
            parent = next((x for x in rows if x["pid"] == r["ppid"]), None)
            if r["rank"] < 0 and parent:
                r["rank"] = parent["rank"]
    # Local ranks that should be alive but have no process: a peer died (counted, never guessed by name).
    trainers = [r for r in rows if r["role"] == "trainer"]
    local = {r["local_rank"] for r in trainers if r["local_rank"] >= 0}
    for r in trainers:
        if r["local_world"] > 0 and r["local_rank"] >= 0:
            r["peers_missing"] = max(0, r["local_world"] - len(local))
    out = []
    for r in rows:
        lockers = r.pop("_lockers")
        details = r.pop("_details")
        rank = r.pop("rank")  # a provenance attribute every fact has, passed to the registry as such
        mount = r.pop("_mount")
        who = _describe(r["pid"], rank, r["role"], r["worker"], r["ppid"])
        bits = []
        if r["wait_frame"]:
            bits.append(
                f"main thread {r['main_state'] or 'seen'}, waiting [{r['wait']}] in {r['wait_frame']}"
            )
        elif r["hot_frame"]:
            bits.append(f"main thread {r['main_state']} in {r['hot_frame']}")
        if r["lock_waiters"] >= 2:
            bits.append("threads waiting on locks: " + "; ".join(lockers[:4]))
        if r["hot_frame"] and r["wait_frame"]:
            bits.append(f"hot frame {r['hot_frame']}")
        proc = f"state {r['state'] or '?'}"
        if r["wchan"]:
            proc += f", wchan {r['wchan']}"
        if r["syscall"]:
            proc += f", syscall {r['syscall']}"
        if r["blocked_path"]:
            proc += f" on {r['blocked_path']} ({r['blocked_fs'] or 'unknown fs'})"
            if mount:
                proc += f", mounted at {mount}"
        bits.append(proc)
        if r["cpu_s"] >= 0:
            bits.append(f"{r['cpu_s']:.2f} s CPU in {r['interval_s']:g} s")
        if r["sampled_twice"]:
            bits.append("stacks moved between samples" if r["moved"] else "same stacks in both samples")
        elif r["dump_status"] and r["dump_status"] != "ok":
            bits.append(f"py-spy: {r['dump_status']}" + (f" ({details[-1]})" if details else ""))
        out.append((r, redact(f"{who}: " + "; ".join(bits))[:1500], rank))
    return out


# --- the live recording ------------------------------------------------------------------------------------
def _rank_env(pid: int) -> dict[str, int]:
    """RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE from the process's environment (only those names)."""
    import psutil

    try:
        env = psutil.Process(pid).environ()
    except (psutil.Error, OSError):
        return {}
    return {k: _int(env[k]) for k in _RANK_VARS if k in env}


def _rank_from_cmdline(cmdline: Sequence[str]) -> int:
    for i, arg in enumerate(cmdline):
        for flag in ("--local_rank", "--local-rank"):
            if arg.startswith(flag + "="):
                return _int(arg.split("=", 1)[1])
            if arg == flag and i + 1 < len(cmdline):
                return _int(cmdline[i + 1])
    return -1


def _newest_log_age(ctx: Context) -> float:
    newest = -1.0
    for root in ctx.run_dirs:
        files = ctx.files_of(root)
        for role in ("train", "scheduler"):
            for p in files.files(role):
                try:
                    newest = max(newest, os.stat(p).st_mtime)
                except OSError:
                    continue
    for p in ctx.logs:
        try:
            newest = max(newest, os.stat(p).st_mtime)
        except OSError:
            continue
    return round(max(0.0, time.time() - newest), 1) if newest > 0 else -1.0


def record(ctx: Context, interval_s: float = INTERVAL_S) -> dict[str, Any]:
    """Sample the run's processes twice; the recording ``analyse`` reads."""
    from concurrent.futures import ThreadPoolExecutor

    from .processes import _is_launcher, live_snapshot
    from .processes import analyse as analyse_processes

    snapshot = live_snapshot()
    by_pid = {int(e["pid"]): e for e in snapshot}
    roots = [os.path.realpath(r) for r in ctx.run_dirs]
    found = analyse_processes(snapshot, roots, [], ctx.now)
    pids = [f.attrs["pid"] for f in found.processes if f.attrs["in_run_dir"]][:MAX_PROCESSES]
    table = load_table()
    pyspy = find_pyspy()
    run = runner_of(ctx)
    procs: list[dict[str, Any]] = []
    for pid in pids:
        e = by_pid.get(pid, {})
        env = _rank_env(pid)
        cmd = list(e.get("cmdline") or [])
        local_rank = env.get("LOCAL_RANK", _rank_from_cmdline(cmd))
        procs.append(
            {
                "pid": pid,
                "ppid": _int(e.get("ppid")),
                "cmdline": redact(" ".join(cmd))[:500],
                "launcher": _is_launcher(e),
                "rank": env.get("RANK", local_rank if env.get("WORLD_SIZE", 1) <= 1 else -1),
                "local_rank": local_rank,
                "world_size": env.get("WORLD_SIZE", -1),
                "local_world": env.get("LOCAL_WORLD_SIZE", -1),
                "samples": [],
            }
        )

    def one(p: dict[str, Any], native: bool) -> dict[str, Any]:
        proc = read_proc(p["pid"], table.network_filesystems).to_json()
        proc["at"] = round(time.monotonic(), 3)
        d = dump(pyspy, p["pid"], native, run, min(DUMP_TIMEOUT_S, command_timeout()))
        d["proc"] = proc
        return d

    with ThreadPoolExecutor(max_workers=8, thread_name_prefix="stacks") as pool:
        for native in (False, True):
            if native:
                time.sleep(interval_s)
            for p, d in zip(procs, pool.map(lambda p, n=native: one(p, n), procs), strict=True):
                p["samples"].append(d)
    return {
        "schema": SCHEMA,
        "interval_s": interval_s,
        "silent_s": _newest_log_age(ctx),
        "pyspy": bool(pyspy),
        "cores": os.cpu_count() or 0,
        "load": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else 0.0,
        "processes": procs,
    }


def probe_stacks(ctx: Context) -> ProbeOutput:
    rec = ctx.options.get("recorded", {}).get("stacks")
    if rec is None:
        if not ctx.run_dirs:
            raise ProbeUnavailable("no run directory: stacks are taken of a run's own processes only")
        try:
            rec = record(ctx, float(ctx.options.get("stack_interval_s", INTERVAL_S)))
        except ImportError:
            raise ProbeUnavailable("psutil is not installed") from None
    out = ProbeOutput("stacks")
    host = hostname()
    rows = analyse(rec)
    if not rows:
        raise ProbeUnavailable("no process of the run is alive")
    for attrs, text, rank in rows:
        out.facts.append(
            ctx.registry.make(
                "stack.process", attrs, probe="stacks", text=text, rank=rank if rank >= 0 else None, host=host
            )
        )
    out.payload["stacks"] = rec
    ok = sum(1 for a, _, _ in rows if a["dumps_ok"])
    how = "py-spy" if rec.get("pyspy") else "no py-spy (pip install py-spy): /proc only"
    denied = sum(1 for a, _, _ in rows if a["dump_status"] == "no_ptrace")
    detail = f"{len(rows)} process(es) sampled twice {rec.get('interval_s', INTERVAL_S):g} s apart, {ok} with stacks ({how})"
    if denied:
        detail += (
            f"; ptrace refused for {denied} (CAP_SYS_PTRACE / kernel.yama.ptrace_scope, see docs/probes.md)"
        )
    out.detail = detail
    return out
