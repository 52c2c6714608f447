"""Smoke building blocks: recipes per framework, command discovery, classification, outcome mapping, state
concurrency and control pairing."""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import time
from pathlib import Path

import pytest
from mldebug_rules.engine.gate import argv_diff, map_outcome
from mldebug_rules.engine.packs import KnowledgeBase

from mldebug_rules.errors import UsageError
from mldebug_rules.smokes.common import program_of, smokes_for
from mldebug_rules.smokes.controls import effect_of, find_baseline, pairs, parse_control
from mldebug_rules.smokes.execute import (
    Execution,
    classify,
    failure_signatures,
    run_command,
    signature_scanner,
)
from mldebug_rules.smokes.recipe import (
    apply_recipe,
    conditions_of,
    find_command,
    parse_command_line,
    resolve_onset,
    split_command,
)
from mldebug_rules.smokes.state import append_record, read_records, state_path

HALVE = {"overrides": {"batch_size": 1, "max_steps": 1}}
FP32 = {"overrides": {"precision": "32", "fp16": False, "bf16": False}}


# --- recipes ------------------------------------------------------------------------------------------------
def test_hf_trainer_flags() -> None:
    argv = [
        "python",
        "run_clm.py",
        "--per_device_train_batch_size=16",
        "--max_steps",
        "500",
        "--fp16",
        "--lr_x",
        "1",
    ]
    ap = apply_recipe(argv, HALVE)
    assert ap.framework == "hf"
    assert ap.argv == [
        "python",
        "run_clm.py",
        "--per_device_train_batch_size=1",
        "--max_steps",
        "1",
        "--fp16",
        "--lr_x",
        "1",
    ]
    ap = apply_recipe(argv, FP32)
    assert "--fp16" not in ap.argv and ap.unapplied == {}
    ap = apply_recipe(["python", "t.py", "--output_dir", "o", "--bf16", "True"], FP32)
    assert ap.argv == ["python", "t.py", "--output_dir", "o"]
    ap = apply_recipe(
        ["python", "t.py", "--output_dir", "o"], {"overrides": {"learning_rate": 0, "num_workers": 0}}
    )
    assert ap.argv[-4:] == ["--learning_rate", "0", "--dataloader_num_workers", "0"]


def test_lightning_cli_flags() -> None:
    argv = [
        "python",
        "main.py",
        "fit",
        "--trainer.max_steps=1000",
        "--data.batch_size",
        "64",
        "--trainer.precision",
        "16-mixed",
    ]
    ap = apply_recipe(
        argv, {"overrides": {"batch_size": 1, "max_steps": 1, "precision": "32", "fp16": False}}
    )
    assert ap.framework == "lightning"
    assert ap.argv == [
        "python",
        "main.py",
        "fit",
        "--trainer.max_steps=1",
        "--data.batch_size",
        "1",
        "--trainer.precision",
        "32",
    ]
    ap = apply_recipe(
        ["python", "main.py", "fit", "--trainer.devices", "8"], {"overrides": {"num_workers": 0}}
    )
    assert ap.argv[-2:] == ["--data.num_workers", "0"]


def test_hydra_overrides() -> None:
    argv = ["python", "train.py", "experiment=big", "data.batch_size=256", "trainer.precision=bf16-mixed"]
    ap = apply_recipe(argv, {"overrides": {"batch_size": 1, "precision": "32", "max_steps": 1}})
    assert ap.framework == "hydra"
    assert ap.argv == [
        "python",
        "train.py",
        "experiment=big",
        "data.batch_size=1",
        "trainer.precision=32",
        "++trainer.max_steps=1",
    ]
    ap = apply_recipe(["python", "train.py", "loader.batch_size=8"], {"overrides": {"batch_size": 2}})
    assert ap.argv[-1] == "loader.batch_size=2"  # matched by the last key component


def test_plain_argparse_only_changes_existing_flags() -> None:
    ap = apply_recipe(["python", "train.py", "--batch-size", "64", "--epochs", "3"], HALVE)
    assert ap.framework == "argparse"
    assert ap.argv == ["python", "train.py", "--batch-size", "1", "--epochs", "3"]
    assert ap.unapplied == {"max_steps": 1}  # no flag for it: the user sets it in the code


