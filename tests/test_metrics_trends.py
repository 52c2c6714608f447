"""Trend detectors either side of each threshold, and thresholds moved by pack parameters."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import pytest
from mldebug_rules.collectors.metrics_series import SeriesSet
from mldebug_rules.collectors.trends import DEFAULTS, chance_classes, detect


def _ss(**series: Sequence[float]) -> SeriesSet:
    ss = SeriesSet("t")
    for name, values in series.items():
        for i, v in enumerate(values):
            ss.add(name, i, v)
    return ss


def _trends(ss: SeriesSet, params: Mapping[str, float] | None = None) -> dict[str, object]:
    return {t.trend: t for t in detect(ss, params)}


def test_nan_onset_first_point_vs_later() -> None:
    first = _trends(_ss(loss=[math.nan, math.nan, 1.0]))["nan_onset"]
    assert first.points == 0 and first.step == 0 and first.window_end == 0  # type: ignore[attr-defined]
    later = _trends(_ss(loss=[2.0, 1.9, math.inf]))["nan_onset"]
    assert later.points == 2 and later.step == 2  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("end", "grad_end", "expect"),
    [
        (3.1, 2.1, "diverging"),
        (2.9, 2.1, None),
        (3.1, 1.9, "rising"),
    ],
)
def test_divergence_thresholds(end: float, grad_end: float, expect: str | None) -> None:
    # min loss 1.0 at step 4; the last three losses' median is `end` (x3 = diverge_rise_factor)
    loss = [2.0, 1.8, 1.5, 1.2, 1.0, 1.5, 2.0, end, end, end]
    grad = [1.0] * 5 + [1.5, 1.8, grad_end, grad_end, grad_end]
    got = _trends(_ss(loss=loss, grad_norm=grad))
    names = {"diverging", "rising"} & set(got)
    assert names == ({expect} if expect else set())


def test_rising_without_grad_norm() -> None:
    assert "rising" in _trends(_ss(loss=[2.0, 1.5, 1.0, 1.2, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0]))


def test_divergence_param_override() -> None:
    loss = [2.0, 1.8, 1.5, 1.2, 1.0, 1.5, 2.0, 2.5, 2.5, 2.5]
    assert "rising" not in _trends(_ss(loss=loss))
    assert "rising" in _trends(_ss(loss=loss), {"diverge_rise_factor": 2.4})


@pytest.mark.parametrize(("jitter", "flat"), [(0.01, True), (0.04, False)])
def test_plateau_spread_threshold(jitter: float, flat: bool) -> None:
    # 10th-90th percentile spread of the last half vs plateau_rel_range (3%) of a level of 1.0; the loss fell
    # 3% first (less than plateau_min_drop, more than stuck_rel_tol): only the spread decides.
    loss = [max(1.0, 1.04 - 0.004 * i) + (jitter / 2 if i % 2 else -jitter / 2) for i in range(40)]
    assert ("plateau" in _trends(_ss(loss=loss))) is flat


@pytest.mark.parametrize(("end", "stuck"), [(0.985, True), (0.97, False)])
def test_a_noisy_loss_stuck_at_its_initial_value(end: float, stuck: bool) -> None:
    # spread 20% (not flat), the last half's median within stuck_rel_tol (2%) of the start, or not
    loss = [(1.0 if i < 20 else end) + (0.1 if i % 2 else -0.1) for i in range(40)]
    got = _trends(_ss(loss=loss))
    assert ("plateau" in got) is stuck
    if stuck:
        assert "stuck" in got["plateau"].note  # type: ignore[attr-defined]


def test_chance_level_without_a_flat_curve() -> None:
    loss = [2.3026 + (0.2 if i % 2 else -0.2) for i in range(40)]  # noisy, at ln(10), never better
    assert "chance_level" in _trends(_ss(loss=loss))


def test_plateau_needs_no_improvement() -> None:
    converged = [3.0 - 0.2 * i for i in range(10)] + [1.0] * 30
    assert "plateau" not in _trends(_ss(loss=converged))


@pytest.mark.parametrize(
    ("value", "k"), [(2.3026, 10), (0.6931, 2), (4.6052, 100), (6.9078, 1000), (2.35, None), (-1.0, None)]
)
def test_chance_classes(value: float, k: int | None) -> None:
    assert chance_classes(value, DEFAULTS["chance_abs_tol"]) == k


def test_chance_level_noted_only_at_ln_k() -> None:
    assert "chance_level" in _trends(_ss(loss=[0.6931] * 20))
    got = _trends(_ss(loss=[0.75] * 20))
    assert "plateau" in got and "chance_level" not in got


@pytest.mark.parametrize(("val_end", "expect"), [(1.06, True), (1.04, False)])
def test_overfitting_threshold(val_end: float, expect: bool) -> None:
    ss = SeriesSet("t")
    for i in range(20):
        ss.add("loss", i * 10, 2.0 - 0.08 * i)
    for i, v in enumerate([1.5, 1.2, 1.0, val_end, val_end]):
        ss.add("val_loss", i * 40 + 39, v)
    assert ("overfitting" in _trends(ss)) is expect


@pytest.mark.parametrize(("val_end", "expect"), [(-0.80, True), (-0.86, False)])
def test_overfitting_with_negative_losses(val_end: float, expect: bool) -> None:
    # A soft-Dice style loss: lower (more negative) is better; rising towards zero after its best is overfitting.
    ss = SeriesSet("t")
    for i in range(20):
        ss.add("loss", i * 10, -0.5 - 0.02 * i)
    for i, v in enumerate([-0.6, -0.8, -0.9, val_end, val_end]):
        ss.add("val_loss", i * 40 + 39, v)
    assert ("overfitting" in _trends(ss)) is expect


def test_overfitting_needs_train_falling() -> None:
    ss = SeriesSet("t")
    for i in range(20):
        ss.add("loss", i * 10, 1.0)
    for i, v in enumerate([1.5, 1.2, 1.0, 1.3, 1.3]):
        ss.add("val_loss", i * 40 + 39, v)
    assert "overfitting" not in _trends(ss)


@pytest.mark.parametrize(("factor", "expect"), [(4.1, True), (3.9, False)])
def test_spike_threshold(factor: float, expect: bool) -> None:
    loss = [1.0] * 15 + [factor] + [1.0] * 5
    assert ("spike" in _trends(_ss(loss=loss))) is expect


@pytest.mark.parametrize(("step_mb", "expect"), [(4.0, True), (3.8, False)])
def test_memory_growth_fraction(step_mb: float, expect: bool) -> None:
    # 30 points, 3 skipped as warm-up: growth = 26 * step_mb / (1000 + 3 * step_mb) vs 10%: 10.3%, 9.8%
    mem = [1000.0 + step_mb * i for i in range(30)]
    assert ("growing" in _trends(_ss(mem=mem))) is expect


def test_memory_mostly_flat_is_not_growing() -> None:
    mem = [1000.0 + (300.0 if i % 3 == 0 and i > 20 else 0.0) + (i // 10) * 200.0 for i in range(40)]
    assert "growing" not in _trends(_ss(mem=mem))
    assert "growing" not in _trends(_ss(mem=[1000.0 + i for i in range(19)]))  # too few points


@pytest.mark.parametrize(("late", "expect"), [(65.0, True), (75.0, False)])
def test_throughput_drop(late: float, expect: bool) -> None:
    tp = [100.0] * 20 + [late] * 10
    assert ("throughput_drop" in _trends(_ss(throughput=tp))) is expect


@pytest.mark.parametrize(("data", "expect"), [(0.41, True), (0.39, False)])
def test_data_wait_share(data: float, expect: bool) -> None:
    assert ("data_wait" in _trends(_ss(data_time=[data] * 20, step_time=[1.0] * 20))) is expect


def test_data_wait_param_override() -> None:
    ss = _ss(data_time=[0.3] * 20, step_time=[1.0] * 20)
    assert "data_wait" not in _trends(ss)
    assert "data_wait" in _trends(ss, {"data_wait_share": 0.25})


def test_loss_scale_collapse_and_skipped_steps() -> None:
    healthy = _trends(_ss(loss_scale=[65536.0, 32768.0, 65536.0, 131072.0], skipped_iters=[16, 0, 1, 0, 0]))
    assert "loss_scale_collapse" not in healthy and "skipped_steps" not in healthy  # start-up search
    collapsed = _trends(_ss(loss_scale=[65536.0, 65536.0, 256.0, 1.0], skipped_iters=[16, 0, 5, 5, 5]))
    assert collapsed["loss_scale_collapse"].value == 1.0  # type: ignore[attr-defined]
    assert collapsed["skipped_steps"].value == 15.0  # type: ignore[attr-defined]
    assert "skipped_steps" not in _trends(_ss(skipped_iters=[0, 3, 3, 3]))  # 9 < 10


def test_skipped_running_total_counts_its_increments() -> None:
    # DeepSpeed's skipped=K is cumulative: 3 at start-up, then +4 +4 +4 = 12 after the scaler settled.
    many = _trends(_ss(skipped=[3, 3, 7, 11, 15]))
    assert many["skipped_steps"].value == 12.0  # type: ignore[attr-defined]
    assert many["skipped_steps"].points == 3 and many["skipped_steps"].window_start == 2  # type: ignore[attr-defined]
    assert "skipped_steps" not in _trends(_ss(skipped=[3, 3, 5, 7, 9, 11]))  # 8 < 10, not 35
    resumed = _trends(_ss(skipped=[3, 3, 9, 2, 8]))  # the total restarts at a resume: 6 + 2 + 6
    assert resumed["skipped_steps"].value == 14.0  # type: ignore[attr-defined]


def test_a_summary_nan_is_a_final_value_not_an_onset() -> None:
    ss = SeriesSet("wandb-summary.json", last_values_only=True)
    ss.add("train/loss", 3000, math.nan)
    ss.add("train/grad_norm", 3000, 1.5)
    trends = detect(ss)
    assert [(t.metric, t.trend, t.window_start, t.window_end, t.points) for t in trends] == [
        ("loss", "nan_final", 3000, 3000, 1)
    ]


def test_nan_sudden_vs_preceded() -> None:
    sudden = _trends(_ss(loss=[1.0, 0.99, 0.98, 0.97, math.nan]))
    assert "nan_sudden" in sudden
    built_up = _trends(
        _ss(loss=[2.0, 1.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, math.nan], grad_norm=[1.0] * 3 + [10.0] * 6)
    )
    assert "nan_sudden" not in built_up and "diverging" in built_up
    too_short = _trends(_ss(loss=[1.0, 0.9, math.nan]))
    assert "nan_sudden" not in too_short


def test_stop_reason_only_from_structured_records() -> None:
    ss = _ss(loss=[1.0, 0.9])
    ss.stop = "early_stopping"
    stopped = _trends(ss)["stopped"]
    assert stopped.note == "early_stopping"  # type: ignore[attr-defined]
    assert (stopped.window_start, stopped.window_end, stopped.points) == (0, 1, 2)  # type: ignore[attr-defined]
    ss.stop_from_log = True
    assert "stopped" not in _trends(ss)


def test_detector_defaults_are_the_pack_defaults_and_documented(kb: object) -> None:
    """trends.DEFAULTS (used only without the core pack), the packs' params and docs/curves.md agree."""
    import re
    from pathlib import Path

    params = kb.params  # type: ignore[attr-defined]
    for name, default in DEFAULTS.items():
        assert params[name] == default, name
    doc = (Path(__file__).parents[1] / "docs" / "curves.md").read_text()
    rows = dict(re.findall(r"^\| `(\w+)`[^|]* \| ([0-9.]+) \|", doc, re.M))
    for name in [*DEFAULTS, "gpu_util_low_pct"]:
        assert float(rows[name]) == float(params[name]), name


