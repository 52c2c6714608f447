"""The share of step time spent waiting for data, from each of its four sources (Time/Data meters, DataLoader
wait logs, throughput trends, profiler summaries): each alone puts input_pipeline_bottleneck first, with its
smoke (one synthetic in-memory batch, bypassing the DataLoader)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from conftest import FIXTURES, diagnose_dir

_STEPS = range(10, 400, 10)


def _loss(s: int) -> float:
    return 3.0 - s / 1000


# Logs written for these tests in the shapes custom loops print a DataLoader wait (the meters' own formats are
# the fixtures below).
_WAIT_LOGS: dict[str, Callable[[float], str]] = {  # wait (s per step) -> log
    "dataloader_wait_ms": lambda w: "".join(
        f"[step {s}] dataloader_wait: {1000 * w + s % 7:.0f}ms  step_time: {0.6 + (s % 5) / 100:.2f}s  "
        f"loss {_loss(s):.3f}\n"
        for s in _STEPS
    ),
    "data_loading_time_spaced_units": lambda w: "".join(
        f"Iter {s} | loss {_loss(s):.3f} | data loading time: {1000 * w + s % 9:.0f} ms | batch time: 598 ms\n"
        for s in _STEPS
    ),
    "data_wait_time_kv": lambda w: "".join(
        f"step={s} loss={_loss(s):.3f} data_wait_time={w + (s % 3) / 1000:.3f} iter_time=0.600\n"
        for s in _STEPS
    ),
    # the wait printed as its share of a 0.6 s step
    "data_share_percent": lambda w: "".join(
        f"step {s} | loss {_loss(s):.3f} | dataloader: {100 * w / 0.6 + s % 3:.1f}%\n" for s in _STEPS
    ),
    "data_beside_compute": lambda w: "".join(
        f"step {s} | loss {_loss(s):.3f} | data {w:.2f}s | compute 0.20s\n" for s in _STEPS
    ),
}
_THROUGHPUT_LOGS = {
    "tokens_per_second": "".join(
        f"step {s} | loss {_loss(s):.3f} | {12000 if s < 300 else 7000:,} tokens/s\n" for s in _STEPS
    ),
    # HF Trainer log dicts carrying the throughput (a callback's `self.log`)
    "hf_train_samples_per_second": "".join(
        f"{{'loss': {_loss(s):.4f}, 'learning_rate': 1e-05, 'train_samples_per_second': "
        f"{31.0 if s < 300 else 17.0:.1f}, 'epoch': {s / 400:.2f}}}\n"
        for s in _STEPS
    ),
}
_TORCH_PROFILER = (
    "".join(f"step {s} loss {_loss(s):.3f}\n" for s in _STEPS)
    + "-------------------------------------------------------  ------------  ------------  ------------\n"
    + "                                                   Name    Self CPU %      Self CPU   CPU total %\n"
    + "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__        58.20%       2.328s        58.45%       2.338s      23.380ms           100  \n"
    + "                                          aten::addmm         9.10%     364.000ms         9.80%     392.000ms       1.960ms           200  \n"
)


def _top_is_the_pipeline_with_its_smoke(rep: dict[str, Any], trend: str) -> None:
    top = rep["hypotheses"][0]
    assert top["id"] == "input_pipeline_bottleneck", [(h["id"], h["score"]) for h in rep["hypotheses"]]
    assert top["smoke"]["id"] == "synthetic_batch"
    assert "input_pipeline_bottleneck" in top["smoke"]["outcomes"]["passed"]["confirms"]
    assert any(e["fact"] == "metric.trend" and f"{trend}:" in e["text"] for e in top["evidence"]), top[
        "evidence"
    ]


@pytest.mark.parametrize(
    "fixture",
    ["curves_pytorch_examples_data_wait", "curves_timm_data_wait", "curves_megatron_timer_data_wait"],
)
def test_time_data_meters(fixture: str) -> None:
    _top_is_the_pipeline_with_its_smoke(diagnose_dir(FIXTURES / fixture), "data_wait")


@pytest.mark.parametrize("name", sorted(_WAIT_LOGS))
def test_dataloader_wait_logs(name: str, diagnose_files: Callable[..., dict[str, Any]]) -> None:
    _top_is_the_pipeline_with_its_smoke(diagnose_files({"train.log": _WAIT_LOGS[name](0.45)}), "data_wait")


@pytest.mark.parametrize("name", sorted(_THROUGHPUT_LOGS))
def test_throughput_trends(name: str, diagnose_files: Callable[..., dict[str, Any]]) -> None:
    _top_is_the_pipeline_with_its_smoke(
        diagnose_files({"train.log": _THROUGHPUT_LOGS[name]}), "throughput_drop"
    )


def test_profiler_summaries(diagnose_files: Callable[..., dict[str, Any]]) -> None:
    _top_is_the_pipeline_with_its_smoke(
        diagnose_dir(FIXTURES / "curves_lightning_profiler_data_wait"), "data_wait"
    )
    _top_is_the_pipeline_with_its_smoke(diagnose_files({"train.log": _TORCH_PROFILER}), "data_wait")


@pytest.mark.parametrize("name", sorted(_WAIT_LOGS))
def test_a_small_data_share_is_no_bottleneck(
    name: str, diagnose_files: Callable[..., dict[str, Any]]
) -> None:
    """The same logs with a data wait far below data_wait_share give no pipeline hypothesis."""
    fast = _WAIT_LOGS[name](0.02)
    rep = diagnose_files({"train.log": fast})
    assert "input_pipeline_bottleneck" not in [h["id"] for h in rep["hypotheses"]], fast[:200]
