"""Issue 17's "Done when", end to end through the real command line with a stand-in trainer
(tests/stand_in_trainer.py: step/loss lines, a CUDA OOM above --fits, no torch):

- a no-op (`true`), an unpaired pass and a hand-recorded confirmation without --trust-recorded never open
  the gate; a baseline that reproduces plus a batch-size-1 run that trains does;
- after a refutation the lead is one of the refuted hypothesis's alternatives, and a hypothesis listed only
  as its consequence is no lead;
- the report and `smoke plan` show each pair, and the plan says which half is missing;
- recipes on recorded command lines: the existing flag is changed, lr_zero/fp32_rerun resume before the
  onset and run past it, controls that cannot apply are listed as not applicable.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

TRAINER = str(Path(__file__).with_name("stand_in_trainer.py"))
HOOK = Path(__file__).resolve().parents[1] / "examples" / "hooks" / "claim-gate.sh"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
BIG = [sys.executable, TRAINER, "--batch-size", "32", "--max-steps", "1"]
SMALL = [sys.executable, TRAINER, "--batch-size", "1", "--max-steps", "1"]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mldebug_rules", *args],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )


def smoke(run: Path, hid: str, *command: str, baseline: bool = False) -> subprocess.CompletedProcess[str]:
    flag = ["--baseline"] if baseline else []
    r = cli("smoke", "run", str(run), "--hypothesis", hid, *flag, "--timeout", "120", "--", *command)
    assert r.returncode == 0, r.stderr
    return r


def gate(run: Path, claim: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return cli("gate", str(run), "--claim", claim, *extra)


def report(run: Path) -> dict[str, Any]:
    r = cli("diagnose", str(run), "--offline", "--format", "json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def plan(run: Path, *extra: str) -> dict[str, Any]:
    r = cli("smoke", "plan", str(run), "--format", "json", *extra)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def status(rep: dict[str, Any], hid: str) -> str:
    return next((h["status"] for h in rep["hypotheses"] if h["id"] == hid), "absent")


@pytest.fixture
def run(tmp_path: Path) -> Path:
    """A single-process run that died of a CUDA OOM at batch size 32, under torchrun's elastic agent (whose
    ChildFailedError summary raises distributed_peer_failure as a consequence of the OOM)."""
    d = tmp_path / "run"
    d.mkdir()
    out = subprocess.run(
        [sys.executable, TRAINER, "--batch-size", "32", "--max-steps", "100"], capture_output=True, text=True
    )
    assert out.returncode == 1
    (d / "train.log").write_text(
        f"+ python {TRAINER} --batch-size 32 --max-steps 100 --num_workers 4\n"
        + out.stdout
        + out.stderr
        + "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
    )
    return d


def hook(run: Path, claim: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    shim = tmp_path / "mldebug-shim"
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} -m mldebug_rules "$@"\n')
    shim.chmod(0o755)
    return subprocess.run(
        ["bash", str(HOOK)],
        input=f"Root cause: {claim} (run: {run})\n",
        capture_output=True,
        text=True,
        env={**os.environ, "MLDEBUG_BIN": str(shim)},
        timeout=180,
    )


def test_nothing_but_a_pair_opens_the_gate(run: Path, tmp_path: Path) -> None:
    rep = report(run)
    assert rep["hypotheses"][0]["id"] == "gpu_oom"
    assert (
        "gpu_oom"
        in next(h for h in rep["hypotheses"] if h["id"] == "distributed_peer_failure")["explained_by"]
    )

    # 1. A no-op: exit 0 without training proves nothing, for a raised hypothesis or one nothing raised.
    r = smoke(run, "gpu_oom", "true")
    assert "no_progress" in r.stdout and "nothing decided" in r.stdout
    r = smoke(run, "host_oom_kill", "true")
    assert "no_progress" in r.stdout
    rep = report(run)
    assert rep["verdict"] == "uncertain" and status(rep, "host_oom_kill") == "absent"
    assert gate(run, "gpu_oom").returncode == 1
    assert gate(run, "host_oom_kill").returncode == 1
    assert "CAUSE" not in cli("diagnose", str(run), "--offline").stdout

    # 2. An unpaired pass: it trains at batch size 1, but nothing showed that the unchanged command fails.
    r = smoke(run, "gpu_oom", *SMALL)
    assert "passed" in r.stdout and "no baseline" in r.stdout
    g = gate(run, "gpu_oom")
    assert g.returncode == 1 and "missing: the baseline" in g.stdout

    # 3. A baseline that does not reproduce does not count; nor does a "change" that runs another program.
    r = smoke(run, "gpu_oom", *SMALL, baseline=True)
    assert "did not reproduce" in r.stdout
    smoke(run, "gpu_oom", *SMALL)
    assert gate(run, "gpu_oom").returncode == 1
    smoke(run, "gpu_oom", *BIG, baseline=True)
    r = smoke(run, "gpu_oom", sys.executable, "-c", "print('step 1 | loss 2.0')")
    assert "must run the same program and script" in r.stdout
    # ... nor the baseline's own command run again as the "change" (it reproduces, but changed nothing).
    r = smoke(run, "gpu_oom", *BIG)
    assert "nothing was changed" in r.stdout
    assert gate(run, "gpu_oom").returncode == 1

    # 4. A hand-recorded confirmation: kept and shown as recorded, counted only with --trust-recorded, which
    #    the stop hook never passes.
    rec = cli(
        "smoke", "record", str(run), "--hypothesis", "gpu_oom", "--outcome", "confirmed", "--note", "it fit"
    )
    assert rec.returncode == 0, rec.stderr
    assert gate(run, "gpu_oom").returncode == 1
    assert gate(run, "gpu_oom", "--trust-recorded").returncode == 0
    assert hook(run, "gpu_oom", tmp_path).returncode == 2
    assert report(run)["verdict"] == "uncertain"

    # 5. The pair: the reproduced baseline (#6) and a batch-size-1 change that trains.
    r = smoke(run, "gpu_oom", *SMALL[:3], "1", *SMALL[4:])
    assert "gpu_oom CONFIRMED" in r.stdout and "baseline #6 reproduced; the change passed" in r.stdout
    assert gate(run, "gpu_oom").returncode == 0
    assert hook(run, "gpu_oom", tmp_path).returncode == 0
    rep = report(run)
    assert rep["verdict"] == "cause" and rep["cause"] == "gpu_oom"
    pair = next(p for p in rep["smokes"]["pairs"] if p["outcome"] == "confirmed")
    assert pair["baseline"]["command"].endswith("--batch-size 32 --max-steps 1")
    assert pair["baseline"]["classification"] == "reproduced"
    assert pair["change"]["command"].endswith("--batch-size 1 --max-steps 1")
    assert pair["change"]["classification"] == "passed"
    assert pair["argv_diff"] == ["--batch-size 32 -> 1"] and pair["decides"] == {"gpu_oom": "confirmed"}
    text = cli("diagnose", str(run), "--offline").stdout
    assert "Smoke pairs" in text and "argv difference: --batch-size 32 -> 1" in text
    # the other claims stay shut
    assert gate(run, "host_oom_kill").returncode == 1


def test_after_a_refutation_the_lead_is_an_alternative(run: Path) -> None:
    p = plan(run)
    assert p["schema"] == "mldebug-rules/smoke-plan/v1"
    top = p["hypotheses"][0]
    assert top["id"] == "gpu_oom" and top["missing"] == "baseline"
    halve = top["smokes"][0]
    assert halve["baseline_command"].endswith(
        f"--baseline --timeout 600 -- python {TRAINER} --batch-size 32 --max-steps 1 --num_workers 4"
    )
    assert halve["command"].endswith(f"-- python {TRAINER} --batch-size 1 --max-steps 1 --num_workers 4")
    assert halve["argv_diff"] == ["--batch-size 32 -> 1"]

    smoke(run, "gpu_oom", *BIG, baseline=True)
    assert plan(run)["hypotheses"][0]["missing"] == "change"
    assert "missing: the change" in cli("smoke", "plan", str(run)).stdout
    r = smoke(run, "gpu_oom", *SMALL, "--fits", "0")
    assert "gpu_oom refuted" in r.stdout

    rep = report(run)
    assert status(rep, "gpu_oom") == "refuted"
    # distributed_peer_failure was raised only as a consequence of the OOM: no lead now.
    assert status(rep, "distributed_peer_failure") == "hypothesis"
    assert "distributed_peer_failure" not in rep["leads"]
    assert rep["leads"][:2] == ["gpu_memory_leak", "host_oom_kill"]
    assert "the lead is now gpu_memory_leak, an alternative of gpu_oom" in rep["next_action"]
    p = plan(run)
    assert [h["id"] for h in p["hypotheses"]][:2] == ["gpu_memory_leak", "host_oom_kill"]
    assert p["hypotheses"][0]["alternative_of"] == ["gpu_oom"]
    assert p["hypotheses"][1]["pairs"] == [] and p["hypotheses"][1]["missing"] == "baseline"

    # A no-op after the refutation flips nothing back.
    smoke(run, "gpu_oom", "true")
    assert status(report(run), "gpu_oom") == "refuted" and gate(run, "gpu_oom").returncode == 1

    # An alternative of the refuted hypothesis can now be settled by its own pair, though no rule raised it;
    # a hypothesis that is neither raised nor such an alternative cannot.
    smoke(run, "host_oom_kill", *BIG, baseline=True)
    smoke(run, "host_oom_kill", *SMALL)
    assert gate(run, "host_oom_kill").returncode == 0
    r = smoke(run, "disk_full", *SMALL, "--disk-full", baseline=True)
    assert "baseline #6 reproduced the original failure" in r.stdout
    smoke(run, "disk_full", *SMALL)
    g = gate(run, "disk_full")
    assert g.returncode == 1 and "not an alternative of a refuted hypothesis" in g.stdout


def test_recipes_on_recorded_command_lines(tmp_path: Path) -> None:
    # lr_zero on a recorded divergence (loss diverging from step 7, NaN at 32, checkpoints every 10 steps):
    # no checkpoint precedes the onset, so it starts from scratch, and it runs past the NaN step.
    nan_run = tmp_path / "nan"
    shutil.copytree(FIXTURES / "nan_lr_too_high", nan_run)
    cmd = "python train.py --lr 0.003 --steps 300 --workers 4 --resume none --fp16"
    p = plan(nan_run, "--cmd", cmd, "--hypothesis", "optimizer_divergence")
    lr0 = p["hypotheses"][0]["smokes"][0]
    assert lr0["id"] == "lr_zero"
    assert lr0["command"].endswith("-- python train.py --lr 0 --steps 52 --workers 4 --resume none --fp16")
    assert lr0["baseline_command"].endswith(
        "-- python train.py --lr 0.003 --steps 52 --workers 4 --resume none --fp16"
    )
    assert any("from scratch" in n for n in lr0["notes"])
    # with a checkpoint saved before the onset it resumes from there (both halves of the pair)
    shutil.copy(nan_run / "checkpoints" / "step_10.pt", nan_run / "checkpoints" / "step_5.pt")
    p = plan(nan_run, "--cmd", cmd, "--hypothesis", "optimizer_divergence")
    lr0 = p["hypotheses"][0]["smokes"][0]
    resume = str(nan_run / "checkpoints" / "step_5.pt")
    assert lr0["command"].endswith(
        f"-- python train.py --lr 0 --steps 52 --workers 4 --resume {resume} --fp16"
    )
    assert f"--resume {resume}" in lr0["baseline_command"] and "--lr 0.003" in lr0["baseline_command"]
    fp32 = plan(nan_run, "--cmd", cmd, "--hypothesis", "mixed_precision_overflow")["hypotheses"][0]["smokes"][
        0
    ]
    assert fp32["id"] == "fp32_rerun"
    assert fp32["command"].endswith(f"-- python train.py --lr 0.003 --steps 52 --workers 4 --resume {resume}")
    assert fp32["argv_diff"] == ["- --fp16"]

    # The workers control changes the script's own --num_workers, never adds a second flag for it.
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "train.log").write_text(
        "+ python train.py --output_dir out --per_device_train_batch_size 8 --num_workers 4\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
    )
    controls = {c["control"].split("=")[0]: c for c in plan(hf)["hypotheses"][0]["controls"]}
    assert controls["workers"]["changes"] == ["--num_workers 4 -> 0"]
    assert "--dataloader_num_workers" not in controls["workers"]["command"]
    # a single-process run: one GPU instead of many cannot change anything
    assert controls["gpus"]["applicable"] is False and "single process" in controls["gpus"]["reason"]

    # A host-side failure (a DataLoader worker killed by the OOM killer): compile and gradient checkpointing
    # cannot change anything, and are listed as not applicable with the reason, not offered.
    host = tmp_path / "host"
    shutil.copytree(FIXTURES / "host_oom_worker", host)
    p = plan(host, "--hypothesis", "host_oom_kill", "--cmd", "python train.py --batch-size 8 --num-workers 8")
    controls = {c["control"].split("=")[0]: c for c in p["hypotheses"][0]["controls"]}
    for name in ("compile", "grad_checkpointing", "precision"):
        assert controls[name]["applicable"] is False and "host" in controls[name]["reason"]
        assert "command" not in controls[name]
    assert controls["workers"]["applicable"] is True
    text = cli("smoke", "plan", str(host), "--hypothesis", "host_oom_kill").stdout
    assert "compile=off (torch.compile on vs off): not applicable:" in text
