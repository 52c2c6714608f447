"""The live probes: the seed's Step 1 on the machine the run is on. None of them runs with ``--offline``.

Each probe's deadline leaves room for the blocking commands it chains (see ``deadlines``); ``run_probes``
enforces the deadlines and the 25 s total, so the whole set finishes in bounded time whatever hangs.
"""

from __future__ import annotations

from collections.abc import Callable

from .base import Context, ProbeOutput, ProbeSpec, ProbeUnavailable
from .deadlines import probe_deadline
from .disks import probe_disks
from .environment import probe_environment
from .gpu import probe_gpu
from .kernel_live import probe_kernel_live
from .processes import probe_processes
from .stacks import INTERVAL_S, probe_stacks


def _not_for_bundles(func: Callable[[Context], ProbeOutput]) -> Callable[[Context], ProbeOutput]:
    """`diagnose --bundle X` replays another machine's evidence; this machine's state would pollute it."""

    def wrapped(ctx: Context) -> ProbeOutput:
        if ctx.bundles and not ctx.run_dirs and not ctx.logs and not ctx.kernel_logs:
            raise ProbeUnavailable("replaying a bundle: the live machine is not probed")
        return func(ctx)

    wrapped.__name__ = func.__name__
    wrapped.__doc__ = func.__doc__
    return wrapped


def live_probes() -> list[ProbeSpec]:
    return [
        # psutil reads /proc only; the deadline covers a machine with very many processes.
        ProbeSpec(
            "processes", _not_for_bundles(probe_processes), deadline_s=probe_deadline(1) + 3.0, live_only=True
        ),
        # dmesg, then journalctl, then a file read: two commands can hang one after the other.
        ProbeSpec(
            "kernel", _not_for_bundles(probe_kernel_live), deadline_s=probe_deadline(2), live_only=True
        ),
        # NVML child, then nvidia-smi (and its retry with fewer fields).
        ProbeSpec("gpu", _not_for_bundles(probe_gpu), deadline_s=probe_deadline(3), live_only=True),
        # statvfs children run side by side: one timeout for all of them.
        ProbeSpec("disks", _not_for_bundles(probe_disks), deadline_s=probe_deadline(1) + 1.0, live_only=True),
        ProbeSpec(
            "environment", _not_for_bundles(probe_environment), deadline_s=probe_deadline(1), live_only=True
        ),
        # Two py-spy dumps per process (run side by side) with the sampling interval between them.
        ProbeSpec(
            "stacks",
            _not_for_bundles(probe_stacks),
            deadline_s=probe_deadline(2) + INTERVAL_S + 1.0,
            live_only=True,
        ),
    ]
