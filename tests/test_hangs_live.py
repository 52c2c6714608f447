"""Live hung processes, classified from their stacks by ``diagnose RUN_DIR`` (issue: hung runs).

Each test starts a real stuck process (tests/hang_scenarios.py) in its own process group, waits until it has
printed and gone silent, runs the CLI live on its run directory with a short silence threshold, and kills
the group afterwards whatever happened. Nothing here needs a GPU; the torch scenarios need torch.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest
from mldebug_rules.collectors.stacks import find_pyspy

HERE = Path(__file__).resolve().parent
SCENARIOS = HERE / "hang_scenarios.py"
SILENCE_S = 2.0

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or find_pyspy() is None, reason="needs Linux /proc and py-spy"
)


def _ptrace_ok() -> bool:
    pyspy = find_pyspy()
    if pyspy is None:
        return False
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        time.sleep(0.3)
        r = subprocess.run([pyspy, "dump", "--pid", str(p.pid)], capture_output=True, timeout=20)
        return r.returncode == 0
    finally:
        p.kill()
        p.wait()


@contextmanager
def scenario(name: str, run: Path, fifo: bool = False, ready_timeout: float = 120.0) -> Iterator[int]:
    write_end = None
    if fifo:
        os.mkfifo(run / "feed.fifo")
        # Opened read-write so that this open does not wait for a reader; the scenario's read then blocks.
        write_end = os.open(run / "feed.fifo", os.O_RDWR | os.O_NONBLOCK)
    proc = subprocess.Popen(
        [sys.executable, str(SCENARIOS), name, str(run)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=run,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + ready_timeout
        line = b""
        while b"ready" not in line and time.monotonic() < deadline:
            line = proc.stdout.readline() if proc.stdout else b""
            if not line and proc.poll() is not None:
                break
        assert b"ready" in line, f"scenario {name} did not start"
        time.sleep(SILENCE_S + 1.0)
        yield proc.pid
    finally:
        # torchrun's agent starts its workers in sessions of their own, so killing the scenario's process group
        # would leave them behind (a rank waiting forever in a collective): every descendant is listed before
        # anything is killed, while the tree still links them to the scenario.
        try:
            descendants = psutil.Process(proc.pid).children(recursive=True)
        except psutil.Error:
            descendants = []
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        for child in descendants:
            try:
                child.kill()
            except psutil.Error:
                pass
        proc.wait(timeout=30)
        psutil.wait_procs(descendants, timeout=30)
        if write_end is not None:
            os.close(write_end)


def diagnose_live(run: Path) -> dict:
    t0 = time.monotonic()
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "mldebug_rules",
            "diagnose",
            str(run),
            "--format",
            "json",
            "--param",
            f"hang_stack_silence_s={SILENCE_S}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    elapsed = time.monotonic() - t0
    assert out.returncode == 0, out.stderr
    rep = json.loads(out.stdout)
    rep["_elapsed"] = elapsed
    return rep


def _top(rep: dict) -> dict:
    assert rep["hypotheses"], rep["probes"]
    return rep["hypotheses"][0]


def _texts(h: dict) -> str:
    return "\n".join(e.get("text", "") for e in h["evidence"])


needs_ptrace = pytest.mark.skipif(not _ptrace_ok(), reason="py-spy cannot attach here (ptrace)")


@needs_ptrace
def test_busy_loop_names_hot_frame(tmp_path: Path) -> None:
    with scenario("busy", tmp_path):
        rep = diagnose_live(tmp_path)
    top = _top(rep)
    assert top["id"] == "process_hang"
    assert "wait_for_flag (hang_scenarios.py:" in _texts(top)
    assert rep["_elapsed"] < 30


@needs_ptrace
def test_deadlock_names_both_threads(tmp_path: Path) -> None:
    with scenario("deadlock", tmp_path):
        rep = diagnose_live(tmp_path)
    top = _top(rep)
    assert top["id"] == "process_hang"
    text = _texts(top)
    assert "save_checkpoint (hang_scenarios.py:" in text and "log_metrics (hang_scenarios.py:" in text
    assert rep["_elapsed"] < 30


@needs_ptrace
def test_fifo_read_names_the_path(tmp_path: Path) -> None:
    with scenario("fifo", tmp_path, fifo=True):
        rep = diagnose_live(tmp_path)
    top = _top(rep)
    assert top["id"] == "process_hang"
    assert "feed.fifo (fifo)" in _texts(top)
    assert "syscall read" in _texts(top)
    assert rep["_elapsed"] < 30


@needs_ptrace
def test_slow_healthy_trainer_is_not_hung(tmp_path: Path) -> None:
    with scenario("healthy", tmp_path):
        rep = diagnose_live(tmp_path)
    assert "process_hang" not in [h["id"] for h in rep["hypotheses"]]
    stacks = next(p for p in rep["probes"] if p["name"] == "stacks")
    assert stacks["status"] == "ok" and stacks["facts"] >= 1


@needs_ptrace
def test_data_stall_names_the_worker_and_its_wait(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    with scenario("data_stall", tmp_path, fifo=True):
        rep = diagnose_live(tmp_path)
    top = _top(rep)
    assert top["id"] == "process_hang"
    text = _texts(top)
    assert "[dataloader_queue]" in text and "torch/utils/data/dataloader.py:" in text
    assert "DataLoader worker 0 of pid" in text and "feed.fifo (fifo)" in text
    assert rep["_elapsed"] < 30


@needs_ptrace
def test_gloo_names_the_rank_not_in_the_collective(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    with scenario("gloo", tmp_path):
        rep = diagnose_live(tmp_path)
    top = _top(rep)
    assert top["id"] == "distributed_desync"
    text = _texts(top)
    assert "rank 1 trainer" in text and "evaluate (hang_scenarios.py:" in text
    assert "rank 0 trainer" in text and "[collective] in all_reduce (torch/distributed/" in text
    assert rep["_elapsed"] < 30
