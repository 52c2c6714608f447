"""Checkpoint integrity on real files: a torch.save zip from a recorded run (fixtures/completed_normally),
cut short, emptied or much smaller, and safetensors files built to the format's specification (an 8-byte
little-endian header length, a JSON header, the tensor bytes). Also the newest checkpoint against the log."""

from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path

import pytest
from mldebug_rules.collectors.base import Context, ProbeUnavailable
from mldebug_rules.collectors.checkpoints import probe_checkpoints
from mldebug_rules.engine.facts import FactRegistry

REAL = Path(__file__).parent.parent / "fixtures" / "completed_normally" / "checkpoints"
T0 = 1_714_560_000.0


def _safetensors(n_floats: int, cut: int = 0, header_len: int | None = None) -> bytes:
    header = json.dumps(
        {
            "__metadata__": {"format": "pt"},
            "w": {"dtype": "F32", "shape": [n_floats], "data_offsets": [0, 4 * n_floats]},
        }
    ).encode()
    data = struct.pack("<Q", header_len if header_len is not None else len(header)) + header
    data += b"\0" * (4 * n_floats)
    return data[: len(data) - cut] if cut else data


def _put(path: Path, data: bytes, at: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.utime(path, (at, at))


def _facts(run: Path, offline: bool = True) -> dict[str, dict]:
    ctx = Context(registry=FactRegistry.load(), run_dirs=[run], offline=offline)
    return {f.file: f.attrs for f in probe_checkpoints(ctx).facts}


def test_torch_zip_truncated_empty_and_size_drop(tmp_path: Path) -> None:
    full = (REAL / "final.pt").read_bytes()
    small = (REAL / "best.pt").read_bytes()
    _put(tmp_path / "ckpt" / "step_100.pt", full, T0)
    _put(tmp_path / "ckpt" / "step_200.pt", full, T0 + 60)
    _put(tmp_path / "ckpt" / "step_300.pt", small, T0 + 120)  # a valid zip, a third of the size
    _put(tmp_path / "ckpt" / "step_400.pt", full[: len(full) // 2], T0 + 180)  # cut short mid-write
    _put(tmp_path / "ckpt" / "step_500.pt", b"", T0 + 240)
    got = _facts(tmp_path)
    summary = {k: (a["format"], a["problem"], a["valid"], a["step"], a["newest"]) for k, a in got.items()}
    assert summary == {
        "ckpt/step_100.pt": ("torch_zip", "", True, 100, False),
        "ckpt/step_200.pt": ("torch_zip", "", True, 200, False),
        "ckpt/step_300.pt": ("torch_zip", "size_drop", True, 300, False),
        "ckpt/step_400.pt": ("torch_zip", "truncated", False, 400, False),
        "ckpt/step_500.pt": ("unknown", "zero_bytes", False, 500, True),
    }
    assert got["ckpt/step_300.pt"]["size_ratio"] == round(len(small) / len(full), 3)


def test_safetensors_header_and_data_checks(tmp_path: Path) -> None:
    _put(tmp_path / "checkpoint-10" / "model.safetensors", _safetensors(256), T0)
    _put(tmp_path / "checkpoint-20" / "model.safetensors", _safetensors(256, cut=100), T0 + 1)
    _put(tmp_path / "checkpoint-30" / "model.safetensors", _safetensors(256, header_len=2**40), T0 + 2)
    got = _facts(tmp_path)
    assert {k: (a["format"], a["problem"], a["step"]) for k, a in got.items()} == {
        "checkpoint-10/model.safetensors": ("safetensors", "", 10),
        "checkpoint-20/model.safetensors": ("safetensors", "truncated", 20),
        "checkpoint-30/model.safetensors": ("safetensors", "bad_header", 30),
    }


def test_newest_checkpoint_against_the_log_live(tmp_path: Path) -> None:
    """Live, the newest checkpoint says how long the log went on after it; offline, mtimes mean nothing."""
    shutil.copy(REAL / "final.pt", tmp_path / "final.pt")
    os.utime(tmp_path / "final.pt", (T0, T0))
    log = tmp_path / "train.log"
    log.write_text("step 900 loss 1.2\n")
    os.utime(log, (T0 + 1800, T0 + 1800))
    (live,) = _facts(tmp_path, offline=False).values()
    assert live["newest"] and live["log_ahead_s"] == 1800.0
    (offline,) = _facts(tmp_path, offline=True).values()
    assert offline["log_ahead_s"] == -1.0


def test_no_checkpoints_is_unavailable(tmp_path: Path) -> None:
    (tmp_path / "train.log").write_text("step 1\n")
    with pytest.raises(ProbeUnavailable):
        _facts(tmp_path)


def test_reading_checkpoints_writes_nothing(tmp_path: Path) -> None:
    _put(tmp_path / "ckpt" / "a.pt", (REAL / "final.pt").read_bytes(), T0)
    before = {p: (p.stat().st_mtime, p.stat().st_size) for p in tmp_path.rglob("*")}
    _facts(tmp_path, offline=False)
    assert {p: (p.stat().st_mtime, p.stat().st_size) for p in tmp_path.rglob("*")} == before
