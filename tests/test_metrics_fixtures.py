"""Every fixtures/curves_* run diagnoses to its expected id, without a traceback (bar the leak-then-OOM)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from conftest import FIXTURES, diagnose_dir, top_id
from mldebug_rules.engine.packs import KnowledgeBase

CURVES = sorted(p for p in FIXTURES.glob("curves_*") if p.is_dir())


def test_there_is_a_fixture_per_format() -> None:
    names = " ".join(p.name for p in CURVES)
    for fmt in (
        "hf_logdict",
        "hf_state",
        "lightning_csv",
        "lightning_bar",
        "megatron",
        "deepspeed",
        "torchvision",
        "timm",
        "generic_step",
        "jsonl",
        "tensorboard",
        "wandb",
        # the generic reader and the formats it covers (issue 16)
        "pytorch_examples",
        "keras",
        "fairseq",
        "detectron2",
        "mmengine",
        "torchtitan",
        "plain_prints",
        # data share from timers and profiler summaries
        "megatron_timer",
        "lightning_profiler",
    ):
        assert f"curves_{fmt}" in names


@pytest.mark.parametrize("fixture", CURVES, ids=[p.name for p in CURVES])
def test_curve_fixture_diagnoses_to_expected(fixture: Path, kb: KnowledgeBase) -> None:
    expected = yaml.safe_load((fixture / "expected.yaml").read_text())
    assert expected["origin"] in ("synthetic", "real") and expected["source"]
    rep = diagnose_dir(fixture, kb=kb)
    assert top_id(rep) == expected["diagnosis"], [(h["id"], h["score"]) for h in rep["hypotheses"]]
    if fixture.name != "curves_torchvision_leak_oom":
        logs = [p for p in fixture.rglob("*") if p.suffix in (".log", ".txt", ".out")]
        assert not any("Traceback (most recent call last)" in p.read_text(errors="replace") for p in logs)
    top = rep["hypotheses"][0]
    assert (
        any(e["fact"] == "metric.trend" for e in top["evidence"])
        or expected["diagnosis"] == "completed_normally"
    )


def test_early_stopped_hf_run_is_no_failure(kb: KnowledgeBase) -> None:
    rep = diagnose_dir(FIXTURES / "curves_hf_early_stopping", kb=kb)
    assert rep["verdict"] == "no_failure"
    assert [h["id"] for h in rep["hypotheses"]] == ["completed_normally"]


def test_memory_leak_ranks_above_the_oom_it_caused(kb: KnowledgeBase) -> None:
    rep = diagnose_dir(FIXTURES / "curves_torchvision_leak_oom", kb=kb)
    ids = [h["id"] for h in rep["hypotheses"]]
    assert ids[0] == "gpu_memory_leak" and "gpu_oom" in ids
    oom = next(h for h in rep["hypotheses"] if h["id"] == "gpu_oom")
    assert "gpu_memory_leak" in oom.get("explained_by", [])


def test_trend_evidence_states_window_and_points(kb: KnowledgeBase) -> None:
    from mldebug_rules.diagnose import Request, diagnose

    d = diagnose(Request(run_dirs=[FIXTURES / "curves_jsonl_memory_leak"], offline=True), kb=kb)
    (mem,) = [f for f in d.facts if f.kind == "metric.trend" and f.attrs["trend"] == "growing"]
    assert mem.attrs["window_start"] >= 0 and mem.attrs["window_end"] > mem.attrs["window_start"]
    assert mem.attrs["points"] >= 20 and mem.source.startswith("metrics.jsonl:")


@pytest.mark.parametrize("fixture", CURVES, ids=[p.name for p in CURVES])
def test_every_trend_fact_states_its_window_and_points(fixture: Path, kb: KnowledgeBase) -> None:
    from mldebug_rules.diagnose import Request, diagnose

    d = diagnose(Request(run_dirs=[fixture], offline=True), kb=kb)
    trends = [f for f in d.facts if f.kind == "metric.trend"]
    assert trends
    for f in trends:
        a = f.attrs
        # nan_onset counts the finite points before the onset (0: NaN from the first point), the rest > 0.
        least = 0 if a["trend"] == "nan_onset" else 1
        assert 0 <= a["window_start"] <= a["window_end"] and a["points"] >= least, (a["trend"], a)
        assert f"steps {a['window_start']}..{a['window_end']}, {a['points']} point(s)" in f.text


def test_param_override_reaches_the_detector() -> None:
    rep = diagnose_dir(FIXTURES / "curves_timm_data_wait", params={"data_wait_share": "0.95"})
    # The data-wait trend is gone; the saved nvidia-smi (a partly idle GPU holding the job's memory) may still
    # raise the hypothesis on its own, without the trend.
    ipb = [h for h in rep["hypotheses"] if h["id"] == "input_pipeline_bottleneck"]
    assert all(e["fact"] != "metric.trend" for h in ipb for e in h["evidence"])
    default = diagnose_dir(FIXTURES / "curves_timm_data_wait")
    top = default["hypotheses"][0]
    assert top["id"] == "input_pipeline_bottleneck" and any(
        e["fact"] == "metric.trend" for e in top["evidence"]
    )


def test_data_wait_combines_with_a_saved_nvidia_smi(kb: KnowledgeBase, tmp_path: Path) -> None:
    import shutil

    with_smi = diagnose_dir(FIXTURES / "curves_timm_data_wait", kb=kb)
    top = with_smi["hypotheses"][0]
    assert top["id"] == "input_pipeline_bottleneck"
    assert {e["fact"] for e in top["evidence"]} >= {"metric.trend", "gpu.state"}
    bare = tmp_path / "run"
    shutil.copytree(FIXTURES / "curves_timm_data_wait", bare)
    (bare / "nvidia-smi.txt").unlink()
    without = diagnose_dir(bare, kb=kb)["hypotheses"][0]
    assert without["id"] == "input_pipeline_bottleneck" and without["score"] < top["score"]
    assert {e["fact"] for e in without["evidence"]} == {"metric.trend"}


# Each format issue 16 names, its failing fixture and the parser that must have read it (the probe's detail).
_FORMATS = {
    "PyTorch examples Time/Data meters": ("curves_pytorch_examples_data_wait", "generic"),
    "Keras-style": ("curves_keras_overfitting", "generic_named"),
    "detectron2": ("curves_detectron2_stuck", "generic"),
    "fairseq": ("curves_fairseq_fp16_collapse", "generic"),
    "mmengine": ("curves_mmengine_leak", "mmengine_epoch"),
    "timm": ("curves_timm_data_wait", "timm"),
    "plain prints": ("curves_plain_prints_overfitting", "generic"),
    "HF Trainer log dicts": ("curves_hf_logdict_divergence", "hf_dict"),
    "HF trainer_state.json": ("curves_hf_state_nan_first", "trainer_state"),
    "Lightning progress bar": ("curves_lightning_bar_chance", "lightning_bar"),
    "Lightning CSVLogger": ("curves_lightning_csv_overfitting", "csv"),
    "Megatron fp16 with a loss-scale search": ("curves_megatron_fp16_overflow", "megatron"),
    "DeepSpeed fp16 with a loss-scale search": ("curves_deepspeed_fp16_skipped", "deepspeed_step"),
    "torchvision references": ("curves_torchvision_chance", "torchvision"),
}


@pytest.mark.parametrize("fmt", sorted(_FORMATS))
def test_each_named_format_has_a_traceback_free_fixture_read_by_its_parser(
    fmt: str, kb: KnowledgeBase
) -> None:
    from mldebug_rules.diagnose import Request, diagnose

    name, parser = _FORMATS[fmt]
    fixture = FIXTURES / name
    texts = [p.read_bytes().decode("utf-8", "replace") for p in fixture.rglob("*") if p.is_file()]
    assert not any("Traceback (most recent call last)" in t for t in texts), (
        fmt
    )  # every file, whatever its name
    d = diagnose(Request(run_dirs=[fixture], offline=True), kb=kb)
    metrics = next(o for o in d.probes if o.name == "metrics")
    read_by = re.search(r"with metrics \(([^)]*)\)", metrics.detail)
    assert read_by is not None and parser in read_by.group(1).split(", "), metrics.detail
    expected = yaml.safe_load((fixture / "expected.yaml").read_text())["diagnosis"]
    top = d.gate.hypotheses[0]
    assert top.id == expected and any(f.kind == "metric.trend" for f in top.evidence), fmt


def test_the_fp16_failures_begin_with_a_loss_scale_search() -> None:
    """The Megatron and DeepSpeed failures are not a scaler that never settled: each starts with the start-up
    search (skipped iterations in the first interval / the scale halving before the first step line), then
    holds, and only later collapses or keeps skipping."""
    megatron = (FIXTURES / "curves_megatron_fp16_overflow" / "train.log").read_text()
    first = next(ln for ln in megatron.splitlines() if " iteration " in ln)
    assert "number of skipped iterations:  16 |" in first
    deepspeed = (FIXTURES / "curves_deepspeed_fp16_skipped" / "train.log").read_text().splitlines()
    first_step = next(i for i, ln in enumerate(deepspeed) if "] step=" in ln)
    assert sum("Attempted loss scale" in ln for ln in deepspeed[:first_step]) >= 2


@pytest.mark.parametrize(
    "fixture",
    [p for p in CURVES if p.name not in ("curves_hf_early_stopping", "curves_torchvision_leak_oom")],
    ids=lambda p: p.name,
)
def test_a_failing_curve_that_reached_its_last_step_is_still_the_failure(
    fixture: Path, kb: KnowledgeBase, tmp_path: Path
) -> None:
    """completed_normally only with healthy curves: the same run ending in its framework's completion line is
    still reported as its failure, the normal end below it."""
    import shutil

    run = tmp_path / fixture.name
    shutil.copytree(fixture, run)
    logs = sorted(
        (p for p in run.rglob("*") if p.suffix in (".log", ".out", ".txt") and p.name != "nvidia-smi.txt"),
        key=lambda p: p.stat().st_size,
    )
    log = logs[-1] if logs else run / "train.log"
    with log.open("a") as fh:
        fh.write("Training completed. Do not forget to share your model on huggingface.co/models =)\n")
    expected = yaml.safe_load((fixture / "expected.yaml").read_text())["diagnosis"]
    rep = diagnose_dir(run, kb=kb)
    ids = [h["id"] for h in rep["hypotheses"]]
    assert ids[0] == expected and rep["verdict"] != "no_failure", ids
