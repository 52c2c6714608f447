"""The probes a diagnosis runs, in report order. Live-only probes never run with ``--offline``."""

from __future__ import annotations

from .base import ProbeSpec
from .checkpoints import probe_checkpoints
from .logs import probe_logs
from .smoke_state import probe_smoke_state


def default_probes() -> list[ProbeSpec]:
    probes = [
        ProbeSpec("logs", probe_logs, deadline_s=600.0),
        ProbeSpec("checkpoints", probe_checkpoints, deadline_s=10.0),
        ProbeSpec("smoke_state", probe_smoke_state, deadline_s=5.0),
    ]
    try:  # live probes arrive as their own modules; the offline pipeline does not depend on them
        from .live import live_probes
    except ImportError:
        return probes
    return probes + live_probes()
