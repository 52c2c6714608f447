"""The issue's "Done when", end to end through the real command line (subprocesses, as an agent calls it)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

OOM_LOG = (
    "torchrun --nproc_per_node 2 train.py --per_device_train_batch_size 32 --max_steps 1000 --fp16\n"
    "step 10 | loss 2.31\n"
    "Traceback (most recent call last):\n"
    '  File "train.py", line 88, in <module>\n'
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 total 79\n"
)
OOM_LINE = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "mldebug_rules", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def report(run: Path) -> dict:
    r = cli("diagnose", str(run), "--offline", "--format", "json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def status_of(rep: dict, hid: str) -> str:
    return next(h["status"] for h in rep["hypotheses"] if h["id"] == hid)


@pytest.fixture
def oom_run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "train.log").write_text(OOM_LOG)
    return run


def test_gate_fails_before_any_smoke_and_says_what_settles_it(oom_run: Path) -> None:
    r = cli("gate", str(oom_run), "--claim", "gpu_oom")
    assert r.returncode == 1
    assert "not smoke-confirmed" in r.stdout
    assert "halve_batch" in r.stdout
    assert f"smoke run {oom_run} --hypothesis gpu_oom" in r.stdout
    assert "--per_device_train_batch_size 1" in r.stdout  # the concrete command, from the launcher echo
    assert f"smoke record {oom_run} --hypothesis gpu_oom" in r.stdout


def test_passing_smoke_confirms_and_gate_passes(oom_run: Path) -> None:
    before = sha(oom_run / "train.log")
    r = cli(
        "smoke",
        "run",
        str(oom_run),
        "--hypothesis",
        "gpu_oom",
        "--timeout",
        "60",
        "--",
        sys.executable,
        "-c",
        "print('ok')",
    )
    assert r.returncode == 0, r.stderr
    assert "passed" in r.stdout
    rep = report(oom_run)
    assert rep["verdict"] == "cause" and rep["cause"] == "gpu_oom"
    assert status_of(rep, "gpu_oom") == "confirmed"
    assert cli("gate", str(oom_run), "--claim", "gpu_oom").returncode == 0
    other = cli("gate", str(oom_run), "--claim", "host_oom_kill")
    assert other.returncode == 1 and "smoke-confirmed instead: gpu_oom" in other.stdout
    assert sha(oom_run / "train.log") == before
    # nothing but .mldebug/ was added
    assert sorted(p.name for p in oom_run.iterdir()) == [".mldebug", "train.log"]
    recs = [json.loads(x) for x in (oom_run / ".mldebug" / "smokes.jsonl").read_text().splitlines()]
    rec = recs[0]
    assert rec["hypothesis"] == "gpu_oom" and rec["smoke"] == "halve_batch"
    assert rec["outcome"] == "confirmed" and rec["classification"] == "passed" and rec["exit_code"] == 0
    assert rec["output_tail"] == "ok" and rec["duration_s"] >= 0 and rec["control"] is None
    assert (oom_run / rec["output_file"]).read_text().strip() == "ok"


def test_same_oom_refutes(oom_run: Path) -> None:
    code = f"import sys; print({OOM_LINE!r}); sys.exit(1)"
    r = cli("smoke", "run", str(oom_run), "--hypothesis", "gpu_oom", "--", sys.executable, "-c", code)
    assert r.returncode == 0, r.stderr
    assert "reproduced" in r.stdout
    rep = report(oom_run)
    assert status_of(rep, "gpu_oom") == "refuted"
    assert rep["verdict"] != "cause"
    assert cli("gate", str(oom_run), "--claim", "gpu_oom").returncode == 1


def test_different_failure_decides_nothing(oom_run: Path) -> None:
    r = cli(
        "smoke",
        "run",
        str(oom_run),
        "--hypothesis",
        "gpu_oom",
        "--",
        sys.executable,
        "-c",
        "raise SystemExit('ImportError: no module named foo')",
    )
    assert r.returncode == 0, r.stderr
    assert "failed_differently" in r.stdout
    assert status_of(report(oom_run), "gpu_oom") == "hypothesis"


def test_hang_is_stopped_at_timeout_and_decides_nothing(oom_run: Path, tmp_path: Path) -> None:
    before = sha(oom_run / "train.log")
    pidfile = tmp_path / "grandchild.pid"
    # The smoke leaves a grandchild behind: the whole process group must die at the timeout.
    code = (
        "import subprocess, sys, time; "
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)']); "
        f"open({str(pidfile)!r}, 'w').write(str(p.pid)); print('started', flush=True); time.sleep(300)"
    )
    t0 = time.monotonic()
    r = cli(
        "smoke",
        "run",
        str(oom_run),
        "--hypothesis",
        "gpu_oom",
        "--timeout",
        "2",
        "--",
        sys.executable,
        "-c",
        code,
    )
    assert time.monotonic() - t0 < 60
    assert r.returncode == 0, r.stderr
    assert "timed_out" in r.stdout
    rec = json.loads((oom_run / ".mldebug" / "smokes.jsonl").read_text().splitlines()[-1])
    assert (
        rec["classification"] == "timed_out" and rec["outcome"] == "inconclusive" and rec["exit_code"] is None
    )
    assert status_of(report(oom_run), "gpu_oom") == "hypothesis"
    assert cli("gate", str(oom_run), "--claim", "gpu_oom").returncode == 1
    gc = int(pidfile.read_text())
    for _ in range(50):  # reaped by init shortly after the kill
        try:
            os.kill(gc, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail("the smoke's grandchild survived the timeout")
    assert sha(oom_run / "train.log") == before


def test_record_validation(oom_run: Path) -> None:
    bad = cli("smoke", "record", str(oom_run), "--hypothesis", "gpu_oom", "--outcome", "maybe")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    unknown = cli("smoke", "record", str(oom_run), "--hypothesis", "no_such_thing", "--outcome", "refuted")
    assert unknown.returncode == 2 and "unknown hypothesis" in unknown.stderr
    assert not (oom_run / ".mldebug").exists()
    ok = cli(
        "smoke",
        "record",
        str(oom_run),
        "--hypothesis",
        "gpu_oom",
        "--outcome",
        "confirmed",
        "--note",
        "bs=1 ok",
    )
    assert ok.returncode == 0, ok.stderr
    assert cli("gate", str(oom_run), "--claim", "gpu_oom").returncode == 0


def test_refuted_drops_and_next_leads(oom_run: Path) -> None:
    (oom_run / "dmesg.log").write_text(
        "[ 12.3] Out of memory: Killed process 4242 (python) total-vm:1kB, anon-rss:1kB\n"
    )
    assert (
        cli("smoke", "record", str(oom_run), "--hypothesis", "gpu_oom", "--outcome", "refuted").returncode
        == 0
    )
    rep = report(oom_run)
    assert rep["hypotheses"][-1]["id"] == "gpu_oom"
    assert rep["hypotheses"][0]["id"] != "gpu_oom" and rep["hypotheses"][0]["status"] == "hypothesis"


def test_plan_lists_smoke_outcomes_and_concrete_command(oom_run: Path) -> None:
    r = cli("smoke", "plan", str(oom_run), "--format", "json")
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    assert plan["command_source"] == "train.log:1"
    top = plan["hypotheses"][0]
    assert top["id"] == "gpu_oom"
    smoke = top["smokes"][0]
    assert smoke["id"] == "halve_batch"
    assert smoke["outcomes"]["passed"]["confirms"] == ["gpu_oom"]
    assert smoke["outcomes"]["reproduced"]["refutes"] == ["gpu_oom"]
    assert smoke["command"].endswith(
        "-- torchrun --nproc_per_node 2 train.py --per_device_train_batch_size 1 --max_steps 1 --fp16"
    )
    gpus = next(c for c in top["controls"] if c["control"] == "gpus=1")
    assert "env CUDA_VISIBLE_DEVICES=0 torchrun --nproc_per_node 1" in gpus["command"]
    text = cli(
        "smoke", "plan", str(oom_run), "--hypothesis", "gpu_oom", "--cmd", "python train.py --batch-size 64"
    )
    assert text.returncode == 0 and "python train.py --batch-size 1" in text.stdout


def test_controls_pair_with_baseline_in_report(oom_run: Path) -> None:
    fail = f"import sys; print({OOM_LINE!r}); sys.exit(1)"
    assert (
        cli(
            "smoke", "run", str(oom_run), "--hypothesis", "gpu_oom", "--", sys.executable, "-c", fail
        ).returncode
        == 0
    )
    r = cli(
        "smoke",
        "run",
        str(oom_run),
        "--hypothesis",
        "gpu_oom",
        "--control",
        "grad_checkpointing=on",
        "--",
        sys.executable,
        "-c",
        "print('fits')",
    )
    assert r.returncode == 0, r.stderr
    assert "paired with baseline #1" in r.stdout
    rep = report(oom_run)
    assert status_of(rep, "gpu_oom") == "refuted"  # a control alone decides nothing
    (c,) = rep["controls"]
    assert c["control"] == "grad_checkpointing=on" and c["effect"] == "removes_failure"
    assert c["baseline"]["seq"] == 1 and "activation memory" in c["mechanism"]
    text = cli("diagnose", str(oom_run), "--offline").stdout
    assert "Controls" in text and "narrows to: activation memory" in text
    two = cli(
        "smoke",
        "run",
        str(oom_run),
        "--hypothesis",
        "gpu_oom",
        "--control",
        "workers=0",
        "--control",
        "compile=off",
        "--",
        sys.executable,
        "-c",
        "pass",
    )
    assert two.returncode == 2 and "exactly one variable" in two.stderr
    unknown = cli(
        "smoke",
        "run",
        str(oom_run),
        "--hypothesis",
        "gpu_oom",
        "--control",
        "colour=blue",
        "--",
        sys.executable,
        "-c",
        "pass",
    )
    assert unknown.returncode == 2


HOOK = Path(__file__).resolve().parents[1] / "examples" / "hooks" / "claim-gate.sh"


def test_claim_gate_hook(oom_run: Path, tmp_path: Path) -> None:
    # The hook calls the CLI by name: a tiny shim runs this interpreter's module.
    shim = tmp_path / "mldebug-shim"
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} -m mldebug_rules "$@"\n')
    shim.chmod(0o755)
    transcript = tmp_path / "t.jsonl"
    msg = {
        "type": "assistant",
        "message": {
            "role": "assistant",
            "content": [
                {"type": "text", "text": f"The OOM is it.\n**Root cause:** `gpu_oom` (run: {oom_run})"}
            ],
        },
    }
    transcript.write_text(
        json.dumps({"type": "user", "message": {"content": "why"}}) + "\n" + json.dumps(msg) + "\n"
    )
    event = json.dumps({"transcript_path": str(transcript), "stop_hook_active": False})
    env = {**os.environ, "MLDEBUG_BIN": str(shim)}

    def hook(stdin: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(HOOK)], input=stdin, capture_output=True, text=True, env=env, timeout=120
        )

    blocked = hook(event)
    assert blocked.returncode == 2 and "halve_batch" in blocked.stderr
    assert hook("just a hypothesis so far").returncode == 0
    assert (
        cli(
            "smoke", "run", str(oom_run), "--hypothesis", "gpu_oom", "--", sys.executable, "-c", "pass"
        ).returncode
        == 0
    )
    assert hook(event).returncode == 0
    assert hook(f"Root cause: host_oom_kill (run: {oom_run})").returncode == 2
