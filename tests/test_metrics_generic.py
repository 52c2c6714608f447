"""The generic metric reader, the data share from meters/timers/profilers, the trend rules on healthy runs
(loss-scale search, noisy stuck losses, memory growth before an OOM, sparse validation) and the healthy corpus."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import FIXTURES, top_id
from mldebug_rules.collectors.metrics_generic import parse_generic
from mldebug_rules.collectors.metrics_parse import parse_text_lines
from mldebug_rules.collectors.trends import detect
from mldebug_rules.engine.packs import KnowledgeBase

# --- the generic reader ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "want"),
    [
        ("step 5 loss: 2.5 acc=0.75 lr 1e-3", {"loss": 2.5, "acc": 0.75, "lr": 1e-3}),
        ("iter 5 'loss': '2.5', 'acc': 0.75", {"loss": 2.5, "acc": 0.75}),  # quoted names and numbers
        ("epoch 2 Time  0.520 ( 0.610)  Data 0.480 (0.550)", {"Time": 0.52, "Data": 0.48}),  # value (avg)
        ("step 9 loss nan grad_norm inf val_loss -Infinity", {"loss": math.nan, "grad_norm": math.inf}),
        ("step 9 loss 2.345E+00 tps: 12,345.5 total 1,234", {"loss": 2.345, "tps": 12345.5, "total": 1234.0}),
        (
            "step 9 time 250ms data 0.1s wait 50us mfu 31.5%",
            {"time": 0.25, "data": 0.1, "wait": 5e-5, "mfu": 31.5},
        ),
        ("step 9 mem 2GiB max_mem: 5678M alloc 512MB tokens 12.5M", {"mem": 2048.0, "max_mem": 5678.0}),
        (
            "step 9 train loss 0.5 val loss 0.6 grad norm 1.5",
            {"train loss": 0.5, "val loss": 0.6, "grad norm": 1.5},
        ),
        ("step 9 | 11,000 tok/s | 980.5 samples/sec", {"throughput": 11000.0}),
    ],
)
def test_named_numbers_in_any_spelling(line: str, want: dict[str, float]) -> None:
    got, counters = parse_generic(line)
    assert counters == {"x": 9.0} or "step 5" in line or "epoch 2" in line or "iter 5" in line
    for k, v in want.items():
        assert k in got, (k, got)
        assert (math.isnan(got[k]) and math.isnan(v)) or got[k] == pytest.approx(v), (k, got)


def test_units_on_memory_and_plain_multipliers() -> None:
    got, _ = parse_generic("step 9 alloc 512MB tokens 12.5M")
    assert got == {"alloc": 512.0, "tokens": 12.5e6}


@pytest.mark.parametrize(
    ("line", "x"),
    [
        ("step 1,200 loss 1.0", 1200.0),
        ("global_step=77 epoch=3 loss=1.0", 77.0),
        ("Epoch: [3][ 10/500]\tLoss 1.0 (1.1)", 1510.0),
        ("epoch 3 iter 10/500 loss 1.0", 1510.0),
        ("epoch 001:    100 / 1000 loss=1.0, num_updates=2100", 2100.0),
        ("[epoch 4/10] loss 1.0", 4.0),
    ],
)
def test_counters_place_the_point(line: str, x: float) -> None:
    assert parse_generic(line)[1] == {"x": x}


def test_not_pairs() -> None:
    got, _ = parse_generic("step 3 | trainer.py:412 | eta: 0:30:00 | 1875/1875 | rank 0 | loss 2.0")
    assert got == {"loss": 2.0}


def test_dates_and_progress_bar_percentages_are_not_values() -> None:
    # a log level followed by a date is no "INFO 2025" metric; tqdm's "Training:  45%|" is the bar, not a metric
    assert parse_generic("INFO 2025-01-01 12:00:00 train.py:10] step 5 loss 1.2") == (
        {"loss": 1.2},
        {"x": 5.0},
    )
    assert parse_generic("Training:  45%|####5     | 45/100 [01:30<01:50,  2.00s/it]") == ({}, {})
    assert parse_generic("gpu util: 45% | loss 0.3")[0] == {"gpu util": 45.0, "loss": 0.3}


def test_a_development_split_is_validation() -> None:
    # flair's "DEV : loss 1.7" and "dev loss" are the validation split; a /dev/ path in the head is not
    assert parse_generic("2023-01-01 10:00:04,000 DEV : loss 1.7 - f1-score (micro avg)  0.6000")[0] == {
        "val_loss": 1.7
    }
    assert parse_generic("writing /dev/shm cache loss 0.5")[0] == {"loss": 0.5}
    ss = parse_text_lines("epoch 1 dev loss: 0.52, dev acc: 0.81\nepoch 2 dev loss: 0.50, dev acc: 0.82\n")
    assert {"val_loss", "val_acc"} <= set(ss.series)


def test_a_line_headed_val_eval_or_test_is_validation() -> None:
    assert parse_generic("[eval] step 40: loss=1.5 acc 0.5")[0] == {"val_loss": 1.5, "val_acc": 0.5}
    assert parse_generic("Test: [ 10/196]\tTime 0.1 (0.1)\tLoss 1.2 (1.3)")[0] == {
        "val_Time": 0.1,
        "val_Loss": 1.2,
    }
    assert parse_generic("step 40: loss=1.5 val_loss 1.7")[0] == {
        "loss": 1.5,
        "val_loss": 1.7,
    }  # names, not head
    assert parse_generic("[test_train.py:3] step 40: loss=1.5")[0] == {"loss": 1.5}


def test_names_are_learned_per_file_and_line_order_is_x_without_a_counter() -> None:
    ss = parse_text_lines(
        "Loading shard 3 of 8\n"
        "Epoch 1/3\n"
        "100/100 - 2s - loss: 2.0 - accuracy: 0.20 - val_loss: 2.1\n"
        "Epoch 2/3\n"
        "100/100 - 2s - loss: 1.5 - accuracy: 0.40 - val_loss: 1.7\n"
        "checkpoint loss 9.9 written\n"
    )
    assert ss.series["loss"].values == [2.0, 1.5, 9.9] and ss.series["loss"].steps == [1.0, 2.0, 3.0]
    assert ss.step_kind == "entry"
    assert "shard" not in ss.series  # "shard 3": one sighting is not a series
    assert ss.series["val_loss"].values == [2.1, 1.7]


def test_validation_lines_take_the_last_step() -> None:
    ss = parse_text_lines(
        "step 100 | loss 2.0\nvalidation: loss 2.2 acc 0.3\nstep 200 | loss 1.8\nvalidation: loss 2.1 acc 0.4\n"
    )
    assert ss.series["val_loss"].steps == [100.0, 200.0] and ss.series["loss"].steps == [100.0, 200.0]


def test_ansi_colours_are_not_part_of_names() -> None:
    line = "\x1b[31mstep: 10  \x1b[32mloss:  2.2177  \x1b[33mmemory:  0.30GiB(0.38%)\x1b[39m"
    got, counters = parse_generic(line)
    assert got == {"loss": 2.2177, "memory": pytest.approx(307.2)} and counters == {"x": 10.0}


def test_megatron_timers_and_profiler_summaries_give_a_data_share() -> None:
    ss = parse_text_lines(
        "".join(
            f" iteration {i * 10:8d}/    1000 | elapsed time per iteration (ms): 100.0 | lm loss: 2.0E+00 |\n"
            "(min, max) time across ranks (ms):\n"
            "    forward-backward ...............................: (38.0, 40.0)\n"
            "    batch-generator ................................: (58.0, 60.0)\n"
            for i in range(1, 20)
        )
    )
    assert ss.series["data_time"].steps[:2] == [10.0, 20.0] and ss.series["data_time"].values[0] == 60.0
    (dw,) = [t for t in detect(ss) if t.trend == "data_wait"]
    assert dw.value == pytest.approx(0.6)
    prof = parse_text_lines(
        "step 1 loss 2.0\nstep 2 loss 1.9\n"
        "|  run_training_batch                          \t|  0.010  \t|  600  \t|  6.0  \t|  20.0  \t|\n"
        "|  [_TrainingEpochLoop].train_dataloader_next  \t|  0.040  \t|  600  \t|  24.0  \t|  80.0  \t|\n"
    )
    (dw,) = [t for t in detect(prof) if t.trend == "data_wait"]
    assert dw.value == pytest.approx(0.8) and dw.points == 1
    torch_prof = parse_text_lines(
        "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__   30.20%   1.2s   30.45%   1.2s   12ms   100\n"
    )
    assert not [t for t in detect(torch_prof) if t.trend == "data_wait"]  # 30% < data_wait_share
    assert [t for t in detect(torch_prof, {"data_wait_share": 0.3}) if t.trend == "data_wait"]


# --- trend rules that know a healthy run ------------------------------------------------------------------


def _megatron(scales: list[float], skipped: list[int], losses: list[float]) -> str:
    return "".join(
        f" iteration {10 * (i + 1):8d}/    5000 | lm loss: {loss:.6E} | loss scale: {s:.1f} | grad norm: 1.0 |"
        f" number of skipped iterations: {k:3d} | number of nan iterations:   0 |\n"
        for i, (s, k, loss) in enumerate(zip(scales, skipped, losses, strict=True))
    )


def test_a_start_up_loss_scale_search_is_healthy(diagnose_files: Callable[..., dict[str, Any]]) -> None:
    n = 60
    scales = [2.0**32, 2.0**26, 2.0**20, 2.0**17] + [2.0**17] * (n - 4)
    skipped = [10, 10, 10, 3] + [0] * (n - 4)
    losses = [10.0 - 6.0 * (1 - math.exp(-i / 15)) for i in range(n)]
    rep = diagnose_files({"train.log": _megatron(scales, skipped, losses)})
    assert rep["verdict"] == "no_failure", [h["id"] for h in rep["hypotheses"]]


def test_a_collapse_needs_the_floor_or_continuing_skips(
    diagnose_files: Callable[..., dict[str, Any]],
) -> None:
    n = 60
    at_floor = [2.0**16] * 30 + [2.0 ** (15 - i) for i in range(15)] + [1.0] * 15
    rep = diagnose_files({"train.log": _megatron(at_floor, [0] * 30 + [1] * 30, [3.0] * n)})
    assert top_id(rep) == "mixed_precision_overflow"
    # fell 2^10 after the search but steady since, no skips for the last half: the scaler found its level
    settled = [2.0**16] * 20 + [2.0 ** (15 - i) for i in range(10)] + [2.0**6] * 30
    rep = diagnose_files(
        {"train.log": _megatron(settled, [0] * 20 + [1] * 10 + [0] * 30, [3.0 - i / 60 for i in range(n)])}
    )
    assert "mixed_precision_overflow" not in [h["id"] for h in rep["hypotheses"]]


def test_memory_growing_for_thousands_of_steps_before_an_oom_is_a_leak_first(
    diagnose_files: Callable[..., dict[str, Any]],
) -> None:
    # a peak-memory counter: it creeps up in plateaus (few step-to-step increases) over the whole run
    lines = [
        f"Epoch: [0]  [{i:4d}/5000]  eta: 0:10:00  lr: 0.1  loss: 2.0000 (2.0000)  time: 0.2000  data: 0.0100  "
        f"max mem: {20000 + 150 * (i // 200)}"
        for i in range(0, 4000, 20)
    ]
    lines += [
        "Traceback (most recent call last):",
        '  File "train.py", line 120, in train_one_epoch',
        "    loss.backward()",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
        "79.10 GiB of which 1.12 GiB is free.",
    ]
    rep = diagnose_files({"train.log": "\n".join(lines) + "\n"})
    ids = [h["id"] for h in rep["hypotheses"]]
    assert ids[0] == "gpu_memory_leak" and "gpu_oom" in ids


def test_overfitting_with_validation_every_n_steps(diagnose_files: Callable[..., dict[str, Any]]) -> None:
    lines = []
    for step in range(10, 1010, 10):
        lines.append(f"step {step} | loss {2.0 * math.exp(-step / 300) + 0.1:.4f} | lr 1.0e-03")
        if step % 200 == 0:
            val = 1.0 + ((step - 400) / 400) ** 2 * 0.5  # best at step 400, then rising
            lines.append(f"step {step} | val_loss {val:.4f}")
    rep = diagnose_files({"train.log": "\n".join(lines) + "\n"})
    assert top_id(rep) == "overfitting"


def test_a_diverged_run_that_kept_going_is_not_completed(
    diagnose_files: Callable[..., dict[str, Any]],
) -> None:
    lines = [
        f"step {s} | loss {1.0 if s < 500 else 1.0 + (s - 500) / 50:.4f} | grad_norm {1.0 if s < 500 else s / 100:.3f}"
        for s in range(10, 1010, 10)
    ]
    lines.append("Training completed.")
    rep = diagnose_files({"train.log": "\n".join(lines) + "\n"})
    assert top_id(rep) == "optimizer_divergence" and rep["verdict"] != "no_failure"


# --- the healthy corpus -----------------------------------------------------------------------------------

HEALTHY = sorted(p.parent for p in (FIXTURES / "healthy").glob("*/expected.yaml"))
CURVE_RULES = [
    r["id"] for r in yaml.safe_load((FIXTURES.parent / "rules/core/curves.yaml").read_text())["rules"]
]


def test_the_healthy_corpus_covers_every_format() -> None:
    assert len(HEALTHY) >= 20
    names = " ".join(p.name for p in HEALTHY)
    for fmt in (
        "hf_",
        "lightning",
        "keras",
        "megatron",
        "deepspeed",
        "timm",
        "torchvision",
        "fairseq",
        "detectron2",
        "mmengine",
        "pytorch_examples",
        "torchtitan",
        "plain_prints",
        "yolov5",
        "matconvnet",
        "mxnet",
        "caffe",
    ):
        assert fmt in names, fmt


@pytest.mark.parametrize("run_dir", HEALTHY, ids=lambda p: p.name)
def test_every_trend_rule_on_every_healthy_run(run_dir: Path, kb: KnowledgeBase) -> None:
    """The metrics probe reads the run's curves (so the trend detectors run on real data), and no curve rule
    other than the stop record fires: a healthy or in-progress run gives no failure."""
    from mldebug_rules.diagnose import Request, diagnose

    d = diagnose(Request(run_dirs=[run_dir], offline=True), kb=kb)
    metrics = next(o for o in d.probes if o.name == "metrics")
    curves = metrics.payload.get("series", {})
    if run_dir.name != "torchrun_gloo_ddp":  # its loss is printed three times: too few points for a window
        assert any(len(s.get("loss", [])) >= 8 for s in (c["series"] for c in curves.values())), curves.keys()
    trends = [f.attrs["trend"] for f in d.facts if f.kind == "metric.trend"]
    assert set(trends) <= {"stopped"}, trends
    fired = {r for h in d.gate.hypotheses for r in h.rules}
    assert not {f"core.{r}" for r in CURVE_RULES if r != "curve_stop_recorded"} & fired
    assert d.gate.verdict == "no_failure"


def _same(a: tuple[dict[str, float], dict[str, float]], b: tuple[dict[str, float], dict[str, float]]) -> bool:
    return (
        a[1] == b[1]
        and a[0].keys() == b[0].keys()
        and all((math.isnan(v) and math.isnan(b[0][k])) or v == b[0][k] for k, v in a[0].items())
    )


def test_the_plan_cache_reads_every_fixture_line_as_the_slow_path_does() -> None:
    """Every line of every fixture log, read twice through the template cache (plan, then replay) and once
    the slow way, gives the same metrics and x."""
    from mldebug_rules.collectors.metrics_generic import PLANS, parse_slow

    PLANS.clear()
    logs = [
        p for p in FIXTURES.rglob("*") if p.suffix in (".log", ".txt", ".out") and p.stat().st_size < 1 << 20
    ]
    checked = 0
    for path in logs:
        for line in path.read_text(errors="replace").splitlines():
            slow = parse_slow(line)
            assert _same(parse_generic(line), slow), line
            assert _same(parse_generic(line), slow), line
            checked += 1
    assert checked > 5000 and len(PLANS) > 100


@pytest.mark.parametrize(
    "lines",
    [
        ["step 5 loss 2.5", "step 6 loss -2.5", "step 7 loss nan", "step 8 loss 1e-3", "step -9 loss 2"],
        [
            "Epoch: [1][ 5/10]\tAcc@1 70.0 (60.0)\tAcc@5 90.0 (80.0)",
            "Epoch: [1][ 6/10]\tAcc@1 71.0 (61.0)\tAcc@5 91.0",
        ],
        ["step 1,200 | tps: 3,456 | layer2_loss 0.5", "step 1,300 | tps: 345 | layer3_loss 0.7"],
        [
            "step 5 loss 2.5 lr 3",
            "step 1.2.3 loss 2.5.1 lr 3,4",
            "step 5 loss 2.5 lr 3,4",
            "step 5,6 loss 1 lr 2",
        ],  # tokens the plan's first line did not have
    ],
)
def test_lines_sharing_a_template_replay_their_own_numbers(lines: list[str]) -> None:
    from mldebug_rules.collectors.metrics_generic import parse_slow

    for line in lines:
        assert _same(parse_generic(line), parse_slow(line)), line


def test_dataloader_wait_lines_and_token_throughput(diagnose_files: Callable[..., dict[str, Any]]) -> None:
    waits = "".join(
        f"[step {s}] dataloader_wait: {450 + s % 7}ms  step_time: {0.6 + (s % 5) / 100:.2f}s  loss {3 - s / 1000:.3f}\n"
        for s in range(10, 400, 10)
    )
    ss = parse_text_lines(waits)
    (dw,) = [t for t in detect(ss) if t.trend == "data_wait"]
    assert 0.6 < dw.value < 0.8
    assert top_id(diagnose_files({"train.log": waits})) == "input_pipeline_bottleneck"
    slowing = "".join(
        f"step {s} | loss {3 - s / 1000:.3f} | {12000 if s < 300 else 7000:,} tokens/s\n"
        for s in range(10, 400, 10)
    )
    assert [t.trend for t in detect(parse_text_lines(slowing)) if t.trend == "throughput_drop"]


@pytest.mark.parametrize(
    ("line", "want"),
    [
        # an epoch's time is not a step's time (it would read as a 100x slower step)
        ("Epoch 3 | epoch time 44.6s | loss 0.3012", {"epoch time": 44.6, "loss": 0.3012}),
        # matconvnet: "epoch NN: i/n:" places the point, "rate (avg) Hz" is the throughput
        (
            "train: epoch 02: 600/1112: 5.4 (5.3) Hz objective: 0.752",
            {"objective": 0.752, "throughput": 5.4},
        ),
        (
            "Epoch 1:  40%|####   | 200/500 [00:50<01:15,  4.12it/s]  loss 0.41",
            {"loss": 0.41, "throughput": 4.12},
        ),
    ],
)
def test_generic_reader_rates_and_epoch_names(line: str, want: dict[str, float]) -> None:
    from mldebug_rules.collectors.metrics_generic import parse_generic

    assert parse_generic(line)[0] == want


def test_matconvnet_epoch_batch_counter_places_the_point() -> None:
    from mldebug_rules.collectors.metrics_generic import parse_generic

    assert parse_generic("train: epoch 02: 600/1112: 5.4 (5.3) Hz objective: 0.752")[1] == {
        "x": 2 * 1112 + 600
    }


def test_yolo_epoch_lines_read_nan_loss_columns() -> None:
    # A diverged fp16 YOLO run prints nan in its loss columns; the line must still give a loss point (NaN).
    ss = parse_text_lines(
        "".join(
            f"     {e}/299     6.02G    0.0{5 - e % 3}52    0.0348    0.0190         95        640: 100%|██████████|"
            f" 469/469 [03:01<00:00, 2.58it/s]\n"
            for e in range(10)
        )
        + "     10/299     6.02G        nan        nan        nan         95        640: 100%|██████████| 469/469"
        " [03:01<00:00, 2.58it/s]\n"
    )
    values = ss.series["loss"].values
    assert len(values) == 11 and math.isnan(values[-1]) and all(math.isfinite(v) for v in values[:-1])


def test_a_step_counted_within_its_epoch_takes_the_epoch_into_x() -> None:
    # The PyTorch tutorials' loop prints "Epoch [e/E], Step [i/n]": i restarts every epoch.
    ss = parse_text_lines(
        "".join(
            f"Epoch [{e}/3], Step [{i}/300], Loss: {2.0 - 0.1 * e - i / 1000:.4f}\n"
            for e in range(1, 4)
            for i in (100, 200, 300)
        )
    )
    steps = ss.series["Loss"].steps if "Loss" in ss.series else ss.series["loss"].steps
    assert steps == sorted(steps) and len(set(steps)) == 9
    assert parse_generic("step 100 | loss 2.0")[1] == {"x": 100.0}  # a step without an epoch stays as it is


def test_a_bracketed_qualifier_between_a_name_and_its_colon_is_not_part_of_the_name() -> None:
    assert parse_generic("epoch 3 | loss (avg): 0.52 | lr 3e-4") == ({"loss": 0.52, "lr": 0.0003}, {"x": 3.0})
    assert parse_generic("Testing loss  (50 prc): 0.53")[0] == {"val_loss": 0.53}
    # a running average after the number stays out of the name and out of the value
    assert parse_generic("Time  0.200 ( 0.210)    Loss 2.30 (2.35)")[0] == {"Time": 0.2, "Loss": 2.3}


def test_mxnet_epoch_summaries_give_train_and_validation_losses() -> None:
    ss = parse_text_lines(
        "INFO:root:Epoch[1] Train-cross-entropy=1.402\n"
        "INFO:root:Epoch[1] Time cost=24.695\n"
        "INFO:root:Epoch[1] Validation-cross-entropy=1.511\n"
        "INFO:root:Epoch[2] Train-cross-entropy=1.203\n"
        "INFO:root:Epoch[2] Time cost=24.101\n"
        "INFO:root:Epoch[2] Validation-cross-entropy=1.498\n"
    )
    assert ss.series["loss"].values == [1.402, 1.203]
    assert ss.series["val_loss"].values == [1.511, 1.498]


@pytest.mark.parametrize(
    ("line", "want"),
    [
        ("[10]\ttrain-logloss:0.51234\teval-logloss:0.62345", {"loss": 0.51234, "val_loss": 0.62345}),
        # the sklearn API's eval_set=[(train), (test)]: validation_0 is the training set when validation_1 follows
        ("[25]\tvalidation_0-rmse:3.21450\tvalidation_1-rmse:3.90120", {"loss": 3.2145, "val_loss": 3.9012}),
        ("[25]\tvalidation_0-rmse:3.21450", {"val_loss": 3.2145}),
        (
            "[10]\ttraining's binary_logloss: 0.512\tvalid_1's binary_logloss: 0.623",
            {"loss": 0.512, "val_loss": 0.623},
        ),
        (
            "10:\tlearn: 0.5123\ttest: 0.6234\tbest: 0.6000 (6)\ttotal: 1.2s\tremaining: 10.3s",
            {"loss": 0.5123, "val_loss": 0.6234},
        ),
        ("[5]\ttrain-auc:0.91\teval-auc:0.85", {"acc": 0.91, "val_acc": 0.85}),  # a score: higher is better
    ],
)
def test_gradient_boosting_rounds(line: str, want: dict[str, float]) -> None:
    from mldebug_rules.collectors.metrics_parse import parse_record

    assert parse_record("gbdt", line) == want
