"""GPU state: NVML (in a child process), ``nvidia-smi --query-gpu`` as the fallback, and saved ``nvidia-smi``
outputs found in run directories (the plain table, ``-q``, and ``--format=csv``). One set of gpu.state
attributes serves all of them. No GPU is a fact (``present=False``), not an error; a hung query is evidence.

>>> table = '''
... | NVIDIA-SMI 535.104.05             Driver Version: 535.104.05   CUDA Version: 12.2     |
... |-----------------------------------------+----------------------+----------------------+
... | GPU  Name                 Persistence-M | Bus-Id        Disp.A | Volatile Uncorr. ECC |
... | Fan  Temp   Perf          Pwr:Usage/Cap |         Memory-Usage | GPU-Util  Compute M. |
... |=========================================+======================+======================|
... |   0  NVIDIA A100-SXM4-80GB          On  | 00000000:07:00.0 Off |                    0 |
... | N/A   34C    P0              62W / 400W |      4MiB / 81920MiB |      0%      Default |
... |                                         |                      |             Disabled |
... +-----------------------------------------+----------------------+----------------------+
... | Processes:                                                                            |
... |  GPU   GI   CI        PID   Type   Process name                            GPU Memory |
... |=======================================================================================|
... |  No running processes found                                                           |
... +---------------------------------------------------------------------------------------+
... '''
>>> [(line, a["index"], a["name"], a["util_pct"], a["mem_used_mib"], a["temp_c"], a["processes"])
...  for line, a, _ in parse_saved(table)]
[(7, 0, 'NVIDIA A100-SXM4-80GB', 0.0, 4.0, 34.0, 0)]
>>> csv = ("index, name, utilization.gpu [%], memory.used [MiB], memory.total [MiB]\\n"
...        "0, Tesla V100, 87 %, 15000 MiB, 16160 MiB\\n")
>>> [(a["index"], a["util_pct"], a["mem_total_mib"]) for _, a, _ in parse_saved(csv)]
[(0, 87.0, 16160.0)]
>>> [a for _, a, _ in parse_saved("No devices were found\\n")]
[{'present': False}]
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from collections.abc import Iterator, Sequence
from typing import Any

from ..engine.facts import FactError
from ..engine.safeio import open_regular, read_up_to
from .base import Context, ProbeOutput, ProbeUnavailable, Runner, runner_of
from .deadlines import command_timeout, hostname
from .gpu_nvml import throttle_attrs

QUERY_FIELDS = (
    "index",
    "name",
    "pci.bus_id",
    "utilization.gpu",
    "memory.used",
    "memory.total",
    "temperature.gpu",
    "power.draw",
    "clocks_throttle_reasons.active",
    "ecc.errors.uncorrected.volatile.total",
)
BASIC_FIELDS = QUERY_FIELDS[:8]  # every driver since ~2015 knows these
_NO_GPU = re.compile(
    r"No devices were found|couldn't communicate with the NVIDIA driver|NVIDIA-SMI has failed|"
    r"No NVIDIA GPU found|Unable to determine the device handle"
)
_LOST = re.compile(r"GPU is lost|Unable to determine the device handle for GPU|fallen off the bus")
_NA = {
    "",
    "n/a",
    "[n/a]",
    "[not supported]",
    "not supported",
    "unknown error",
    "[unknown error]",
    "[gpu is lost]",
}

# csv header (units stripped) -> (attribute, type)
_CSV_FIELDS: dict[str, tuple[str, str]] = {
    "index": ("index", "int"),
    "name": ("name", "str"),
    "utilization.gpu": ("util_pct", "float"),
    "memory.used": ("mem_used_mib", "float"),
    "memory.total": ("mem_total_mib", "float"),
    "temperature.gpu": ("temp_c", "float"),
    "power.draw": ("power_w", "float"),
    "power.draw.instant": ("power_w", "float"),
    "clocks_throttle_reasons.active": ("_mask", "hex"),
    "clocks_event_reasons.active": ("_mask", "hex"),
    "ecc.errors.uncorrected.volatile.total": ("ecc_uncorrected", "int"),
    "retired_pages.sbe": ("_retired_sbe", "int"),
    "retired_pages.dbe": ("_retired_dbe", "int"),
    "retired_pages.single_bit_ecc.count": ("_retired_sbe", "int"),
    "retired_pages.double_bit.count": ("_retired_dbe", "int"),
    "remapped_rows.failure": ("remap_failure", "yesno"),
    "pci.bus_id": ("_pci", "str"),
    "clocks.sm": ("_sm", "float"),
    "clocks.current.sm": ("_sm", "float"),
    "clocks.max.sm": ("_sm_max", "float"),
    "clocks.max.graphics": ("_gr_max", "float"),
    "clocks.gr": ("_gr", "float"),
    "clocks.current.graphics": ("_gr", "float"),
}


def _clock_pct(raw: dict[str, Any]) -> float | None:
    """The SM (else graphics) clock as a percentage of its maximum, when both were read."""
    for cur, top in (("_sm", "_sm_max"), ("_gr", "_gr_max")):
        if raw.get(cur) is not None and raw.get(top):
            return round(100.0 * float(raw[cur]) / float(raw[top]), 1)
    return None


def _num(raw: str, kind: str) -> Any:
    value = raw.strip()
    if value.lower() in _NA:
        return None
    if kind == "str":
        return value
    if kind == "yesno":
        return value.lower() in ("yes", "1", "true")
    value = re.sub(r"\s*(%|MiB|W|C|MHz)$", "", value)
    try:
        if kind == "hex":
            return int(value, 16)
        if kind == "int":
            return int(float(value))
        return float(value)
    except ValueError:
        return None


def _finish(raw: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """gpu.state attributes from parsed fields, and the device's bus id for the citation text."""
    attrs = {k: v for k, v in raw.items() if not k.startswith("_") and v is not None}
    if raw.get("_mask") is not None:
        attrs.update(throttle_attrs(raw["_mask"]))
    pct = _clock_pct(raw)
    if pct is not None:
        attrs["sm_clock_pct"] = pct
    if raw.get("_retired_sbe") is not None or raw.get("_retired_dbe") is not None:
        attrs["retired_pages"] = int(raw.get("_retired_sbe") or 0) + int(raw.get("_retired_dbe") or 0)
    return attrs, str(raw.get("_pci") or "")