def test_env_and_launcher_flags() -> None:
    argv = [
        "NCCL_DEBUG=WARN",
        "torchrun",
        "--nnodes",
        "2",
        "--nproc-per-node=8",
        "train.py",
        "--batch_size",
        "4",
    ]
    ap = apply_recipe(argv, {"env": {"CUDA_VISIBLE_DEVICES": "0"}, "args": ["--nproc-per-node", "1"]})
    assert ap.argv == [
        "env",
        "NCCL_DEBUG=WARN",
        "CUDA_VISIBLE_DEVICES=0",
        "torchrun",
        "--nnodes",
        "1",  # one rank means one node: a two-node rendezvous would wait for the other node forever
        "--nproc-per-node=1",
        "train.py",
        "--batch_size",
        "4",
    ]
    ap = apply_recipe(
        ["python", "-m", "torch.distributed.run", "--nproc_per_node", "4", "-m", "pkg.train"],
        {"args": ["--nproc-per-node", "1"]},
    )
    assert ap.argv == ["python", "-m", "torch.distributed.run", "--nproc_per_node", "1", "-m", "pkg.train"]
    ap = apply_recipe(["accelerate", "launch", "train.py"], {"overrides": {"nproc": 1}})
    assert ap.argv == ["accelerate", "launch", "--num_processes", "1", "train.py"]
    ap = apply_recipe(["python", "train.py"], {"args": ["--nproc-per-node", "1"]})
    assert ap.argv == ["python", "train.py"] and ap.notes


def test_process_count_keeps_framework_devices_in_step() -> None:
    one_gpu = {"env": {"CUDA_VISIBLE_DEVICES": "0"}, "args": ["--nproc-per-node", "1"]}
    lightning = [
        "torchrun",
        "--nnodes=2",
        "--nproc-per-node",
        "8",
        "main.py",
        "fit",
        "--trainer.devices",
        "8",
    ]
    ap = apply_recipe([*lightning, "--trainer.num_nodes", "2"], one_gpu)
    assert ap.argv == [
        "env",
        "CUDA_VISIBLE_DEVICES=0",
        "torchrun",
        "--nnodes=1",
        "--nproc-per-node",
        "1",
        "main.py",
        "fit",
        "--trainer.devices",
        "1",
        "--trainer.num_nodes",
        "1",
    ]
    # Lightning without a launcher starts its own processes: the devices flag is the process count.
    ap = apply_recipe(["python", "main.py", "fit", "--trainer.devices", "4"], {"overrides": {"nproc": 2}})
    assert ap.argv == ["python", "main.py", "fit", "--trainer.devices", "2"] and not ap.notes
    # Hydra: only keys the command already sets are changed; nothing is added for the device count.
    hydra = ["torchrun", "--nproc_per_node=8", "train.py", "trainer.devices=8", "data.batch_size=4"]
    ap = apply_recipe(hydra, one_gpu)
    assert ap.argv[-4:] == ["--nproc_per_node=1", "train.py", "trainer.devices=1", "data.batch_size=4"]
    ap = apply_recipe(["torchrun", "--nproc_per_node=8", "train.py", "x=1"], one_gpu)
    assert ap.argv[-2:] == ["train.py", "x=1"] and "--nnodes" not in ap.argv


# The five knobs (batch size, max steps, learning rate, precision, workers) on each framework's own
# syntax: existing settings are replaced in place, missing ones added where the framework accepts them.
FIVE = {"batch_size": 2, "max_steps": 3, "learning_rate": 0.0, "precision": "32", "num_workers": 0}
FIVE_OFF = {**FIVE, "fp16": False, "bf16": False}
FRAMEWORK_CASES = {
    "hf": (
        "python run_clm.py --output_dir o --per_device_train_batch_size 16 --bf16",
        "python run_clm.py --output_dir o --per_device_train_batch_size 2 --max_steps 3 --learning_rate 0.0 "
        "--dataloader_num_workers 0",
    ),
    "lightning": (
        "python main.py fit --trainer.precision bf16-mixed --model.lr 0.1 --data.num_workers 8",
        "python main.py fit --trainer.precision 32 --model.lr 0.0 --data.num_workers 0 --data.batch_size 2 "
        "--trainer.max_steps 3",
    ),
    "hydra": (
        "python train.py experiment=big trainer.precision=bf16-mixed optimizer.lr=3e-4 data.num_workers=8 "
        "data.batch_size=64 trainer.max_steps=90000",
        "python train.py experiment=big trainer.precision=32 optimizer.lr=0.0 data.num_workers=0 "
        "data.batch_size=2 trainer.max_steps=3",
    ),
}


