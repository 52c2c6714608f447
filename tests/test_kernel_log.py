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
