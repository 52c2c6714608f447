"""Kernel log lines (dmesg, dmesg -T, journalctl short-iso) into facts: the cases the live probe relies on."""

from __future__ import annotations

import pytest
from mldebug_rules.collectors import kernel_log


def kinds(line: str) -> list[tuple[str, dict]]:
    return [(k, a) for k, a, _ in kernel_log.parse_line(line)]


def test_oom_summary_keeps_the_memcg() -> None:
    line = (
        "[ 91.2] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,"
        "oom_memcg=/kubepods/burstable/pod1,task_memcg=/kubepods/burstable/pod1/c1,task=python,pid=17224,uid=0"
    )
    ((kind, a),) = kinds(line)
    assert kind == "kernel.oom_kill"
    assert (a["pid"], a["process"], a["constraint"], a["cgroup"]) == (
        17224,
        "python",
        "CONSTRAINT_MEMCG",
        "/kubepods/burstable/pod1",
    )


def test_oom_summary_without_memcg() -> None:
    ((_, a),) = kinds(
        "[ 9.1] oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,task=python3,pid=42,uid=0"
    )
    assert (a["pid"], a["cgroup"], a["constraint"]) == (42, "", "CONSTRAINT_NONE")


@pytest.mark.parametrize(
    ("line", "event", "fatal"),
    [
        ("[ 5.0] NVRM: GPU 0000:3b:00.0: RmInitAdapter failed! (0x26:0x56:1463)", "init_failed", True),
        (
            "[ 5.0] NVRM: The NVIDIA GPU 0000:3b:00.0 (PCI ID: 10de:20b0) has fallen off the bus.",
            "fallen_off_bus",
            True,
        ),
        ("[ 5.0] NVRM: rpcRecvPoll: GSP RM heartbeat timed out", "gsp_timeout", True),
        ("[ 5.0] NVRM: A GPU crash dump has been created. If possible, please run", "crash_dump", False),
    ],
)
def test_nvrm_events(line: str, event: str, fatal: bool) -> None:
    ((kind, a),) = kinds(line)
    assert (kind, a["event"], a["fatal"]) == ("kernel.nvrm", event, fatal)


def test_nvrm_chatter_is_not_a_fact() -> None:
    assert kinds("[ 3.1] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.104.05") == []


def test_xid_line_is_an_xid_not_an_nvrm_event() -> None:
    line = "[ 8.8] NVRM: Xid (PCI:0000:0f:00): 79, pid=48214, name=python, GPU has fallen off the bus."
    assert [k for k, _ in kinds(line)] == ["kernel.xid"]


def test_sympathetic_xid_is_classified() -> None:
    ((_, a),) = kinds(
        "[ 9.9] NVRM: Xid (PCI:0000:3b:00): 13, pid='<unknown>', name=<unknown>, Graphics Exception"
    )
    assert (a["code"], a["pid"], a["hardware"], a["sympathetic"]) == (13, -1, False, True)


# --- Xid lines as drivers print them, and the catalogue behind them ------------------------------------------
@pytest.mark.parametrize(
    ("line", "code", "pci", "pid", "hardware", "sympathetic"),
    [
        (  # an R470-era line: no "PCI:" prefix and no pid
            "[  966.503025] NVRM: Xid (0000:01:00): 31, Ch 0000000b, engmask 00000120, intr 10000000",
            31,
            "0000:01:00",
            -1,
            False,
            True,
        ),
        (
            "[ 4121.9] NVRM: Xid (PCI:0000:b8:00): 94, pid=2161497, name=python, Contained: CE User Channel "
            "(0x9). RST: No, D-RST: No",
            94,
            "0000:b8:00",
            2161497,
            True,
            False,
        ),
        (
            "[ 77.1] NVRM: Xid (PCI:0000:3b:00): 119, pid=1582, name=python, Timeout after 6s of waiting for "
            "RPC response from GPU0 GSP! Expected function 76 (GSP_RM_CONTROL) (0x20802a02 0x8).",
            119,
            "0000:3b:00",
            1582,
            True,
            False,
        ),
        (
            "[ 3.2] NVRM: Xid (PCI:0000:18:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 "
            "(GPU Reset Required)",
            154,
            "0000:18:00",
            -1,
            False,
            True,
        ),
        (
            "[ 9.0] NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, "
            "reset gpu to activate.",
            63,
            "0000:10:1c",
            1896,
            False,  # a remap that worked is a repair, not a fault
            False,
        ),
    ],
)
def test_xid_lines(line: str, code: int, pci: str, pid: int, hardware: bool, sympathetic: bool) -> None:
    ((kind, a),) = kinds(line)
    assert kind == "kernel.xid"
    assert (a["code"], a["pci"], a["pid"], a["hardware"], a["sympathetic"]) == (
        code,
        pci,
        pid,
        hardware,
        sympathetic,
    )


# The Xids NVIDIA documents as the common ones on data-centre GPUs: each must be in the catalogue.
COMMON_XIDS = {8, 13, 31, 32, 43, 45, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 109, 119, 120, 121, 140}
FIELDS = ("mnemonic", "class", "meaning", "immediate_action", "investigatory_action")
CLASSES = {"hardware", "memory", "nvlink", "driver", "application", "engine", "power", "informational"}


