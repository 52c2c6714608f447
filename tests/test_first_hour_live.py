"""Issue 24, live mode, from the user's command down: a machine with no NVML and no nvidia-smi says so plainly
and that is evidence of nothing; processes belong to a run by their command line and open files, not by
their working directory alone; `--engine durable` where durable-rules cannot load is bad usage (exit 2)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from mldebug_rules.collectors.processes import analyse

from mldebug_rules.cli import main

CLI = [sys.executable, "-m", "mldebug_rules"]
_HOLDER = (
    "import sys, time\n"
    "log = open(sys.argv[1], 'a')  # held open for writing, like a logger's file handler\n"
    "print('ready', flush=True)\n"
    "time.sleep(600)\n"
)
_BYSTANDER = "import time; print('ready', flush=True); time.sleep(600)\n"


def _start(argv: list[str], cwd: Path) -> subprocess.Popen[str]:
    p = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    return p


@pytest.fixture
def silent_run(tmp_path: Path) -> Iterator[tuple[Path, dict[str, str]]]:
    """A trainer that holds its log open (silent for 30 minutes), a python bystander whose working directory
    is the run directory, and a PATH with no nvidia-smi."""
    run = tmp_path / "run"
    run.mkdir()
    log = run / "train.log"
    log.write_text(
        "".join(f"2024-05-01 12:{m:02d}:00 step {m * 10} loss {2.0 - m / 100:.2f}\n" for m in range(20))
    )
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    path = os.pathsep.join([str(bin_dir), "/usr/bin", "/bin"])
    if shutil.which("nvidia-smi", path=path) or importlib.util.find_spec("pynvml") is not None:
        pytest.skip("this machine has nvidia-smi or pynvml")
    env = dict(os.environ, PATH=path, MLDEBUG_PROBE_TIMEOUT="2")
    procs = [
        _start([sys.executable, "-c", _HOLDER, str(log)], tmp_path),
        _start([sys.executable, "-c", _BYSTANDER], run),
    ]
    try:
        old = time.time() - 1800
        os.utime(log, (old, old))
        yield run, env
    finally:
        for p in procs:
            p.kill()  # our own children
            p.wait(timeout=10)


def test_no_gpu_is_said_plainly_and_is_no_evidence(silent_run: tuple[Path, dict[str, str]]) -> None:
    run, env = silent_run
    res = subprocess.run(
        [*CLI, "diagnose", str(run), "--format", "json"], env=env, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    rep = json.loads(res.stdout)
    gpu = next(p for p in rep["probes"] if p["name"] == "gpu")
    assert gpu["status"] == "unavailable" and gpu["detail"].startswith(
        "no GPU found (no NVML, no nvidia-smi)"
    )
    assert rep["hypotheses"][0]["id"] == "process_hang"  # the silent live writer still says so
    for h in rep["hypotheses"]:
        for e in h["evidence"]:
            assert "nvidia-smi" not in e["text"] and "not found" not in e["text"], e
            assert e["fact"] != "gpu.state", e
    # The holder writes the log (it is the run's); the bystander only sits in the directory.
    procs = next(p for p in rep["probes"] if p["name"] == "processes")
    assert procs["detail"].startswith("1 training process(es), 1 in the run directory"), procs["detail"]

    text = subprocess.run(
        [*CLI, "diagnose", str(run)], env=env, capture_output=True, text=True, timeout=120
    ).stdout
    assert "gpu: unavailable" in text and "no GPU found (no NVML, no nvidia-smi)" in text


def test_attribution_by_command_line_and_open_files_not_cwd() -> None:
    snap = [
        {"pid": 20, "ppid": 1, "name": "python3", "cmdline": ["python3"], "cwd": "/runs/r7"},
        {"pid": 21, "ppid": 1, "name": "python3", "cmdline": ["python3", "-m", "http.server"], "cwd": "/runs/r7"},
        {"pid": 22, "ppid": 1, "name": "python3", "cmdline": ["python3", "train.py", "--lr", "3e-4"], "cwd": "/runs/r7"},
        {"pid": 23, "ppid": 1, "name": "python3", "cmdline": ["python3", "/runs/r7/train.py"], "cwd": "/home/u"},
        {"pid": 24, "ppid": 1, "name": "python3", "cmdline": ["python3", "x.py", "--out=/runs/r7/ckpt"], "cwd": "/"},
        {"pid": 25, "ppid": 1, "name": "python3", "cmdline": ["python3", "serve.py"], "cwd": "/srv",
         "open_files": [["/runs/r7/train.log", "a"]]},
        {"pid": 26, "ppid": 1, "name": "python3", "cmdline": ["python3", "other.py", "0.001"], "cwd": "/runs/r7/sub"},
    ]  # fmt: skip
    found = analyse(snap, ["/runs/r7"], ["/runs/r7/train.log"], now=60.0)
    assert sorted(p.attrs["pid"] for p in found.processes) == [22, 23, 24, 25, 26]


def test_engine_durable_that_cannot_load_is_bad_usage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """What Python 3.13 does (durable-rules has no build there), simulated on any version."""
    from mldebug_rules.engine import backend_durable

    monkeypatch.setattr(backend_durable, "available", lambda: (False, "OSError: undefined symbol: _PyX"))
    run = tmp_path / "run"
    run.mkdir()
    (run / "train.log").write_text("step 1 loss 2.0\n")
    rc = main(["diagnose", str(run), "--offline", "--engine", "durable"])
    err = capsys.readouterr().err
    assert rc == 2 and "internal error" not in err and "Traceback" not in err
    assert err.startswith("mldebug-rules: error: --engine durable: durable-rules cannot be used"), err
    assert len(err.strip().splitlines()) == 1
    assert main(["diagnose", str(run), "--offline", "--engine", "python", "--format", "json"]) == 0


def test_no_rule_rests_on_a_probe_that_could_not_run() -> None:
    """A probe's unavailability (or its own error) is evidence of nothing: no built-in rule may match a
    `probe.status` other than `timeout` (a hung GPU query is the machine's state, documented in probes.md)."""
    from mldebug_rules.engine.packs import load_packs

    kb = load_packs(entry_points=False)
    for rule in kb.rules:
        for cond in (rule.spec.get("when") or {}).values():
            if not isinstance(cond, dict) or cond.get("kind") != "probe.status":
                continue
            status = (cond.get("match") or {}).get("status")
            allowed = status == "timeout" or (
                isinstance(status, dict) and set(status.get("in", [])) <= {"timeout"}
            )
            assert allowed and status, f"{rule.where}: rests on probe.status {status!r}"


def test_a_probe_child_started_after_the_family_was_read_is_still_ours(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Probes run side by side; the disk worker (a python whose argument is the run directory) may start
    after the process probe read this tool's family. Its parent makes it ours, never a trainer of the run."""
    pytest.importorskip("psutil")
    from mldebug_rules.collectors import processes

    monkeypatch.setattr(processes, "_own_family", lambda: {os.getpid()})  # read before the child existed
    child = _start([sys.executable, "-c", _BYSTANDER, str(tmp_path)], tmp_path)
    try:
        pids = {e["pid"] for e in processes.live_snapshot()}
    finally:
        child.kill()
        child.wait(timeout=10)
    assert child.pid not in pids
    assert os.getppid() in pids or os.getppid() <= 1  # an ancestor's other children are not dropped with it
