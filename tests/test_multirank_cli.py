"""Issue 9 end to end: per-rank logs and per-node directories in a temp dir, through the real CLI
(``python -m mldebug_rules diagnose``), in the formats PyTorch, NCCL and the kernel print them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

# PyTorch >= 2.4 c10 logging: "[E1201 10:10:01.123456789 ProcessGroupNCCL.cpp:616]": no year, no thread id.
WATCHDOG = (
    "[rank{r}]:[E{md} {hms}.417282711 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=8812, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600049 "
    "milliseconds before timing out."
)
OOM = (
    "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total "
    "capacity of 79.10 GiB of which 1.20 GiB is free. Including non-PyTorch memory, this process has 77.89 GiB "
    "memory in use."
)


def _utc(s: str) -> float:
    return datetime.fromisoformat(s).replace(tzinfo=timezone.utc).timestamp()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(
        [sys.executable, "-m", "mldebug_rules", *args], capture_output=True, text=True, timeout=300
    )
    assert r.returncode in (0, 1), r.stderr[-2000:]
    return r


def _json(*args: str) -> dict:
    return json.loads(_cli(*args, "--offline", "--format", "json").stdout)


def _eight_rank_job(root: Path, oom_logged: bool) -> Path:
    """Rank 3 runs out of memory at 10:00:00; the other seven ranks' watchdogs fire ten minutes later."""
    run = root / "job"
    run.mkdir()
    for r in range(8):
        lines = [
            f"2024-12-01 09:59:30,000 - INFO - [rank{r}]: iteration 1200/50000 | "
            "elapsed time per iteration (ms): 1012.4 | lm loss: 2.301E+00",
        ]
        if r == 3:
            lines += [
                "[rank3]: Traceback (most recent call last):",
                '[rank3]:   File "/workspace/train.py", line 212, in <module>',
                # some trainers log the exception through logging (timestamped), most let it print bare
                ("2024-12-01 10:00:00,000 - ERROR - " if oom_logged else "") + OOM,
            ]
        else:
            lines.append(WATCHDOG.format(r=r, md="1201", hms="10:10:01"))
        (run / f"rank{r}.log").write_text("\n".join(lines) + "\n")
    return run


@pytest.mark.parametrize("oom_logged", [True, False])
def test_done_when_oom_on_rank3_with_seven_watchdog_cascades(tmp_path: Path, oom_logged: bool) -> None:
    run = _eight_rank_job(tmp_path, oom_logged)
    rep = _json("diagnose", str(run))
    top = rep["hypotheses"][0]
    assert top["id"] == "gpu_oom"
    assert [e["source"] for e in top["evidence"] if e.get("signature") == "cuda_oom"] == [
        "rank3.log:4"
    ] and all(e.get("rank") == 3 for e in top["evidence"])
    ranks = rep["ranks"]
    first = ranks["first_failure"]
    assert (first["rank"], first["signature"], first["role"]) == (3, "cuda_oom", "root")
    cascades = ranks["cascades"]
    assert sorted(c["rank"] for c in cascades) == [0, 1, 2, 4, 5, 6, 7]
    assert {c["signature"] for c in cascades} == {"nccl_watchdog_timeout"}
    # the year-less c10 stamps got 2024 from the files' own dated lines
    assert {c["ts"] for c in cascades} == {_utc("2024-12-01T10:10:01.417282")}
    if oom_logged:
        assert first["ts"] == _utc("2024-12-01T10:00:00")
        assert {c["after_first_s"] for c in cascades} == {601.417}
    else:
        assert first["ts"] is None and all("after_first_s" not in c for c in cascades)
    peer = next(h for h in rep["hypotheses"] if h["id"] == "distributed_peer_failure")
    timeouts = [e for e in peer["evidence"] if e.get("signature") == "nccl_watchdog_timeout"]
    assert len(timeouts) == 7 and all(e["cascade_of_rank"] == 3 for e in timeouts)
    assert peer["explained_by"] == ["gpu_oom"]

    text = _cli("diagnose", str(run), "--offline").stdout
    assert "first failure: rank 3 (root): rank3.log:4:" in text
    lag = " (+601s)" if oom_logged else ""
    shown = ", ".join(f"{r}{lag}" for r in (0, 1, 2, 4, 5, 6, 7))
    assert f"cascades (consequences, not causes) on rank(s): {shown}\n" in text
    assert text.index("1. [hypothesis] gpu_oom") < text.index("distributed_peer_failure")