@pytest.mark.parametrize("framework", sorted(FRAMEWORK_CASES))
def test_five_overrides_per_framework(framework: str) -> None:
    before, after = FRAMEWORK_CASES[framework]
    ap = apply_recipe(before.split(), {"overrides": FIVE_OFF})
    assert ap.framework == framework and ap.unapplied == {}
    assert ap.argv == after.split()


ENV_RECIPES = {
    "CUDA_VISIBLE_DEVICES": "0",
    "NCCL_IB_DISABLE": "1",
    "CUDA_LAUNCH_BLOCKING": "1",
    "TORCH_DISTRIBUTED_DEBUG": "DETAIL",
    "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
}


def test_env_var_recipes_are_in_the_packs_and_apply(kb: KnowledgeBase) -> None:
    cmd = ["torchrun", "--nproc-per-node", "8", "train.py", "--output_dir", "o"]
    for var, value in ENV_RECIPES.items():
        sids = [
            s for s, spec in kb.smokes.items() if (spec.get("recipe") or {}).get("env", {}).get(var) == value
        ]
        assert sids, f"no smoke recipe sets {var}={value}"
        ap = apply_recipe(cmd, kb.smokes[sids[0]]["recipe"])
        assert ap.argv[0] == "env" and f"{var}={value}" in ap.argv[: ap.argv.index("torchrun")]
    one = [
        s
        for s, spec in kb.smokes.items()
        if (spec.get("recipe") or {}).get("args") == ["--nproc-per-node", "1"]
    ]
    assert one, "no smoke runs on one process"
    ap = apply_recipe(cmd, kb.smokes[one[0]]["recipe"])
    assert ap.argv[ap.argv.index("torchrun") + 1 : ap.argv.index("train.py")] == ["--nproc-per-node", "1"]


def test_split_command_finds_script() -> None:
    sp = split_command(["torchrun", "--standalone", "--nproc_per_node", "2", "train.py", "--lr", "1"])
    assert sp.launcher == "torchrun" and sp.args == ["--lr", "1"]
    sp = split_command(["python3", "-m", "pkg.train", "a=1"])
    assert sp.launcher is None and sp.args == ["a=1"]


# --- finding the command ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("line", "argv"),
    [
        (
            "+ torchrun --nproc_per_node 8 train.py --lr 1",
            ["torchrun", "--nproc_per_node", "8", "train.py", "--lr", "1"],
        ),
        ("$ CUDA_VISIBLE_DEVICES=0,1 python train.py", ["CUDA_VISIBLE_DEVICES=0,1", "python", "train.py"]),
        ("Running with args: ['run_glue.py', '--do_train']", ["python", "run_glue.py", "--do_train"]),
        (
            "Command: accelerate launch --num_processes 2 sft.py",
            ["accelerate", "launch", "--num_processes", "2", "sft.py"],
        ),
        ("step 10 loss 2.3", None),
        ('  File "/usr/lib/python3.10/runpy.py", line 196', None),
    ],
)
def test_parse_command_line(line: str, argv: list[str] | None) -> None:
    assert parse_command_line(line) == argv


