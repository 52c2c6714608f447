"""Every threshold of the trend detectors and curve rules is a documented pack parameter: the parameters added
for the last literal thresholds move their detectors, no numeric literal acts as a threshold in trends.py or
in a curve rule's match, and the loss-scale collapse needs its floor or continuing overflow."""

from __future__ import annotations

import ast
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from mldebug_rules.collectors.metrics_series import SeriesSet
from mldebug_rules.collectors.trends import detect

ROOT = Path(__file__).resolve().parents[1]


def _ss(**series: Sequence[float]) -> SeriesSet:
    ss = SeriesSet("t")
    for name, values in series.items():
        for i, v in enumerate(values):
            ss.add(name, i, v)
    return ss


def _trends(ss: SeriesSet, params: Mapping[str, float] | None = None) -> set[str]:
    return {t.trend for t in detect(ss, params)}


# Literals that are structure, not thresholds, each stated in the parameter descriptions: 0 and 1 (signs,
# indices), 2, 3 and 4 (twice a parameter, the last 3 points, thirds and quarters of a run) and 1.5 (an
# accuracy above it is a percentage, not a fraction).
_STRUCTURAL = {0, 1, 2, 3, 4, 1.5}


def test_no_literal_threshold_in_the_trend_detectors() -> None:
    src = (ROOT / "collectors" / "trends.py").read_text()
    found = []
    for node in ast.walk(ast.parse(src)):
        in_range = isinstance(node, ast.Call) and getattr(node.func, "id", "") == "range"
        if isinstance(node, ast.Compare) or in_range:
            for n in ast.walk(node):
                if (
                    isinstance(n, ast.Constant)
                    and type(n.value) in (int, float)
                    and n.value not in _STRUCTURAL
                ):
                    found.append((node.lineno, n.value, ast.get_source_segment(src, node)))
    assert not found, f"make these pack parameters (rules/core/curves.yaml, docs/curves.md): {found}"


def test_curve_rules_compare_with_parameters_not_numbers() -> None:
    doc = yaml.safe_load((ROOT / "rules" / "core" / "curves.yaml").read_text())

    def numbers(x: Any) -> list[float]:
        if isinstance(x, dict):
            return [v for val in x.values() for v in numbers(val)]
        if isinstance(x, list):
            return [v for val in x for v in numbers(val)]
        return [x] if type(x) in (int, float) else []

    for rule in doc["rules"]:
        # 0 bounds a percentage from below (a reading at all), nothing else may be a bare number
        assert set(numbers(rule["when"])) <= {0}, rule["id"]


@pytest.mark.parametrize(
    ("param", "series", "trend", "moved"),
    [
        # a NaN after five finite points, the last three climbing: enough for nan_rise_min_points (4), not for 6
        ("nan_rise_min_points", {"loss": [1.0, 1.0, 1.0, 2.0, 2.5, math.nan]}, "nan_after_rise", 6),
        # a short log: four points rising x40 (above short_rise_factor 30), three points too few
        ("short_rise_factor", {"loss": [1.0, 2.0, 9.0, 40.0]}, "rising", 50.0),
        ("short_rise_min_points", {"loss": [1.0, 9.0, 40.0, 45.0]}, "rising", 5),
        # one spike after nine points: spike_min_points (10) wants one more
        ("spike_min_points", {"loss": [2.0] * 9 + [20.0] + [2.0] * 10}, "spike", 9),
        # a short memory log whose last rises are a quarter of the average: saturating at mem_saturation_share 0.3
        (
            "mem_saturation_share",
            {"mem": [1000.0, 2000.0, 2400.0, 2800.0, 3200.0, 3270.0, 3340.0]},
            "growing",
            0.2,
        ),
    ],
)
def test_the_parameters_move_their_detectors(
    param: str, series: dict[str, list[float]], trend: str, moved: float
) -> None:
    default = trend in _trends(_ss(**series))
    assert default != (trend in _trends(_ss(**series), {param: moved})), (param, default)


def test_throughput_decay_min_stretches_moves_the_slide() -> None:
    # 12 points: after warm-up 11, five stretches falling steadily
    tp = [100.0 - 6 * i for i in range(12)]
    assert "throughput_decay" in _trends(_ss(throughput=tp))
    assert "throughput_decay" not in _trends(_ss(throughput=tp), {"throughput_decay_min_stretches": 6})


# --- the loss-scale collapse: its floor, or overflow that goes on ------------------------------------------


def _fairseq(scales: Sequence[float]) -> str:
    """fairseq train_inner lines: a loss_scale column and no skipped-steps counter."""
    return "".join(
        f"2024-03-01 10:00:00 | INFO | train_inner | epoch 001:    {10 * (i + 1)} / 1000 loss={5 - i / 100:.3f}, "
        f"nll_loss=4.5, ppl=20.1, wps=12345.6, ups=2.1, num_updates={10 * (i + 1)}, lr=1.25e-05, gnorm=2.345, "
        f"loss_scale={s:g}, train_wall=48, wall=50\n"
        for i, s in enumerate(scales)
    )


def test_without_a_skip_counter_a_fall_that_held_is_the_scaler_at_its_level(
    diagnose_files: Callable[..., dict[str, Any]],
) -> None:
    grown = [128 * 2 ** min(i, 8) for i in range(30)]  # the scale grows to 2^15 while nothing overflows
    held = grown + [2**15 / 2 ** (i + 1) for i in range(8)] + [128.0] * 60  # falls 256x, then holds
    rep = diagnose_files({"train.log": _fairseq(held)})
    assert rep["verdict"] == "no_failure", [h["id"] for h in rep["hypotheses"]]
    falling = grown + [2**15 / 2 ** (i // 4 + 1) for i in range(48)]  # still halving to the end (not at 1)
    assert falling[-1] > 1.0
    rep = diagnose_files({"train.log": _fairseq(falling)})
    assert rep["hypotheses"][0]["id"] == "mixed_precision_overflow"


def _megatron(scales: Sequence[float], skipped: Sequence[int]) -> str:
    return "".join(
        f" iteration {10 * (i + 1):8d}/    5000 | lm loss: {3.0 - i / 100:.6E} | loss scale: {s:.1f} | grad norm: 1.0 |"
        f" number of skipped iterations: {k:3d} | number of nan iterations:   0 |\n"
        for i, (s, k) in enumerate(zip(scales, skipped, strict=True))
    )


def test_with_a_skip_counter_a_fall_off_the_floor_needs_skips_to_go_on(
    diagnose_files: Callable[..., dict[str, Any]],
) -> None:
    scales = (
        [2.0**16] * 20 + [2.0 ** (15 - i) for i in range(10)] + [2.0**6] * 30
    )  # 1024x fall, above the floor
    going_on = diagnose_files({"train.log": _megatron(scales, [0] * 20 + [1] * 40)})
    assert going_on["hypotheses"][0]["id"] == "mixed_precision_overflow"
    stopped = diagnose_files({"train.log": _megatron(scales, [0] * 20 + [1] * 10 + [0] * 30)})
    assert "mixed_precision_overflow" not in [h["id"] for h in stopped["hypotheses"]]
