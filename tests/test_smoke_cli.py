"""The smoke CLI through the real command line (subprocesses, as an agent calls it): recording, planning,
controls, concurrency, terminal streaming and the stop hook. The issue's "Done when" scenario itself is
tests/test_smoke_done_when.py."""

from __future__ import annotations

import hashlib
import json
import os
import pty
import select
import subprocess
import sys
from pathlib import Path

import pytest

OOM_LOG = (
    "torchrun --nproc_per_node 2 train.py --per_device_train_batch_size 32 --max_steps 1000 --fp16\n"
    "step 10 | loss 2.31\n"
    "Traceback (most recent call last):\n"
    '  File "train.py", line 88, in <module>\n'
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
    "79.15 GiB of which 1.21 GiB is free. Including non-PyTorch memory, this process has 77.93 GiB memory in "
    "use. Of the allocated memory 75.80 GiB is allocated by PyTorch, and 0.61 GiB is reserved by PyTorch but "
    "unallocated.\n"
)
OOM_LINE = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
TRAINER = str(Path(__file__).with_name("stand_in_trainer.py"))  # prints step/loss lines; OOMs above --fits
BIG = [sys.executable, TRAINER, "--batch-size", "32", "--max-steps", "1"]  # reproduces the OOM
SMALL = [sys.executable, TRAINER, "--batch-size", "1", "--max-steps", "1"]  # trains
SMALL_OOM = [*SMALL, "--fits", "0"]  # one sample does not fit either: reproduces


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "mldebug_rules", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def report(run: Path) -> dict:
    r = cli("diagnose", str(run), "--offline", "--format", "json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def smoke(run: Path, hid: str, *command: str, baseline: bool = False) -> subprocess.CompletedProcess[str]:
    r = cli(
        "smoke", "run", str(run), "--hypothesis", hid, *(["--baseline"] if baseline else []), "--", *command
    )
    assert r.returncode == 0, r.stderr
    return r


def status_of(rep: dict, hid: str) -> str:
    return next(h["status"] for h in rep["hypotheses"] if h["id"] == hid)


@pytest.fixture
def oom_run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "train.log").write_text(OOM_LOG)
    return run


def test_record_validation(oom_run: Path) -> None:
    bad = cli("smoke", "record", str(oom_run), "--hypothesis", "gpu_oom", "--outcome", "maybe", "--note", "x")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    unknown = cli(
        "smoke",
        "record",
        str(oom_run),
        "--hypothesis",
        "no_such_thing",
        "--outcome",
        "refuted",
        "--note",
        "x",
    )
    assert unknown.returncode == 2 and "unknown hypothesis" in unknown.stderr
    for note in ([], ["--note", "  "]):  # a result typed in by hand says what was run
        no_note = cli(
            "smoke", "record", str(oom_run), "--hypothesis", "gpu_oom", "--outcome", "confirmed", *note
        )
        assert no_note.returncode == 2 and "--note" in no_note.stderr
    assert not (oom_run / ".mldebug").exists()
    ok = cli(
        "smoke",
        "record",
        str(oom_run),
        "--hypothesis",
        "gpu_oom",
        "--outcome",
        "confirmed",
        "--note",
        "bs=1 ok",
    )
    assert ok.returncode == 0, ok.stderr
    (rec,) = [json.loads(x) for x in (oom_run / ".mldebug" / "smokes.jsonl").read_text().splitlines()]
    assert rec["kind"] == "record" and rec["recorded"] is True and rec["note"] == "bs=1 ok"
    # Kept and shown as recorded, never counted without --trust-recorded.
    g = cli("gate", str(oom_run), "--claim", "gpu_oom")
    assert g.returncode == 1 and "counts only with --trust-recorded" in g.stdout
    assert cli("gate", str(oom_run), "--claim", "gpu_oom", "--trust-recorded").returncode == 0
    rep = report(oom_run)
    assert rep["verdict"] == "uncertain" and status_of(rep, "gpu_oom") == "hypothesis"
    (shown,) = next(h for h in rep["hypotheses"] if h["id"] == "gpu_oom")["recorded"]
    assert shown == {
        "outcome": "confirmed",
        "note": "bs=1 ok",
        "source": ".mldebug/smokes.jsonl:1",
        "counted": False,
    }
    assert rep["smokes"]["recorded"][0]["hypothesis"] == "gpu_oom"
    assert "recorded by hand: confirmed" in cli("diagnose", str(oom_run), "--offline").stdout
    # A control is paired by how the run ended, which only `smoke run` sees: `record` has no such flag.
    ctl = cli(
        "smoke",
        "record",
        str(oom_run),
        "--hypothesis",
        "gpu_oom",
        "--outcome",
        "confirmed",
        "--note",
        "x",
        "--control",
        "workers=0",
    )
    assert ctl.returncode == 2 and "--control" in ctl.stderr
    assert len((oom_run / ".mldebug" / "smokes.jsonl").read_text().splitlines()) == 1