def test_find_command_sources(tmp_path: Path) -> None:
    (tmp_path / "train.log").write_text("hello\n[launcher] python train.py --batch-size 8\nstep 1\n")
    found = find_command(tmp_path)
    assert found is not None and found.source == "train.log:2" and found.argv[-1] == "8"
    (tmp_path / "node.mldebug.json").write_text(
        json.dumps({"processes": [{"pid": 1, "cmdline": ["/usr/bin/python3", "-u", "main.py", "fit"]}]})
    )
    found = find_command(tmp_path)
    assert found is not None and found.argv == ["/usr/bin/python3", "-u", "main.py", "fit"]
    assert find_command(tmp_path, "python x.py --lr 1").argv == ["python", "x.py", "--lr", "1"]  # type: ignore[union-attr]
    # What `collect` writes: the training process as a `process` fact whose text is its command line.
    (tmp_path / "node.mldebug.json").write_text(
        json.dumps(
            {
                "schema": "mldebug-rules/bundle/v1",
                "facts": [
                    {"kind": "gpu.util", "attrs": {"util_pct": 0.0}, "origin": "probe", "source": "nvml"},
                    {
                        "kind": "process",
                        "attrs": {"pid": 24420, "name": "python3", "in_run_dir": True},
                        "origin": "probe",
                        "source": "probe:processes",
                        "text": "python train.py --output_dir out --per_device_train_batch_size 8",
                    },
                ],
            }
        )
    )
    found = find_command(tmp_path)
    assert found is not None and found.source == "node.mldebug.json"
    assert found.argv == ["python", "train.py", "--output_dir", "out", "--per_device_train_batch_size", "8"]
    with pytest.raises(UsageError):
        find_command(tmp_path, "python 'unterminated")


# --- classification and outcome mapping ---------------------------------------------------------------------
def _ex(code: int | None, sigs: dict[str, int] | None = None, timed_out: bool = False) -> Execution:
    return Execution(["x"], code, timed_out, 0.1, b"", b"", 0, dict(sigs or {}))


def test_classify(kb: KnowledgeBase) -> None:
    fails = failure_signatures(kb)
    assert "cuda_oom" in fails and "training_completed" not in fails
    assert classify(_ex(0), ["cuda_oom"], fails, True)[0] == "passed"
    assert classify(_ex(0, {"training_completed": 1}), ["cuda_oom"], fails, True)[0] == "passed"
    # exit 0 alone proves nothing: without step or loss lines in its own output it did not train
    assert classify(_ex(0), ["cuda_oom"], fails, False)[0] == "no_progress"
    assert classify(_ex(1, {"cuda_oom": 1}), ["cuda_oom"], fails, True)[0] == "reproduced"
    assert classify(_ex(1), ["cuda_oom"], fails, True)[0] == "failed_differently"
    assert classify(_ex(0, {"enospc": 2}), ["cuda_oom"], fails, True)[0] == "failed_differently"
    timed = _ex(None, {"cuda_oom": 1}, timed_out=True)
    assert classify(timed, ["cuda_oom"], fails, True)[0] == "timed_out"


def test_run_command_scans_whole_output_but_keeps_it_bounded(kb: KnowledgeBase) -> None:
    code = (
        "import sys\n"
        "for i in range(40000): print('filler line', i)\n"
        "print('torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1 GiB')\n"
        "for i in range(40000): print('more filler', i)\n"
        "sys.exit(3)\n"
    )
    ex = run_command([sys.executable, "-c", code], 60, signature_scanner(kb), echo=False)
    assert ex.exit_code == 3 and not ex.timed_out
    assert ex.signatures.get("cuda_oom") == 1  # seen although it is neither in the kept head nor the tail
    assert ex.total_bytes > 1_000_000 and len(ex.output()) < 300_000
    assert b"bytes not kept" in ex.output()
    assert run_command(["/nonexistent/binary"], 5, signature_scanner(kb), echo=False).error


def test_run_command_ends_with_the_command_not_with_its_leftovers(kb: KnowledgeBase, tmp_path: Path) -> None:
    """The command exits while a background child keeps the pipe open and keeps printing: the smoke ends
    with the command (not at the timeout) and the leftover child is killed with the group."""
    pidfile = tmp_path / "child.pid"
    code = (
        "import subprocess, sys\n"
        "p = subprocess.Popen([sys.executable, '-c', "
        "'import time\\nwhile True: print(\"spam\", flush=True); time.sleep(0.01)'])\n"
        f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
        "print('main done', flush=True)\n"
    )
    ex = run_command([sys.executable, "-c", code], 300, signature_scanner(kb), echo=False)
    assert not ex.timed_out and ex.exit_code == 0
    assert b"main done" in ex.output()
    pid = int(pidfile.read_text())
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail("the command's leftover child outlived the smoke")


