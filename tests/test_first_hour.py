"""Issue 24, "the first hour of a real user", from the user's command down (offline): bundles that merge,
the tool's own outputs never read as evidence, no verdict on nothing, the root rank's own exception cited,
the terminal report (colour, wrapping, --no-wrap, progress, help) and byte-identical JSON."""

from __future__ import annotations

import json
import os
import pty
import select
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "fixtures"
CLI = [sys.executable, "-m", "mldebug_rules"]
SCHEMA = "mldebug-rules/bundle/v1"
_ENV = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "COLUMNS", "FORCE_COLOR")}


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, timeout=300, env=env or _ENV, cwd=REPO
    )


def _json(*args: str) -> dict[str, Any]:
    r = _cli(*args, "--format", "json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _cited(rep: dict[str, Any]) -> list[str]:
    return [e["source"] for h in rep["hypotheses"] for e in h["evidence"]]


def _bundle(path: Path, host: str, code: int) -> Path:
    doc = {
        "schema": SCHEMA,
        "host": host,
        "facts": [
            {
                "kind": "kernel.xid",
                "attrs": {"code": code, "hardware": True},
                "file": "dmesg",
                "line": 7,
                "text": f"NVRM: Xid (PCI:0000:3b:00): {code}, pid=2741, name=python, GPU has fallen off the bus.",
            }
        ],
    }
    path.write_text(json.dumps(doc, indent=1))
    return path


# --- bundles ---------------------------------------------------------------------------------------------
def test_bundle_glob_and_shell_expanded_bundles_merge(tmp_path: Path) -> None:
    for i in (1, 2, 3):
        _bundle(tmp_path / f"node{i}.mldebug.json", f"node{i}", 79)
    quoted = _json("diagnose", "--bundle", str(tmp_path / "node*.mldebug.json"), "--offline")
    probe = next(p for p in quoted["probes"] if p["name"] == "bundle")
    assert probe["status"] == "ok" and probe["detail"].count("fact(s)") == 3, probe
    assert quoted["hypotheses"][0]["id"] == "gpu_hardware_fault"
    assert {s.split(":")[0] for s in _cited(quoted)} == {"node1", "node2", "node3"}  # every node cited

    expanded = sorted(str(p) for p in tmp_path.glob("node*.mldebug.json"))  # what the shell passes
    shell = _json("diagnose", "--bundle", *expanded, "--offline")
    assert shell["hypotheses"] == quoted["hypotheses"]

    r = _cli("diagnose", "--bundle", str(tmp_path / "nomatch*.mldebug.json"), "--offline")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "no file matches" in r.stderr


def test_a_file_that_is_not_a_bundle_reads_nothing(tmp_path: Path) -> None:
    notb = tmp_path / "notes.json"
    notb.write_text('{"a": 1}\n')
    rep = _json("diagnose", "--bundle", str(notb), "--offline")
    assert rep["verdict"] == "uncertain"
    assert [n["problem"] for n in rep["inputs"]] == ["not_a_bundle"]
    assert "nothing to read" in rep["inputs"][0]["text"] and "Nothing to read" in rep["next_action"]
    text = _cli("diagnose", "--bundle", str(notb), "--offline").stdout
    assert f"input: --bundle {notb}: not a bundle" in text


# --- the tool's own outputs ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("fmt", "name"), [("text", "diagnosis.txt"), ("markdown", "report.log"), ("json", "diag.out")]
)
def test_own_report_in_the_run_dir_is_never_evidence(tmp_path: Path, fmt: str, name: str) -> None:
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "gpu_throttling", run)
    before = _json("diagnose", str(run), "--offline")
    with open(run / name, "w") as out:  # diagnose RUN > RUN/diagnosis.txt
        subprocess.run(
            [*CLI, "diagnose", str(run), "--offline", "--format", fmt], stdout=out, env=_ENV, check=True
        )
    after = _json("diagnose", str(run), "--offline")
    assert not [s for s in _cited(after) if s.startswith(name)], _cited(after)
    assert [h["id"] for h in after["hypotheses"]] == [h["id"] for h in before["hypotheses"]]
    assert after["verdict"] == before["verdict"]
    assert {"source": name, "problem": "own_output"}.items() <= after["inputs"][0].items()


def test_healthy_run_with_its_report_saved_stays_healthy(tmp_path: Path) -> None:
    """The issue's reproducer: a healthy run became `gpu_oom` citing diagnosis.txt:14."""
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "healthy" / "hf_trainer_glue", run)
    (run / "notes.txt").write_text("step 1 loss 2.0\nCUDA out of memory. Tried to allocate 2.00 GiB\n")
    with open(run / "diagnosis.txt", "w") as out:
        subprocess.run([*CLI, "diagnose", str(run), "--offline"], stdout=out, env=_ENV, check=True)
    (run / "notes.txt").unlink()  # the report now quotes a CUDA OOM that the run no longer holds
    rep = _json("diagnose", str(run), "--offline")
    assert rep["verdict"] == "no_failure", rep["hypotheses"]
    assert "gpu_oom" not in [h["id"] for h in rep["hypotheses"]]