def parse_csv(text: str, header: Sequence[str] | None = None) -> Iterator[tuple[int, dict[str, Any], str]]:
    """``--query-gpu`` output, with a header line or with the header given. The last row per GPU wins
    (a saved ``nvidia-smi -l`` log holds many rows per device)."""
    rows: dict[Any, tuple[int, dict[str, Any], str]] = {}
    fields: list[str] | None = [h.strip() for h in header] if header else None
    for no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if fields is None and (line.lstrip().startswith(("$", "#", ">")) or "nvidia-smi" in line):
            continue  # the command line pasted above its output ("$ nvidia-smi --query-gpu=a,b --format=csv")
        cells = [c.strip() for c in line.split(",")]
        if fields is None:
            fields = [re.sub(r"\s*\[.*?\]$", "", c).strip() for c in cells]
            continue
        if len(cells) != len(fields):
            continue
        raw: dict[str, Any] = {}
        for name, cell in zip(fields, cells, strict=True):
            spec = _CSV_FIELDS.get(name)
            if spec is not None:
                raw[spec[0]] = _num(cell, spec[1])
        attrs, pci = _finish(raw)
        if "[GPU is lost]" in line:
            attrs["lost"] = True
        rows[attrs.get("index", pci or no)] = (no, attrs, line.strip())
    yield from rows.values()


_TABLE_DEV = re.compile(
    r"^\|\s*(\d+)\s+(.+?)\s+(?:On|Off)\s*\|\s*([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d)\s+\S+\s*\|\s*(\S+)\s*\|"
)
# A process holding at least this much device memory is a training job, not a stray context (a CUDA context
# that another rank opened on GPU 0 holds a few hundred MiB): two of them on one GPU are competing jobs.
LARGE_PROCESS_MIB = 2048
_TABLE_PROC = re.compile(r"^\|\s+(\d+)\s+(?:\S+\s+\S+\s+)?(\d+)\s+[CGM+]+\s+\S.*?\s(\d+)MiB\s*\|")


