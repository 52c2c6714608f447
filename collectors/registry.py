"""The probes a diagnosis runs, in report order. Live-only probes never run with ``--offline``."""

from __future__ import annotations

from .base import ProbeSpec
from .bundles import probe_bundles
from .checkpoints import probe_checkpoints
from .flightrec import probe_flight_recorder
from .gpu import probe_gpu_files
from .logs import probe_logs
from .metrics import probe_metrics
from .smoke_state import probe_smoke_state


def default_probes(live: bool = True) -> list[ProbeSpec]:
    """Every probe; with ``live=False`` the live modules (psutil, NVML...) are not even imported, which is
    a good part of an offline diagnosis' start-up."""
    probes = [
        ProbeSpec("logs", probe_logs, deadline_s=600.0),
        ProbeSpec("checkpoints", probe_checkpoints, deadline_s=10.0),
        ProbeSpec("metrics", probe_metrics, deadline_s=120.0),
        ProbeSpec("smoke_state", probe_smoke_state, deadline_s=5.0),
        ProbeSpec("gpu_files", probe_gpu_files, deadline_s=10.0),  # saved nvidia-smi outputs
        ProbeSpec("bundle", probe_bundles, deadline_s=60.0),  # replayed `collect` bundles
        ProbeSpec("flight_recorder", probe_flight_recorder, deadline_s=60.0),  # NCCL Flight Recorder dumps
    ]
    if not live:
        return probes
    try:  # live probes arrive as their own modules; the offline pipeline does not depend on them
        from .live import live_probes
    except ImportError:
        return probes
    return probes + live_probes()
