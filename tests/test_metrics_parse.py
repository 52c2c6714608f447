"""Every metric format the `metrics` probe reads, parsed from text written in that logger's real format."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

from mldebug_rules.collectors.metrics_parse import (
    SECTION_MODES,
    TABLE_MODES,
    LineReader,
    loads_tolerant,
    parse_text_lines,
    read_any,
    read_trainer_state,
)
from mldebug_rules.collectors.metrics_series import Series, canonical
from mldebug_rules.collectors.tfevents import read_tfevents, write_scalars


def test_hf_printed_dicts_train_and_eval() -> None:
    ss = parse_text_lines(
        "{'loss': 0.6931, 'grad_norm': 1.2, 'learning_rate': 4.9e-05, 'epoch': 0.42}\n"
        " 10%|█         | 50/500 [00:10<01:30,  5.00it/s]\n"
        "{'eval_loss': 0.51, 'eval_runtime': 3.1, 'eval_samples_per_second': 320.0, 'epoch': 1.0}\n"
        "{'loss': nan, 'grad_norm': inf, 'learning_rate': 4.8e-05, 'epoch': 1.1}\n"
        "{'train_runtime': 100.0, 'train_samples_per_second': 50.0, 'train_loss': 0.4, 'epoch': 3.0}\n"
    )
    loss = ss.series["loss"]
    assert loss.values[0] == 0.6931 and math.isnan(loss.values[1]) and loss.total == 2  # summary dict skipped
    assert ss.series["val_loss"].values == [0.51]
    assert math.isinf(ss.series["grad_norm"].values[1])
    assert ss.series["lr"].values == [4.9e-05, 4.8e-05]
    assert ss.step_kind == "entry"


def test_trainer_state_with_bare_nan_and_infinity(tmp_path: Path) -> None:
    p = tmp_path / "trainer_state.json"
    p.write_text(
        '{"global_step": 30, "max_steps": 100, "log_history": ['
        '{"loss": 0.5, "grad_norm": 1.0, "step": 10}, {"loss": NaN, "grad_norm": Infinity, "step": 20},'
        '{"eval_loss": -Infinity, "step": 20}, {"train_runtime": 3.0, "step": 30}]}'
    )
    ss = read_trainer_state(p, "trainer_state.json")
    assert ss.series["loss"].steps == [10.0, 20.0]
    assert ss.series["loss"].nan_onset is not None and ss.series["loss"].nan_onset[0] == 20.0
    assert ss.series["grad_norm"].values[1] == math.inf
    assert ss.series["val_loss"].values == [-math.inf]
    assert ss.stop == "early_stopping"  # finished (train_runtime) before max_steps


def test_trainer_state_early_stopping_callback_state(tmp_path: Path) -> None:
    p = tmp_path / "trainer_state.json"
    p.write_text(
        json.dumps(
            {
                "log_history": [{"loss": 1.0, "step": 1}],
                "stateful_callbacks": {
                    "EarlyStoppingCallback": {
                        "args": {"early_stopping_patience": 2},
                        "attributes": {"early_stopping_patience_counter": 2},
                    }
                },
            }
        )
    )
    assert read_trainer_state(p, "t").stop == "early_stopping"


def test_tolerant_json_lowercase_nan() -> None:
    doc = loads_tolerant('{"loss": nan, "x": -inf, "s": "nan stays a string"}')
    assert math.isnan(doc["loss"]) and doc["x"] == -math.inf and doc["s"] == "nan stays a string"


def test_lightning_csv_sparse_rows(tmp_path: Path) -> None:
    p = tmp_path / "metrics.csv"
    p.write_text(
        "epoch,step,train_loss_epoch,train_loss_step,val_loss\n"
        "0,49,,2.1,\n0,99,,1.9,\n0,99,,,1.95\n0,99,2.0,,\n1,149,,1.7,\n"
    )
    ss = read_any(p, "metrics.csv")
    assert ss is not None
    assert ss.series["loss"].steps == [49.0, 99.0, 149.0]
    assert ss.series["val_loss"].values == [1.95]
    assert ss.series["train_loss_epoch"].values == [2.0]


def test_lightning_progress_bar_cr_updates_keep_physical_lines(tmp_path: Path) -> None:
    p = tmp_path / "train.log"
    p.write_bytes(
        b"GPU available: True\n"
        b"\rEpoch 0:  50%|\xe2\x96\x88\xe2\x96\x88\xe2\x96\x88\xe2\x96\x88\xe2\x96\x88     | 5/10 [00:01<00:01, 5.0it/s, v_num=1, loss=0.9]"
        b"\rEpoch 0: 100%|\xe2\x96\x88\xe2\x96\x88\xe2\x96\x88\xe2\x96\x88\xe2\x96\x88\xe2\x96\x88\xe2\x96\x88\xe2\x96\x88\xe2\x96\x88\xe2\x96\x88| 10/10 [00:02<00:00, 5.0it/s, v_num=1, loss=0.8]\n"
        b"\rEpoch 1:  50%|#####     | 5/10 [00:01<00:01, 5.0it/s, v_num=1, loss=nan]\n"
    )
    ss = LineReader().read(p, "train.log")
    loss = ss.series["loss"]
    assert loss.steps == [5.0, 10.0, 15.0]  # epoch * batches + batch
    assert loss.lines == [2, 2, 3]
    assert loss.nan_onset is not None and loss.nan_onset[2] == 3


def test_megatron_iteration_lines() -> None:
    ss = parse_text_lines(
        " iteration     1500/  100000 | consumed samples:       768000 | elapsed time per iteration (ms): 512.3 |"
        " learning rate: 3.000E-04 | global batch size:   512 | lm loss: 2.345000E+00 | loss scale: 65536.0 |"
        " grad norm: 1.234 | number of skipped iterations:   2 | number of nan iterations:   0 |\n"
    )
    got = {k: s.values[0] for k, s in ss.series.items()}
    assert got == {
        "step_time": 512.3,
        "lr": 3e-4,
        "loss": 2.345,
        "loss_scale": 65536.0,
        "grad_norm": 1.234,
        "skipped_iters": 2.0,
        "nan_iters": 0.0,
    }
    assert ss.series["loss"].steps == [1500.0]


def test_deepspeed_engine_step_and_timer_lines() -> None:
    ss = parse_text_lines(
        "[2024-05-01 10:02:11,201] [INFO] [logging.py:96:log_dist] [Rank 0] step=10, skipped=4, "
        "lr=[4.99e-05, 4.99e-05], mom=[(0.9, 0.95), (0.9, 0.95)]\n"
        "[2024-05-01 10:02:11,204] [INFO] [timer.py:260:stop] epoch=0/micro_step=40/global_step=10, "
        "RunningAvgSamplesPerSec=25.02, CurrSamplesPerSec=25.70, MemAllocated=4.32GB, MaxMemAllocated=38.49GB\n"
    )
    assert ss.parsers == {"deepspeed_step", "deepspeed_timer"}
    got = {k: (s.steps[0], s.values[0]) for k, s in ss.series.items()}
    assert got["skipped_total"] == (10.0, 4.0)  # a running total: trends turn it into per-interval counts
    assert got["throughput"] == (10.0, 25.7) and got["mem"] == (10.0, 4.32)
    assert "lr" not in got and "skipped_iters" not in got


def test_every_parser_example_is_read_by_its_parser() -> None:
    """The examples in metric_lines.yaml are selected by their own parser first and yield metrics."""
    import yaml
    from mldebug_rules.collectors.metrics_parse import parse_record

    doc = yaml.safe_load((Path(__file__).parents[1] / "collectors" / "metric_lines.yaml").read_text())
    reader = LineReader()
    for entry in doc["lines"]:
        for ex in entry["examples"]:
            (hit,), _ = reader._matches(ex.encode() + b"\n")
            assert reader.parsers[hit[1]].id == entry["id"], ex
            if entry["parse"] not in TABLE_MODES + SECTION_MODES:
                assert parse_record(entry["parse"], hit[2]), ex
    for entry in doc["stops"]:
        for ex in entry["examples"]:
            ss = parse_text_lines(ex + "\n")
            assert ss.stop == entry["stop"], ex


def test_torchvision_and_timm_lines() -> None:
    tv = parse_text_lines(
        "Epoch: [3]  [ 100/5005]  eta: 0:30:00  lr: 0.1  img/s: 1024.5  loss: 2.3000 (2.4000)  acc1: 45.0 (44.1)"
        "  time: 0.2500  data: 0.2000  max mem: 10000\n"
    )
    assert {k: s.values[0] for k, s in tv.series.items()} == {
        "lr": 0.1,
        "throughput": 1024.5,
        "loss": 2.3,
        "acc1": 45.0,
        "step_time": 0.25,
        "data_time": 0.2,
        "mem": 10000.0,
    }
    assert tv.series["loss"].steps == [3 * 5005 + 100.0]
    timm = parse_text_lines(
        "Train: 3 [ 100/5005 (  2%)]  Loss: 3.2 (3.4)  Time: 0.250s, 1024.00/s  (0.255s, 1003.92/s)  LR: 1.000e-01"
        "  Data: 0.200 (0.190)\n"
    )
    assert {k: s.values[0] for k, s in timm.series.items()} == {
        "loss": 3.2,
        "step_time": 0.25,
        "lr": 0.1,
        "data_time": 0.2,
        "throughput": 1024.0,
    }


def test_generic_step_lines_and_one_parser_per_line() -> None:
    ss = parse_text_lines(
        "2024-05-01 12:00:00 INFO step=1200 loss=nan lr=3e-4\n"
        "step 1210 | loss 2.3456 | grad_norm 0.8 | lr 3.0e-04\n"
        "Epoch 3: 40%|####      | 2/5 [00:01<00:01, 2.0it/s, loss=0.1, v_num=1]\n"
    )
    assert ss.series["loss"].steps[:2] == [1200.0, 1210.0]
    assert ss.series["loss"].total == 3  # the bar line is read once (lightning_bar), not again as generic


def test_interleaved_ranks_follow_the_first() -> None:
    ss = parse_text_lines("[rank 0] step 0 loss 1.0\n[rank 1] step 0 loss 9.0\n[rank 0] step 1 loss 0.9\n")
    assert ss.series["loss"].values == [1.0, 0.9]


def test_stop_lines_near_the_end() -> None:
    ss = parse_text_lines("step 1 loss 1.0\nEarly stopping triggered at epoch 4\nTraining completed\n")
    assert ss.stop == "early_stopping" and ss.stop_from_log
    far = parse_text_lines("Training completed\n" + "step 1 loss 1.0\n" * 100)
    assert far.stop == ""


def test_jsonl_torn_last_line_and_gzip(tmp_path: Path) -> None:
    p = tmp_path / "metrics.jsonl"
    p.write_text('{"step": 1, "loss": 1.0}\n{"step": 2, "loss": NaN}\n{"step": 3, "lo')
    ss = read_any(p, "metrics.jsonl")
    assert ss is not None and ss.series["loss"].total == 2
    g = tmp_path / "m.jsonl.gz"
    g.write_bytes(gzip.compress(b'{"iteration": 5, "train/loss": 2.0, "time": 1714557600.0}\n'))
    gs = read_any(g, "m.jsonl.gz")
    assert gs is not None and gs.series["loss"].steps == [5.0] and "step_time" not in gs.series  # a timestamp


def test_wandb_summary(tmp_path: Path) -> None:
    p = tmp_path / "wandb-summary.json"
    p.write_text('{"train/loss": NaN, "_step": 300, "_runtime": 12.0, "_wandb": {"runtime": 12}}')
    ss = read_any(p, "wandb-summary.json")
    assert ss is not None and ss.series["loss"].nan_onset == (300.0, ss.series["loss"].values[0], 0)


def test_tensorboard_simple_value_and_tensor_forms(tmp_path: Path) -> None:
    a = tmp_path / "events.out.tfevents.1.a"
    write_scalars(a, [(i, "train/loss", 1.0 / (i + 1)) for i in range(5)])
    b = tmp_path / "events.out.tfevents.1.b"
    write_scalars(b, [(i, "Loss/train", 2.0) for i in range(3)], tensor=True)
    sa, sb = read_tfevents(a, "a"), read_tfevents(b, "b")
    assert sa.series["loss"].total == 5 and abs(sa.series["loss"].values[-1] - 0.2) < 1e-6
    assert sb.series["loss_train"].values == [2.0, 2.0, 2.0]
    torn = tmp_path / "events.out.tfevents.1.c"
    torn.write_bytes(a.read_bytes()[:-7])
    st = read_tfevents(torn, "c")
    assert st.series["loss"].total == 4 and st.issues


def test_series_bounded_keeps_onset_extremes_and_tail() -> None:
    s = Series("loss", cap=1000, keep_last=100)
    for i in range(50_000):
        s.add(i, math.nan if i == 20_000 else float(i % 997))
    assert len(s.steps) <= 1000 and s.total == 50_000
    assert s.nan_onset is not None and s.nan_onset[0] == 20_000.0
    assert s.max_value == 996.0 and s.min_value == 0.0
    assert s.steps[-100:] == [float(i) for i in range(49_900, 50_000)]
    assert any(math.isnan(v) for v in s.values)  # the onset stays visible after compaction


def test_canonical_names() -> None:
    assert [
        canonical(n)
        for n in (
            "train/loss",
            "eval/loss",
            "val_loss",
            "lm loss",
            "learning rate",
            "grad norm",
            "loss scale",
            "max mem",
            "data",
            "time",
        )
    ] == [
        "loss",
        "val_loss",
        "val_loss",
        "loss",
        "lr",
        "grad_norm",
        "loss_scale",
        "mem",
        "data_time",
        "step_time",
    ]


def test_big_log_metric_lines_are_sampled_with_exact_line_numbers(tmp_path: Path, monkeypatch) -> None:
    import mldebug_rules.collectors.metrics_parse as mp

    monkeypatch.setattr(mp, "CHUNK", 2048)
    monkeypatch.setattr(mp, "SAMPLE_MIN_BYTES", 10_000)
    monkeypatch.setattr(mp, "SAMPLE_HEAD", 2)
    monkeypatch.setattr(mp, "SAMPLE_TAIL", 2)
    monkeypatch.setattr(mp, "SAMPLE_CHUNKS", 8)
    n = 6000
    lines = []
    for i in range(1, n + 1):  # line i logs step i (every third line is noise)
        lines.append(f"step {i} | loss {1.0 + i / n:.6f}" if i % 3 else f"noise line {i}")
    path = tmp_path / "train.log"
    path.write_text("\n".join(lines) + "\n")
    ss = LineReader().read(path, "train.log")
    loss = ss.series["loss"]
    assert 0 < loss.total < n // 2  # sampled, not every metric line
    assert all(int(step) == line for step, line in zip(loss.steps, loss.lines, strict=True))
    assert loss.steps[-1] == n - 1  # the end of the log is always read
    assert any("metric lines read in" in i for i in ss.issues)
    # Below the threshold every line is read.
    monkeypatch.setattr(mp, "SAMPLE_MIN_BYTES", 1 << 30)
    assert LineReader().read(path, "train.log").series["loss"].total == n - n // 3


def test_a_named_cost_is_the_loss() -> None:
    """`train cost`, `val_cost`: the loss under another name. A bare `cost` stays itself: MXNet's
    "Epoch[3] Time cost=24.695" is an epoch's time, and reading it as the loss made a healthy run spike."""
    assert [canonical(n) for n in ("train cost", "avg_cost", "val_cost", "cost", "time cost")] == [
        "loss",
        "loss",
        "val_loss",
        "cost",
        "time_cost",
    ]
