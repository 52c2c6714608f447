"""Issue 3's "Done when", end to end through the command line on the live machine.

A trainer is alive and holds its log open; the log's last line is 30 minutes old (its mtime says so);
``nvidia-smi``, ``dmesg`` and ``journalctl`` hang forever; HF_TOKEN is in the trainer's environment and an
``--api-key`` on its command line. Then ``diagnose RUN_DIR --format json`` (live) finishes within 30 s, lists
those probes as ``timeout`` and names ``process_hang`` first; neither the report nor a ``collect`` bundle
contains either secret. MLDEBUG_PROBE_TIMEOUT keeps the test short; the default deadlines are also bounded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_live_probes import make_hanging_bin

HF_TOKEN = "tok-Hq7-unguessable-4242"  # not shaped like a real token: redaction must come from the name
API_KEY = "key-Zx9-unguessable-9999"
CLI = [sys.executable, "-m", "mldebug_rules"]
_TRAINER = (
    "import sys, time\n"
    "log = open(sys.argv[1], 'a')  # held open for writing, like a logger's file handler\n"
    "print('ready', flush=True)\n"
    "time.sleep(600)\n"
)


@pytest.fixture
def hung_run(tmp_path: Path) -> Iterator[tuple[Path, dict[str, str]]]:
    run = tmp_path / "run"
    run.mkdir()
    log = run / "train.log"
    log.write_text(
        "".join(f"2024-05-01 12:{m:02d}:00 step {m * 10} loss {2.0 - m / 100:.2f}\n" for m in range(20))
    )
    env = dict(os.environ)
    env["PATH"] = f"{make_hanging_bin(tmp_path / 'bin')}{os.pathsep}{env.get('PATH', '')}"
    env["MLDEBUG_PROBE_TIMEOUT"] = "2"
    trainer_env = dict(env, HF_TOKEN=HF_TOKEN)
    trainer = subprocess.Popen(
        [sys.executable, "-c", _TRAINER, str(log), "--api-key", API_KEY],
        cwd=run,
        env=trainer_env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert trainer.stdout is not None and trainer.stdout.readline().strip() == "ready"
        old = time.time() - 1800
        os.utime(log, (old, old))  # the last line is 30 minutes old
        yield run, env
    finally:
        trainer.kill()  # our own child
        trainer.wait(timeout=10)


def test_done_when(hung_run: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    run, env = hung_run
    t0 = time.monotonic()
    res = subprocess.run(
        [*CLI, "diagnose", str(run), "--format", "json"], env=env, capture_output=True, text=True, timeout=60
    )
    elapsed = time.monotonic() - t0
    assert res.returncode == 0, res.stderr
    assert elapsed < 30, elapsed
    rep = json.loads(res.stdout)
    status = {p["name"]: p["status"] for p in rep["probes"]}
    assert status["gpu"] == "timeout" and status["kernel"] == "timeout", status
    assert rep["hypotheses"][0]["id"] == "process_hang", [(h["id"], h["score"]) for h in rep["hypotheses"]]
    sources = {e["source"] for e in rep["hypotheses"][0]["evidence"]}
    assert "train.log" in sources
    for secret in (HF_TOKEN, API_KEY):
        assert secret not in res.stdout and secret not in res.stderr

    bundle = tmp_path / "hang.mldebug.json"
    res = subprocess.run(
        [*CLI, "collect", str(run), "--out", str(bundle)], env=env, capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stderr
    text = bundle.read_text()
    for secret in (HF_TOKEN, API_KEY):
        assert secret not in text
    doc = json.loads(text)
    assert {p["name"]: p["status"] for p in doc["probes"]}["gpu"] == "timeout"
    # The trainer's command line was recorded, with the key masked.
    cmd = [f["text"] for f in doc["facts"] if f["kind"] == "process" and f["attrs"]["writes_log"]]
    assert cmd and "--api-key [REDACTED]" in cmd[0]

    # The bundle replays to the same verdict anywhere.
    res = subprocess.run(
        [*CLI, "diagnose", "--bundle", str(bundle), "--format", "json"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert json.loads(res.stdout)["hypotheses"][0]["id"] == "process_hang"