def test_run_command_passes_argv_as_is_without_a_shell(kb: KnowledgeBase, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    args = ["$HOME", "a; touch " + str(marker), "*", "`id`", "$(id)", "two words"]
    ex = run_command(
        [sys.executable, "-c", "import sys; print(sys.argv[1:])", *args],
        60,
        signature_scanner(kb),
        echo=False,
    )
    assert ex.exit_code == 0 and ex.output().decode().strip() == repr(args)
    assert not marker.exists()


def test_map_outcome(kb: KnowledgeBase) -> None:
    spec = kb.smokes["halve_batch"]
    assert map_outcome(spec, "passed", "gpu_oom")[0] == "confirmed"
    assert map_outcome(spec, "reproduced", "gpu_oom")[0] == "refuted"
    assert map_outcome(spec, "failed_differently", "gpu_oom")[0] == "inconclusive"
    assert map_outcome(spec, "no_progress", "gpu_oom")[0] == "inconclusive"
    assert map_outcome(spec, "timed_out", "gpu_oom")[0] == "inconclusive"
    assert map_outcome(spec, "passed", "host_oom_kill")[0] == "inconclusive"
    # no smoke declared: the protocol's default (a passing change confirms, a reproducing one refutes)
    assert map_outcome(None, "passed", "gpu_oom")[0] == "confirmed"
    assert map_outcome(None, "reproduced", "gpu_oom")[0] == "refuted"
    assert smokes_for(kb, "gpu_oom")[0] == "halve_batch"
    assert "alloc_expandable_segments" in smokes_for(kb, "gpu_oom")


# --- state --------------------------------------------------------------------------------------------------
def _append_many(run_dir: str, tag: str, n: int) -> None:
    for i in range(n):
        append_record(
            Path(run_dir), {"hypothesis": "gpu_oom", "outcome": "inconclusive", "note": f"{tag}{i}" * 50}
        )


def test_concurrent_appends_never_corrupt(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_append_many, args=(str(tmp_path), t, 100)) for t in ("a", "b")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    lines = state_path(tmp_path).read_bytes().splitlines()
    assert len(lines) == 200
    recs = [json.loads(x) for x in lines]  # every line is one whole record
    assert sorted(r["seq"] for r in recs) == list(range(1, 201))
    assert len(read_records(tmp_path)) == 200


def test_torn_line_is_skipped_and_next_record_stays_whole(tmp_path: Path) -> None:
    append_record(tmp_path, {"hypothesis": "gpu_oom", "outcome": "refuted"})
    with state_path(tmp_path).open("ab") as fh:
        fh.write(b'{"hypothesis": "gpu_oom", "outc')  # a crash mid-write
    rec = append_record(tmp_path, {"hypothesis": "gpu_oom", "outcome": "confirmed"})
    assert rec["seq"] == 2
    assert [r["outcome"] for r in read_records(tmp_path)] == ["refuted", "confirmed"]


# --- controls -----------------------------------------------------------------------------------------------
def test_parse_control() -> None:
    assert parse_control([]) is None
    assert parse_control(["precision=fp32"]) == {"name": "precision", "value": "fp32"}
    for bad in (["precision"], ["colour=red"], ["workers=0", "compile=off"]):
        with pytest.raises(UsageError):
            parse_control(bad)


def test_effects_and_pairing() -> None:
    assert effect_of("reproduced", "passed") == "removes_failure"
    assert effect_of("reproduced", "reproduced") == "no_effect"
    assert effect_of("passed", "failed_differently") == "introduces_failure"
    assert effect_of("reproduced", "failed_differently") == "changes_failure"
    assert effect_of("timed_out", "passed") == "inconclusive"
    base = {
        "seq": 1,
        "kind": "run",
        "hypothesis": "h",
        "smoke": "s",
        "classification": "reproduced",
        "control": None,
    }
    slow = {**base, "seq": 2, "classification": "timed_out"}
    ctl = {**base, "seq": 3, "classification": "reproduced", "control": {"name": "workers", "value": "0"}}
    assert find_baseline([base, slow, ctl], ctl) == base  # a timed-out baseline compares with nothing
    (p,) = pairs([base, slow, ctl])
    assert p["effect"] == "no_effect" and p["baseline"]["seq"] == 1
    assert "not the mechanism" in p["mechanism"]
    (lone,) = pairs([ctl])
    assert lone["effect"] == "unpaired" and lone["baseline"] is None


# --- issue 17: recipes on recorded command lines -----------------------------------------------------------
def test_recipe_changes_the_existing_flag_instead_of_adding_a_second() -> None:
    """An HF-style command whose script has its own `--num_workers 4`: the workers control changes that flag,
    never adds `--dataloader_num_workers 0` next to it (two flags for one setting)."""
    cmd = [
        "python",
        "train.py",
        "--output_dir",
        "out",
        "--per_device_train_batch_size",
        "8",
        "--num_workers",
        "4",
        "--fp16",
    ]
    ap = apply_recipe(cmd, {"overrides": {"num_workers": 0}})
    assert ap.framework == "hf"
    assert ap.argv == [*cmd[:6], "--num_workers", "0", "--fp16"]
    assert "--dataloader_num_workers" not in ap.argv and ap.changes == ["--num_workers 4 -> 0"]
    # the same for a batch size the script spells its own way
    ap = apply_recipe(
        ["python", "t.py", "--output_dir", "o", "--batch_size=16"], {"overrides": {"batch_size": 1}}
    )
    assert ap.argv == ["python", "t.py", "--output_dir", "o", "--batch_size=1"]
    # and when no spelling of it is there, the framework's own flag is added once
    ap = apply_recipe(["python", "t.py", "--output_dir", "o"], {"overrides": {"num_workers": 0}})
    assert ap.argv[-2:] == ["--dataloader_num_workers", "0"]


def test_baseline_gets_only_the_smoke_conditions() -> None:
    recipe = {
        "overrides": {"batch_size": 1, "max_steps": 1},
        "env": {"X": "1"},
        "args": ["--nproc-per-node", "1"],
    }
    assert conditions_of(recipe) == {"overrides": {"max_steps": 1}}
    cmd = [
        "torchrun",
        "--nproc_per_node",
        "2",
        "train.py",
        "--per_device_train_batch_size",
        "32",
        "--max_steps",
        "1000",
    ]
    assert apply_recipe(cmd, conditions_of(recipe)).argv == [*cmd[:-1], "1"]


ONSET = {
    "overrides": {"learning_rate": 0, "max_steps": 50},
    "onset": {"trends": ["diverging", "nan_onset"], "past_steps": 20},
}


def test_lr_zero_resumes_before_the_onset_and_runs_past_it() -> None:
    """Recorded: `python train.py --lr 0.003 --max-steps 5000 --resume ''`-style run that diverged at step
    4200 and went NaN at 4810, with checkpoints every 1000 steps (the one at 5000 was saved after the NaN)."""
    onsets = [("diverging", 4200), ("nan_onset", 4810), ("plateau", 100)]
    ckpts = [
        ("checkpoints/step_3000.pt", 3000),
        ("checkpoints/step_4000.pt", 4000),
        ("checkpoints/step_5000.pt", 5000),
    ]
    recipe, notes = resolve_onset(ONSET, "runs/x", onsets, ckpts)
    assert recipe["overrides"] == {
        "learning_rate": 0,
        "max_steps": 4830,
        "resume_from": "runs/x/checkpoints/step_4000.pt",
    }
    assert "onset" not in recipe and any("step_4000.pt" in n for n in notes)
    ap = apply_recipe(["python", "train.py", "--lr", "0.003", "--max-steps", "5000", "--resume", ""], recipe)
    assert ap.argv == [
        "python",
        "train.py",
        "--lr",
        "0",
        "--max-steps",
        "4830",
        "--resume",
        "runs/x/checkpoints/step_4000.pt",
    ]
    # HF: the checkpoint folder, through --resume_from_checkpoint; fp32_rerun's recipe resolves the same way
    hf = resolve_onset(ONSET, "r", [("nan_onset", 700)], [("out/checkpoint-500/trainer_state.json", 500)])[0]
    ap = apply_recipe(["python", "run.py", "--output_dir", "out", "--max_steps", "1000"], hf)
    assert ap.argv[-4:] == ["--learning_rate", "0", "--resume_from_checkpoint", "r/out/checkpoint-500"]
    assert "--max_steps" in ap.argv and ap.argv[ap.argv.index("--max_steps") + 1] == "720"
    # no checkpoint before the onset: from scratch, still past the onset; onset unknown: said so
    recipe, notes = resolve_onset(ONSET, "r", [("nan_onset", 32), ("diverging", 7)], [("c/step_10.pt", 10)])
    assert recipe["overrides"] == {"learning_rate": 0, "max_steps": 52} and "from scratch" in notes[-1]
    recipe, notes = resolve_onset(ONSET, "r", [], [])
    assert recipe["overrides"] == {"learning_rate": 0, "max_steps": 50} and "not known" in notes[0]


def test_numerics_smokes_resolve_their_onset(kb: KnowledgeBase) -> None:
    for sid in ("lr_zero", "fp32_rerun"):
        assert kb.smokes[sid]["recipe"]["onset"]["trends"], sid


def test_program_of_ignores_options_and_environment() -> None:
    assert program_of(["env", "A=1", "python3.11", "train.py", "--bs", "1"]) == "python train.py"
    assert program_of(["torchrun", "--nproc_per_node", "8", "./train.py", "--x"]) == "torchrun train.py"
    assert program_of(["torchrun", "--nproc_per_node", "1", "train.py"]) == "torchrun train.py"
    assert program_of(["true"]) == "true"
    assert program_of(["bash", "run.sh", "--bs", "32"]) == program_of(["bash", "./run.sh", "--bs", "1"])
    assert program_of(["./train.sh", "--bs", "32"]) == "train.sh"
    assert program_of(["python", "-c", "print(1)"]) != program_of(["python", "-c", "print(2)"])
    assert program_of(["python", "-c", "print(1)", "x"]) != program_of(["python", "-c", "print(2)", "y"])
    assert program_of(["python", "-m", "pkg.train", "a=1"]) == "python -m pkg.train"
    assert program_of(["python", "other.py"]) != program_of(["python", "train.py"])


def test_argv_diff() -> None:
    assert argv_diff("python t.py --bs 32 --fp16", "python t.py --bs 1 --fp16") == ["--bs 32 -> 1"]
    assert argv_diff("python t.py --fp16", "python t.py") == ["- --fp16"]
    assert argv_diff("python t.py", "env A=1 python t.py") == ["+ env A=1"]
    assert argv_diff("python t.py", "python t.py") == []


def _check_many(run_dir: str, n: int) -> int:
    from mldebug_rules.smokes.common import check_state_writable

    for _ in range(n):
        check_state_writable(Path(run_dir))
    return n


def test_state_write_checks_from_many_processes_never_race(tmp_path: Path) -> None:
    """Smoke commands check the run directory at once: one creating `.mldebug` while another removes its
    empty one must not refuse either (it once did, with `File exists`)."""
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as pool:
        done = pool.starmap(_check_many, [(str(tmp_path), 300)] * 4)
    assert done == [300] * 4
    state = tmp_path / ".mldebug"
    assert not state.exists() or not any(state.iterdir())  # no probe file left behind


def test_state_write_check_keeps_a_directory_in_use(tmp_path: Path) -> None:
    from mldebug_rules.smokes.common import check_state_writable

    (tmp_path / ".mldebug").mkdir()
    (tmp_path / ".mldebug" / "facts.jsonl").write_text("{}\n")
    check_state_writable(tmp_path)
    assert (tmp_path / ".mldebug" / "facts.jsonl").read_text() == "{}\n"