def test_each_smoke_subcommand_owns_its_flags_and_shows_the_command_form() -> None:
    run_help = cli("smoke", "run", "--help")
    assert run_help.returncode == 0 and "-- COMMAND [ARG...]" in run_help.stdout
    assert "--baseline" in run_help.stdout and "--note" not in run_help.stdout
    rec_help = cli("smoke", "record", "--help").stdout
    assert "--note" in rec_help and "--baseline" not in rec_help and "--timeout" not in rec_help
    plan_help = cli("smoke", "plan", "--help").stdout
    assert "--format" in plan_help and "--outcome" not in plan_help
    assert "--trust-recorded" in cli("gate", "--help").stdout
    wrong = cli("smoke", "plan", "/tmp", "--outcome", "confirmed")
    assert wrong.returncode == 2 and "unrecognized arguments" in wrong.stderr


def test_refuted_drops_and_next_leads(oom_run: Path) -> None:
    (oom_run / "dmesg.log").write_text(
        "[ 12.3] Out of memory: Killed process 4242 (python) total-vm:1kB, anon-rss:1kB\n"
    )
    smoke(oom_run, "gpu_oom", *BIG, baseline=True)
    smoke(oom_run, "gpu_oom", *SMALL_OOM)
    rep = report(oom_run)
    assert rep["hypotheses"][-1]["id"] == "gpu_oom" and rep["hypotheses"][-1]["status"] == "refuted"
    assert rep["hypotheses"][0]["id"] != "gpu_oom" and rep["hypotheses"][0]["status"] == "hypothesis"


def test_all_refuted_plans_the_alternatives(oom_run: Path) -> None:
    smoke(oom_run, "gpu_oom", *BIG, baseline=True)
    smoke(oom_run, "gpu_oom", *SMALL_OOM)
    rep = report(oom_run)
    assert [(h["id"], h["status"]) for h in rep["hypotheses"]] == [("gpu_oom", "refuted")]
    assert rep["leads"][0] == "gpu_memory_leak"
    assert "Smokes refuted gpu_oom" in rep["next_action"] and "gpu_memory_leak" in rep["next_action"]
    plan = json.loads(cli("smoke", "plan", str(oom_run), "--format", "json").stdout)
    assert plan["refuted"] == ["gpu_oom"]
    leak = plan["hypotheses"][0]
    assert leak["id"] == "gpu_memory_leak" and leak["alternative_of"] == ["gpu_oom"]
    assert leak["smokes"][0]["id"] == "memory_per_step"
    assert leak["smokes"][0]["outcomes"]["reproduced"]["confirms"] == ["gpu_memory_leak"]


