"""Issue 6's "Done when", as one scenario through the real command line (subprocesses, as an agent calls it).

On a run directory whose log ends in a CUDA OOM (tests/data/cuda_oom_run, copied to a temp dir):
- before any smoke, `gate --claim gpu_oom` fails and names the missing evidence and the settling smoke;
- a command that hangs is stopped at --timeout (its whole process group) and decides nothing;
- after a baseline that reproduces the OOM (`smoke run --baseline`) and a batch-size-1 change that trains
  (issue 17's pair), diagnose's verdict is `cause` with gpu_oom confirmed, `gate --claim gpu_oom` passes and
  `gate --claim host_oom_kill` fails;
- on a second copy, a change that prints the same OOM and fails refutes gpu_oom;
- train.log is byte-identical afterwards, and nothing outside RUN_DIR/.mldebug/ was written.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

RUN = Path(__file__).parent / "data" / "cuda_oom_run"
OOM_LINE = 37  # the `torch.cuda.OutOfMemoryError: CUDA out of memory. ...` line of train.log
SMOKE_OOM = (
    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 96.00 MiB. GPU 0 has a total "
    "capacity of 79.15 GiB of which 12.25 MiB is free. Process 4112 has 79.13 GiB memory in use."
)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mldebug_rules", *args],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )


def snapshot(run: Path) -> dict[str, tuple[str, int]]:
    """Every path outside .mldebug/: content hash (or "dir") and modification time."""
    out = {}
    for p in sorted(run.rglob("*")):
        rel = p.relative_to(run)
        if rel.parts[0] == ".mldebug":
            continue
        digest = "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
        out[str(rel)] = (digest, p.stat().st_mtime_ns)
    return out


def report(run: Path) -> dict[str, Any]:
    r = cli("diagnose", str(run), "--offline", "--format", "json")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["schema"] == "mldebug-rules/report/v1"
    return rep


def hyp(rep: dict[str, Any], hid: str) -> dict[str, Any]:
    return next(h for h in rep["hypotheses"] if h["id"] == hid)


def records(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / ".mldebug" / "smokes.jsonl").read_text().splitlines()]


TRAINER = str(Path(__file__).with_name("stand_in_trainer.py"))


def smoke_run(
    run: Path, timeout: str, *command: str, baseline: bool = False
) -> subprocess.CompletedProcess[str]:
    flag = ["--baseline"] if baseline else []
    r = cli("smoke", "run", str(run), "--hypothesis", "gpu_oom", *flag, "--timeout", timeout, "--", *command)
    assert r.returncode == 0, r.stderr
    return r


def gone(pid: int) -> bool:
    for _ in range(100):  # the killed grandchild is reaped by init shortly after
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


def test_done_when_cuda_oom(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    before = snapshot(run)
    log_sha = hashlib.sha256((run / "train.log").read_bytes()).hexdigest()

    # 1. Rules alone give a hypothesis, never a cause; the gate refuses and says what would settle it.
    rep = report(run)
    assert rep["verdict"] == "uncertain" and rep["cause"] is None
    top = rep["hypotheses"][0]
    assert (top["id"], top["status"]) == ("gpu_oom", "hypothesis")
    assert {"fact": "log.signature", "source": f"train.log:{OOM_LINE}"}.items() <= top["evidence"][0].items()
    g = cli("gate", str(run), "--claim", "gpu_oom")
    assert g.returncode == 1, g.stdout + g.stderr
    assert "gpu_oom is not smoke-confirmed" in g.stdout
    assert "missing: the baseline" in g.stdout
    assert "settle it with smoke halve_batch" in g.stdout
    # the concrete pair: the launch line from train.log under the smoke's conditions, then with its recipe
    assert (
        f"baseline: mldebug-rules smoke run {run} --hypothesis gpu_oom --baseline --timeout 600 -- python "
        "run_clm.py --model_name_or_path gpt2-large --dataset_name wikitext --dataset_config_name "
        "wikitext-103-raw-v1 --per_device_train_batch_size 32 --max_steps 1 --learning_rate 5e-05 --fp16"
    ) in g.stdout
    assert (
        f"change:   mldebug-rules smoke run {run} --hypothesis gpu_oom --timeout 600 -- python run_clm.py --model_name_or_path "
        "gpt2-large --dataset_name wikitext --dataset_config_name wikitext-103-raw-v1 "
        "--per_device_train_batch_size 1 --max_steps 1 --learning_rate 5e-05 --fp16"
    ) in g.stdout
    assert (
        f"smoke record {run} --hypothesis gpu_oom --outcome confirmed|refuted|inconclusive --note" in g.stdout
    )

    # 2. A hang is stopped at --timeout, with the grandchild it started, and decides nothing, even though it
    #    printed the original OOM before hanging.
    pidfile = tmp_path / "grandchild.pid"
    hang = (
        "import subprocess, sys, time\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
        f"print({SMOKE_OOM!r}, flush=True)\n"
        "time.sleep(600)\n"
    )
    t0 = time.monotonic()
    r = smoke_run(run, "2", sys.executable, "-c", hang)
    assert time.monotonic() - t0 < 120  # stopped at the timeout, not after the 600 s sleep
    assert "timed_out" in r.stdout and "inconclusive" in r.stdout
    assert gone(int(pidfile.read_text())), "the smoke's grandchild outlived the timeout"
    (rec,) = records(run)
    assert rec["classification"] == "timed_out" and rec["outcome"] == "inconclusive"
    assert rec["exit_code"] is None and rec["timeout_s"] == 2.0
    rep = report(run)
    assert rep["verdict"] == "uncertain" and hyp(rep, "gpu_oom")["status"] == "hypothesis"
    assert cli("gate", str(run), "--claim", "gpu_oom").returncode == 1

    # 3. A baseline that reproduces the OOM, then a batch-size-1 change that trains: gpu_oom is confirmed.
    r = smoke_run(
        run, "120", sys.executable, TRAINER, "--batch-size", "32", "--max-steps", "1", baseline=True
    )
    assert "reproduced" in r.stdout and "it counts" in r.stdout
    r = smoke_run(run, "120", sys.executable, TRAINER, "--batch-size", "1", "--max-steps", "1")
    assert "passed" in r.stdout and "gpu_oom CONFIRMED" in r.stdout and "--batch-size 32 -> 1" in r.stdout
    first, base, second = records(run)
    assert first == rec  # append-only: the earlier record is untouched
    assert (base["seq"], base["role"], base["classification"]) == (2, "baseline", "reproduced")
    assert (second["seq"], second["hypothesis"], second["smoke"]) == (3, "gpu_oom", "halve_batch")
    assert (second["classification"], second["role"], second["exit_code"]) == ("passed", "change", 0)
    assert second["progress_records"] == 1
    assert second["output_tail"].endswith("Training completed.")
    assert (run / second["output_file"]).read_text().endswith("Training completed.\n")
    rep = report(run)
    assert rep["verdict"] == "cause" and rep["cause"] == "gpu_oom"
    top = rep["hypotheses"][0]
    assert (top["id"], top["status"]) == ("gpu_oom", "confirmed")
    sources = [e["source"] for e in top["evidence"]]
    assert f"train.log:{OOM_LINE}" in sources and ".mldebug/smokes.jsonl:3" in sources
    # the smokes' own captured output (the hang printed an OOM) is never read back as run evidence
    everywhere = [e["source"] for h in rep["hypotheses"] for e in h["evidence"]]
    assert not [x for x in everywhere if x.startswith(".mldebug/smoke-")]
    assert cli("gate", str(run), "--claim", "gpu_oom").returncode == 0
    other = cli("gate", str(run), "--claim", "host_oom_kill")
    assert other.returncode == 1
    assert "host_oom_kill is not smoke-confirmed" in other.stdout
    assert "smoke-confirmed instead: gpu_oom" in other.stdout and "settle it with smoke" in other.stdout

    # 4. The run directory: train.log byte-identical, nothing outside .mldebug/ written, no temp files left.
    assert hashlib.sha256((run / "train.log").read_bytes()).hexdigest() == log_sha
    assert snapshot(run) == before
    state = sorted(p.name for p in (run / ".mldebug").iterdir())
    assert state[-1] == "smokes.jsonl" and len(state) == 4
    assert all(n.startswith("smoke-") and n.endswith(".out") for n in state[:-1])

    # 5. On a fresh copy, a smoke that prints the same OOM and fails refutes gpu_oom.
    run2 = tmp_path / "run2"
    shutil.copytree(RUN, run2)
    before2 = snapshot(run2)
    r = smoke_run(
        run2, "120", sys.executable, TRAINER, "--batch-size", "32", "--max-steps", "1", baseline=True
    )
    r = smoke_run(
        run2, "120", sys.executable, TRAINER, "--batch-size", "1", "--max-steps", "1", "--fits", "0"
    )
    assert "reproduced" in r.stdout and "gpu_oom refuted" in r.stdout
    _, rec2 = records(run2)
    assert (rec2["classification"], rec2["role"], rec2["exit_code"]) == ("reproduced", "change", 1)
    assert rec2["signatures"] == {"cuda_oom": 1}
    rep = report(run2)
    assert rep["verdict"] == "uncertain" and rep["cause"] is None
    assert hyp(rep, "gpu_oom")["status"] == "refuted"
    g = cli("gate", str(run2), "--claim", "gpu_oom")
    assert g.returncode == 1 and "refuted by a smoke" in g.stdout
    assert snapshot(run2) == before2
