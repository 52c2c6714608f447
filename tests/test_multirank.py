"""Many ranks and nodes (issue 9): rank/host on facts, the cross-rank timeline, Flight Recorder dumps,
stragglers and stalls, and the report's ``ranks`` block."""

from __future__ import annotations

import json
import os
import pickle
from datetime import datetime, timezone
from pathlib import Path

import pytest
from mldebug_rules.collectors import flightrec, lineinfo

from mldebug_rules.diagnose import Request, diagnose, load_kb
from mldebug_rules.report import build, to_text

WATCHDOG = (
    "[rank{r}]:[E ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=8812, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600049 "
    "milliseconds before timing out."
)
OOM = (
    "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total "
    "capacity of 79.10 GiB of which 1.20 GiB is free."
)


def _report(*run_dirs: Path) -> dict:
    d = diagnose(Request(run_dirs=list(run_dirs), offline=True))
    return build(d)


def _eight_ranks(tmp_path: Path, oom_ts: bool = True) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    for r in range(8):
        lines = [f"2024-05-01 11:59:00,000 - INFO - [rank{r}]: step 100 loss=1.0"]
        if r == 3:
            lines.append("[rank3]: Traceback (most recent call last):")
            lines.append(("2024-05-01 12:00:00,000 " if oom_ts else "") + OOM)
        else:
            lines.append("2024-05-01 12:10:01,000 " + WATCHDOG.format(r=r))
        (run / f"rank{r}.log").write_text("\n".join(lines) + "\n")
    return run


@pytest.mark.parametrize("oom_ts", [True, False])
def test_oom_on_rank3_outranks_seven_watchdog_timeouts(tmp_path: Path, oom_ts: bool) -> None:
    rep = _report(_eight_ranks(tmp_path, oom_ts))
    top = rep["hypotheses"][0]
    assert top["id"] == "gpu_oom"
    assert any(e["source"].startswith("rank3.log") and e.get("rank") == 3 for e in top["evidence"])
    ranks = rep["ranks"]
    assert ranks["count"] == 8
    assert ranks["first_failure"]["rank"] == 3 and ranks["first_failure"]["signature"] == "cuda_oom"
    assert sorted(c["rank"] for c in ranks["cascades"]) == [0, 1, 2, 4, 5, 6, 7]
    assert {c["signature"] for c in ranks["cascades"]} == {"nccl_watchdog_timeout"}
    if oom_ts:
        assert all(c["after_first_s"] == 601.0 for c in ranks["cascades"])
    peer = next(h for h in rep["hypotheses"] if h["id"] == "distributed_peer_failure")
    assert all(e.get("cascade_of_rank") == 3 for e in peer["evidence"] if e.get("role") == "cascade")
    text = to_text(rep)
    assert "first failure: rank 3" in text and "cascades (consequences, not causes)" in text