def _xid_node(root: Path, trainer_error: list[str]) -> Path:
    job = root / "job"
    for node in ("node-017", "node-018"):
        (job / node).mkdir(parents=True)
    (job / "node-017" / "kern.log").write_text(
        "Dec  1 10:00:01 node-017 kernel: [812345.123456] NVRM: GPU at PCI:0000:3b:00: "
        "GPU-7d2a1c54-9e0b-4b1f-8c53-2f6d9a0e1b77\n"
        "Dec  1 10:00:01 node-017 kernel: [812345.123470] NVRM: Xid (PCI:0000:3b:00): 79, pid=51212, "
        "name=python, GPU has fallen off the bus.\n"
    )
    for r in range(4):
        node = "node-017" if r < 2 else "node-018"
        lines = [f"2024-12-01 09:59:30,000 - INFO - [rank{r}]: iteration 1200/50000 | lm loss: 2.301E+00"]
        lines += (
            [t.format(r=r) for t in trainer_error]
            if r == 1
            else [WATCHDOG.format(r=r, md="1201", hms="10:10:02")]
        )
        (job / node / f"rank{r}.log").write_text("\n".join(lines) + "\n")
    return job


@pytest.mark.parametrize(
    "trainer_error",
    [
        [  # the CUDA error surfaces in the trainer
            "[rank{r}]: RuntimeError: CUDA error: unspecified launch failure",
            "[rank{r}]: CUDA kernel errors might be asynchronously reported at some other API call, so the "
            "stacktrace below might be incorrect.",
        ],
        [  # NCCL meets it first and wraps it
            "[2024-12-01 10:00:02] node-017:51212:51544 [1] misc/strongstream.cc:395 NCCL WARN Cuda failure "
            "'unspecified launch failure'",
            "[rank{r}]: torch.distributed.DistBackendError: NCCL error in: "
            "../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, unhandled cuda error (run with NCCL_DEBUG=INFO for "
            "details), NCCL version 2.20.5",
        ],
    ],
    ids=["cuda", "nccl"],
)
def test_done_when_xid79_node_with_launch_failure_is_hardware(
    tmp_path: Path, trainer_error: list[str]
) -> None:
    rep = _json("diagnose", str(_xid_node(tmp_path, trainer_error)))
    top = rep["hypotheses"][0]
    assert top["id"] == "gpu_hardware_fault"
    facts = {e["fact"] for e in top["evidence"]}
    assert "kernel.xid" in facts and "log.signature" in facts
    first = rep["ranks"]["first_failure"]
    assert (first["rank"], first["host"]) == (1, "node-017")
    assert sorted(c["rank"] for c in rep["ranks"]["cascades"]) == [0, 2, 3]


def test_glog_year_rolls_over_from_december_into_january(tmp_path: Path) -> None:
    """A job that dies just after midnight on New Year: the dated lines are 2024-12-31, the c10 stamps
    E101 are 2025-01-01; a file with no dated line takes its year from its mtime (2025-01-02)."""
    run = tmp_path / "job"
    run.mkdir()
    (run / "rank0.log").write_text(
        "2024-12-31 23:59:50,000 - INFO - [rank0]: iteration 10/100\n"
        + WATCHDOG.format(r=0, md="101", hms="00:10:01")
        + "\n"
    )
    (run / "rank1.log").write_text(
        "2024-12-31 23:59:50,000 - INFO - [rank1]: iteration 10/100\n"
        "[rank1]:[E1231 23:59:59.000000000 CUDACachingAllocator.cpp:1000] CUDA out of memory\n"
        + OOM.replace("rank3", "rank1")
        + "\n"
    )
    undated = run / "rank2.log"
    undated.write_text(WATCHDOG.format(r=2, md="1231", hms="23:59:58") + "\n")
    mtime = _utc("2025-01-02T08:00:00")
    os.utime(undated, (mtime, mtime))
    rep = _json("diagnose", str(run))
    ts = {c["rank"]: c["ts"] for c in rep["ranks"]["cascades"]}
    assert ts[0] == _utc("2025-01-01T00:10:01.417282")
    assert ts[2] == _utc("2024-12-31T23:59:58.417282")
    assert rep["ranks"]["first_failure"]["rank"] == 1


def _steps(rank: int, seconds: list[float]) -> str:
    return "".join(
        f" [2024-12-01 09:{i // 60:02d}:{i % 60:02d}] iteration {100 + i:8d}/   50000 | consumed samples: {i} | "
        f"elapsed time per iteration (ms): {s * 1000:.1f} | lm loss: 2.301E+00 | [Rank {rank}]\n"
        for i, s in enumerate(seconds)
    )


