"""Live-probe parsers on recorded outputs (tests/data/recorded): nvidia-smi in its three shapes, dmesg and
journalctl, /proc/mounts, a psutil snapshot; plus every collector module's doctests. No GPU, no root."""

from __future__ import annotations

import doctest
import importlib
import json
from pathlib import Path

import pytest
from mldebug_rules.collectors import disks, environment, gpu, kernel_live, processes
from mldebug_rules.collectors.base import CommandResult, Context
from mldebug_rules.engine.facts import FactRegistry

DATA = Path(__file__).parent / "data" / "recorded"
MODULES = [
    "mldebug_rules.collectors.processes",
    "mldebug_rules.collectors.gpu",
    "mldebug_rules.collectors.gpu_nvml",
    "mldebug_rules.collectors.disks",
    "mldebug_rules.collectors.environment",
    "mldebug_rules.collectors.kernel_live",
    "mldebug_rules.collectors.kernel_log",
    "mldebug_rules.collectors.bundles",
    "mldebug_rules.collectors.deadlines",
    "mldebug_rules.collectors.numeric",
]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name: str) -> None:
    """The samples in each parser's docstring are executable documentation."""
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0


def _saved(name: str) -> list[tuple[int, dict, str]]:
    return list(gpu.parse_saved((DATA / name).read_text()))


def test_nvidia_smi_table_535_two_gpus_and_processes() -> None:
    rows = _saved("nvidia-smi-535-table.txt")
    assert [(line, a["index"], a["util_pct"], a["mem_used_mib"], a["processes"]) for line, a, _ in rows] == [
        (9, 0, 0.0, 71234.0, 1),
        (13, 1, 0.0, 71234.0, 1),
    ]
    assert rows[1][1]["ecc_uncorrected"] == 2
    assert rows[0][1]["power_w"] == 62.0


def test_nvidia_smi_table_470_layout() -> None:
    ((line, a, text),) = _saved("nvidia-smi-470-table.txt")
    assert (line, a["name"], a["temp_c"], a["util_pct"], a["mem_total_mib"]) == (
        9,
        "Tesla V100-SXM2...",
        83.0,
        100.0,
        16160.0,
    )
    assert a["processes"] == 1 and "00000000:00:1E.0" in text


def test_nvidia_smi_table_fan_percentage_is_not_the_utilisation() -> None:
    # A GPU with a fan (GeForce, workstation cards) shows "| 30%   41C ..." in the first cell; GPU-Util is the
    # cell after Memory-Usage.
    table = (
        "| GPU  Name        Persistence-M| Bus-Id        Disp.A | Volatile Uncorr. ECC |\n"
        "| Fan  Temp  Perf  Pwr:Usage/Cap|         Memory-Usage | GPU-Util  Compute M. |\n"
        "|===============================+======================+======================|\n"
        "|   0  NVIDIA GeForce ...  Off  | 00000000:01:00.0  On |                  N/A |\n"
        "| 30%   41C    P8    17W / 220W |    412MiB /  8192MiB |      2%      Default |\n"
        "+-------------------------------+----------------------+----------------------+\n"
    )
    ((_, a, _),) = list(gpu.parse_saved(table))
    assert (a["util_pct"], a["mem_used_mib"], a["temp_c"]) == (2.0, 412.0, 41.0)


def test_nvidia_smi_q() -> None:
    ((line, a, _),) = _saved("nvidia-smi-q.txt")
    assert line == 9
    assert a["name"] == "NVIDIA A100-SXM4-80GB" and a["index"] == 0
    assert (a["mem_used_mib"], a["mem_total_mib"], a["util_pct"], a["temp_c"], a["power_w"]) == (
        71234.0,
        81920.0,
        0.0,
        88.0,
        62.45,
    )
    assert a["ecc_uncorrected"] == 3  # volatile only, not the aggregate
    assert a["remap_failure"] is False and a["processes"] == 1
    assert a["hw_slowdown"] and a["thermal_throttle"] and not a["power_throttle"]
    assert "idle" not in a["throttle"]


def test_nvidia_smi_csv_last_row_per_gpu_wins() -> None:
    rows = _saved("nvidia-smi-query.csv")
    by_index = {a.get("index"): a for _, a, _ in rows}
    assert by_index[0]["util_pct"] == 0.0 and by_index[0]["throttle"] == ""  # idle is not a throttle
    assert "util_pct" not in by_index[1]  # [N/A] stays unknown
    reg = FactRegistry.load()
    for _, a, _ in rows:
        reg.make("gpu.state", a)  # every parsed record fits the schema


