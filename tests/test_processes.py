"""The process probe on a recorded psutil snapshot (two torchrun launches in one run directory, a D-state rank,
a zombie worker, a `tail -f` reader) against a real run directory: states, children, duplicates, and whether
the process writing the log is alive and how long the log has been silent."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from mldebug_rules.collectors.base import Context
from mldebug_rules.collectors.processes import probe_processes
from mldebug_rules.engine.facts import FactRegistry

DATA = Path(__file__).parent / "data" / "recorded"
NOW = 1709640000.0


def _snapshot(run: Path) -> list[dict[str, Any]]:
    text = (DATA / "ps-torchrun-duplicate.json").read_text().replace("/runs/r7", str(run))
    return json.loads(text)


def _run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "r7"
    run.mkdir()
    log = run / "train.log"
    log.write_text("".join(f"2024-03-05 10:{m:02d}:00 step {m * 50} loss 1.9\n" for m in range(10)))
    os.utime(log, (NOW - 1800, NOW - 1800))  # silent for 30 minutes; it logged once a minute
    return run


def _probe(run: Path, snapshot: list[dict[str, Any]]) -> dict[str, Any]:
    ctx = Context(
        registry=FactRegistry.load(),
        run_dirs=[run],
        offline=False,
        options={"recorded": {"processes": snapshot}},
        now=NOW,
    )
    out = probe_processes(ctx)
    return {
        "procs": {f.attrs["pid"]: f.attrs for f in out.facts if f.kind == "process"},
        "writers": [f for f in out.facts if f.kind == "log.writer"],
        "detail": out.detail,
    }


def test_states_children_duplicates_and_the_live_writer(tmp_path: Path) -> None:
    run = _run_dir(tmp_path)
    got = _probe(run, _snapshot(run))
    procs = got["procs"]
    assert {p: a["state"] for p, a in procs.items() if p in (201, 202, 204)} == {
        201: "sleeping",
        202: "disk-sleep",
        204: "zombie",
    }
    assert procs[201]["children"] == 2 and procs[201]["age_s"] == round(NOW - 1709630102.0, 1)
    assert procs[201]["rss_mb"] > 8000 and procs[201]["threads"] == 57
    assert {a["instances"] for a in procs.values()} == {2}
    assert all(a["in_run_dir"] for a in procs.values())
    ((w,),) = [got["writers"]]
    assert w.file == "train.log"
    assert (w.attrs["alive"], w.attrs["pid"], w.attrs["writers"]) == (True, 201, 2)
    assert (w.attrs["silent_s"], w.attrs["interval_s"], w.attrs["silence_factor"]) == (1800.0, 60.0, 30.0)


def test_a_zombie_or_a_reader_is_not_a_live_writer(tmp_path: Path) -> None:
    run = _run_dir(tmp_path)
    snap = _snapshot(run)
    for e in snap:
        if e["pid"] in (201, 203):
            e["status"] = "zombie"  # the trainer died; its parent has not reaped it yet
    got = _probe(run, snap)
    ((w,),) = [got["writers"]]
    assert (w.attrs["alive"], w.attrs["pid"], w.attrs["writers"]) == (False, -1, 0)  # `tail` only reads


def test_a_stopped_trainer_is_reported_stopped(tmp_path: Path) -> None:
    run = _run_dir(tmp_path)
    snap = _snapshot(run)
    next(e for e in snap if e["pid"] == 201)["status"] = "stopped"  # SIGSTOP / Ctrl-Z
    got = _probe(run, snap)
    assert got["procs"][201]["state"] == "stopped"
    ((w,),) = [got["writers"]]
    assert (w.attrs["alive"], w.attrs["state"]) == (True, "stopped")


def test_processes_elsewhere_are_left_out(tmp_path: Path) -> None:
    run = _run_dir(tmp_path)
    other = tmp_path / "elsewhere"
    other.mkdir()
    got = _probe(other, _snapshot(run))
    assert got["procs"] == {} and got["writers"] == []
    assert got["detail"] == "0 training process(es), 0 in the run directory"