def parse_table(text: str) -> Iterator[tuple[int, dict[str, Any], str]]:
    """The default ``nvidia-smi`` table (driver 4xx-5xx layouts)."""
    lines = text.splitlines()
    devices: list[tuple[int, dict[str, Any], str]] = []
    procs: dict[int, int] = {}
    large: dict[int, int] = {}
    in_procs = False
    for i, line in enumerate(lines):
        if "Processes:" in line:
            in_procs = True
            continue
        if in_procs:
            m = _TABLE_PROC.match(line)
            if m:
                gpu = int(m.group(1))
                procs[gpu] = procs.get(gpu, 0) + 1
                if int(m.group(3)) >= LARGE_PROCESS_MIB:
                    large[gpu] = large.get(gpu, 0) + 1
            continue
        m = _TABLE_DEV.match(line)
        if not m:
            continue
        attrs: dict[str, Any] = {"index": int(m.group(1)), "name": m.group(2).strip()}
        ecc = _num(m.group(4), "int")
        if ecc is not None:
            attrs["ecc_uncorrected"] = ecc
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        for rx, key in (
            (r"(\d+)C\s", "temp_c"),
            (r"(\d+)W\s*/\s*\d+W", "power_w"),
            (r"(\d+)MiB\s*/\s*\d+MiB", "mem_used_mib"),
            (r"\d+MiB\s*/\s*(\d+)MiB", "mem_total_mib"),
            (
                r"MiB\s*\|\s*(\d+)%\s",
                "util_pct",
            ),  # the cell after Memory-Usage (the first one may be Fan: "| 30%")
        ):
            mm = re.search(rx, nxt)
            if mm:
                attrs[key] = float(mm.group(1))
        if "ERR!" in nxt or "ERR!" in line:
            attrs["lost"] = True
        devices.append((i + 1, attrs, f"{line.strip()} {nxt.strip()}"))
    if in_procs:
        for _, attrs, _ in devices:
            attrs["processes"] = procs.get(attrs["index"], 0)
            attrs["large_processes"] = large.get(attrs["index"], 0)
    yield from devices


def parse_q(text: str) -> Iterator[tuple[int, dict[str, Any], str]]:
    """``nvidia-smi -q``: an indented key : value tree, one ``GPU <bus id>`` section per device."""
    devices: list[tuple[int, dict[str, Any], str]] = []
    stack: list[tuple[int, str]] = []
    cur: dict[str, Any] | None = None
    for no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        m = re.match(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d)\s*$", line)
        if m:
            cur = {"_pci": m.group(1), "index": len(devices), "processes": 0, "large_processes": 0}
            cur.update(_ecc=None, _retired=None)
            cur["_mask_names"] = []
            devices.append((no, cur, line.strip()))
            stack = []
            continue
        if cur is None:
            continue
        indent = len(line) - len(line.lstrip())
        key, sep, value = line.strip().partition(":")
        key, value = key.strip(), value.strip()
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = [k for _, k in stack] + [key]
        if not sep or (not value and sep):
            stack.append((indent, key))
            continue
        section = path[0] if len(path) > 1 else ""
        if key == "Product Name":
            cur["name"] = value
        elif key == "Minor Number" and value.isdigit():
            cur["index"] = int(value)
        elif section == "FB Memory Usage" and key in ("Used", "Total"):
            cur["mem_used_mib" if key == "Used" else "mem_total_mib"] = _num(value, "float")
        elif section == "Utilization" and key == "Gpu":
            cur["util_pct"] = _num(value, "float")
        elif section == "Temperature" and key == "GPU Current Temp":
            cur["temp_c"] = _num(value, "float")
        elif section in ("Power Readings", "GPU Power Readings") and key in (
            "Power Draw",
            "Average Power Draw",
        ):
            if cur.get("power_w") is None:
                cur["power_w"] = _num(value, "float")
        elif section in ("Clocks", "Max Clocks") and key in ("SM", "Graphics"):
            slot = ("_sm" if key == "SM" else "_gr") + ("_max" if section == "Max Clocks" else "")
            cur[slot] = _num(value, "float")
        elif section in ("Clocks Throttle Reasons", "Clocks Event Reasons") and value == "Active":
            cur["_mask_names"].append(key)
        elif section == "ECC Errors" and len(path) > 2 and path[1] == "Volatile":
            if "Uncorrectable" in key or ("Double Bit" in path and key == "Total"):  # new and old layouts
                n = _num(value, "int")
                if n is not None:
                    cur["_ecc"] = (cur["_ecc"] or 0) + n
        elif section == "Retired Pages" and (
            "Single Bit" in key or "Double Bit" in key or key == "Retired Count"
        ):
            n = _num(value, "int")
            if n is not None:
                cur["_retired"] = (cur["_retired"] or 0) + n
        elif section == "Remapped Rows" and key == "Remapping Failure Occurred":
            cur["remap_failure"] = value.lower() == "yes"
        elif section == "Processes" and key == "Process ID":
            cur["processes"] += 1
        elif section == "Processes" and key == "Used GPU Memory":
            used = _num(value, "float")
            if used is not None and used >= LARGE_PROCESS_MIB:
                cur["large_processes"] += 1
    out = []
    for no, cur, text_line in devices:
        names = {n.lower() for n in cur.pop("_mask_names", [])}
        attrs = {k: v for k, v in cur.items() if not k.startswith("_") and v is not None}
        if cur.get("_ecc") is not None:
            attrs["ecc_uncorrected"] = cur["_ecc"]
        if cur.get("_retired") is not None:
            attrs["retired_pages"] = cur["_retired"]
        pct = _clock_pct(cur)
        if pct is not None:
            attrs["sm_clock_pct"] = pct
        throttles = sorted(n.replace(" ", "_") for n in names if n != "idle")
        attrs.update(
            throttle=",".join(throttles),
            thermal_throttle=any("thermal" in n for n in names),
            power_throttle=any("power" in n for n in names),
            hw_slowdown="hw slowdown" in names,
        )
        out.append((no, attrs, f"{text_line} {attrs.get('name', '')}".strip()))
    yield from out