def test_skewed_clock_still_names_the_root(tmp_path: Path) -> None:
    """Rank 3's clock is 20 s off: its OOM reads later than rank 0's timeout, within the skew window."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "rank0.log").write_text("2024-05-01 12:00:00 " + WATCHDOG.format(r=0) + "\n")
    (run / "rank3.log").write_text("2024-05-01 12:00:20 " + OOM + "\n")
    rep = _report(run)
    assert rep["hypotheses"][0]["id"] == "gpu_oom"
    assert rep["ranks"]["first_failure"]["rank"] == 3
    assert [c["rank"] for c in rep["ranks"]["cascades"]] == [0]


def test_xid79_with_launch_failure_is_hardware(tmp_path: Path) -> None:
    run = tmp_path / "node-017"
    run.mkdir()
    (run / "dmesg.txt").write_text(
        "[Thu May  2 10:00:01 2024] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, "
        "GPU has fallen off the bus.\n"
    )
    (run / "train.log").write_text(
        "step 100 loss 1.0\nRuntimeError: CUDA error: unspecified launch failure\n"
        "CUDA kernel errors might be asynchronously reported at some other API call, "
        "so the stacktrace below might be incorrect.\n"
    )
    rep = _report(run)
    assert rep["hypotheses"][0]["id"] == "gpu_hardware_fault"


@pytest.mark.parametrize(
    ("line", "rank", "host"),
    [
        ("[rank3]:[E ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog", 3, ""),
        ("[Rank 5] Watchdog caught collective operation timeout", 5, ""),
        ("node-017:51212:51544 [5] NCCL INFO Channel 00/32", 5, "node-017"),
        (
            "ERROR:elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 2 (pid: 43)",
            2,
            "",
        ),
        ("[default6]:[rank14]: RuntimeError: boom", 14, ""),
        ("12: torch.OutOfMemoryError: CUDA out of memory", 12, ""),
        ("gpu-a17: [rank9]: RuntimeError", 9, "gpu-a17"),
        ("[rank: 4] Epoch 1", 4, ""),
        # DeepSpeed log_dist / engine lines, both spellings, after the logger's own prefix
        ("[2024-05-01 12:00:03,120] [INFO] [logging.py:96:log_dist] [Rank 3] step=10, skipped=0", 3, ""),
        ("[2024-05-01 12:00:03,120] [INFO] [engine.py:100:_configure] [RANK 3] hello", 3, ""),
        # Megatron's per-rank memory report
        ("[Rank 6] (after 10 iterations) memory (MB) | allocated: 1234.5 | max allocated: 2345.6", 6, ""),
        # elastic agent: the failure line and the ChildFailedError summary
        (
            "[2024-05-01 12:10:05,000] torch.distributed.elastic.multiprocessing.api: [ERROR] failed "
            "(exitcode: -9) local_rank: 3 (pid: 4321) of binary: /usr/bin/python",
            3,
            "",
        ),
        ("  rank      : 11 (local_rank: 3)", 11, ""),
        # srun --label pads task ids; Open MPI --tag-output
        (" 7: RuntimeError: CUDA error: unspecified launch failure", 7, ""),
        ("[1,13]<stderr>:RuntimeError: boom", 13, ""),
        ("[default2]:[rank10]:[E1201 10:05:33.123456 123 ProcessGroupNCCL.cpp:1234] boom", 10, ""),
        (
            "[E626 06:24:44.906457629 ProcessGroupNCCL.cpp:1785] [PG ID 0 PG GUID 0(default_pg) Rank 1] Exception "
            "(either an error or timeout) detected by watchdog at work: 808",
            1,
            "",
        ),
        (
            "[E1206 18:44:12.715588844 ProcessGroupNCCL.cpp:1664] [PG 1 Rank 4] Exception (either an error",
            4,
            "",
        ),
        # NCCL >= 2.23: optional timestamp, then "file.cc:line (function)" before NCCL; [2] is the CUDA device
        (
            "[2024-12-01 10:00:02] node-017:51212:51544 [2] misc/strongstream.cc:395 NCCL WARN Cuda failure "
            "'unspecified launch failure'",
            2,
            "node-017",
        ),
        ("step 10 loss 1.0", None, ""),
    ],
)
def test_rank_and_host_of_line(line: str, rank: int | None, host: str) -> None:
    assert lineinfo.rank_of_line(line) == rank
    assert lineinfo.host_of_line(line) == host


@pytest.mark.parametrize(
    ("line", "in_rank12_log"),
    [
        ("node-001:51212:51544 [4] NCCL WARN Net : Connection closed by remote peer", 12),  # [4]: CUDA device
        ("[default4]:RuntimeError: CUDA error: unspecified launch failure", 12),  # torchrun --tee: local rank
        ("failed (exitcode: 1) local_rank: 4 (pid: 4321) of binary: /usr/bin/python", 12),
        ("[default4]:[rank12]: RuntimeError: boom", 12),
        ("[rank9]: RuntimeError: boom", 9),  # an explicit global rank is believed over the file name
        ("4: RuntimeError: boom", 4),  # srun --label task ids are global
    ],
)
def test_local_rank_markers_yield_to_the_files_rank(line: str, in_rank12_log: int) -> None:
    """On the second node, rank12.log's NCCL [cudaDev] and torchrun [defaultN] say 4: the file's 12 wins."""
    assert lineinfo.rank_of_line(line, file_rank=12) == in_rank12_log


@pytest.mark.parametrize(
    ("line", "ref", "until_ref", "iso"),
    [
        # c10: month unpadded, 9 fractional digits, no thread id
        (
            "[rank4]:[E318 07:39:53.792630246 ProcessGroupNCCL.cpp:616] x",
            "2025-03-18T07:00:00",
            False,
            "2025-03-18T07:39:53.792630",
        ),
        # glog with thread id, after an srun label
        (
            "3: E1201 10:05:33.123456 12345 file.cc:12] msg",
            "2024-11-30T00:00:00",
            False,
            "2024-12-01T10:05:33.123456",
        ),
        # the dated line is in December, the stamp in January: next year
        (
            "[E101 00:10:01.5 ProcessGroupNCCL.cpp:616] x",
            "2024-12-31T23:59:50",
            False,
            "2025-01-01T00:10:01.5",
        ),
        # mtime in January, stamp in December: last year (never after the mtime)
        ("[E1231 23:59:58.0 ProcessGroupNCCL.cpp:616] x", "2025-01-02T08:00:00", True, "2024-12-31T23:59:58"),
        # mtime in December, stamp in March: this year's March, not next year's
        ("[E318 07:39:53.0 ProcessGroupNCCL.cpp:616] x", "2024-12-01T00:00:00", True, "2024-03-18T07:39:53"),
        # glog's log_year_in_prefix: the year is given
        (
            "I20240501 10:05:33.123456 12345 file.cc:12] msg",
            "2030-01-01T00:00:00",
            False,
            "2024-05-01T10:05:33.123456",
        ),
    ],
)
def test_glog_stamps_get_a_year(line: str, ref: str, until_ref: bool, iso: str) -> None:
    def utc(s: str) -> float:
        return datetime.fromisoformat(s).replace(tzinfo=timezone.utc).timestamp()

    assert lineinfo.time_of_line(line, utc(ref), until_ref) == pytest.approx(utc(iso), abs=1e-6)


def test_glog_stamp_without_a_reference_has_no_time() -> None:
    assert lineinfo.time_of_line("[E1201 10:05:33.5 ProcessGroupNCCL.cpp:616] x") is None
    assert lineinfo.time_of_line("E1201 is not a stamp] 10:05") is None


@pytest.mark.parametrize(
    ("path", "rank", "host"),
    [
        ("rank3.log", 3, ""),
        ("logs/train_rank_3_of_8.log", 3, ""),
        ("rank_3.log", 3, ""),
        ("log.rank3", 3, ""),
        ("train-3.log", 3, ""),
        ("out/train_rank003.log", 3, ""),
        ("gpt_rank003_of_064.txt", 3, ""),
        ("slurm-123-4.out", 4, ""),  # slurm-%j-%t.out: %t is SLURM_PROCID
        ("slurm-123.4.out", 4, ""),
        ("train-981234-5.log", 5, ""),  # %x-%j-%t.log
        ("slurm-123_4.out", None, ""),  # slurm-%A_%a.out: an array task, a separate run
        ("train-2024.log", None, ""),  # a year
        ("epoch-3.log", None, ""),
        ("train-981234.log", None, ""),  # a job id
        ("logs/a1b2_0/attempt_0/5/stdout.log", 5, ""),  # torchrun --log-dir: the local rank's directory
        ("node-017/worker_5.log", 5, "node-017"),
        ("slurm-77-gpu-a17.out", None, "gpu-a17"),
        ("exp2/train.log", None, ""),
    ],
)
def test_rank_and_host_of_path(path: str, rank: int | None, host: str) -> None:
    assert lineinfo.rank_of_path(path) == rank
    assert lineinfo.host_of_path(path) == host


def test_srun_label_and_host_dirs_reach_facts(tmp_path: Path) -> None:
    """One merged srun --label log: ranks come from the task prefixes, hosts from directory names."""
    run = tmp_path / "job"
    (run / "node-001").mkdir(parents=True)
    (run / "node-002").mkdir(parents=True)
    (run / "node-001" / "train.log").write_text(
        "0: step 5 loss 1\n1: 2024-05-01 12:10:00 " + WATCHDOG.format(r=1) + "\n"
    )
    (run / "node-002" / "train.log").write_text(
        "2: step 5 loss 1\n2: 2024-05-01 12:00:00 " + OOM.replace("[rank3]: ", "") + "\n"
    )
    d = diagnose(Request(run_dirs=[run], offline=True))
    sigs = {(f.rank, f.host, f.attrs["signature"]) for f in d.facts if f.kind == "log.signature"}
    assert (2, "node-002", "cuda_oom") in sigs and (1, "node-001", "nccl_watchdog_timeout") in sigs
    rep = build(d)
    assert rep["ranks"]["first_failure"]["rank"] == 2 and rep["ranks"]["first_failure"]["host"] == "node-002"


# --- Flight Recorder -------------------------------------------------------------------------------------
class _Evil:
    def __reduce__(self) -> tuple:
        return (os.system, ("echo pwned > /tmp/mldebug_pwned",))


def test_unpickler_refuses_globals() -> None:
    with pytest.raises(flightrec.RefusedPickle):
        flightrec.safe_loads(pickle.dumps(_Evil()))
    with pytest.raises(flightrec.RefusedPickle):
        flightrec.safe_loads(pickle.dumps({"entries": [Path("/x")]}))
    assert flightrec.safe_loads(pickle.dumps({"a": [1, 2.0, "s", None, True, (1,), b"x"]})) == {
        "a": [1, 2.0, "s", None, True, (1,), b"x"]
    }


def _dump(seq: int, ranks: str = "[0, 1, 2, 3]") -> bytes:
    return pickle.dumps(
        {
            "version": "2.4",
            "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": ranks}},
            "entries": [
                {
                    "record_id": i,
                    "pg_id": 0,
                    "process_group": ("0", "default_pg"),
                    "collective_seq_id": s,
                    "p2p_seq_id": 0,
                    "profiling_name": "nccl:all_reduce",
                    "state": "completed" if s < seq else "started",
                    "is_p2p": False,
                }
                for i, s in enumerate(range(max(1, seq - 3), seq + 1))
            ],
        }
    )


def test_flight_recorder_finds_the_rank_that_never_joined(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    for r in (0, 1, 3):
        (run / f"nccl_trace_rank_{r}").write_bytes(_dump(41 if r != 1 else 40))
    (run / "nccl_trace_rank_2").write_bytes(pickle.dumps(_Evil()))  # a malicious dump is refused, not run
    d = diagnose(Request(run_dirs=[run], offline=True))
    assert not Path("/tmp/mldebug_pwned").exists()
    dumps = {f.rank: f.attrs["status"] for f in d.facts if f.kind == "flight.dump"}
    assert dumps == {0: "ok", 1: "ok", 2: "refused", 3: "ok"}
    lag = {
        f.rank: (f.attrs["seq"], f.attrs["max_seq"], f.attrs["dump"])
        for f in d.facts
        if f.kind == "flight.lagging_rank"
    }
    assert lag == {1: (40, 41, "ok"), 2: (-1, 41, "refused")}
    rep = build(d)
    ids = [h["id"] for h in rep["hypotheses"]]
    assert ids[0] == "distributed_peer_failure" and "distributed_desync" in ids
    assert any(e.get("rank") == 2 for e in rep["hypotheses"][0]["evidence"])
    assert {n["rank"] for n in rep["ranks"]["never_joined"]} == {1, 2}


def test_missing_and_corrupt_dumps_are_evidence(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "nccl_trace_rank_0").write_bytes(_dump(9, "[0, 1, 2]"))
    (run / "nccl_trace_rank_1").write_bytes(b"\x80\x04\x95garbage")
    reg = load_kb(Request()).registry
    dumps = [flightrec.parse_dump(r, p, p.name) for r, p in flightrec.find_dumps([run])]
    facts = flightrec.analyse(dumps, reg)
    status = {f.rank: f.attrs["status"] for f in facts if f.kind == "flight.dump"}
    assert status == {0: "ok", 1: "corrupt", 2: "missing"}
    lag = {f.rank: f.attrs["dump"] for f in facts if f.kind == "flight.lagging_rank"}
    assert lag == {1: "corrupt", 2: "missing"}


# --- stragglers and stalls -------------------------------------------------------------------------------
def test_straggler_and_stalled_rank(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    for r in range(8):
        ms = 2400.0 if r == 5 else 1000.0 + r
        last = 300 if r == 6 else 400
        lines = [
            f" iteration {s}/ 1000 | elapsed time per iteration (ms): {ms} | loss 1.0"
            for s in range(100, last + 1, 100)
        ]
        (run / f"rank{r}.log").write_text("\n".join(lines) + "\n")
    rep = _report(run)
    assert [s["rank"] for s in rep["ranks"]["stragglers"]] == [5]
    assert [s["rank"] for s in rep["ranks"]["stalled_first"]] == [6]
    ids = [h["id"] for h in rep["hypotheses"]]
    assert "process_hang" in ids and "gpu_throttling" in ids


def test_single_rank_has_no_ranks_block(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "train.log").write_text(OOM + "\n")
    rep = _report(run)
    assert "ranks" not in rep
    assert json.dumps(rep)  # serialisable


def test_bundles_from_two_nodes_merge_centrally(tmp_path: Path) -> None:
    """Per-node `collect` bundles (dumps and logs of 2 ranks each), one central diagnose over both."""
    from mldebug_rules.bundle import collect

    bundles = []
    for node, ranks in (("node-000", (0, 1)), ("node-001", (2, 3))):
        run = tmp_path / node
        run.mkdir()
        for r in ranks:
            (run / f"nccl_trace_rank_{r}").write_bytes(_dump(41 if r != 2 else 40))
            line = OOM if r == 3 else "2024-05-01 12:10:01 " + WATCHDOG.format(r=r)
            (run / f"rank{r}.log").write_text(f"[rank{r}]: step 5\n{line}\n")
        doc = collect(Request(run_dirs=[run], offline=True))
        doc["host"] = node
        b = tmp_path / f"{node}.mldebug.json"
        b.write_text(json.dumps(doc))
        bundles.append(b)
    d = diagnose(Request(bundles=bundles, offline=True))
    status = {f.rank: f.attrs["status"] for f in d.facts if f.kind == "flight.dump"}
    assert status == {
        0: "ok",
        1: "ok",
        2: "ok",
        3: "ok",
    }  # no rank is "missing" because it is on another node
    lag = {f.rank: f.attrs["seq"] for f in d.facts if f.kind == "flight.lagging_rank"}
    assert lag == {2: 40}
    rep = build(d)
    assert rep["hypotheses"][0]["id"] == "gpu_oom"
    assert rep["ranks"]["first_failure"]["rank"] == 3 and rep["ranks"]["first_failure"]["host"] == "node-001"
    assert {c["rank"] for c in rep["ranks"]["cascades"]} == {0, 1, 2}
