"""Bundles: `collect` writes a schema-versioned, redacted bundle; `diagnose --bundle` and a run directory that
holds one replay it through the same validation; a corrupt bundle is a probe error, never a crash."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mldebug_rules.collectors.bundles import SCHEMA

from mldebug_rules import cli

SECRET = "Zq81-very-private-value"
LOG = (
    "2024-05-01 12:00:00 starting python train.py --api-key " + SECRET + "\n"
    "2024-05-01 12:00:05 step 10 loss 2.1\n"
    "OSError: [Errno 24] Too many open files: '/data/shard-00042.tar'\n"
)


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _collect(run: Path, out: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    code, _, err = _run(["collect", str(run), "--out", str(out), "--offline"], capsys)
    assert code == 0, err
    return json.loads(out.read_text())


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "train.log").write_text(LOG)
    return run


def test_collect_writes_a_redacted_versioned_bundle(run_dir: Path, tmp_path: Path, capsys: Any) -> None:
    doc = _collect(run_dir, tmp_path / "b.mldebug.json", capsys)
    assert doc["schema"] == SCHEMA
    assert doc["tool"]["name"] == "mldebug-rules" and doc["tool"]["version"]
    assert doc["host"] and doc["created"].endswith("Z")
    assert {p["name"] for p in doc["probes"]} >= {"logs", "checkpoints"}
    assert "bundle" not in {p["name"] for p in doc["probes"]}  # a bundle never nests another
    sig = [f for f in doc["facts"] if f["kind"] == "log.signature"]
    assert [(f["attrs"]["signature"], f["source"]) for f in sig] == [
        ("fd_too_many_open_files", "train.log:3")
    ]
    assert any(f["kind"] == "probe.status" for f in doc["facts"])
    assert doc["scrollback"][0]["file"] == "train.log"
    assert SECRET not in (tmp_path / "b.mldebug.json").read_text()
    assert sorted(p.name for p in run_dir.iterdir()) == ["train.log"]  # only --out was written


def test_diagnose_replays_a_bundle(run_dir: Path, tmp_path: Path, capsys: Any) -> None:
    bundle = tmp_path / "b.mldebug.json"
    _collect(run_dir, bundle, capsys)
    code, out, _ = _run(["diagnose", "--bundle", str(bundle), "--format", "json"], capsys)
    assert code == 0
    rep = json.loads(out)
    assert rep["hypotheses"][0]["id"] == "fd_exhausted"
    assert "train.log:3" in {e["source"] for e in rep["hypotheses"][0]["evidence"]}
    probes = {p["name"]: p for p in rep["probes"]}
    assert probes["bundle"]["status"] == "ok"
    assert probes["processes"]["status"] == "unavailable"  # this machine is not mixed into a replay
    assert SECRET not in out


def test_a_run_directory_holding_a_bundle_replays_it(run_dir: Path, tmp_path: Path, capsys: Any) -> None:
    other = tmp_path / "colleague"
    other.mkdir()
    _collect(run_dir, other / "node1.mldebug.json", capsys)
    code, out, _ = _run(["diagnose", str(other), "--offline", "--format", "json"], capsys)
    assert code == 0
    assert json.loads(out)["hypotheses"][0]["id"] == "fd_exhausted"


def test_corrupt_bundle_is_a_probe_error_not_a_crash(tmp_path: Path, capsys: Any) -> None:
    bad = tmp_path / "bad.mldebug.json"
    bad.write_text('{"schema": "mldebug-rules/bundle/v1", "facts": [')
    code, out, err = _run(["diagnose", "--bundle", str(bad), "--offline", "--format", "json"], capsys)
    assert code == 0 and "Traceback" not in err
    probe = next(p for p in json.loads(out)["probes"] if p["name"] == "bundle")
    assert probe["status"] == "error" and "not a JSON bundle" in probe["detail"]


def test_wrong_schema_and_bad_facts(tmp_path: Path, capsys: Any) -> None:
    other = tmp_path / "other.mldebug.json"
    other.write_text(json.dumps({"schema": "something/else", "facts": []}))
    mixed = tmp_path / "mixed.mldebug.json"
    mixed.write_text(
        json.dumps(
            {
                "schema": SCHEMA,
                "host": "n1",
                "facts": [
                    {
                        "kind": "kernel.xid",
                        "attrs": {"code": "seventy-nine"},
                        "source": "dmesg:1",
                        "file": "dmesg",
                    },
                    {
                        "kind": "kernel.xid",
                        "attrs": {"code": 79, "hardware": True},
                        "file": "dmesg",
                        "line": 2,
                    },
                ],
            }
        )
    )
    code, out, _ = _run(
        ["diagnose", "--bundle", str(other), "--bundle", str(mixed), "--offline", "--format", "json"], capsys
    )
    assert code == 0
    rep = json.loads(out)
    probe = next(p for p in rep["probes"] if p["name"] == "bundle")
    assert probe["status"] == "error"
    assert "is not 'mldebug-rules/bundle/v1'" in probe["detail"] and "1 invalid" in probe["detail"]
    top = rep["hypotheses"][0]
    assert top["id"] == "gpu_hardware_fault"
    assert top["evidence"][0]["source"] == "n1:dmesg:2"  # several bundles: sources name their host


def test_replay_keeps_rank_host_and_time(tmp_path: Path) -> None:
    from mldebug_rules.collectors.bundles import load_facts
    from mldebug_rules.engine.facts import FactRegistry

    doc = {
        "schema": SCHEMA,
        "host": "n7",
        "facts": [
            {
                "kind": "log.signature",
                "attrs": {"signature": "cuda_oom"},
                "file": "logs/rank_3.log",
                "line": 42,
                "rank": 3,
                "ts": 1714564800.5,
                "text": "torch.OutOfMemoryError: CUDA out of memory.",
            }
        ],
    }
    (f,) = load_facts(doc, FactRegistry.load()).facts
    assert (f.source, f.rank, f.host, f.ts, f.text[:5]) == (
        "logs/rank_3.log:42",
        3,
        "n7",
        1714564800.5,
        "torch",
    )


def test_recorded_hang_bundle_fixture_replays() -> None:
    """fixtures/bundle_process_hang holds only a bundle recorded by `collect` on a live (hung) run."""
    from conftest import FIXTURES, diagnose_dir

    rep = diagnose_dir(FIXTURES / "bundle_process_hang")
    assert rep["hypotheses"][0]["id"] == "process_hang"
    assert {"train.log", "probe:gpu"} <= {e["source"] for e in rep["hypotheses"][0]["evidence"]}