def parse_saved(text: str) -> Iterator[tuple[int, dict[str, Any], str]]:
    """Any saved nvidia-smi output, by its shape."""
    m = _NO_GPU.search(text)
    if m and not re.search(r"^GPU [0-9A-Fa-f]{4,8}:", text, re.M) and "|=" not in text:
        line = text[: m.start()].count("\n") + 1
        lost = _LOST.search(text)
        # "Unable to determine the device handle for GPU 0000:03:00.0: Unknown Error": the GPU is there (the
        # driver names its bus id) but does not answer, which is not the same as no GPU at all.
        yield line, ({"present": True, "lost": True} if lost else {"present": False}), m.group(0)
        return
    if "NVSMI LOG" in text or re.search(r"^GPU [0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:", text, re.M):
        yield from parse_q(text)
    elif "NVIDIA-SMI" in text or re.search(r"^\|\s+\d+\s+\S", text, re.M):
        yield from parse_table(text)
    elif "," in text:
        yield from parse_csv(text)


# --- probes ------------------------------------------------------------------------------------------------
def probe_gpu_files(ctx: Context) -> ProbeOutput:
    """Saved nvidia-smi outputs in the run directories (offline)."""
    out = ProbeOutput("gpu_files")
    files_read = 0
    for root in ctx.run_dirs:
        files = ctx.files_of(root)
        prefix = "" if len(ctx.run_dirs) == 1 else root.name.rstrip("/") + "/"
        for p in files.files("gpu"):
            try:
                with open_regular(p) as f:
                    text = read_up_to(f, 4 * 2**20).decode("utf-8", "replace")
            except OSError as e:
                out.detail += f"{files.rel(p)}: {e.strerror}; "
                continue
            files_read += 1
            for line, attrs, cited in parse_saved(text):
                try:
                    out.facts.append(
                        ctx.registry.make(
                            "gpu.state", attrs, file=prefix + files.rel(p), line=line, text=cited
                        )
                    )
                except FactError:
                    continue
    if not files_read:
        raise ProbeUnavailable("no saved nvidia-smi output")
    out.detail = f"{files_read} file(s), {len(out.facts)} device record(s)" + (
        f"; {out.detail}" if out.detail else ""
    )
    return out