def test_xid_catalogue_covers_the_common_codes() -> None:
    catalog = kernel_log.xid_catalog()
    assert set(catalog) >= COMMON_XIDS, sorted(COMMON_XIDS - set(catalog))
    for code, entry in catalog.items():
        assert all(isinstance(entry.get(f), str) and entry[f].strip() for f in FIELDS), code
        assert entry["class"] in CLASSES, code
        assert isinstance(entry["hardware"], bool) and isinstance(entry["sympathetic"], bool), code
    # The board, its memory or its links: these send the diagnosis to gpu_hardware_fault.
    assert {c for c in (48, 64, 74, 79, 95, 140) if catalog[c]["hardware"]} == {48, 64, 74, 79, 95, 140}
    # Application faults and follow-ups are sympathetic, never hardware on their own.
    for c in (13, 31, 43, 45, 154):
        assert catalog[c]["sympathetic"] and not catalog[c]["hardware"], c


def test_xid_catalogue_lists_each_code_once() -> None:
    from importlib import resources

    import yaml

    text = resources.files("mldebug_rules.collectors").joinpath("xid_catalog.yaml").read_text("utf-8")
    codes = [e["code"] for e in yaml.safe_load(text)["xids"]]
    assert len(codes) == len(set(codes))


# --- the rest of the kernel log ------------------------------------------------------------------------------
def test_old_style_oom_kill_pair_is_one_kill() -> None:
    lines = [
        (1, "[ 611.1] Out of memory: Kill process 9120 (python) score 912 or sacrifice child"),
        (2, "[ 611.1] Killed process 9120 (python) total-vm:73543216kB, anon-rss:61203428kB, file-rss:0kB"),
        (3, "[ 700.0] Out of memory: Killed process 9200 (pt_data_worker) total-vm:1kB, anon-rss:2048kB"),
    ]
    got = [(no, a["pid"], a["anon_rss_kb"]) for no, _, a, _, _ in kernel_log.parse_lines(lines)]
    assert got == [(2, 9120, 61203428), (3, 9200, 2048)]


def test_oom_summary_far_from_its_kill_line_stays_separate() -> None:
    lines = [
        (10, "[ 1.0] oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,task=python,pid=42,uid=0"),
        (90, "[ 9.0] Out of memory: Killed process 43 (python) total-vm:1kB, anon-rss:2kB"),
    ]
    assert [a["pid"] for _, _, a, _, _ in kernel_log.parse_lines(lines)] == [42, 43]


@pytest.mark.parametrize(
    ("line", "corrected"),
    [
        (
            "[81234.5] EDAC MC0: 1 CE memory read error on CPU_SrcID#0_MC#0_Chan#1_DIMM#0 (channel:1 slot:0 "
            "page:0x1b2d3e offset:0x0 grain:32 syndrome:0x0 - err_code:0x0101:0x0091 SystemAddress:0x1b2d3e000)",
            True,
        ),
        (
            "[81234.6] EDAC MC1: 1 UE memory read error on CPU_SrcID#1_MC#0_Chan#0_DIMM#0 (channel:0 slot:0 "
            "page:0x2a0f1 offset:0x400 grain:32 - err_code:0x0101:0x0090)",
            False,
        ),
        ("[ 5120.0] mce: [Hardware Error]: Machine check events logged", True),
        (
            "[ 5120.1] mce: [Hardware Error]: CPU 3: Machine Check Exception: 5 Bank 17: bea0000000000108",
            False,
        ),
        ("[ 5121.0] mce: Uncorrected hardware memory error in user-access at 2d5c8f000", False),
        ("[ 6001.2] {1}[Hardware Error]: event severity: corrected", True),
        ("[ 6001.3] {2}[Hardware Error]: event severity: fatal", False),
    ],
)
def test_machine_checks_and_edac(line: str, corrected: bool) -> None:
    ((kind, a),) = kinds(line)
    assert kind == "kernel.mce" and a["corrected"] is corrected


def test_edac_chatter_is_not_a_fact() -> None:
    assert kinds("[ 2.0] EDAC MC: Ver: 3.0.0") == []
    assert kinds("[ 2.1] EDAC skx: ECC is disabled on imc 0") == []


@pytest.mark.parametrize(
    ("line", "kind", "expect"),
    [
        (
            "2024-05-01T03:12:44+0000 gpu07 kernel: INFO: task pt_data_worker:88123 blocked for more than "
            "122 seconds.",
            "kernel.hung_task",
            {"process": "pt_data_worker", "pid": 88123, "seconds": 122},
        ),
        (
            "[ 812.5] python[48400]: segfault at 0 ip 00007f1c2a3b4c5d sp 00007ffd1e2f3a40 error 4 in "
            "libnccl.so.2[7f1c2a300000+1950000] likely on CPU 3 (core 3, socket 0)",
            "kernel.segfault",
            {"process": "python", "pid": 48400, "library": "libnccl.so.2"},
        ),
        (
            "[ 90.0] nfs: server fs01.example.org not responding, timed out",
            "kernel.nfs",
            {"server": "fs01.example.org", "state": "not_responding"},
        ),
        (
            "[ 95.0] nfs: server fs01.example.org OK",
            "kernel.nfs",
            {"server": "fs01.example.org", "state": "ok"},
        ),
    ],
)
def test_other_kernel_events(line: str, kind: str, expect: dict) -> None:
    ((got_kind, a),) = kinds(line)
    assert got_kind == kind
    assert {k: a[k] for k in expect} == expect