def test_nvidia_smi_csv_with_its_command_line_pasted_above() -> None:
    text = (
        "$ nvidia-smi --query-gpu=index,utilization.gpu,memory.used --format=csv\n"
        "index, utilization.gpu [%], memory.used [MiB]\n"
        "0, 100 %, 15077 MiB\n"
        "1, 0 %, 0 MiB\n"
    )
    rows = [(line, a) for line, a, _ in gpu.parse_saved(text)]
    assert rows == [
        (3, {"index": 0, "util_pct": 100.0, "mem_used_mib": 15077.0}),
        (4, {"index": 1, "util_pct": 0.0, "mem_used_mib": 0.0}),
    ]


def test_nvidia_smi_without_driver_is_no_gpu() -> None:
    assert [a for _, a, _ in _saved("nvidia-smi-nodriver.txt")] == [{"present": False}]


def test_live_csv_with_known_header() -> None:
    text = "0, NVIDIA A100-SXM4-80GB, 00000000:07:00.0, 0, 4, 81920, 34, 62.10, 0x0000000000000044, 0\n"
    ((_, a, _),) = gpu.parse_csv(text, gpu.QUERY_FIELDS)
    assert a["thermal_throttle"] and a["power_throttle"] and a["ecc_uncorrected"] == 0


def test_dmesg_iso_output() -> None:
    found = [
        (no, kind, attrs)
        for no, kind, attrs, _, _ in kernel_live.parse_output((DATA / "dmesg-iso.txt").read_text())
    ]
    kinds = [k for _, k, _ in found]
    assert kinds == [
        "kernel.nfs",
        "kernel.nfs",
        "kernel.hung_task",
        "kernel.xid",
        "kernel.nvrm",
        "kernel.nvrm",
        "kernel.oom_kill",  # the summary and the "Killed process" line are one kill
    ]
    xid = next(a for _, k, a in found if k == "kernel.xid")
    assert (xid["code"], xid["pci"], xid["pid"], xid["hardware"]) == (79, "0000:0f:00", 48214, True)
    nvrm = [a["event"] for _, k, a in found if k == "kernel.nvrm"]
    assert nvrm == ["fallen_off_bus", "crash_dump"]
    ((no, oom),) = [(no, a) for no, k, a in found if k == "kernel.oom_kill"]
    assert no == 9  # cited at the "Killed process" line
    assert (oom["pid"], oom["process"], oom["cgroup"], oom["anon_rss_kb"], oom["constraint"]) == (
        48300,
        "python",
        "/slurm/uid_1000/job_77",
        84628,
        "CONSTRAINT_MEMCG",
    )


def test_journalctl_short_iso_times() -> None:
    found = list(kernel_live.parse_output((DATA / "journalctl-k.txt").read_text()))
    assert [k for _, k, _, _, _ in found] == ["kernel.nfs", "kernel.xid", "kernel.segfault"]
    assert found[0][3] == 1709633140.0


def _ctx(tmp_path: Path, **recorded: object) -> Context:
    return Context(
        registry=FactRegistry.load(), run_dirs=[tmp_path], offline=False, options={"recorded": recorded}
    )


def test_kernel_probe_falls_back_and_reports_permission(tmp_path: Path) -> None:
    denied = CommandResult("unavailable", stderr="dmesg: read kernel buffer failed: Operation not permitted")
    ctx = _ctx(
        tmp_path,
        dmesg=denied,
        journalctl=(DATA / "journalctl-k.txt").read_text(),
    )
    out = kernel_live.probe_kernel_live(ctx)
    assert out.status == "ok"
    assert "Operation not permitted" in out.detail
    assert {f.file for f in out.facts} == {"journalctl -k"}
    assert [f.line for f in out.facts] == [1, 2, 3]


def test_kernel_probe_all_denied_is_unavailable(tmp_path: Path) -> None:
    from mldebug_rules.collectors.base import ProbeUnavailable

    denied = CommandResult("unavailable", stderr="Operation not permitted")
    ctx = _ctx(tmp_path, dmesg=denied, journalctl=denied, **{kernel_live.KERN_LOG: denied})
    with pytest.raises(ProbeUnavailable, match="not permitted"):
        kernel_live.probe_kernel_live(ctx)


def test_kernel_probe_timeout_is_kept_with_later_facts(tmp_path: Path) -> None:
    hung = CommandResult("timeout", stderr="dmesg: no answer")
    ctx = _ctx(tmp_path, dmesg=hung, journalctl=(DATA / "journalctl-k.txt").read_text())
    out = kernel_live.probe_kernel_live(ctx)
    assert out.status == "timeout" and len(out.facts) == 3