def test_named_outputs_bundles_as_logs_and_dot_mldebug_are_skipped(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "train.log").write_text("step 1 loss 2.0\nstep 2 loss 1.9\n")
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    (run / "summary.mldebug.txt").write_text(oom)  # by name
    _bundle(run / "bundle-copy.txt", "n9", 79)  # a bundle saved under a log's name: by content
    (run / ".mldebug").mkdir()
    (run / ".mldebug" / "smoke-1.out").write_text(oom)
    rep = _json("diagnose", str(run), "--offline")
    assert rep["hypotheses"] == [] or all(h["id"] != "gpu_oom" for h in rep["hypotheses"])
    assert sorted(n["source"] for n in rep["inputs"]) == ["bundle-copy.txt", "summary.mldebug.txt"]
    named = _json("diagnose", "--log", str(run / "summary.mldebug.txt"), "--offline")
    assert named["verdict"] == "uncertain" and named["hypotheses"] == []


# --- nothing to read -----------------------------------------------------------------------------------------
def test_empty_log_is_nothing_to_read_not_no_failure(tmp_path: Path) -> None:
    for content in ("", "\n\n   \n"):
        log = tmp_path / "train.log"
        log.write_text(content)
        rep = _json("diagnose", "--log", str(log), "--offline")
        assert rep["verdict"] == "uncertain"
        assert rep["inputs"][0]["problem"] == "empty" and "nothing to read" in rep["inputs"][0]["text"]
    text = _cli("diagnose", "--log", str(log), "--offline").stdout
    assert "NO FAILURE" not in text and "the file is empty; nothing to read" in text


def test_training_log_passed_as_kernel_log_is_nothing_to_read() -> None:
    log = FIXTURES / "healthy" / "hf_trainer_glue" / "train.log"
    rep = _json("diagnose", "--kernel-log", str(log), "--offline")
    assert rep["verdict"] == "uncertain" and rep["inputs"][0]["problem"] == "no_kernel_lines"
    # a real kernel log is read as one
    dmesg = next(p for p in sorted(FIXTURES.glob("*/dmesg*")) if p.stat().st_size > 0)
    assert "inputs" not in _json("diagnose", "--kernel-log", str(dmesg), "--offline")


def test_empty_run_directory_and_run_of_empty_files(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    rep = _json("diagnose", str(run), "--offline")
    assert rep["verdict"] == "uncertain" and rep["inputs"][0]["problem"] == "nothing_found"
    (run / "train.log").write_text("")
    (run / "stderr").write_text("")
    rep = _json("diagnose", str(run), "--offline")
    assert rep["verdict"] == "uncertain" and "only 2 empty file(s)" in rep["inputs"][0]["text"]
    assert "Nothing to read" in rep["next_action"]


def test_a_healthy_run_with_an_empty_stderr_is_still_healthy(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "healthy" / "hf_trainer_glue", run)
    (run / "stderr").write_text("")
    rep = _json("diagnose", str(run), "--offline")
    assert rep["verdict"] == "no_failure" and "inputs" not in rep


# --- multi-rank roots -------------------------------------------------------------------------------------
def test_root_rank_exception_is_cited_not_only_its_exit_code() -> None:
    rep = _json("diagnose", str(FIXTURES / "dist_peer_crash"), "--offline")
    top = rep["hypotheses"][0]
    assert top["id"] == "distributed_peer_failure"
    cited = {(e["source"], e["text"]) for e in top["evidence"]}
    assert ("train.log:19", "[rank1]: KeyError: 'x'") in cited
    first = rep["ranks"]["first_failure"]
    assert first["rank"] == 1 and first["exception"]["source"] == "train.log:19"
    assert first["exception"]["type"] == "KeyError"
    text = _cli("diagnose", str(FIXTURES / "dist_peer_crash"), "--offline").stdout
    assert "raised by rank 1: train.log:19: [rank1]: KeyError: 'x'" in text


def test_each_rank_own_exception_in_its_own_file(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "rank0.log").write_text(
        'step 5 loss 1.0\nTraceback (most recent call last):\n  File "t.py", line 9, in <module>\n'
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer\n"
    )
    (run / "rank1.log").write_text(
        'step 5 loss 1.0\nTraceback (most recent call last):\n  File "t.py", line 3, in <module>\n'
        "ZeroDivisionError: division by zero\n"
    )
    rep = _json("diagnose", str(run), "--offline")
    ranks = rep["ranks"]
    assert ranks["first_failure"]["rank"] == 1
    assert ranks["first_failure"]["exception"]["source"] == "rank1.log:4"
    assert ranks["cascades"][0]["exception"]["source"] == "rank0.log:4"
    top = rep["hypotheses"][0]
    assert top["id"] == "distributed_peer_failure"
    assert ("rank1.log:4", "ZeroDivisionError: division by zero") in {
        (e["source"], e["text"]) for e in top["evidence"]
    }


# --- determinism -----------------------------------------------------------------------------------------
def test_offline_json_is_byte_identical_with_input_notes(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "dist_peer_crash", run)
    (run / "diagnosis.txt").write_text(_cli("diagnose", str(run), "--offline").stdout)
    (run / "empty.log").write_text("")
    a = _cli("diagnose", str(run), "--offline", "--format", "json").stdout
    b = _cli("diagnose", str(run), "--offline", "--format", "json").stdout
    assert a == b and json.loads(a)["schema"] == "mldebug-rules/report/v1"


# --- the terminal report -----------------------------------------------------------------------------------
def _on_tty(args: list[str], env: dict[str, str], cols: int = 72) -> str:
    """Run the CLI with stdout on a pseudo-terminal `cols` wide; what it wrote."""
    import fcntl
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, cols, 0, 0))
    p = subprocess.Popen([*CLI, *args], stdout=slave, stderr=subprocess.PIPE, env=env, cwd=REPO)
    os.close(slave)
    chunks: list[bytes] = []
    while True:
        ready, _, _ = select.select([master], [], [], 60)
        if not ready:
            break
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    p.wait(timeout=60)
    os.close(master)
    return b"".join(chunks).decode("utf-8", "replace").replace("\r\n", "\n")


