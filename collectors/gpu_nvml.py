"""NVML query, run as ``python -m mldebug_rules.collectors.gpu_nvml`` in a child process.

NVML calls go into the driver and can block forever on a wedged GPU; in a child process the caller can give
up at its deadline and kill it. The child prints one JSON object: ``status`` (ok / unavailable / error),
``detail`` and ``devices`` (gpu.state attributes per device).

>>> class FakeNVML:  # a recorded device: one A100, a power cap active, one process
...     NVMLError = RuntimeError
...     NVML_TEMPERATURE_GPU = 0
...     NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
...     NVML_VOLATILE_ECC = 0
...     def nvmlInit(self): pass
...     def nvmlShutdown(self): pass
...     def nvmlDeviceGetCount(self): return 1
...     def nvmlDeviceGetHandleByIndex(self, i): return i
...     def nvmlDeviceGetName(self, h): return b"NVIDIA A100-SXM4-80GB"
...     def nvmlDeviceGetUtilizationRates(self, h): return type("U", (), {"gpu": 97})()
...     def nvmlDeviceGetMemoryInfo(self, h): return type("M", (), {"used": 70 * 2**30, "total": 2**36})()
...     def nvmlDeviceGetTemperature(self, h, s): return 61
...     def nvmlDeviceGetPowerUsage(self, h): return 398123
...     def nvmlDeviceGetCurrentClocksThrottleReasons(self, h): return 0x4
...     def nvmlDeviceGetTotalEccErrors(self, h, a, b): return 0
...     def nvmlDeviceGetRemappedRows(self, h): return (0, 0, 0, 0)
...     def nvmlDeviceGetComputeRunningProcesses(self, h): return [object()]
>>> r = query(FakeNVML())
>>> r["status"], r["devices"][0]["util_pct"], r["devices"][0]["mem_used_mib"], r["devices"][0]["throttle"]
('ok', 97.0, 71680.0, 'sw_power_cap')
>>> r["devices"][0]["power_throttle"], r["devices"][0]["processes"], r["devices"][0]["power_w"]
(True, 1, 398.1)
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

# NVML / nvidia-smi clock throttle ("clock event") reason bits.
THROTTLE_BITS = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)


def throttle_attrs(mask: int) -> dict[str, Any]:
    """gpu.state throttle attributes from a reason bitmask (idle is not a throttle worth reporting).

    >>> sorted(throttle_attrs(0x41).items())  # doctest: +NORMALIZE_WHITESPACE
    [('hw_slowdown', False), ('power_throttle', False), ('thermal_throttle', True),
     ('throttle', 'hw_thermal_slowdown')]
    """
    names = [n for bit, n in THROTTLE_BITS if mask & bit and n != "gpu_idle"]
    return {
        "throttle": ",".join(names),
        "thermal_throttle": bool(mask & (0x20 | 0x40)),
        "power_throttle": bool(mask & (0x4 | 0x80)),
        "hw_slowdown": bool(mask & 0x8),
    }


def _try(fn: Callable[[], Any], errors: tuple[type[BaseException], ...]) -> Any:
    try:
        return fn()
    except errors:
        return None


def _device(nv: Any, i: int, errors: tuple[type[BaseException], ...]) -> dict[str, Any]:
    h = nv.nvmlDeviceGetHandleByIndex(i)
    d: dict[str, Any] = {"index": i, "present": True}
    name = _try(lambda: nv.nvmlDeviceGetName(h), errors)
    if name is not None:
        d["name"] = name.decode() if isinstance(name, bytes) else str(name)
    util = _try(lambda: nv.nvmlDeviceGetUtilizationRates(h), errors)
    if util is not None:
        d["util_pct"] = float(util.gpu)
    mem = _try(lambda: nv.nvmlDeviceGetMemoryInfo(h), errors)
    if mem is not None:
        d["mem_used_mib"] = round(mem.used / 2**20, 1)
        d["mem_total_mib"] = round(mem.total / 2**20, 1)
    temp = _try(lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU), errors)
    if temp is not None:
        d["temp_c"] = float(temp)
    power = _try(lambda: nv.nvmlDeviceGetPowerUsage(h), errors)
    if power is not None:
        d["power_w"] = round(power / 1000.0, 1)
    getter = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
        nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None
    )
    mask = _try(lambda: getter(h), errors) if getter else None
    if mask is not None:
        d.update(throttle_attrs(int(mask)))
    ecc = _try(
        lambda: nv.nvmlDeviceGetTotalEccErrors(
            h, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC
        ),
        errors,
    )
    if ecc is not None:
        d["ecc_uncorrected"] = int(ecc)
    retired = 0
    seen_retired = False
    for cause in (
        "NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS",
        "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR",
    ):
        if hasattr(nv, cause) and hasattr(nv, "nvmlDeviceGetRetiredPages"):
            pages = _try(lambda c=cause: nv.nvmlDeviceGetRetiredPages(h, getattr(nv, c)), errors)
            if pages is not None:
                retired += len(pages)
                seen_retired = True
    if seen_retired:
        d["retired_pages"] = retired
    rows = (
        _try(lambda: nv.nvmlDeviceGetRemappedRows(h), errors)
        if hasattr(nv, "nvmlDeviceGetRemappedRows")
        else None
    )
    if rows is not None and len(rows) >= 4:
        d["remap_failure"] = bool(rows[3])
    procs = _try(lambda: nv.nvmlDeviceGetComputeRunningProcesses(h), errors)
    if procs is not None:
        d["processes"] = len(procs)
    return d


def query(nv: Any) -> dict[str, Any]:
    errors: tuple[type[BaseException], ...] = (getattr(nv, "NVMLError", Exception),)
    try:
        nv.nvmlInit()
    except errors as e:
        # No driver, no library, no permission: there is no NVML here, which is not an error.
        return {"status": "unavailable", "detail": f"nvmlInit: {e}", "devices": []}
    try:
        count = nv.nvmlDeviceGetCount()
        devices = []
        for i in range(count):
            try:
                devices.append(_device(nv, i, errors))
            except errors as e:
                lost = "lost" in str(e).lower() or "GpuIsLost" in type(e).__name__
                devices.append({"index": i, "present": True, "lost": lost, "name": f"unreadable: {e}"[:100]})
        return {"status": "ok", "detail": f"{count} device(s) via NVML", "devices": devices}
    finally:
        _try(nv.nvmlShutdown, errors)


def main() -> int:
    try:
        import pynvml
    except ImportError:
        print(json.dumps({"status": "unavailable", "detail": "pynvml is not installed", "devices": []}))
        return 0
    try:
        result = query(pynvml)
    except Exception as e:  # report, never a traceback: the parent reads one JSON line
        result = {"status": "error", "detail": f"{type(e).__name__}: {e}", "devices": []}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