def test_the_docs_threshold_table_is_the_curves_pack_params() -> None:
    """docs/curves.md's parameter table lists exactly the curves pack's params, with their defaults and
    descriptions (and rows for the other packs' params it cites name them with their pack)."""
    import re
    from pathlib import Path

    import yaml

    root = Path(__file__).parents[1]
    params = yaml.safe_load((root / "rules" / "core" / "curves.yaml").read_text())["params"]
    doc = (root / "docs" / "curves.md").read_text()
    rows = {
        name: (float(default), desc.replace("`", "").strip())
        for name, other, default, desc in re.findall(
            r"^\| `(\w+)`( \(core/\w+\))? \| ([0-9.]+) \| (.*) \|$", doc, re.M
        )
        if not other
    }
    assert set(rows) == set(params), set(rows) ^ set(params)
    for name, spec in params.items():
        assert rows[name] == (float(spec["default"]), spec["description"].strip()), name


def test_a_loss_frozen_at_chance_after_a_noisy_start_is_a_plateau() -> None:
    """Frozen to the printed digits at ln(2) after moving: the outputs no longer change (saturated units)."""
    got = _trends(_ss(loss=[0.69, 1.9, 4.0, 0.88, 7.3, 2.7, 0.99, 0.70] + [0.6931] * 24))
    assert "plateau" in got and "chance_level" in got
    # frozen elsewhere than ln(k) after converging stays healthy (a loss printed with few digits)
    assert "plateau" not in _trends(_ss(loss=[3.0 - 0.2 * i for i in range(10)] + [1.0] * 30))