def test_gpu_probe_from_recorded_nvidia_smi(tmp_path: Path) -> None:
    text = "0, NVIDIA A100-SXM4-80GB, 00000000:07:00.0, 3, 70000, 81920, 40, 80.5, 0x0000000000000001, 0\n"
    out = gpu.probe_gpu(_ctx(tmp_path, **{"nvidia-smi": text}))
    ((f,),) = [out.facts]
    assert f.kind == "gpu.state" and f.attrs["util_pct"] == 3.0 and f.attrs["present"]


def test_mounts_and_network_filesystems() -> None:
    mounts = disks.parse_mounts((DATA / "proc-mounts.txt").read_text())
    assert disks.mount_for("/scratch/u/run7", mounts) == ("/scratch", "nfs4", True)
    assert disks.mount_for("/lustre/proj/x", mounts)[1:] == ("lustre", True)
    assert disks.mount_for("/mnt/gcs/bucket", mounts)[1:] == ("fuse.gcsfuse", True)
    assert disks.mount_for("/dev/shm", mounts)[1:] == ("tmpfs", False)
    assert disks.mount_for("/home/u", mounts) == ("/", "ext4", False)


def test_disk_probe_marks_a_stalled_network_mount(tmp_path: Path) -> None:
    ok = json.dumps({"frsize": 4096, "blocks": 100, "bfree": 1, "bavail": 1, "files": 10, "ffree": 5})

    def measure(path: str) -> CommandResult:
        return CommandResult("timeout") if path.startswith("/scratch") else CommandResult("ok", ok)

    ctx = _ctx(tmp_path, mounts=(DATA / "proc-mounts.txt").read_text(), statvfs=measure)
    ctx.run_dirs = [Path("/scratch/u/run7")]
    ctx.seed_run_files({"/scratch/u/run7": _empty_runfiles(Path("/scratch/u/run7"))})
    out = disks.probe_disks(ctx)
    assert out.status == "timeout" and "/scratch/u/run7 (nfs4)" in out.detail
    run = next(f for f in out.facts if f.attrs["role"] == "run_dir")
    assert run.attrs["stalled"] and run.attrs["network"] and run.attrs["used_pct"] == -1.0
    shm = next(f for f in out.facts if f.attrs["role"] == "shm")
    assert shm.attrs["used_pct"] == 99.0 and shm.attrs["inodes_used_pct"] == 50.0


def _empty_runfiles(root: Path):  # type: ignore[no-untyped-def]
    from mldebug_rules.collectors.rundir import RunFiles

    return RunFiles(root=root)


def test_psutil_snapshot_duplicates_workers_and_writers() -> None:
    snap = json.loads((DATA / "ps-torchrun-duplicate.json").read_text())
    found = processes.analyse(snap, ["/runs/r7"], ["/runs/r7/train.log"], now=1709640000.0)
    by_pid = {f.attrs["pid"]: f.attrs for f in found.processes}
    assert sorted(by_pid) == [200, 201, 202, 203, 204, 300, 301, 302]  # jupyter (elsewhere) and tail are out
    assert {a["instances"] for a in by_pid.values()} == {2}  # two torchrun launches from one shell
    assert by_pid[201]["children"] == 2 and by_pid[201]["writes_log"]
    assert by_pid[201]["fd_used_pct"] == 95.7
    assert by_pid[202]["state"] == "disk-sleep"
    writers = [e["pid"] for e in found.writers["/runs/r7/train.log"]]
    assert writers == [201, 203]  # tail reads, it does not write
    assert all("SECRET" not in f.text for f in found.processes)


def test_psutil_snapshot_single_launch_is_one_instance() -> None:
    snap = [e for e in json.loads((DATA / "ps-torchrun-duplicate.json").read_text()) if e["pid"] < 300]
    found = processes.analyse(snap, ["/runs/r7"], [], now=1709640000.0)
    assert {f.attrs["instances"] for f in found.processes} == {1}  # ranks and workers are not duplicates


def test_environment_filters_and_redacts() -> None:
    env = {
        "NCCL_SOCKET_IFNAME": "ib0",
        "HF_TOKEN": "hf_abcdefghijklmnopqrstuvwx",
        "MASTER_ADDR": "https://alice:pw123@host",
        "SLURM_JOB_ID": "77",
        "SLURM_CPUS_ON_NODE": "64",
        "AWS_SECRET_ACCESS_KEY": "zzz",
    }
    got = environment.interesting_env(env)
    assert got == {
        "NCCL_SOCKET_IFNAME": "ib0",
        "MASTER_ADDR": "https://alice:[REDACTED]@host",
        "SLURM_JOB_ID": "77",
    }
    assert environment.scheduler_of(env, False) == "slurm"
    assert environment.scheduler_of({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, False) == "kubernetes"
