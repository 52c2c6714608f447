"""Time limits for live probes, in one place.

A live probe runs anything that can block (a command, a stat on a network mount, an NVML call) in a
subprocess with ``command_timeout()`` seconds to answer. ``MLDEBUG_PROBE_TIMEOUT`` shortens (or lengthens) it,
which tests use to cut off deliberately hanging fakes quickly. A probe's own deadline leaves room for the
commands it chains (a fallback after a timeout) plus a margin, so the probe can report ``timeout`` itself
with a reason instead of being abandoned by the runner.

>>> import os
>>> os.environ["MLDEBUG_PROBE_TIMEOUT"] = "2"
>>> command_timeout(), probe_deadline(2)
(2.0, 6.0)
>>> os.environ["MLDEBUG_PROBE_TIMEOUT"] = "junk"
>>> command_timeout()
5.0
>>> del os.environ["MLDEBUG_PROBE_TIMEOUT"]
"""

from __future__ import annotations

import os
import socket

DEFAULT_COMMAND_TIMEOUT_S = 5.0
MAX_COMMAND_TIMEOUT_S = 12.0  # two chained commands must still fit in run_probes' 25 s total
_MARGIN_S = 2.0


def command_timeout() -> float:
    raw = os.environ.get("MLDEBUG_PROBE_TIMEOUT", "")
    try:
        value = float(raw) if raw else DEFAULT_COMMAND_TIMEOUT_S
    except ValueError:
        return DEFAULT_COMMAND_TIMEOUT_S
    if not 0.1 <= value <= MAX_COMMAND_TIMEOUT_S:
        return DEFAULT_COMMAND_TIMEOUT_S
    return value


def probe_deadline(chained: int = 1) -> float:
    """Deadline for a probe that may run ``chained`` blocking commands one after the other."""
    return chained * command_timeout() + _MARGIN_S


def hostname() -> str:
    try:
        return socket.gethostname()
    except OSError:
        return ""