def test_a_short_log_all_at_chance_is_chance_level() -> None:
    assert "chance_level" in _trends(_ss(loss=[0.6932, 0.6931, 0.6931, 0.6930, 0.6931]))
    # a short healthy start: at ln(10) first, then learning
    assert "chance_level" not in _trends(_ss(loss=[2.3026, 2.2950, 2.10, 1.80, 1.50]))


def test_a_short_memory_log_rising_at_every_point_grows() -> None:
    assert "growing" in _trends(_ss(mem=[2000.0, 6100.0, 6800.0, 7400.0, 8100.0, 8900.0, 9600.0]))
    # warm-up jumps, then flat: healthy
    assert "growing" not in _trends(_ss(mem=[2000.0, 6100.0, 6900.0, 6900.0, 6900.0, 6900.0, 6900.0]))


def test_overfitting_from_accuracies() -> None:
    acc = [0.6, 0.75, 0.85, 0.92, 0.96, 0.98, 0.99, 0.995]
    assert "overfitting" in _trends(_ss(acc=acc, val_acc=[0.58, 0.66, 0.70, 0.71, 0.69, 0.70, 0.68, 0.69]))
    # a small gap, or validation still improving, is not overfitting
    assert "overfitting" not in _trends(_ss(acc=acc, val_acc=[0.6, 0.7, 0.8, 0.85, 0.88, 0.9, 0.92, 0.93]))
    assert "overfitting" not in _trends(_ss(acc=acc, val_acc=[0.3, 0.4, 0.5, 0.55, 0.6, 0.65, 0.7, 0.72]))


def test_a_short_saturating_peak_memory_log_is_not_a_leak() -> None:
    """max_memory_allocated meeting larger batches early on: new peaks, each smaller than the last."""
    assert "growing" not in _trends(_ss(mem=[3000.0, 3000.0, 3900.0, 4500.0, 4800.0, 4900.0, 4930.0, 4940.0]))


def test_a_short_log_that_blows_up_is_rising() -> None:
    assert "rising" in _trends(_ss(loss=[2.30, 2.10, 45.6, 1234.5, 1.2e6]))
    # a short healthy log, or one noisy step up, is not
    assert "rising" not in _trends(_ss(loss=[2.30, 2.10, 1.90, 1.85, 1.80]))
    assert "rising" not in _trends(_ss(loss=[2.30, 2.10, 1.90, 2.40, 1.80]))