@pytest.mark.skipif(sys.platform == "win32", reason="needs a pseudo-terminal")
def test_colour_and_wrapping_only_on_a_tty_and_never_with_no_color() -> None:
    args = ["diagnose", str(FIXTURES / "dist_peer_crash"), "--offline"]
    coloured = _on_tty(args, _ENV, cols=72)
    assert "\x1b[" in coloured
    plain = _on_tty(args, dict(_ENV, NO_COLOR="1"), cols=72)
    assert "\x1b[" not in plain
    assert max(len(line) for line in plain.splitlines()) <= 72
    assert "     seen: train.log:19: [rank1]: KeyError: 'x'" in plain
    whole = _on_tty([*args, "--format", "text", "--no-wrap"], dict(_ENV, NO_COLOR="1"), cols=72)
    long_line = [line for line in whole.splitlines() if "seen: train.log:28:" in line]
    assert long_line and "Connection closed by peer" in long_line[0] and len(long_line[0]) > 72
    assert "reporting an error" in long_line[0]  # the evidence line kept whole, not cut
    piped = _cli(*args).stdout
    assert "\x1b[" not in piped
    assert "".join(piped.split()) == "".join(plain.split())  # the same words, whatever the rendering


def test_progress_bar_on_long_scans_on_a_tty_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from mldebug_rules.collectors import logscan

    log = tmp_path / "big.log"
    log.write_text("step 1 loss 2.0\n" * 20000)
    scanner = logscan.Scanner([logscan.Pattern("oom", "out of memory")], chunk_size=4096)
    monkeypatch.setattr(logscan, "PROGRESS_MIN_BYTES", 1000)
    monkeypatch.setattr(logscan, "_stderr_is_tty", lambda: False)
    scanner.scan_path(str(log))
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(logscan, "_stderr_is_tty", lambda: True)
    res = scanner.scan_path(str(log))
    err = capsys.readouterr().err
    assert res.total_lines == 20000 and "reading big.log" in err


def test_help_on_every_option_and_usage_lines() -> None:
    from mldebug_rules.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    for name in ("diagnose", "collect", "rules", "eval", "gate"):
        for action in sub.choices[name]._actions:
            assert action.help, f"{name} {action.option_strings or action.dest}: no --help text"
    assert "--no-wrap" in _cli("diagnose", "--help").stdout
    assert "rules new NAME" in _cli("rules", "--help").stdout
    assert "-- COMMAND" in _cli("smoke", "run", "--help").stdout
    assert "-- COMMAND" in _cli("--help").stdout and "docs/cli.md" in _cli("--help").stdout


def test_user_docs_stand_on_their_own() -> None:
    """docs/cli.md covers the CLI, exit codes, the report schema and the run-directory conventions; the README
    points there; no user document sends a clone's reader to ../shared."""
    cli_md = (REPO / "docs" / "cli.md").read_text()
    for needed in (
        "## Exit codes",
        "mldebug-rules/report/v1",
        "## Run directories",
        "-- COMMAND",
        "NO_COLOR",
    ):
        assert needed in cli_md, needed
    assert "docs/cli.md" in (REPO / "README.md").read_text()
    for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        assert "../shared" not in doc.read_text() and "CONTRACT.md" not in doc.read_text(), doc
