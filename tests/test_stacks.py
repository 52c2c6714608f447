"""The stacks probe's analysis on recorded samples (no ptrace needed), its fallbacks, and the kernel-event
window that keeps another process's old OOM kill out of a live run's diagnosis."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from mldebug_rules.collectors import stacks
from mldebug_rules.collectors.base import CommandResult, Context
from mldebug_rules.collectors.kernel_live import probe_kernel_live
from mldebug_rules.collectors.procinfo import read_proc
from mldebug_rules.collectors.stack_parse import classify, load_table, parse_pyspy_json
from mldebug_rules.engine.facts import FactRegistry

SITE = "/opt/venv/lib/python3.11/site-packages/"
STD = "/usr/lib/python3.11/"


def _frame(name: str, file: str, line: int = 0, native: bool = False) -> dict[str, Any]:
    return {"name": name, "filename": file, "line": line, "module": file if native else None}


def _thread(
    pid: int, tid: int, name: str, frames: list[dict[str, Any]], active: bool = False
) -> dict[str, Any]:
    return {
        "pid": pid,
        "thread_id": tid,
        "os_thread_id": tid,
        "thread_name": name,
        "active": active,
        "frames": frames,
    }


def _sample(threads: list[dict[str, Any]], cpu: float, at: float, **proc: Any) -> dict[str, Any]:
    return {
        "status": "ok",
        "detail": "",
        "threads": threads,
        "proc": {"cpu_s": cpu, "at": at, "state": "S", **proc},
    }


def test_data_stall_recording_names_worker_and_its_wait() -> None:
    main = [
        _frame("poll", "/usr/lib/libc.so.6", native=True),
        _frame("_try_get_data", SITE + "torch/utils/data/dataloader.py", 1133),
        _frame("__next__", SITE + "torch/utils/data/dataloader.py", 631),
        _frame("train", "/home/me/proj/train.py", 88),
    ]
    worker = [
        _frame("__libc_read", "/usr/lib/libc.so.6", native=True),
        _frame("__getitem__", "/home/me/proj/data.py", 41),
        _frame("_worker_loop", SITE + "torch/utils/data/_utils/worker.py", 308),
    ]
    rec = {
        "interval_s": 2.0,
        "silent_s": 700.0,
        "processes": [
            {
                "pid": 100,
                "ppid": 1,
                "samples": [_sample([_thread(100, 100, "MainThread", main)], 5.0, 1.0)] * 2,
            },
            {
                "pid": 101,
                "ppid": 100,
                "samples": [
                    _sample(
                        [_thread(101, 101, "MainThread", worker)],
                        1.0,
                        1.0,
                        syscall="read",
                        blocked_path="/data/x.fifo",
                        blocked_fs="fifo",
                    )
                ]
                * 2,
            },
        ],
    }
    rows = {a["pid"]: (a, text) for a, text, _rank in stacks.analyse(rec)}
    m, mtext = rows[100]
    w, wtext = rows[101]
    assert (m["role"], m["wait"], m["moved"], m["sampled_twice"]) == (
        "trainer",
        "dataloader_queue",
        False,
        True,
    )
    assert "_try_get_data (torch/utils/data/dataloader.py:1133)" in mtext and "train (train.py:88)" in mtext
    assert (w["role"], w["worker"], w["wait"], w["blocked_fs"]) == ("worker", 0, "io", "fifo")
    assert "DataLoader worker 0 of pid 100" in wtext and "/data/x.fifo (fifo)" in wtext


def test_moved_compares_the_main_thread_only() -> None:
    a = _thread(7, 7, "MainThread", [_frame("forward", "/p/model.py", 10)])
    b = _thread(7, 7, "MainThread", [_frame("backward", SITE + "torch/autograd/__init__.py", 200)])
    bg1 = _thread(7, 8, "watchdog", [_frame("sleep_a", "/p/w.py", 1)])
    bg2 = _thread(7, 8, "watchdog", [_frame("sleep_b", "/p/w.py", 2)])
    rec = {"processes": [{"pid": 7, "samples": [_sample([a, bg1], 0.0, 1.0), _sample([b, bg1], 1.0, 3.0)]}]}
    assert stacks.analyse(rec)[0][0]["moved"] is True
    rec = {"processes": [{"pid": 7, "samples": [_sample([a, bg1], 0.0, 1.0), _sample([a, bg2], 1.0, 3.0)]}]}
    assert stacks.analyse(rec)[0][0]["moved"] is False


def test_cpu_share_is_relative_to_the_node_load() -> None:
    t = _thread(7, 7, "MainThread", [_frame("spin", "/p/train.py", 3)], active=True)
    rec = {
        "cores": 2,
        "load": 8.0,
        "processes": [{"pid": 7, "samples": [_sample([t], 10.0, 100.0), _sample([t], 10.5, 102.0)]}],
    }
    attrs = stacks.analyse(rec)[0][0]
    assert (
        attrs["cpu_frac"] == 0.25 and attrs["cpu_busy"] == 1.0 and attrs["hot_frame"] == "spin (train.py:3)"
    )


def test_queue_and_join_waits_are_not_lock_waits() -> None:
    table = load_table()
    lock_native = _frame("PyThread_acquire_lock_timed", "/usr/lib/libpython3.11.so", native=True)
    q = parse_pyspy_json([_thread(1, 2, "pool", [lock_native, _frame("get", STD + "queue.py", 180)])])[0]
    j = parse_pyspy_json(
        [
            _thread(
                1, 1, "MainThread", [lock_native, _frame("_wait_for_tstate_lock", STD + "threading.py", 1139)]
            )
        ]
    )[0]
    plain = parse_pyspy_json([_thread(1, 3, "t", [lock_native, _frame("save", "/p/ckpt.py", 9)])])[0]
    assert [classify(t, table).wait for t in (q, j, plain)] == ["queue", "join", "lock"]


def test_malformed_pyspy_output_is_skipped_not_raised() -> None:
    assert parse_pyspy_json({"not": "a list"}) == []
    assert parse_pyspy_json([None, 3, {"frames": [None, {"name": None, "line": "x"}]}])[0].frames[0].line == 0
    rec = {"processes": [{"pid": 5, "samples": [{"status": "ok", "threads": "garbage"}, "junk"]}, "junk"]}
    attrs, _text, _ = stacks.analyse(rec)[0]
    assert attrs["method"] == "py-spy" and attrs["wait"] == ""


def test_without_pyspy_the_proc_half_still_answers_and_says_so() -> None:
    r = stacks.dump(None, os.getpid(), native=False, run=lambda argv, t: CommandResult("ok"))
    assert r["status"] == "no_pyspy"
    rec = {
        "pyspy": False,
        "processes": [{"pid": 9, "samples": [{**r, "proc": {"state": "D", "cpu_s": 1.0, "at": 1.0}}] * 2}],
    }
    attrs, text, _ = stacks.analyse(rec)[0]
    assert attrs["method"] == "proc" and attrs["state"] == "D" and "py-spy: no_pyspy" in text


def test_ptrace_refusal_is_reported_as_such() -> None:
    def refuse(argv: Any, timeout: float) -> CommandResult:
        return CommandResult(
            "unavailable", stderr="Error: Operation not permitted (os error 1)", returncode=1
        )

    assert stacks.dump("/usr/bin/py-spy", 1, native=False, run=refuse)["status"] == "no_ptrace"


def test_a_dump_that_hangs_is_a_timeout() -> None:
    r = stacks.dump(
        "/usr/bin/py-spy", 1, native=True, run=lambda argv, t: CommandResult("timeout", stderr="no answer")
    )
    assert r["status"] == "timeout"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")
def test_proc_names_the_fifo_a_reader_blocks_on(tmp_path: Path) -> None:
    fifo = tmp_path / "feed.fifo"
    os.mkfifo(fifo)
    hold = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
    p = subprocess.Popen([sys.executable, "-c", f"f=open({str(fifo)!r},'rb'); f.read(1)"])
    try:
        for _ in range(100):
            st = read_proc(p.pid)
            if st.syscall == "read":
                break
            time.sleep(0.05)
        assert (st.syscall, st.blocked_path, st.blocked_fs) == ("read", str(fifo), "fifo")
        assert st.state == "S" and st.cpu_s >= 0
    finally:
        p.kill()
        p.wait()
        os.close(hold)


def test_bundle_keeps_the_raw_stacks() -> None:
    from mldebug_rules.collectors.base import ProbeOutput

    from mldebug_rules.bundle import build_bundle

    out = ProbeOutput(
        "stacks",
        payload={
            "stacks": {
                "schema": stacks.SCHEMA,
                "processes": [
                    {"pid": 1, "cmdline": "python train.py --token hf_abcdefghijklmnopqrstuvwxyz012345"}
                ],
            }
        },
    )
    doc = build_bundle([out], [], offline=False, now=0.0)
    assert doc["stacks"]["processes"][0]["pid"] == 1
    assert "hf_abcdefghijklmnopqrstuvwxyz012345" not in json.dumps(doc)


def _kernel_ctx(tmp_path: Path, processes: list[dict[str, Any]], dmesg: str, now: float) -> Context:
    return Context(
        registry=FactRegistry.load(),
        run_dirs=[tmp_path],
        offline=False,
        now=now,
        options={"recorded": {"processes": processes, "dmesg": dmesg, "boot_time": 0.0}},
    )


def test_an_old_oom_kill_of_another_process_is_context_not_evidence(tmp_path: Path) -> None:
    now = 100_000.0
    trainer = {
        "pid": 500,
        "ppid": 1,
        "name": "python",
        "cmdline": ["python", "train.py"],
        "cwd": str(tmp_path),
        "create_time": now - 600,
    }
    dmesg = (
        "[ 1000.0] Memory cgroup out of memory: Killed process 77 (python) total-vm:1kB, anon-rss:9kB\n"
        f"[ {now - 60:.1f}] Out of memory: Killed process 500 (python) total-vm:1kB, anon-rss:9kB\n"
    )
    out = probe_kernel_live(_kernel_ctx(tmp_path, [trainer], dmesg, now))
    kills = [f for f in out.facts if f.kind == "kernel.oom_kill"]
    assert [f.attrs["pid"] for f in kills] == [500]
    assert "context only" in out.detail and "Killed process 77" in out.detail


def test_an_old_event_naming_the_run_s_process_is_kept(tmp_path: Path) -> None:
    now = 100_000.0
    trainer = {
        "pid": 77,
        "ppid": 1,
        "name": "python",
        "cmdline": ["python", "train.py"],
        "cwd": str(tmp_path),
        "create_time": now - 600,
    }
    dmesg = "[ 1000.0] Out of memory: Killed process 77 (python) total-vm:1kB, anon-rss:9kB\n"
    out = probe_kernel_live(_kernel_ctx(tmp_path, [trainer], dmesg, now))
    assert [f.attrs["pid"] for f in out.facts if f.kind == "kernel.oom_kill"] == [77]


def test_with_no_live_process_every_event_is_kept(tmp_path: Path) -> None:
    dmesg = "[ 1000.0] Out of memory: Killed process 77 (python) total-vm:1kB, anon-rss:9kB\n"
    out = probe_kernel_live(_kernel_ctx(tmp_path, [], dmesg, 100_000.0))
    assert [f.attrs["pid"] for f in out.facts if f.kind == "kernel.oom_kill"] == [77]


FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
STACK_BUNDLES = [
    *sorted(FIXTURES.glob("**/hang_stacks_*/node.mldebug.json")),
    FIXTURES / "hang_stacks_control_slow_trainer" / "node.mldebug.json",
]


@pytest.mark.parametrize("bundle", STACK_BUNDLES, ids=lambda p: p.parent.name)
def test_recorded_raw_stacks_replay_to_the_bundle_s_facts(bundle: Path) -> None:
    """`collect` keeps the raw stacks beside the facts, and the analysis of the raw stacks gives those facts."""
    doc = json.loads(bundle.read_text())
    assert doc["stacks"]["processes"], "collect wrote no raw stacks"
    recorded = sorted(
        (f["attrs"]["pid"], f["attrs"]["wait"], f["attrs"]["moved"], f["attrs"]["lock_waiters"])
        for f in doc["facts"]
        if f["kind"] == "stack.process"
    )
    replayed = sorted(
        (a["pid"], a["wait"], a["moved"], a["lock_waiters"]) for a, _t, _r in stacks.analyse(doc["stacks"])
    )
    assert recorded == replayed


def test_merged_nodes_name_the_rank_outside_the_collective(tmp_path: Path) -> None:
    """One bundle per node (here the recorded gloo job split by rank, each half on its own host): the merged
    diagnosis names rank 1, on the other node, as the rank that is not in the collective."""
    doc = json.loads((FIXTURES / "hang_stacks_gloo_desync" / "node.mldebug.json").read_text())
    paths = []
    for rank, host in ((0, "node-a"), (1, "node-b")):
        part = dict(
            doc,
            host=host,
            facts=[
                dict(f, host=host)
                for f in doc["facts"]
                if f["kind"] != "stack.process" or f.get("rank") == rank
            ],
        )
        part.pop("stacks", None)
        path = tmp_path / f"{host}.mldebug.json"
        path.write_text(json.dumps(part))
        paths.append(str(path))
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "mldebug_rules",
            "diagnose",
            "--format",
            "json",
            "--bundle",
            paths[0],
            "--bundle",
            paths[1],
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    top = json.loads(out.stdout)["hypotheses"][0]
    assert top["id"] == "distributed_desync"
    cited = [e for e in top["evidence"] if "rank 1 trainer" in e.get("text", "")]
    assert cited and "node-b" in cited[0]["source"] and "evaluate (hang_scenarios.py:" in cited[0]["text"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="FIFOs")
def test_a_fifo_named_like_a_checkpoint_is_not_opened(tmp_path: Path) -> None:
    from mldebug_rules.collectors.checkpoints import probe_checkpoints

    os.mkfifo(tmp_path / "model.bin")
    (tmp_path / "ok.pt").write_bytes(b"\x80\x02}q\x00.")
    ctx = Context(registry=FactRegistry.load(), run_dirs=[tmp_path])
    out = probe_checkpoints(ctx)  # would block forever in open() on the FIFO
    assert [f.file for f in out.facts] == ["ok.pt"]
    assert "model.bin: not a regular file" in out.detail
