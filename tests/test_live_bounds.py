"""Bounded time, proven on real hanging subprocesses through the probes' injectable command runner: a command
that never answers is killed (with its children) at its deadline and reported as ``timeout``; probes run side
by side; the live probes' total is capped whatever hangs. No GPU and no root needed."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import psutil
import pytest
from mldebug_rules.collectors import gpu, kernel_live
from mldebug_rules.collectors.base import (
    CommandResult,
    Context,
    ProbeOutput,
    ProbeSpec,
    ProbeUnavailable,
    run_command,
    run_probes,
)
from mldebug_rules.collectors.live import live_probes
from mldebug_rules.engine.facts import FactRegistry

DATA = Path(__file__).parent / "data" / "recorded"
FOREVER = "987654"  # an argument unique to this test's sleeping commands, to find leftovers by


def _hangs(argv: Sequence[str], timeout_s: float) -> CommandResult:
    """A real command that never answers, run exactly as a probe's command would be."""
    return run_command(["sh", "-c", f"sleep {FOREVER} & exec sleep {FOREVER}"], timeout_s)


def _leftovers() -> list[int]:
    found = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        if FOREVER in " ".join(p.info.get("cmdline") or []):
            found.append(p.info["pid"])
    return found


def _ctx(tmp_path: Path, runner: object, **recorded: object) -> Context:
    options: dict[str, object] = {"runner": runner}
    if recorded:
        options["recorded"] = recorded
    return Context(registry=FactRegistry.load(), run_dirs=[tmp_path], offline=False, options=options)


def test_a_hung_command_is_killed_with_its_children() -> None:
    res = _hangs(["nvidia-smi"], 0.5)
    assert res.status == "timeout" and "no answer within 0.5 s" in res.stderr
    deadline = time.monotonic() + 5
    while _leftovers() and time.monotonic() < deadline:
        time.sleep(0.05)  # SIGKILL is delivered; reaping the grandchild is init's job
    assert _leftovers() == []


def test_hung_dmesg_is_a_timeout_and_journalctl_still_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLDEBUG_PROBE_TIMEOUT", "0.5")
    journal = (DATA / "journalctl-k.txt").read_text()
    calls: list[str] = []

    def runner(argv: Sequence[str], timeout_s: float) -> CommandResult:
        calls.append(argv[0])
        return _hangs(argv, timeout_s) if argv[0] == "dmesg" else CommandResult("ok", journal)

    spec = next(p for p in live_probes() if p.name == "kernel")
    (out,) = run_probes(_ctx(tmp_path, runner), [spec])
    assert calls == ["dmesg", "journalctl"]
    assert out.status == "timeout" and "dmesg: no answer within 0.5 s" in out.detail
    assert [f.kind for f in out.facts] == ["kernel.nfs", "kernel.xid", "kernel.segfault", "probe.status"]
    assert out.facts[-1].attrs["status"] == "timeout"


def test_hung_nvidia_smi_is_a_timeout_not_no_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLDEBUG_PROBE_TIMEOUT", "0.5")
    out = gpu.probe_gpu(_ctx(tmp_path, _hangs))
    assert out.status == "timeout" and "nvidia-smi: no answer" in out.detail
    assert not [f for f in out.facts if f.kind == "gpu.state"]  # a wedged GPU is not an absent one


