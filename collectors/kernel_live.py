"""The live kernel log: ``dmesg``, then ``journalctl -k``, then /var/log/kern.log, parsed by ``kernel_log``.

Each command runs in a subprocess with a deadline. Sources are tried in order until one answers; a source
that hangs is itself evidence (a kernel stuck on a device), so when any source timed out the probe reports
``timeout`` with the facts that a later source gave. No permission anywhere gives ``unavailable`` with the
reasons.

>>> facts = list(parse_output("[ 8123.456789] Out of memory: Killed process 31337 (python) "
...     "total-vm:1kB, anon-rss:2kB\\n[ 9000.1] usb 1-1: new device\\n", boot_time=1700000000.0))
>>> [(no, kind, attrs["pid"], ts) for no, kind, attrs, ts, _ in facts]
[(1, 'kernel.oom_kill', 31337, 1700008123.456789)]
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..engine.facts import FactError
from ..engine.safeio import Unreadable, open_regular
from ..redact import clip
from . import kernel_log
from .base import CommandResult, Context, ProbeOutput, ProbeUnavailable, Runner, runner_of
from .deadlines import command_timeout, hostname

KERN_LOG = "/var/log/kern.log"
MAX_LINES = 50000  # the newest lines; a kernel ring buffer holds a few thousand
_UPTIME = re.compile(r"^\[\s*(\d+\.\d+)\]")


@dataclass(frozen=True)
class Source:
    label: str  # cited as the fact's file
    argv: tuple[str, ...] = ()
    path: str = ""


SOURCES = (
    Source("dmesg", ("dmesg", "--time-format", "iso")),
    Source("journalctl -k", ("journalctl", "-k", "-o", "short-iso", "--no-pager", "-n", str(MAX_LINES))),
    Source(KERN_LOG, path=KERN_LOG),
)


def boot_time() -> float | None:
    try:
        with open("/proc/uptime") as f:
            return time.time() - float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def parse_output(
    text: str, boot_time: float | None = None
) -> Iterator[tuple[int, str, dict[str, Any], float | None, str]]:
    """(line number, kind, attrs, POSIX time, line) for every kernel fact in a command's output. Plain
    ``dmesg`` stamps are seconds since boot: with the boot time they become wall-clock times."""
    lines = text.splitlines()
    first = max(0, len(lines) - MAX_LINES)

    def events() -> Iterator[kernel_log.Event]:
        for no, line in enumerate(lines[first:], first + 1):
            for kind, attrs, ts in kernel_log.parse_line(line):
                if ts is None and boot_time is not None:
                    m = _UPTIME.match(line)
                    if m:
                        ts = round(boot_time + float(m.group(1)), 6)
                yield no, kind, attrs, ts, line

    yield from kernel_log.merge_oom(events())


def _read_file(path: str) -> CommandResult:
    try:
        with open_regular(path) as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - 8 * 2**20))  # the newest 8 MiB is plenty for recent events
            return CommandResult("ok", f.read().decode("utf-8", "replace"))
    except Unreadable as e:  # missing, not permitted, or a FIFO/device (never read: it could block)
        status = "unavailable" if e.reason in ("file not found", "permission denied") else "error"
        return CommandResult(status, stderr=e.reason)
    except FileNotFoundError:
        return CommandResult("unavailable", stderr="not found")
    except PermissionError:
        return CommandResult("unavailable", stderr="permission denied")
    except OSError as e:
        return CommandResult("error", stderr=str(e.strerror))


def _fetch(src: Source, recorded: dict[str, Any], timeout_s: float, run: Runner) -> CommandResult:
    key = src.argv[0] if src.argv else src.path
    if key in recorded:
        value = recorded[key]
        return value if isinstance(value, CommandResult) else CommandResult("ok", str(value))
    if src.path:
        return _read_file(src.path)
    res = run(src.argv, timeout_s)
    if res.status == "error" and src.argv[0] == "dmesg" and "time-format" in res.stderr:
        res = run(("dmesg",), timeout_s)  # busybox or an old util-linux
    return res


def _empty(text: str) -> bool:
    return not text.strip() or text.strip().endswith("-- No entries --")


# A kernel event this long before the run's oldest live process started cannot be about the run.
WINDOW_SLACK_S = 5.0


def run_window(ctx: Context) -> tuple[float | None, set[int]]:
    """(start time, pids) of the run's live processes: kernel events belong to the run when they name one of
    its processes or fall after its start. (None, {}) when no process of the run is alive: then nothing
    bounds the window, and every event is kept."""
    if not ctx.run_dirs:
        return None, set()
    recorded = ctx.options.get("recorded", {})
    try:
        from .processes import analyse, live_snapshot

        snapshot = recorded.get("processes")
        if snapshot is None:
            snapshot = live_snapshot()
    except ImportError:
        return None, set()
    import os

    roots = [os.path.realpath(r) for r in ctx.run_dirs]
    found = analyse(snapshot, roots, [], ctx.now)
    run = [f.attrs for f in found.processes if f.attrs["in_run_dir"]]
    starts = [ctx.now - a["age_s"] for a in run if a.get("age_s", -1) >= 0]
    return (min(starts) if starts else None), {int(a["pid"]) for a in run}


def _belongs_to_run(attrs: dict[str, Any], ts: float | None, start: float | None, pids: set[int]) -> bool:
    if start is None or ts is None:
        return True
    if int(attrs.get("pid", -1)) in pids:
        return True
    return ts >= start - WINDOW_SLACK_S


def probe_kernel_live(ctx: Context) -> ProbeOutput:
    recorded = ctx.options.get("recorded", {})
    run = runner_of(ctx)
    timeout_s = command_timeout()
    notes: list[str] = []
    timed_out = False
    out = ProbeOutput("kernel")
    host = hostname()
    start, pids = run_window(ctx)
    context: list[str] = []
    for src in SOURCES:
        res = _fetch(src, recorded, timeout_s, run)
        if res.status == "timeout":
            timed_out = True
            notes.append(f"{src.label}: no answer within {timeout_s:g} s")
            continue
        if res.status != "ok" or _empty(res.stdout):
            reason = (res.stderr or "").strip().splitlines()[-1:] or ["no entries"]
            notes.append(f"{src.label}: {reason[0][:200]}")
            continue
        bt = boot_time() if src.label == "dmesg" and "dmesg" not in recorded else recorded.get("boot_time")
        for no, kind, attrs, ts, text in parse_output(res.stdout, bt):
            if not _belongs_to_run(attrs, ts, start, pids):
                context.append(f"{src.label}:{no}: {text.strip()[:200]}")
                continue
            try:
                out.facts.append(
                    ctx.registry.make(
                        kind, attrs, file=src.label, line=no, text=clip(text, 2000), ts=ts, host=host
                    )
                )
            except FactError:
                continue
        notes.insert(0, f"read {src.label}: {len(out.facts)} event(s)")
        if context:
            # Shown, not used: an event before the run started is about some other process.
            notes.insert(
                1,
                f"{len(context)} older event(s) before this run's processes started, context only "
                f"(the last: {context[-1]})",
            )
        break
    else:
        if not timed_out:
            raise ProbeUnavailable("; ".join(notes))
    out.detail = "; ".join(notes)
    if timed_out:
        out.status = "timeout"
    return out