def test_stragglers_come_from_each_ranks_recent_steps(tmp_path: Path) -> None:
    """Rank 5 is 1.6x slower on every step: a straggler. Rank 2's final step alone is 5x slower: not one."""
    run = tmp_path / "job"
    run.mkdir()
    for r in range(8):
        s = [1.0 + 0.01 * ((r + i) % 3) for i in range(30)]
        if r == 5:
            s = [1.6 + 0.01 * (i % 3) for i in range(30)]
        if r == 2:
            s[-1] = 5.0
        (run / f"rank{r}.log").write_text(_steps(r, s))
    rep = _json("diagnose", str(run))
    strag = rep["ranks"]["stragglers"]
    assert [s["rank"] for s in strag] == [5]
    assert strag[0]["points"] == 20 and strag[0]["window_lines"] == [11, 30]
    assert 1.55 < strag[0]["ratio"] < 1.65
    throttle = next(h for h in rep["hypotheses"] if h["id"] == "gpu_throttling")
    ev = [e for e in throttle["evidence"] if e["fact"] == "rank.straggler"]
    assert [e["rank"] for e in ev] == [5] and "over its last 20 steps (lines 11-30)" in ev[0]["text"]


def test_srun_merged_log_has_a_series_per_rank(tmp_path: Path) -> None:
    """One srun --label log for 4 tasks: each task's step times form its own series."""
    run = tmp_path / "job"
    run.mkdir()
    lines = []
    for i in range(10):
        for r in range(4):
            ms = 2500.0 if r == 1 else 1000.0 + r
            lines.append(f"{r}: step {i} step_time={ms / 1000:.3f}s loss=2.0")
    (run / "slurm-4242.out").write_text("\n".join(lines) + "\n")
    rep = _json("diagnose", str(run))
    assert [s["rank"] for s in rep["ranks"]["stragglers"]] == [1]
    assert rep["ranks"]["stragglers"][0]["points"] == 10


def test_root_without_a_timestamp_and_skewed_clocks(tmp_path: Path) -> None:
    """Rank 2's node clock runs 2 minutes fast: its OOM reads later than the timeouts. A root still wins over
    cascades, and the report says the clocks disagree instead of reordering cause and effect."""
    run = tmp_path / "job"
    run.mkdir()
    for r in range(4):
        if r == 2:
            body = "2024-12-01 10:12:00,000 - ERROR - " + OOM.replace("rank3", "rank2")
        else:
            body = WATCHDOG.format(r=r, md="1201", hms="10:10:01")
        (run / f"rank{r}.log").write_text("2024-12-01 09:59:00,000 - INFO - step 1\n" + body + "\n")
    (run / "rank4.log").write_text(
        "[rank4]: step 1\n" + WATCHDOG.format(r=4, md="1201", hms="10:10:01") + "\n"
    )
    rep = _json("diagnose", str(run))
    ranks = rep["ranks"]
    assert ranks["first_failure"]["rank"] == 2
    assert sorted(c["rank"] for c in ranks["cascades"]) == [0, 1, 3, 4]
    assert any("clock skew" in n for n in ranks["notes"])
    # rank 4's file has no dated line: its year comes from the file's mtime, so it has a timestamp too
    assert next(c for c in ranks["cascades"] if c["rank"] == 4)["ts"] is not None


def test_bundles_collected_per_node_then_merged(tmp_path: Path) -> None:
    """`collect` on each node directory (what srun --ntasks-per-node=1 runs), one central `diagnose --bundle`."""
    job = _eight_rank_job(tmp_path, oom_logged=True)
    bundles = []
    for n in range(2):
        node = tmp_path / f"node-{n:03d}"
        node.mkdir()
        for r in range(4 * n, 4 * n + 4):
            (job / f"rank{r}.log").rename(node / f"rank{r}.log")
        b = tmp_path / f"node-{n:03d}.mldebug.json"
        _cli("collect", str(node), "--out", str(b), "--offline")
        bundles.append(b)
    args = [a for b in bundles for a in ("--bundle", str(b))]
    rep = _json("diagnose", *args)
    assert rep["hypotheses"][0]["id"] == "gpu_oom"
    assert rep["ranks"]["first_failure"]["rank"] == 3
    assert sorted(c["rank"] for c in rep["ranks"]["cascades"]) == [0, 1, 2, 4, 5, 6, 7]