def test_no_nvml_and_no_nvidia_smi_is_said_plainly_and_is_no_evidence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neither NVML nor nvidia-smi: the probe cannot tell, so it is `unavailable` with a plain line and leaves
    no `gpu.state` fact for a rule to cite ("nvidia-smi: not found" is not evidence of a hang)."""
    monkeypatch.setattr(gpu.importlib.util, "find_spec", lambda name, *a: None)  # no pynvml

    def runner(argv: Sequence[str], timeout_s: float) -> CommandResult:
        return run_command(["/nonexistent/nvidia-smi", *argv[1:]], timeout_s)

    with pytest.raises(ProbeUnavailable, match=r"^no GPU found \(no NVML, no nvidia-smi\)"):
        gpu.probe_gpu(_ctx(tmp_path, runner))


def test_nvidia_smi_that_finds_no_device_is_a_finding(tmp_path: Path) -> None:
    def runner(argv: Sequence[str], timeout_s: float) -> CommandResult:
        return run_command(["sh", "-c", "echo 'No devices were found'; exit 6"], timeout_s)

    out = gpu.probe_gpu(_ctx(tmp_path, runner))
    assert out.status == "ok"
    assert [(f.kind, f.attrs["present"]) for f in out.facts] == [("gpu.state", False)]


def test_dmesg_denied_to_a_user_falls_back_with_the_reason(tmp_path: Path) -> None:
    """util-linux dmesg under kernel.dmesg_restrict=1, run for real (a shell that prints what it prints)."""

    def runner(argv: Sequence[str], timeout_s: float) -> CommandResult:
        if argv[0] == "dmesg":
            script = "echo 'dmesg: read kernel buffer failed: Operation not permitted' >&2; exit 1"
            return run_command(["sh", "-c", script], timeout_s)
        return run_command(["sh", "-c", "echo '-- No entries --'"], timeout_s)

    ctx = _ctx(tmp_path, runner, **{kernel_live.KERN_LOG: CommandResult("unavailable", stderr="not found")})
    with pytest.raises(kernel_live.ProbeUnavailable) as e:
        kernel_live.probe_kernel_live(ctx)
    assert "dmesg: dmesg: read kernel buffer failed: Operation not permitted" in str(e.value)
    assert "journalctl -k: no entries" in str(e.value)


def test_probes_run_side_by_side(tmp_path: Path) -> None:
    """Each probe waits for all the others to have started: that only completes when they run concurrently."""
    names = [f"p{i}" for i in range(6)]
    barrier = threading.Barrier(len(names), timeout=20)

    def probe(ctx: Context) -> ProbeOutput:
        barrier.wait()
        return ProbeOutput("p")

    specs = [ProbeSpec(n, probe, deadline_s=30.0, live_only=True) for n in names]
    outputs = run_probes(_ctx(tmp_path, run_command), specs)
    assert [(o.name, o.status) for o in outputs] == [(n, "ok") for n in names]


def test_the_live_total_caps_whatever_hangs(tmp_path: Path) -> None:
    """Probes that each claim a long deadline are cut off together at the live total."""
    release = threading.Event()

    def stuck(ctx: Context) -> ProbeOutput:
        release.wait(60)
        return ProbeOutput("stuck")

    specs = [ProbeSpec(f"s{i}", stuck, deadline_s=50.0, live_only=True) for i in range(3)]
    t0 = time.monotonic()
    try:
        outputs = run_probes(_ctx(tmp_path, run_command), specs, total_deadline_s=1.0)
    finally:
        release.set()
    assert time.monotonic() - t0 < 10
    assert {o.status for o in outputs} == {"timeout"}
    assert outputs[0].facts[-1].attrs["detail"] == "no answer within 1 s"


def test_disk_targets_include_moved_caches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mldebug_rules.collectors import disks

    monkeypatch.setenv("HF_HOME", "/hf")
    monkeypatch.setenv("HF_DATASETS_CACHE", "/scratch/datasets")
    monkeypatch.setenv("TMPDIR", "/local/tmp")
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_CACHE", raising=False)
    ctx = _ctx(tmp_path, run_command)
    roles = disks.targets(ctx)
    assert ("run_dir", str(tmp_path)) in roles
    assert {
        ("tmp", "/local/tmp"),
        ("shm", "/dev/shm"),
        ("cache", "/hf"),
        ("cache", "/scratch/datasets"),
    } <= set(roles)


if sys.platform != "linux":  # pragma: no cover
    pytestmark = pytest.mark.skip("process groups and /proc are Linux-specific")