def _nvml(timeout_s: float, run: Runner) -> tuple[str, str, list[dict[str, Any]]]:
    if importlib.util.find_spec("pynvml") is None:
        return "unavailable", "pynvml is not installed", []
    res = run([sys.executable, "-m", "mldebug_rules.collectors.gpu_nvml"], timeout_s)
    if res.status != "ok":
        return res.status, f"NVML: {(res.stderr or res.status).strip()[:200]}", []
    try:
        data = json.loads(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return "error", "NVML: unreadable answer", []
    return str(data.get("status", "error")), str(data.get("detail", "")), list(data.get("devices", []))


def _smi(
    timeout_s: float, recorded: dict[str, Any], run: Runner
) -> tuple[str, str, list[tuple[int, dict[str, Any], str]]]:
    if "nvidia-smi" in recorded:
        text = recorded["nvidia-smi"]
        return "ok", "recorded nvidia-smi", list(parse_csv(text, QUERY_FIELDS))
    fields = QUERY_FIELDS
    res = run(["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"], timeout_s)
    if res.status == "error" and "field" in (res.stdout + res.stderr).lower():
        fields = BASIC_FIELDS  # an older driver that lacks a field
        res = run(
            ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"], timeout_s
        )
    if res.status == "timeout":
        return "timeout", f"nvidia-smi: no answer within {timeout_s:g} s (a wedged GPU or driver?)", []
    text = res.stdout + "\n" + res.stderr
    if res.status in ("error", "ok") and _NO_GPU.search(text):
        return "absent", f"nvidia-smi: {_NO_GPU.search(text).group(0)}", []  # type: ignore[union-attr]
    if res.status != "ok":
        return res.status, f"nvidia-smi: {(res.stderr or res.status).strip()[:200]}", []
    rows = list(parse_csv(res.stdout, fields))
    if _LOST.search(text):
        for _, attrs, line in rows:
            attrs["lost"] = attrs.get("lost", False) or "lost" in line.lower()
    return "ok", f"{len(rows)} device(s) via nvidia-smi", rows


def probe_gpu(ctx: Context) -> ProbeOutput:
    """Live GPU state: NVML first, nvidia-smi when NVML is not there."""
    out = ProbeOutput("gpu")
    recorded = ctx.options.get("recorded", {})
    timeout_s = command_timeout()
    host = hostname()
    reg = ctx.registry
    run = runner_of(ctx)
    status, detail, devices = ("unavailable", "recorded run", []) if recorded else _nvml(timeout_s, run)
    if status == "ok" and devices:
        for d in devices:
            try:
                out.facts.append(
                    reg.make("gpu.state", d, probe="gpu", host=host, text=str(d.get("name", "")))
                )
            except FactError:
                continue
        out.detail = detail
        return out
    if status == "timeout":
        out.status = "timeout"
        out.detail = f"{detail} (a wedged GPU or driver?)"
        return out
    notes = [detail] if detail and detail != "recorded run" else []
    smi_status, smi_detail, rows = _smi(timeout_s, recorded, run)
    notes.append(smi_detail)
    out.detail = "; ".join(notes)
    if smi_status == "timeout":
        out.status = "timeout"
        return out
    if smi_status == "ok" and rows:
        for _no, attrs, line in rows:
            try:
                out.facts.append(reg.make("gpu.state", attrs, probe="gpu", host=host, text=line))
            except FactError:
                continue
        return out
    if smi_status == "unavailable" and status != "ok":
        # Neither NVML nor nvidia-smi could be asked: this machine cannot tell whether it has a GPU. Say so
        # plainly, and leave no fact: a probe that could not run is evidence of nothing (a silent trainer is
        # not "hung on a missing GPU" because nvidia-smi is not installed).
        raise ProbeUnavailable(f"no GPU found (no NVML, no nvidia-smi): {out.detail}")
    if smi_status in ("absent", "unavailable") or (smi_status == "ok" and not rows):
        # No driver, no nvidia-smi, no device: the machine has no usable NVIDIA GPU. That is a finding.
        out.facts.append(reg.make("gpu.state", {"present": False}, probe="gpu", host=host, text=out.detail))
        return out
    out.status = smi_status
    return out
