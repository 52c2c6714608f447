"""Smoke results kept in ``RUN_DIR/.mldebug/smokes.jsonl``: append-only, one JSON record per line.

Appends take an exclusive lock and write one line with one ``write`` on an O_APPEND descriptor, so two
concurrent smokes never interleave or corrupt records; a torn last line (a crash mid-write) is skipped on
read. This is the only place that writes inside a run directory, and only under ``.mldebug/``: the
``smoke_state`` probe (``collectors/smoke_state.py``) only reads it, through ``record_facts``.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..engine.safeio import Unreadable, kind_problem, read_capped
from ..redact import clip, redact_obj

STATE_DIR = ".mldebug"
STATE_FILE = "smokes.jsonl"
OUTCOMES = ("confirmed", "refuted", "inconclusive")
MAX_STATE_BYTES = 64 << 20  # smokes.jsonl: thousands of records fit in far less


class StateUnusable(OSError):
    """The smoke state file exists but cannot be used (a FIFO, a device, over its cap, unreadable)."""


def state_path(run_dir: Path) -> Path:
    return run_dir / STATE_DIR / STATE_FILE


def read_records(run_dir: Path) -> list[dict[str, Any]]:
    path = state_path(run_dir)
    try:  # a FIFO or device in place of the state file is never opened for reading (it would block)
        raw = read_capped(path, MAX_STATE_BYTES)
    except Unreadable as e:
        if e.reason == "file not found":
            return []
        raise StateUnusable(f"{path}: {e.reason}") from None
    records = []
    for line in raw.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue  # a torn write: the record never completed
        if isinstance(rec, dict) and rec.get("hypothesis") and rec.get("outcome") in OUTCOMES:
            records.append(rec)
    return records


def append_record(run_dir: Path, record: Mapping[str, Any]) -> dict[str, Any]:
    d = run_dir / STATE_DIR
    d.mkdir(exist_ok=True)
    path = d / STATE_FILE
    # O_NONBLOCK: opening a FIFO would otherwise wait for its other end; fstat then refuses it. O_RDWR: the
    # last byte is read back (pread) to start on a fresh line after a torn write.
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_NOFOLLOW, 0o644)
    try:
        why = kind_problem(os.fstat(fd).st_mode)
        if why:
            raise StateUnusable(f"{path}: {why}")
        os.set_blocking(fd, True)
        fcntl.flock(fd, fcntl.LOCK_EX)
        seq = max((_seq(r) for r in read_records(run_dir)), default=0) + 1
        rec = redact_obj(dict(record))  # every writer's text (notes, output tails, commands) masked here too
        rec["seq"] = seq
        line = (json.dumps(rec, sort_keys=True) + "\n").encode()
        # A crash mid-write may have left a torn last line: start on a fresh line so this record stays whole.
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            line = b"\n" + line
        written = os.write(fd, line)
        if written != len(line):  # a short write (disk full): finish it while still holding the lock
            os.write(fd, line[written:])
        os.fsync(fd)
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    return rec


def _seq(rec: Mapping[str, Any]) -> int:
    try:
        return int(rec.get("seq", 0))
    except (TypeError, ValueError):
        return 0


def _role(rec: Mapping[str, Any]) -> str:
    """baseline | change | control | record; "" for a record written before smoke pairs existed (it is
    shown, never counted)."""
    if rec.get("kind") == "record":
        return "record"
    if rec.get("derived_from"):
        return ""
    if isinstance(rec.get("control"), Mapping):
        return "control"
    role = rec.get("role")
    return str(role) if role in ("baseline", "change") else ""


def _summary(rec: Mapping[str, Any]) -> str:
    if rec.get("kind") != "run":
        return str(rec.get("summary", ""))
    role = _role(rec) or "run"
    return f"{role}: {rec.get('command', '')} -> {rec.get('classification', '')}"


def record_facts(registry: Any, run_dir: Path) -> list[Any]:
    """One ``smoke.result`` fact per record of the run directory's state file."""
    return [_fact(registry, rec) for rec in read_records(run_dir)]


def _fact(registry: Any, rec: Mapping[str, Any]) -> Any:
    return registry.make(
        "smoke.result",
        {
            "hypothesis": str(rec["hypothesis"]),
            "outcome": rec["outcome"],
            "smoke": str(rec.get("smoke", "")),
            "seq": _seq(rec),
            "role": _role(rec),
            "classification": str(rec.get("classification", "") or ""),
            "reason": clip(str(rec.get("why", "") or ""), 500),
            "program": str(rec.get("program", "") or ""),
        },
        origin="smoke",
        file=f"{STATE_DIR}/{STATE_FILE}",
        line=_seq(rec),
        text=clip(str(rec.get("note", "") or _summary(rec)), 500),
        extra={k: rec[k] for k in ("command", "control", "classification", "note") if k in rec},
    )
