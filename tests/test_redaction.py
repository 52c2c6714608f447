"""Secrets never leave the tool: env vars named *TOKEN*, *KEY*, *SECRET*, *PASSWORD*, *CREDENTIAL*;
``--api-key``/``--token``-style arguments; credentials in URLs. Checked in the facts the probes make, in the
report (json and text) and in a ``collect`` bundle."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mldebug_rules.collectors import environment, processes
from mldebug_rules.collectors.base import Context
from mldebug_rules.engine.facts import FactRegistry

from mldebug_rules import cli

SECRETS = {
    "hf": "tok-Aa1-unguessable-0001",
    "openai": "tok-Bb2-unguessable-0002",
    "wandb": "tok-Cc3-unguessable-0003",
    "key": "tok-Dd4-unguessable-0004",
    "redis": "tok-Ee5-unguessable-0005",
    "git": "tok-Ff6-unguessable-0006",
    "pw": "tok-Gg7-unguessable-0007",
    "cred": "tok-Hh8-unguessable-0008",
}
LOG = (
    f"2024-05-01 12:00:00 env: HF_TOKEN={SECRETS['hf']} OPENAI_KEY2={SECRETS['openai']}\n"
    f"2024-05-01 12:00:00 launching: python train.py --wandb-key={SECRETS['wandb']} --key {SECRETS['key']}"
    f" --cache redis://:{SECRETS['redis']}@cache:6379/0 --lr 3e-4\n"
    f"2024-05-01 12:00:01 cloning https://ci:{SECRETS['git']}@git.example.com/team/repo.git\n"
    f'2024-05-01 12:00:01 config {{"db_password": "{SECRETS["pw"]}", "batch_size": 32}}\n'
    "2024-05-01 12:00:05 step 10 loss 2.1\n"
    "OSError: [Errno 24] Too many open files: '/data/shard-00042.tar'\n"
)


def _assert_clean(text: str) -> None:
    leaked = [k for k, v in SECRETS.items() if v in text]
    assert not leaked, leaked


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "train.log").write_text(LOG)
    return run


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_report_holds_no_secret(run_dir: Path, fmt: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["diagnose", str(run_dir), "--offline", "--format", fmt]) == 0
    out, err = capsys.readouterr()
    assert "Too many open files" in out or "fd_exhausted" in out  # the log was read and cited
    _assert_clean(out + err)


def test_bundle_holds_no_secret(run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bundle = tmp_path / "x.mldebug.json"
    assert cli.main(["collect", str(run_dir), "--offline", "--out", str(bundle)]) == 0
    text = bundle.read_text()
    assert json.loads(text)["scrollback"]  # the log lines travelled, masked
    _assert_clean(text)
    assert "[REDACTED]" in text


def test_process_and_environment_facts_hold_no_secret() -> None:
    snap = [
        {
            "pid": 7,
            "ppid": 1,
            "name": "python",
            "cwd": "/runs/r1",
            "status": "sleeping",
            "create_time": 0.0,
            "cmdline": ["python", "train.py", "--hf_token", SECRETS["hf"], f"--password={SECRETS['pw']}"],
        }
    ]
    (found,) = processes.analyse(snap, ["/runs/r1"], [], now=10.0).processes
    _assert_clean(found.text + json.dumps(found.attrs))
    env = {
        "HF_TOKEN": SECRETS["hf"],
        "NCCL_SOCKET_IFNAME": "ib0",
        "TORCH_HUB_TOKEN": SECRETS["git"],
        "NCCL_SSH_KEY": SECRETS["key"],
        "CUDA_MPS_PIPE_DIRECTORY": "/tmp/mps",
        "SLURM_JOB_ID": "77",
        "MASTER_ADDR": f"https://alice:{SECRETS['pw']}@host",
        "TORCH_CREDENTIAL_FILE": SECRETS["cred"],
    }
    ctx = Context(registry=FactRegistry.load())
    facts = environment.env_facts(ctx, env, scope="pid:7")
    _assert_clean(json.dumps([f.to_json() for f in facts], default=str))
    assert {f.attrs["name"] for f in facts} >= {"NCCL_SOCKET_IFNAME", "SLURM_JOB_ID", "MASTER_ADDR"}