def test_plan_lists_smoke_outcomes_and_concrete_command(oom_run: Path) -> None:
    r = cli("smoke", "plan", str(oom_run), "--format", "json")
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    assert plan["command_source"] == "train.log:1"
    top = plan["hypotheses"][0]
    assert top["id"] == "gpu_oom"
    smoke = top["smokes"][0]
    assert smoke["id"] == "halve_batch"
    assert smoke["outcomes"]["passed"]["confirms"] == ["gpu_oom"]
    assert smoke["outcomes"]["reproduced"]["refutes"] == ["gpu_oom"]
    assert smoke["command"].endswith(
        "-- torchrun --nproc_per_node 2 train.py --per_device_train_batch_size 1 --max_steps 1 --fp16"
    )
    gpus = next(c for c in top["controls"] if c["control"] == "gpus=1")
    assert "env CUDA_VISIBLE_DEVICES=0 torchrun --nproc_per_node 1" in gpus["command"]
    # Each control changes exactly one thing from the smoke's own command, and a value that changes
    # nothing is never suggested: checkpointing and compile are off in this command, so "on" is the control.
    controls = {c["control"]: c for c in top["controls"]}
    assert controls["precision=fp32"]["changes"] == ["removed --fp16"]
    assert controls["grad_checkpointing=on"]["changes"] == ["added --gradient_checkpointing"]
    assert controls["compile=on"]["changes"] == ["added --torch_compile"]
    assert controls["gpus=1"]["changes"] == ["--nproc_per_node 2 -> 1", "CUDA_VISIBLE_DEVICES=0"]
    assert controls["workers=0"]["changes"] == ["added --dataloader_num_workers 0"]
    assert controls["data_sources=single"]["needs_code_change"] == {"data_sources": "single"}
    for c in top["controls"]:
        assert c["command"].count("--control") == 1
    text = cli("smoke", "plan", str(oom_run)).stdout
    assert (
        "if the change passed: confirms gpu_oom" in text
        and "if the change reproduced: refutes gpu_oom" in text
    )
    assert "if the change timed_out: decides nothing" in text
    text = cli(
        "smoke", "plan", str(oom_run), "--hypothesis", "gpu_oom", "--cmd", "python train.py --batch-size 64"
    )
    assert text.returncode == 0 and "python train.py --batch-size 1" in text.stdout


def test_controls_pair_with_baseline_in_report(oom_run: Path) -> None:
    smoke(oom_run, "gpu_oom", *BIG, baseline=True)
    r = cli(
        "smoke",
        "run",
        str(oom_run),
        "--hypothesis",
        "gpu_oom",
        "--control",
        "grad_checkpointing=on",
        "--",
        *SMALL,
    )
    assert r.returncode == 0, r.stderr
    assert "paired with baseline #1" in r.stdout
    rep = report(oom_run)
    assert status_of(rep, "gpu_oom") == "hypothesis"  # a control alone decides nothing
    (c,) = rep["controls"]
    assert c["control"] == "grad_checkpointing=on" and c["effect"] == "removes_failure"
    assert c["baseline"]["seq"] == 1 and "activation memory" in c["mechanism"]
    text = cli("diagnose", str(oom_run), "--offline").stdout
    assert "Controls" in text and "narrows to: activation memory" in text
    # The baseline's very argv under a control: kept (the change may live in a config file), but flagged.
    same = cli("smoke", "run", str(oom_run), "--hypothesis", "gpu_oom", "--control", "workers=0", "--", *BIG)
    assert same.returncode == 0 and "the command is the same as baseline #1's" in same.stderr
    c2 = report(oom_run)["controls"][1]
    assert c2["control"] == "workers=0" and c2["effect"] == "no_effect" and c2["baseline"]["seq"] == 1
    assert "same as the baseline's" in c2["showed"] and "workers are not the mechanism" in c2["mechanism"]
    two = cli(
        "smoke",
        "run",
        str(oom_run),
        "--hypothesis",
        "gpu_oom",
        "--control",
        "workers=0",
        "--control",
        "compile=off",
        "--",
        sys.executable,
        "-c",
        "pass",
    )
    assert two.returncode == 2 and "exactly one variable" in two.stderr
    unknown = cli(
        "smoke",
        "run",
        str(oom_run),
        "--hypothesis",
        "gpu_oom",
        "--control",
        "colour=blue",
        "--",
        sys.executable,
        "-c",
        "pass",
    )
    assert unknown.returncode == 2


