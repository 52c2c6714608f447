"""The live probes on this machine: the shape of what they report, and that commands which hang forever
(fake ``nvidia-smi``, ``dmesg``, ``journalctl`` first on PATH) are cut off and reported as ``timeout``."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest
from mldebug_rules.collectors.base import STATUSES, Context, ProbeOutput, ProbeSpec, run_probes
from mldebug_rules.collectors.live import live_probes
from mldebug_rules.collectors.registry import default_probes
from mldebug_rules.engine.facts import FactRegistry

HANGING = ("nvidia-smi", "dmesg", "journalctl")


def make_hanging_bin(where: Path, names: tuple[str, ...] = HANGING) -> Path:
    """Executables that never answer, as a wedged driver or a stuck kernel log reader would."""
    where.mkdir(parents=True, exist_ok=True)
    for name in names:
        p = where / name
        p.write_text("#!/bin/sh\nexec sleep 1000\n")
        p.chmod(p.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return where


def _ctx(run_dir: Path) -> Context:
    return Context(registry=FactRegistry.load(), run_dirs=[run_dir], offline=False)


def test_live_probes_are_live_only_and_registered() -> None:
    names = [p.name for p in default_probes()]
    for spec in live_probes():
        assert spec.live_only and spec.name in names
        assert spec.deadline_s <= 25.0
    assert {"gpu_files", "bundle"} <= set(names)


def test_real_probes_shape(tmp_path: Path) -> None:
    """Whatever this machine is (GPU or not, root or not), every probe answers in time with valid facts."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "train.log").write_text("2024-05-01 12:00:00 step 1 loss 2.0\n")
    t0 = time.monotonic()
    outputs = run_probes(_ctx(run), live_probes())
    assert time.monotonic() - t0 < 25
    by_name = {o.name: o for o in outputs}
    assert set(by_name) == {"processes", "kernel", "gpu", "disks", "environment", "stacks"}
    for out in outputs:
        assert out.status in STATUSES
        status = [f for f in out.facts if f.kind == "probe.status"]
        assert len(status) == 1 and status[0].attrs["status"] == out.status
    gpu_facts = [f for f in by_name["gpu"].facts if f.kind == "gpu.state"]
    if by_name["gpu"].status == "ok":
        assert gpu_facts  # either devices or one present=False fact: no GPU is a fact
    roles = {f.attrs["role"] for f in by_name["disks"].facts if f.kind == "disk.usage"}
    assert "run_dir" in roles
    env = {f.attrs["name"] for f in by_name["environment"].facts if f.kind == "env.setting"}
    assert {"python_version", "ulimit_nofile", "scheduler"} <= env
    writers = [f for f in by_name["processes"].facts if f.kind == "log.writer"]
    assert [(w.file, w.attrs["alive"]) for w in writers] == [("train.log", False)]
    assert not any(p.name.endswith(".mldebug") for p in run.iterdir())  # nothing written into the run dir
    assert sorted(p.name for p in run.iterdir()) == ["train.log"]


def test_hanging_commands_are_cut_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = make_hanging_bin(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("MLDEBUG_PROBE_TIMEOUT", "1")
    run = tmp_path / "run"
    run.mkdir()
    t0 = time.monotonic()
    outputs = {o.name: o for o in run_probes(_ctx(run), live_probes())}
    elapsed = time.monotonic() - t0
    assert elapsed < 10, elapsed
    assert outputs["gpu"].status == "timeout" and "nvidia-smi" in outputs["gpu"].detail
    assert outputs["kernel"].status == "timeout"
    assert (
        "dmesg: no answer" in outputs["kernel"].detail
        and "journalctl -k: no answer" in outputs["kernel"].detail
    )
    assert outputs["disks"].status == "ok"


def test_runner_abandons_a_probe_that_blocks_in_process(tmp_path: Path) -> None:
    """A probe that blocks without a subprocess (a bug) is still reported, as timeout, at its deadline."""

    def stuck(ctx: Context) -> ProbeOutput:
        time.sleep(30)
        return ProbeOutput("stuck")

    t0 = time.monotonic()
    (out,) = run_probes(_ctx(tmp_path), [ProbeSpec("stuck", stuck, deadline_s=0.5)])
    assert time.monotonic() - t0 < 3
    assert out.status == "timeout"
    assert out.facts[-1].attrs == {"probe": "stuck", "status": "timeout", "detail": "no answer within 0.5 s"}


def test_live_probes_skip_when_only_replaying_a_bundle(tmp_path: Path) -> None:
    bundle = tmp_path / "x.mldebug.json"
    bundle.write_text("{}")
    ctx = Context(registry=FactRegistry.load(), bundles=[bundle], offline=False)
    outputs = run_probes(ctx, live_probes())
    assert {o.status for o in outputs} == {"unavailable"}
