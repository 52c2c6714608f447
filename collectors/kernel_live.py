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


def probe_kernel_live(ctx: Context) -> ProbeOutput:
    recorded = ctx.options.get("recorded", {})
    run = runner_of(ctx)
    timeout_s = command_timeout()
    notes: list[str] = []
    timed_out = False
    out = ProbeOutput("kernel")
    host = hostname()
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
            try:
                out.facts.append(
                    ctx.registry.make(
                        kind, attrs, file=src.label, line=no, text=clip(text, 2000), ts=ts, host=host
                    )
                )
            except FactError:
                continue
        notes.insert(0, f"read {src.label}: {len(out.facts)} event(s)")
        break
    else:
        if not timed_out:
            raise ProbeUnavailable("; ".join(notes))
    out.detail = "; ".join(notes)
    if timed_out:
        out.status = "timeout"
    return out