def test_two_concurrent_smoke_runs_keep_the_state_whole(oom_run: Path, tmp_path: Path) -> None:
    """Two real `smoke run` processes whose commands overlap in time (each waits for the other to start)."""
    log = sha(oom_run / "train.log")

    def waiter(me: str, other: str) -> str:
        return (
            "import os, sys, time\n"
            f"open({str(tmp_path / me)!r}, 'w').close()\n"
            "for _ in range(1200):\n"
            f"    if os.path.exists({str(tmp_path / other)!r}): break\n"
            "    time.sleep(0.05)\n"
            "else: sys.exit('the other smoke never started')\n"
            f"print('step 1 | loss 2.5 | smoke {me} done')\n"
        )

    smoke = [sys.executable, "-m", "mldebug_rules", "smoke", "run", str(oom_run), "--hypothesis", "gpu_oom"]
    smoke += ["--timeout", "120", "--"]
    procs = [
        subprocess.Popen(
            [*smoke, sys.executable, "-c", waiter(me, other)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for me, other in (("a", "b"), ("b", "a"))
    ]
    outs = [p.communicate(timeout=240) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    lines = (oom_run / ".mldebug" / "smokes.jsonl").read_bytes().splitlines()
    recs = [json.loads(x) for x in lines]  # every line is one whole record
    assert sorted(r["seq"] for r in recs) == [1, 2]
    assert sorted(r["output_tail"] for r in recs) == [
        "step 1 | loss 2.5 | smoke a done",
        "step 1 | loss 2.5 | smoke b done",
    ]
    assert all(r["classification"] == "passed" and r["role"] == "change" for r in recs)
    files = {r["output_file"] for r in recs}
    assert len(files) == 2 and all((oom_run / f).is_file() for f in files)
    assert not [p for p in (oom_run / ".mldebug").iterdir() if p.name.endswith(".tmp")]
    assert sha(oom_run / "train.log") == log
    assert sorted(p.name for p in oom_run.iterdir()) == [".mldebug", "train.log"]


def test_output_streams_to_a_terminal_as_it_comes(oom_run: Path, tmp_path: Path) -> None:
    """With a terminal attached, the command's output shows while it runs: the command below only finishes
    after the test has seen its first line on the terminal."""
    sentinel = tmp_path / "seen"
    code = (
        "import os, sys, time\n"
        "print('LIVE-1', flush=True)\n"
        "for _ in range(1200):\n"
        f"    if os.path.exists({str(sentinel)!r}): break\n"
        "    time.sleep(0.05)\n"
        "else: sys.exit('LIVE-1 was never shown')\n"
        "print('step 1 | loss 2.5 | LIVE-2', flush=True)\n"
    )
    argv = [sys.executable, "-m", "mldebug_rules", "smoke", "run", str(oom_run), "--hypothesis", "gpu_oom"]
    argv += ["--timeout", "120", "--", sys.executable, "-c", code]
    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=slave, stderr=subprocess.PIPE)
    os.close(slave)
    seen = b""
    try:
        while proc.poll() is None or select.select([master], [], [], 0)[0]:
            if not select.select([master], [], [], 1.0)[0]:
                continue
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the terminal's other side is closed
                break
            if not chunk:
                break
            seen += chunk
            if b"LIVE-1" in seen and not sentinel.exists():
                sentinel.write_text("")
        proc.wait(timeout=60)
    finally:
        os.close(master)
    text = seen.decode().replace("\r\n", "\n")
    assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
    assert (
        text.index("LIVE-1")
        < text.index("LIVE-2")
        < text.index("smoke halve_batch for gpu_oom, change: passed")
    )
    # Without a terminal only the summary is printed; the output is kept under .mldebug/ either way.
    piped = cli(*argv[3:-1], "print('QUIET')")
    assert piped.returncode == 0 and "QUIET" not in piped.stdout and "no_progress" in piped.stdout
    out_file = json.loads((oom_run / ".mldebug" / "smokes.jsonl").read_text().splitlines()[-1])["output_file"]
    assert (oom_run / out_file).read_text() == "QUIET\n"


HOOK = Path(__file__).resolve().parents[1] / "examples" / "hooks" / "claim-gate.sh"


def test_claim_gate_hook(oom_run: Path, tmp_path: Path) -> None:
    # The hook calls the CLI by name: a tiny shim runs this interpreter's module.
    shim = tmp_path / "mldebug-shim"
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} -m mldebug_rules "$@"\n')
    shim.chmod(0o755)
    transcript = tmp_path / "t.jsonl"
    msg = {
        "type": "assistant",
        "message": {
            "role": "assistant",
            "content": [
                {"type": "text", "text": f"The OOM is it.\n**Root cause:** `gpu_oom` (run: {oom_run})"}
            ],
        },
    }
    transcript.write_text(
        json.dumps({"type": "user", "message": {"content": "why"}}) + "\n" + json.dumps(msg) + "\n"
    )
    event = json.dumps({"transcript_path": str(transcript), "stop_hook_active": False})
    env = {**os.environ, "MLDEBUG_BIN": str(shim)}

    def hook(stdin: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(HOOK)], input=stdin, capture_output=True, text=True, env=env, timeout=120
        )

    blocked = hook(event)
    assert blocked.returncode == 2 and "halve_batch" in blocked.stderr
    assert hook("just a hypothesis so far").returncode == 0
    # A no-op and a hand-recorded confirmation never open it: the hook never passes --trust-recorded.
    smoke(oom_run, "gpu_oom", "true")
    assert hook(event).returncode == 2
    rec = cli(
        "smoke", "record", str(oom_run), "--hypothesis", "gpu_oom", "--outcome", "confirmed", "--note", "ok"
    )
    assert rec.returncode == 0
    held = hook(event)
    assert held.returncode == 2 and "--trust-recorded" in held.stderr
    code = [x for x in HOOK.read_text().splitlines() if not x.lstrip().startswith("#")]
    assert not [x for x in code if "trust-recorded" in x]
    # A reproduced baseline, then a batch-size-1 run that trains: now it passes.
    smoke(oom_run, "gpu_oom", *BIG, baseline=True)
    smoke(oom_run, "gpu_oom", *SMALL)
    assert hook(event).returncode == 0
    assert hook(f"Root cause: host_oom_kill (run: {oom_run})").returncode == 2
    # A cause the gate cannot check is blocked too (unless MLDEBUG_GATE_STRICT=0), with the reason.
    vague = hook(f"Root cause: OOM (run: {oom_run})")
    assert vague.returncode == 2 and "not a hypothesis id" in vague.stderr
    nodir = hook(f"Root cause: gpu_oom (run: {tmp_path / 'missing'})")
    assert nodir.returncode == 2 and "no such run directory" in nodir.stderr
    env["MLDEBUG_GATE_STRICT"] = "0"
    assert hook(f"Root cause: OOM (run: {oom_run})").returncode == 0
    # Claude Code's second stop in a row: still blocked unless MLDEBUG_GATE_ONCE=1.
    again = json.dumps({"transcript_path": str(transcript), "stop_hook_active": True})
    transcript.write_text(
        json.dumps(
            {
                **msg,
                "message": {
                    "role": "assistant",
                    "content": [{"type": "text", "text": f"Root cause: host_oom_kill (run: {oom_run})"}],
                },
            }
        )
        + "\n"
    )
    assert hook(again).returncode == 2
    env["MLDEBUG_GATE_ONCE"] = "1"
    assert hook(again).returncode == 0
