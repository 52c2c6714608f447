"""The NVML query (collectors/gpu_nvml.py) against a stand-in for pynvml that answers like a real driver: a
recent binding (clock *event* reasons), pages retired for both causes, a row-remap failure, a GPU that the
driver has lost, and a device that does not support a query. No GPU needed."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from mldebug_rules.collectors import gpu_nvml
from mldebug_rules.engine.facts import FactRegistry


class NVMLError(Exception):
    def __init__(self, name: str) -> None:
        super().__init__(name)


class FakeNVML:
    """Two GPUs: 0 healthy but capped by power and heat; 1 has failed memory. A third one is lost."""

    NVMLError = NVMLError
    NVML_TEMPERATURE_GPU = 0
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0
    NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0
    NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return 3

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        if i == 2:
            raise NVMLError("GPU is lost")
        return i

    def nvmlDeviceGetName(self, h: int) -> str:
        return "NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        return SimpleNamespace(gpu=[100, 0][h], memory=[38, 0][h])

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        return SimpleNamespace(used=[76 * 2**30, 512 * 2**20][h], total=81559 * 2**20)

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        return [87, 41][h]

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return [699821, 71034][h]

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: int) -> int:
        return [0x4 | 0x40, 0x1][h]  # sw power cap + hw thermal slowdown; idle

    def nvmlDeviceGetTotalEccErrors(self, h: int, kind: int, counter: int) -> int:
        return [0, 7][h]

    def nvmlDeviceGetRetiredPages(self, h: int, cause: int) -> list[int]:
        if h == 0:
            raise NVMLError("Not Supported")  # Ampere and later remap rows instead
        return [[0x1A2B3000], [0x2B3C4000, 0x2B3C5000]][cause]

    def nvmlDeviceGetRemappedRows(self, h: int) -> tuple[int, int, int, int]:
        return [(0, 0, 0, 0), (2, 5, 1, 1)][h]  # corrected, uncorrected, pending, failure

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[Any]:
        return [[SimpleNamespace(pid=4242, usedGpuMemory=76 * 2**30)], []][h]


def test_query_reports_throttle_ecc_retirement_remap_and_processes() -> None:
    r = gpu_nvml.query(FakeNVML())
    assert r["status"] == "ok" and r["detail"] == "3 device(s) via NVML"
    d0, d1, d2 = r["devices"]
    assert (d0["util_pct"], d0["mem_used_mib"], d0["temp_c"], d0["power_w"], d0["processes"]) == (
        100.0,
        77824.0,
        87.0,
        699.8,
        1,
    )
    assert d0["throttle"] == "sw_power_cap,hw_thermal_slowdown"
    assert d0["power_throttle"] and d0["thermal_throttle"] and not d0["hw_slowdown"]
    assert "retired_pages" not in d0 and d0["remap_failure"] is False and d0["ecc_uncorrected"] == 0
    assert (d1["ecc_uncorrected"], d1["retired_pages"], d1["remap_failure"], d1["processes"]) == (
        7,
        3,
        True,
        0,
    )
    assert d1["throttle"] == ""  # idle is not a throttle
    assert d2["lost"] is True and d2["index"] == 2
    reg = FactRegistry.load()
    for d in r["devices"]:
        reg.make("gpu.state", d)  # every device fits the fact schema


def test_no_driver_is_unavailable_not_an_error() -> None:
    class NoDriver(FakeNVML):
        def nvmlInit(self) -> None:
            raise NVMLError("Driver Not Loaded")

    r = gpu_nvml.query(NoDriver())
    assert (r["status"], r["devices"]) == ("unavailable", [])
    assert "Driver Not Loaded" in r["detail"]
