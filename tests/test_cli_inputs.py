"""Bad or awkward inputs to the command line: one clear line on stderr and exit 2 for unusable input, a report
(exit 0) for logs that are merely odd, and never a traceback or an internal error."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from mldebug_rules.engine.packs import KnowledgeBase

from mldebug_rules import diagnose as diagnose_mod
from mldebug_rules.cli import main

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "fixtures"


@pytest.fixture(autouse=True)
def _shared_kb(monkeypatch: pytest.MonkeyPatch, kb: KnowledgeBase) -> None:
    """Loading the built-in packs takes seconds; the CLI calls here reuse the session's copy unless they name
    their own packs or parameters."""
    original = diagnose_mod.load_kb

    def load(req: diagnose_mod.Request) -> KnowledgeBase:
        return kb if not req.rules_dirs and not req.params else original(req)

    monkeypatch.setattr(diagnose_mod, "load_kb", load)


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def _one_line_error(rc: int, err: str) -> None:
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("mldebug-rules: error: ")
    assert "Traceback" not in err


def _no_crash(rc: int, out: str, err: str) -> None:
    assert "Traceback" not in err and "internal error" not in err, err
    if rc == 2:
        _one_line_error(rc, err)
    else:
        assert rc == 0, err
        assert json.loads(out)["verdict"] in ("cause", "uncertain", "no_failure")


def _bad_pack(tmp_path: Path) -> Path:
    pack = tmp_path / "badpack"
    pack.mkdir()
    text = "pack:\n  name: bad\n  version: 1\nrules:\n  - id: x\n    when: [unclosed\n"
    (pack / "pack.yaml").write_text(text)
    return pack


def _names_line(text: str) -> bool:
    return bool(re.search(r"badpack/pack\.yaml:\d+", text))


def test_malformed_pack_strict_names_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pack = _bad_pack(tmp_path)
    run = tmp_path / "run"
    run.mkdir()
    (run / "train.log").write_text("step 1 loss 2.3\n")
    rc, _, err = _run(["diagnose", str(run), "--offline", "--strict", "--rules", str(pack)], capsys)
    _one_line_error(rc, err)
    assert _names_line(err), err


def test_malformed_pack_lenient_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without --strict a broken third-party pack is disabled, not fatal; the report says where it broke."""
    pack = _bad_pack(tmp_path)
    run = tmp_path / "run"
    run.mkdir()
    (run / "train.log").write_text("step 1 loss 2.3\n")
    rc, out, err = _run(["diagnose", str(run), "--offline", "--format", "json", "--rules", str(pack)], capsys)
    if rc == 2:
        _one_line_error(rc, err)
        assert _names_line(err), err
    else:
        _no_crash(rc, out, err)
        assert _names_line(" ".join(json.loads(out).get("warnings", [])) + err), out


def test_missing_run_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = _run(["diagnose", str(tmp_path / "nope"), "--offline"], capsys)
    _one_line_error(rc, err)
    assert "nope" in err


def test_run_dir_is_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "train.log"
    f.write_text("hello\n")
    rc, _, err = _run(["diagnose", str(f), "--offline"], capsys)
    _one_line_error(rc, err)


def test_missing_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = _run(["diagnose", "--log", str(tmp_path / "none.log"), "--offline"], capsys)
    _one_line_error(rc, err)


def test_nothing_to_diagnose(capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = _run(["diagnose", "--offline"], capsys)
    _one_line_error(rc, err)


def _odd_logs() -> dict[str, bytes]:
    gz = gzip.compress(b"step 1 loss 2.3\nstep 2 loss nan\nTraceback (most recent call last):\n" * 50)
    return {
        "binary": bytes(range(256)) * 64 + b"\x00\xff\xfe" * 1000,
        "empty": b"",
        "long_line": b"step 1 loss 2.30\n" + b"x" * (5 * 1024 * 1024) + b"\nstep 2 loss 2.29\n",
        "gz": gz,
        "bad_utf8": b"step 1 loss 2.3\n\xff\xfe\xc3\x28 garbage \x80\x81\nRuntimeError: boom\xff\n",
    }


@pytest.mark.parametrize("kind", sorted(_odd_logs()))
def test_odd_log_in_run_dir(kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    run.mkdir()
    name = "train.log.gz" if kind == "gz" else "train.log"
    (run / name).write_bytes(_odd_logs()[kind])
    rc, out, err = _run(["diagnose", str(run), "--offline", "--format", "json"], capsys)
    _no_crash(rc, out, err)


@pytest.mark.parametrize("kind", sorted(_odd_logs()))
def test_odd_log_given_with_log(kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / ("train.log.gz" if kind == "gz" else "train.log")
    f.write_bytes(_odd_logs()[kind])
    rc, out, err = _run(["diagnose", "--log", str(f), "--offline", "--format", "json"], capsys)
    _no_crash(rc, out, err)


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root reads any file")
def test_unreadable_log_given_with_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "train.log"
    f.write_text("step 1 loss 2.3\n")
    f.chmod(0)
    try:
        rc, out, err = _run(["diagnose", "--log", str(f), "--offline", "--format", "json"], capsys)
    finally:
        f.chmod(0o644)
    _no_crash(rc, out, err)


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root reads any file")
def test_unreadable_file_in_run_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "train.log").write_text("step 1 loss 2.3\nTraining completed\n")
    bad = run / "stderr"
    bad.write_text("secret\n")
    bad.chmod(0)
    try:
        rc, out, err = _run(["diagnose", str(run), "--offline", "--format", "json"], capsys)
    finally:
        bad.chmod(0o644)
    _no_crash(rc, out, err)


def test_dangling_symlink_log_in_run_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "train.log").write_text("step 1 loss 2.3\n")
    (run / "stderr").symlink_to(tmp_path / "gone")
    rc, out, err = _run(["diagnose", str(run), "--offline", "--format", "json"], capsys)
    _no_crash(rc, out, err)


def test_log_is_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "train.log").mkdir()
    rc, _, err = _run(["diagnose", "--log", str(tmp_path / "train.log"), "--offline"], capsys)
    _one_line_error(rc, err)


def test_unreadable_run_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        pytest.skip("root reads any directory")
    run = tmp_path / "run"
    run.mkdir()
    run.chmod(0)
    try:
        rc, _, err = _run(["diagnose", str(run), "--offline"], capsys)
    finally:
        run.chmod(0o755)
    _one_line_error(rc, err)


def test_eval_bad_inputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = _run(["eval", str(tmp_path / "missing")], capsys)
    _one_line_error(rc, err)
    (tmp_path / "cases").mkdir()
    rc, _, err = _run(["eval", str(tmp_path / "cases")], capsys)  # no expected.yaml anywhere
    _one_line_error(rc, err)
    labels = tmp_path / "labels"
    labels.mkdir()
    (labels / "c1.yaml").write_text("expected: [unclosed\n")
    (tmp_path / "cases" / "c1").mkdir()
    rc, _, err = _run(["eval", str(tmp_path / "cases"), str(labels)], capsys)
    _one_line_error(rc, err)
    assert "c1.yaml:" in err


def test_subprocess_error_is_one_line(tmp_path: Path) -> None:
    """The real entry point: stderr is one line, no traceback, exit 2."""
    r = subprocess.run(
        [sys.executable, "-m", "mldebug_rules", "diagnose", str(tmp_path / "nope"), "--offline"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    _one_line_error(r.returncode, r.stderr)
