"""Trend detectors: metric series in, ``metric.trend`` candidates out, each stating its window and datapoints.

Thresholds are pack parameters (rules/core/curves.yaml ``params``), read from ``kb.params`` so that
``diagnose --param NAME=VALUE`` changes them; ``DEFAULTS`` only covers a knowledge base without that pack.
Detectors are deliberately simple (medians over windows, ratios): a rule author must be able to predict when
one fires from the parameter's description alone.

>>> from .metrics_series import SeriesSet
>>> ss = SeriesSet("t")
>>> for i in range(40): ss.add("loss", i, 2.3026 + (0.001 if i % 2 else -0.001))
>>> [(t.trend, t.note[:30]) for t in detect(ss)]
[('plateau', 'loss frozen at 2.303 over step'), ('chance_level', 'loss ~= ln(10) = 2.3026: chanc')]
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from .metrics_generic import _QUALIFIED_VAL  # a name the logger already marks as validation
from .metrics_series import Series, SeriesSet
from .numeric import median

DEFAULTS: dict[str, float] = {
    "curve_min_points": 8,
    "nan_first_points": 0,
    "nan_sudden_min_points": 3,
    "nan_rise_factor": 1.5,
    "nan_lr_rising_points": 5,
    "nan_rise_min_points": 4,
    "nan_rise_steady_points": 6,
    "diverge_rise_factor": 3.0,
    "diverge_grad_factor": 2.0,
    "diverge_end_percentile": 0.9,
    "short_rise_min_points": 4,
    "short_rise_factor": 30.0,
    "spike_factor": 4.0,
    "spike_min_points": 10,
    "plateau_rel_range": 0.03,
    "plateau_min_drop": 0.05,
    "stuck_rel_tol": 0.02,
    "frozen_rel_range": 0.001,
    "chance_abs_tol": 0.01,
    "chance_min_points": 5,
    "overfit_val_rise": 0.05,
    "overfit_min_val_points": 4,
    "overfit_rising_evals": 3,
    "overfit_train_acc": 0.95,
    "overfit_acc_gap": 0.2,
    "mem_growth_frac": 0.10,
    "mem_increasing_share": 0.5,
    "mem_min_points": 20,
    "mem_rising_stretches": 0.7,
    "mem_monotone_points": 6,
    "mem_saturation_share": 0.3,
    "throughput_drop_frac": 0.3,
    "straggler_start_share": 0.85,
    "throughput_decay_stretches": 0.6,
    "throughput_decay_step": 0.02,
    "throughput_decay_min_drop": 0.15,
    "throughput_decay_min_stretches": 4,
    "data_wait_share": 0.4,
    "skipped_steps_min": 10,
    "loss_scale_collapse_factor": 256.0,
    "loss_scale_floor": 1.0,
}
STOP_PRIORITY = {"early_stopping": 3, "max_steps": 2, "completed": 1, "": 0}
_ROUND_CLASSES = (2, 3, 4, 5, 10, 20, 100, 200, 1000)
_MAX_CLASSES = 1000  # ln(k) is read as a chance level for k in 2..1000 (chance_abs_tol's description)


@dataclass
class Trend:
    metric: str
    trend: str
    value: float = -1.0
    step: int = -1
    window_start: int = -1
    window_end: int = -1
    points: int = 0
    note: str = ""
    line: int = 0  # source line of the onset / window end, for the citation


def params_from(kb_params: Mapping[str, Any] | None) -> dict[str, float]:
    out = dict(DEFAULTS)
    for k in DEFAULTS:
        v = (kb_params or {}).get(k)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            out[k] = float(v)
    return out


def _med(xs: Sequence[float]) -> float:
    return median(xs) if xs else math.nan


def _pct(xs: Sequence[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def _i(x: float) -> int:
    return int(x) if math.isfinite(x) else -1


def chance_classes(value: float, tol: float) -> int | None:
    """The class count k (2..1000) whose ln(k) -- the cross-entropy of a uniform guess -- matches the value.
    Neighbouring k are close for large k, so round counts (10, 100, 1000) win within the tolerance."""
    if not math.isfinite(value) or value <= 0:
        return None
    fits = [k for k in range(2, _MAX_CLASSES + 1) if abs(math.log(k) - value) <= tol]
    if not fits:
        return None
    rounds = [k for k in fits if k in _ROUND_CLASSES]
    pool = rounds or fits
    return min(pool, key=lambda k: abs(math.log(k) - value))


def detect(ss: SeriesSet, kb_params: Mapping[str, Any] | None = None) -> list[Trend]:
    p = params_from(kb_params)
    if ss.last_values_only:
        return _final_values(ss)
    out: list[Trend] = []
    loss = ss.get("loss")
    for name in ("loss", "val_loss", "grad_norm"):
        s = ss.get(name)
        if s is not None and s.nan_onset is not None:
            out.append(_nan_onset(s, p))
            out += _inf_from_start(s, p)
    if loss is not None:
        out += _divergence(loss, ss.get("grad_norm"), p)
        out += _spike(loss, p)
        out += _plateau(loss, p)
    val = ss.get("val_loss")
    if loss is not None and val is not None:
        out += _overfitting(loss, val, p)
    if not any(t.trend == "overfitting" for t in out):
        out += _overfitting_acc(ss.get("acc"), ss.get("val_acc"), p)
    out += _loss_scale(
        ss.get("loss_scale"), ss.get("skipped_iters") or _increments(ss.get("skipped_total")), p
    )
    out += _nan_precursors(loss, ss.get("lr"), p)
    out += _nan_sudden(loss, out, p)
    out += _nan_in_component(loss, ss, out, p)
    mem = ss.get("mem")
    if mem is not None:
        out += _growing(mem, p)
    out += _throughput(ss.get("throughput"), ss.get("step_time"), p)
    out += _data_wait(ss, p)
    if ss.step_kind == "entry":
        for t in out:
            t.note += " (x = log-entry index: the log gives no step)"
    if ss.stop and not ss.stop_from_log:
        # Structured records only (trainer_state.json): stop lines in logs are the lifecycle pack's evidence,
        # and counting them twice would outweigh a crash that followed the stop line. Every trend still
        # carries the run's stop reason as `run_end`. The note is the stop reason itself: rules match it.
        # The window is the run the records cover: the longest series' first and last logged steps.
        longest = max(ss.series.values(), key=lambda s: s.total, default=None)
        ws = _i(longest.steps[0]) if longest is not None and longest.steps else -1
        we = _i(longest.steps[-1]) if longest is not None and longest.steps else -1
        n = longest.total if longest is not None else 0
        out.append(
            Trend(
                "run",
                "stopped",
                step=we,
                window_start=ws,
                window_end=we,
                points=n,
                note=ss.stop,
                line=ss.stop_line,
            )
        )
    return out


def _final_values(ss: SeriesSet) -> list[Trend]:
    """A run summary holds each metric's last value only: a non-finite one says the run ended NaN, but not
    when it started (a summary's single point must not read as "NaN from the first step")."""
    out = []
    for name in ("loss", "val_loss", "grad_norm"):
        s = ss.get(name)
        if s is not None and s.values and not math.isfinite(s.values[-1]):
            x = _i(s.steps[-1])
            out.append(
                Trend(
                    name,
                    "nan_final",
                    step=x,
                    window_start=x,
                    window_end=x,
                    points=1,
                    line=s.lines[-1],
                    note=f"the run summary's last {name} is {s.values[-1]} (step {x}); the summary has no "
                    "history, so when it became non-finite is unknown",
                )
            )
    return out


def _nan_onset(s: Series, p: Mapping[str, float]) -> Trend:
    assert s.nan_onset is not None
    step, value, line = s.nan_onset
    first = s.steps[0] if s.steps else step
    where = (
        "at the first logged point" if s.finite_before_nan <= p["nan_first_points"] else "after finite values"
    )
    return Trend(
        s.name,
        "nan_onset",
        step=_i(step),
        window_start=_i(first),
        window_end=_i(step),
        points=s.finite_before_nan,
        note=f"first non-finite {s.name} ({value}) at step {_i(step)}, {where}; {s.finite_before_nan} finite "
        f"point(s) before it",
        line=line,
    )


def _inf_from_start(s: Series, p: Mapping[str, float]) -> list[Trend]:
    """An infinite (not NaN) loss at the first logged point: an overflow or a singularity in the forward pass
    or the loss (exp of large logits, log(0), a division by zero). NaN inputs propagate as NaN, so an inf
    first points at the computation rather than at the data."""
    assert s.nan_onset is not None
    step, value, line = s.nan_onset
    if s.name != "loss" or not math.isinf(value) or s.finite_before_nan > p["nan_first_points"]:
        return []
    return [
        Trend(
            "loss",
            "inf_from_start",
            step=_i(step),
            window_start=_i(step),
            window_end=_i(step),
            points=0,
            line=line,
            note=f"the first logged loss is {value} (infinite, not NaN) at step {_i(step)}: an overflow or a "
            "log/division at zero in the forward pass or the loss",
        )
    ]


# What leads up to a NaN when the optimizer or reduced precision, not one batch or one term, is behind it.
_NAN_PRECURSORS = frozenset(
    {"diverging", "rising", "loss_scale_collapse", "skipped_steps", "nan_after_rise", "nan_lr_rising"}
)


def _nan_sudden(loss: Series | None, found: Sequence[Trend], p: Mapping[str, float]) -> list[Trend]:
    """A NaN after a healthy stretch with nothing leading up to it (no rise, no grad growth, no loss-scale
    collapse): the signature of one bad batch rather than of the optimizer or of reduced precision."""
    if loss is None or loss.nan_onset is None or loss.finite_before_nan <= p["nan_first_points"]:
        return []
    if loss.finite_before_nan < p["nan_sudden_min_points"]:
        return []
    if any(t.trend in _NAN_PRECURSORS for t in found):
        return []
    step, value, line = loss.nan_onset
    xs, ys = loss.finite()
    before = [y for x, y in zip(xs, ys, strict=False) if x < step][-10:]
    return [
        Trend(
            "loss",
            "nan_sudden",
            value=round(_med(before), 6),
            step=_i(step),
            window_start=_i(xs[0]) if xs else -1,
            window_end=_i(step),
            points=loss.finite_before_nan,
            line=line,
            note=f"{value} loss at step {_i(step)} right after {loss.finite_before_nan} finite points "
            f"(median of the last 10: {_med(before):.4g}); no rising loss, grad-norm growth or loss-scale "
            "collapse before it",
        )
    ]


def _loss_components(ss: SeriesSet) -> list[Series]:
    """The training loss's logged terms (giou_loss, loss_cls, kl_loss...): series named with "loss" other than
    the total and the validation losses."""
    out = []
    for name, s in ss.series.items():
        low = name.lower()
        if name in ("loss", "val_loss") or "loss" not in low or _QUALIFIED_VAL.match(low):
            continue
        out.append(s)
    return out


def _nan_in_component(
    loss: Series | None, ss: SeriesSet, found: Sequence[Trend], p: Mapping[str, float]
) -> list[Trend]:
    """A NaN that appears first in one term of a multi-term loss while the other terms are still finite at
    that step, out of a healthy stretch. A batch of NaN inputs poisons every term at once; one term going
    first points at that term's own computation (log or division at zero, an IoU of empty boxes) or at the
    targets only it reads. An optimizer that blows up overflows the touchiest term first too, so a NaN with a
    build-up before it (a rising loss, a rising learning rate, a collapsing loss scale) is not read so."""
    if loss is None or loss.nan_onset is None or loss.finite_before_nan < p["nan_sudden_min_points"]:
        return []
    if any(t.trend in _NAN_PRECURSORS for t in found):
        return []
    step = loss.nan_onset[0]
    bad, good = [], []
    for comp in _loss_components(ss):
        if comp.nan_onset is not None and comp.nan_onset[0] <= step:
            bad.append(comp)
            continue
        at = [y for x, y in zip(comp.steps, comp.values, strict=False) if x == step]
        if at and all(math.isfinite(y) for y in at):
            good.append(comp)
    if not bad or not good:
        return []
    first = min(bad, key=lambda c: c.nan_onset[0] if c.nan_onset else step)
    onset = first.nan_onset
    assert onset is not None
    return [
        Trend(
            "loss",
            "nan_in_component",
            value=float(len(bad)),
            step=_i(onset[0]),
            window_start=_i(onset[0]),
            window_end=_i(step),
            points=first.finite_before_nan,
            line=onset[2],
            note=f"{first.name} turned {onset[1]} at step {_i(onset[0])} while "
            f"{', '.join(c.name for c in good[:4])} stayed finite: the NaN began in one term of the loss",
        )
    ]


def _nan_precursors(loss: Series | None, lr: Series | None, p: Mapping[str, float]) -> list[Trend]:
    """What led up to a NaN that came after a finite stretch. Two build-ups point at the optimizer rather than
    at one bad batch: the loss climbing over its last finite points (by nan_rise_factor over the lowest of the
    20 before them: the blow-up started before the NaN, smaller than a full divergence), and a learning rate
    still rising at the onset (a warm-up or a schedule pushing the step size past what the model takes)."""
    if loss is None or loss.nan_onset is None or loss.finite_before_nan < p["nan_sudden_min_points"]:
        return []
    step, _, line = loss.nan_onset
    # The points logged before the onset, in log order: a coarse x (a progress bar's percentage) may give the
    # last finite point and the NaN the same x
    k = next((i for i, v in enumerate(loss.values) if not math.isfinite(v)), len(loss.values))
    pre = list(zip(loss.steps[:k], loss.values[:k], strict=False))
    out: list[Trend] = []
    # A short log (4 or 5 finite points) has too few points for noise to be told from a climb, so there the
    # last three must climb at every point: a loss that fell and then turned NaN is still sudden.
    if len(pre) >= p["nan_rise_min_points"]:
        tail = [y for _, y in pre[-3:]]
        ref = [y for _, y in pre[-23:-3]]
        lo = min(ref)
        rise = _med(tail) / lo if lo > 0 else 0.0
        steady = len(pre) >= p["nan_rise_steady_points"] or all(b > a for a, b in pairwise(tail))
        if rise >= p["nan_rise_factor"] and tail[-1] >= tail[0] and steady:
            out.append(
                Trend(
                    "loss",
                    "nan_after_rise",
                    value=round(rise, 3),
                    step=_i(step),
                    window_start=_i(pre[-23:][0][0]),
                    window_end=_i(step),
                    points=len(pre[-23:]),
                    line=line,
                    note=f"loss climbed x{rise:.3g} (from {lo:.4g} to {_med(tail):.4g}) over its last finite "
                    f"points, then turned non-finite at step {_i(step)}",
                )
            )
    if lr is not None:
        lx, ly = lr.finite()
        k = int(p["nan_lr_rising_points"])
        seq = [(x, y) for x, y in zip(lx, ly, strict=False) if x <= step][-k:]
        vals = [y for _, y in seq]
        if len(vals) >= k and vals[-1] > vals[0] > 0 and all(b >= a for a, b in pairwise(vals)):
            out.append(
                Trend(
                    "lr",
                    "nan_lr_rising",
                    value=vals[-1],
                    step=_i(step),
                    window_start=_i(seq[0][0]),
                    window_end=_i(step),
                    points=len(vals),
                    line=line,
                    note=f"the learning rate was still rising ({vals[0]:.4g} -> {vals[-1]:.4g} over the last "
                    f"{len(vals)} points: a warm-up or schedule) when the loss turned non-finite at step {_i(step)}",
                )
            )
    return out


def _short_blowup(loss: Series, p: Mapping[str, float]) -> list[Trend]:
    """A short log (a handful of epochs) whose loss climbs at each of its last three points to short_rise_factor
    times its minimum: too few points for the window detector, too steep to be noise."""
    xs, ys = loss.finite()
    if not p["short_rise_min_points"] <= len(ys) < p["curve_min_points"]:
        return []
    lo = min(range(len(ys)), key=lambda i: ys[i])
    tail = ys[-3:]
    if lo >= len(ys) - 1 or ys[lo] <= 0 or not all(b > a for a, b in pairwise(tail)):
        return []
    rise = ys[-1] / ys[lo]
    if rise < p["short_rise_factor"]:
        return []
    return [
        Trend(
            "loss",
            "rising",
            value=round(rise, 3),
            step=_i(xs[lo]),
            window_start=_i(xs[lo]),
            window_end=_i(xs[-1]),
            points=len(ys) - lo,
            line=loss.line_at(xs[-1]),
            note=f"loss rose x{rise:.3g} from {ys[lo]:.4g} (step {_i(xs[lo])}) to {ys[-1]:.4g} (step {_i(xs[-1])}), "
            "climbing at each of its last points (a short log)",
        )
    ]


def _divergence(loss: Series, grad: Series | None, p: Mapping[str, float]) -> list[Trend]:
    """Loss rising from its minimum to the last finite values, by diverge_rise_factor or more."""
    xs, ys = loss.finite()
    if len(ys) < p["curve_min_points"]:
        return _short_blowup(loss, p)
    lo = min(range(len(ys)), key=lambda i: ys[i])
    tail = ys[-3:]
    if lo >= len(ys) - 3 or ys[lo] <= 0:
        return []
    rise = _med(tail) / ys[lo]
    if rise < p["diverge_rise_factor"]:
        return []
    # A noisy per-batch loss has outlier minima: a run that diverges ends above nearly all of what came
    # before, a noisy flat one ends in the middle of its own range.
    if _med(tail) <= _pct(ys[:-3], p["diverge_end_percentile"]):
        return []
    start, end = xs[lo], xs[-1]
    n = len(ys) - lo
    if grad is None:
        return [
            Trend(
                "loss",
                "rising",
                value=round(rise, 3),
                step=_i(start),
                window_start=_i(start),
                window_end=_i(end),
                points=n,
                line=loss.line_at(end),
                note=f"loss rose x{rise:.3g} from {ys[lo]:.4g} (step {_i(start)}) to {_med(tail):.4g} "
                f"(step {_i(end)}); no grad-norm series to tell divergence from a data problem",
            )
        ]
    gx, gy = grad.finite()
    before = [y for x, y in zip(gx, gy, strict=False) if x <= start][-3:]
    after = [y for x, y in zip(gx, gy, strict=False) if x > start][-3:]
    if not before or not after or _med(before) <= 0:
        return []
    growth = _med(after) / _med(before)
    trend = "diverging" if growth >= p["diverge_grad_factor"] else "rising"
    return [
        Trend(
            "loss",
            trend,
            value=round(rise, 3),
            step=_i(start),
            window_start=_i(start),
            window_end=_i(end),
            points=n,
            line=loss.line_at(end),
            note=f"loss rose x{rise:.3g} from {ys[lo]:.4g} (step {_i(start)}) to {_med(tail):.4g} (step "
            f"{_i(end)}) while grad norm grew x{growth:.3g}",
        )
    ]


def _spike(loss: Series, p: Mapping[str, float]) -> list[Trend]:
    """A single finite value far above the median of the 20 before it, after which the loss comes back."""
    xs, ys = loss.finite()
    best: tuple[float, int] | None = None
    count = 0
    for i in range(max(1, int(p["spike_min_points"])), len(ys) - 2):
        ref = _med(ys[max(0, i - 20) : i])
        if ref > 0 and ys[i] >= p["spike_factor"] * ref and _med(ys[i + 1 : i + 4]) < 2 * ref:
            count += 1
            if best is None or ys[i] / ref > best[0]:
                best = (ys[i] / ref, i)
    if best is None:
        return []
    f, i = best
    return [
        Trend(
            "loss",
            "spike",
            value=round(f, 3),
            step=_i(xs[i]),
            window_start=_i(xs[max(0, i - 20)]),
            window_end=_i(xs[i]),
            points=min(i, 20) + 1,
            line=loss.line_at(xs[i]),
            note=f"loss jumped to x{f:.3g} its running median at step {_i(xs[i])} and recovered "
            f"({count} spike(s))",
        )
    ]


def _short_chance(loss: Series, p: Mapping[str, float]) -> list[Trend]:
    """A short log (fewer points than a window trend needs) whose every point sits at ln(k): a handful of
    epochs all at a uniform guess's cross-entropy is the commonest "my loss does not change" report."""
    xs, ys = loss.finite()
    if not p["chance_min_points"] <= len(ys) < p["curve_min_points"] or loss.nan_onset is not None:
        return []
    level = _med(ys)
    k = chance_classes(level, p["chance_abs_tol"])
    if k is None or any(abs(y - math.log(k)) > p["chance_abs_tol"] for y in ys):
        return []
    ws, we = _i(xs[0]), _i(xs[-1])
    return [
        Trend(
            "loss",
            "chance_level",
            value=round(math.log(k), 6),
            step=ws,
            window_start=ws,
            window_end=we,
            points=len(ys),
            line=loss.line_at(xs[-1]),
            note=f"every logged loss ({len(ys)} points) is ln({k}) = {math.log(k):.4f}: the chance level of a "
            f"uniform guess over {k} classes (the model predicts nothing)",
        )
    ]


def _plateau(loss: Series, p: Mapping[str, float]) -> list[Trend]:
    """Flat over the last half and never better than at the start: the run is not learning."""
    xs, ys = loss.finite()
    if len(ys) < p["curve_min_points"] or loss.nan_onset is not None:
        return _short_chance(loss, p)
    half = ys[len(ys) // 2 :]
    head = ys[: max(3, len(ys) // 10)]
    level = _med(half)
    if level == 0 or not math.isfinite(level):
        return []
    spread = (_pct(half, 0.9) - _pct(half, 0.1)) / abs(level)
    drop = (_med(head) - level) / abs(_med(head)) if _med(head) else 0.0
    # Never better on the way: a loss that fell well below this level and climbed back diverged (or recovered
    # from a spike); that is the divergence detector's business, not a loss that does not decrease.
    first = ys[: len(ys) // 2]
    tenth = max(1, len(first) // 5)
    best = min(_med(first[i : i + tenth]) for i in range(0, len(first), tenth)) if first else level
    if best < level - abs(level) * p["plateau_min_drop"]:
        return []
    # Frozen at chance: the same value to the printed digits at every point of the last half, and that value
    # is ln(k). Batch noise moves a learning model's loss step to step; a loss frozen at a uniform guess's
    # cross-entropy means outputs that no longer change (saturated units, dead activations), however much it
    # moved before freezing. (A converged loss printed with few digits can be frozen too, but not at ln(k).)
    frozen = spread <= p["frozen_rel_range"]
    chance = chance_classes(level, p["chance_abs_tol"])
    frozen_at_chance = frozen and chance is not None
    flat = spread <= p["plateau_rel_range"] and (drop < p["plateau_min_drop"] or frozen_at_chance)
    # Stuck at its initial value: however noisy, the loss ends where it began (neither better nor worse).
    stuck = abs(drop) <= p["stuck_rel_tol"]
    k = chance if drop < p["plateau_min_drop"] or frozen_at_chance else None
    if not flat and not stuck and k is None:
        return []
    ws, we = _i(xs[len(ys) // 2]), _i(xs[-1])
    out = [
        Trend(
            "loss",
            "plateau",
            value=round(level, 6),
            step=ws,
            window_start=ws,
            window_end=we,
            points=len(half),
            line=loss.line_at(xs[-1]),
            note=f"loss {'frozen' if frozen_at_chance else 'flat' if flat else 'stuck'} at {level:.4g} over steps {ws}..{we} (spread "
            f"{spread:.1%}, improved {drop:.1%} since the start)",
        )
    ]
    if k is not None:
        out.append(
            Trend(
                "loss",
                "chance_level",
                value=round(math.log(k), 6),
                step=ws,
                window_start=ws,
                window_end=we,
                points=len(half),
                line=loss.line_at(xs[-1]),
                note=f"loss ~= ln({k}) = {math.log(k):.4f}: chance level of a uniform guess over {k} "
                "classes (the model predicts nothing)",
            )
        )
    return out


def _overfitting(loss: Series, val: Series, p: Mapping[str, float]) -> list[Trend]:
    vx, vy = val.finite()
    if len(vy) < p["overfit_min_val_points"]:
        return []
    lo = min(range(len(vy)), key=lambda i: vy[i])
    if lo >= len(vy) - 1 or vy[lo] == 0:
        return []
    end = _med(vy[-2:])
    # A steady climb (each of the last N evaluations above the one before) is no noise: its last value counts.
    n = int(p["overfit_rising_evals"])
    tail = vy[max(lo, len(vy) - n - 1) :]
    if n >= 1 and len(tail) == n + 1 and all(b > a for a, b in pairwise(tail)):
        end = vy[-1]
    # Relative to the best value's size: negative losses (soft Dice, negative log-likelihoods of flows) rise
    # towards zero when they overfit.
    rise = (end - vy[lo]) / abs(vy[lo])
    if rise < p["overfit_val_rise"]:
        return []
    lx, ly = loss.finite()
    at_lo = [y for x, y in zip(lx, ly, strict=False) if x <= vx[lo]][-3:]
    after = [y for x, y in zip(lx, ly, strict=False) if x > vx[lo]][-3:]
    if not at_lo or not after:
        # The two series count on different axes (train lines by iteration, evaluation lines by epoch): the
        # order in which the log printed them still says which training came before the best evaluation.
        at_lo, after = _split_by_line(loss, val.line_at(vx[lo]))
    if not at_lo or not after or _med(after) >= _med(at_lo):
        return []
    fall = (_med(at_lo) - _med(after)) / abs(_med(at_lo)) if _med(at_lo) else 0.0
    return [
        Trend(
            "val_loss",
            "overfitting",
            value=round(rise, 4),
            step=_i(vx[lo]),
            window_start=_i(vx[lo]),
            window_end=_i(vx[-1]),
            points=len(vy) - lo,
            line=val.line_at(vx[-1]),
            note=f"val loss rose {rise:.1%} from its best {vy[lo]:.4g} (step {_i(vx[lo])}) while train "
            f"loss fell {fall:.1%}",
        )
    ]


def _split_by_line(s: Series, line: int) -> tuple[list[float], list[float]]:
    """The last three finite values printed at or before a log line, and the last three after it (both empty
    when the series has no line numbers: a metrics file)."""
    if line <= 0 or not s.lines or min(s.lines) <= 0:
        return [], []
    pts = [(ln, y) for ln, y in zip(s.lines, s.values, strict=False) if math.isfinite(y)]
    return [y for ln, y in pts if ln <= line][-3:], [y for ln, y in pts if ln > line][-3:]


def _overfitting_acc(acc: Series | None, val: Series | None, p: Mapping[str, float]) -> list[Trend]:
    """Training accuracy near perfect while validation accuracy stalls far below it: the model memorises.
    Percentages are read as fractions. The validation accuracy must have stopped improving (its best came
    before the last third of its points) so that a run still generalising better is not flagged."""
    if acc is None or val is None:
        return []
    vx, vy = val.finite()
    _, ay = acc.finite()
    if len(vy) < p["overfit_min_val_points"] or len(ay) < 2:
        return []
    scale_v = 100.0 if max(vy) > 1.5 else 1.0
    scale_a = 100.0 if max(ay) > 1.5 else 1.0
    vy = [y / scale_v for y in vy]
    train_end = _med([y / scale_a for y in ay[-2:]])
    val_end = _med(vy[-2:])
    best = max(range(len(vy)), key=lambda i: vy[i])
    if best >= len(vy) - max(1, len(vy) // 3):
        return []
    if train_end < p["overfit_train_acc"] or train_end - val_end < p["overfit_acc_gap"]:
        return _val_acc_decline(ay, scale_a, vx, vy, val, best, p)
    return [
        Trend(
            "val_acc",
            "overfitting",
            value=round(train_end - val_end, 4),
            step=_i(vx[best]),
            window_start=_i(vx[best]),
            window_end=_i(vx[-1]),
            points=len(vy) - best,
            line=val.line_at(vx[-1]),
            note=f"train accuracy {train_end:.1%} while validation accuracy stalled at {val_end:.1%} (best "
            f"{vy[best]:.1%} at step {_i(vx[best])})",
        )
    ]


def _val_acc_decline(
    ay: Sequence[float],
    scale_a: float,
    vx: Sequence[float],
    vy: Sequence[float],
    val: Series,
    best: int,
    p: Mapping[str, float],
) -> list[Trend]:
    """Validation accuracy sliding down from its best, evaluation after evaluation, while training accuracy
    still rises: the accuracy form of a rising validation loss. The rise is measured on the validation error
    (1 - accuracy) with the same threshold as the loss (overfit_val_rise), and the last overfit_rising_evals
    evaluations must each be lower than the one before (a steady slide, not noise)."""
    n = int(p["overfit_rising_evals"])
    tail = vy[-(n + 1) :]
    if n < 1 or len(tail) < n + 1 or not all(b < a for a, b in pairwise(tail)):
        return []
    err_best, err_end = 1.0 - vy[best], 1.0 - _med(vy[-2:])
    if err_best <= 0 or (err_end - err_best) / err_best < p["overfit_val_rise"]:
        return []
    train = [y / scale_a for y in ay]
    at_best = train[min(len(train) - 1, len(train) * best // len(vy))]
    if _med(train[-2:]) <= at_best:
        return []
    rise = (err_end - err_best) / err_best
    return [
        Trend(
            "val_acc",
            "overfitting",
            value=round(rise, 4),
            step=_i(vx[best]),
            window_start=_i(vx[best]),
            window_end=_i(vx[-1]),
            points=len(vy) - best,
            line=val.line_at(vx[-1]),
            note=f"validation accuracy slid from its best {vy[best]:.1%} (step {_i(vx[best])}) to "
            f"{_med(vy[-2:]):.1%} (error up {rise:.1%}) while training accuracy rose to {_med(train[-2:]):.1%}",
        )
    ]


def _search_end(ys: Sequence[float]) -> int:
    """Index where the dynamic loss scale's start-up search ends: the first point that is not lower than
    the one before it (the scaler starts high and halves on every overflow until the gradients fit)."""
    return next((i for i in range(1, len(ys)) if ys[i] >= ys[i - 1]), len(ys))


def _loss_scale(scale: Series | None, skipped: Series | None, p: Mapping[str, float]) -> list[Trend]:
    """A collapse needs the scale to stay at its floor, or to fall far after the start-up search while skipped
    steps go on; a search at start-up followed by a stable (or growing) scale is the scaler working."""
    out: list[Trend] = []
    skip_trend = _skipped_steps(skipped, p)
    if scale is not None:
        xs, ys = scale.finite()
        if len(ys) >= 2 and max(ys) > 0:
            final = ys[-1]
            tail = ys[-max(2, len(ys) // 10) :]
            at_floor = all(y <= p["loss_scale_floor"] for y in tail)
            settled = _search_end(ys)
            post = ys[max(0, settled - 1) :]
            top = max(range(len(ys) - len(post), len(ys)), key=lambda i: ys[i])
            factor = ys[top] / final if final > 0 else math.inf
            fell_after_search = top < len(ys) - 1 and factor >= p["loss_scale_collapse_factor"]
            # Without a skipped-steps counter, a scale that fell and then held is the scaler at its new level
            # (it halves only on overflow): the fall counts only while it goes on into the last quarter.
            still_falling = final < ys[-max(2, len(ys) // 4)]
            going_on = bool(skip_trend) if skipped is not None else still_falling
            if at_floor or (fell_after_search and going_on):
                top = top if fell_after_search else max(range(len(ys)), key=lambda i: ys[i])
                out.append(
                    Trend(
                        "loss_scale",
                        "loss_scale_collapse",
                        value=final,
                        step=_i(xs[top]),
                        window_start=_i(xs[top]),
                        window_end=_i(xs[-1]),
                        points=len(ys) - top,
                        line=scale.line_at(xs[-1]),
                        note=f"loss scale fell from {ys[top]:g} (step {_i(xs[top])}) to {final:g} "
                        f"(step {_i(xs[-1])})" + (" and stayed at its floor" if at_floor else ""),
                    )
                )
    return out + skip_trend


def _skipped_steps(skipped: Series | None, p: Mapping[str, float]) -> list[Trend]:
    """Optimizer steps skipped for overflow after the start-up search, still going on in the last quarter."""
    if skipped is None:
        return []
    xs, ys = skipped.finite()
    # The scaler's start-up search skips steps until it settles: count after the first clean interval.
    settled = next((i for i, y in enumerate(ys) if y <= 0), len(ys))
    xs, ys = xs[settled:], ys[settled:]
    total = sum(y for y in ys if y > 0)
    if total < p["skipped_steps_min"]:
        return []
    if not any(y > 0 for y in ys[-max(1, len(ys) // 4) :]):
        return []  # a burst that ended: the scaler recovered and training went on
    first = next(i for i, y in enumerate(ys) if y > 0)
    return [
        Trend(
            "skipped_iters",
            "skipped_steps",
            value=total,
            step=_i(xs[first]),
            window_start=_i(xs[first]),
            window_end=_i(xs[-1]),
            points=len(ys) - first,
            line=skipped.line_at(xs[-1]),
            note=f"{total:g} optimizer steps skipped (overflow) from step {_i(xs[first])} on",
        )
    ]


def _increments(total: Series | None) -> Series | None:
    """A running total (DeepSpeed's ``skipped=K``) as per-interval counts, so that it reads like Megatron's
    "number of skipped iterations" column: the first value counts whole (it covers the start-up search)."""
    if total is None:
        return None
    out = Series("skipped_iters", cap=total.cap, keep_last=total.keep_last)
    prev = 0.0
    for x, y, line in zip(total.steps, total.values, total.lines, strict=False):
        if math.isfinite(y):
            out.add(x, y - prev if y >= prev else y, line)  # a resumed run may restart its total
            prev = y
    return out if out.total else None


def _short_monotone_growth(mem: Series, p: Mapping[str, float]) -> list[Trend]:
    """A short memory log (the few lines a report shows) that rises at every point after the first, or never
    falls and steps up at least three times, by twice mem_growth_frac in all: warm-up allocates in one or two
    jumps and then stays flat, a leak keeps adding."""
    xs, ys = mem.finite()
    if len(ys) < p["mem_monotone_points"]:
        return []
    wx, wy = xs[1:], ys[1:]
    if wy[0] <= 0 or any(b < a for a, b in pairwise(wy)):
        return []
    growth = (wy[-1] - wy[0]) / wy[0]
    if growth < 2 * p["mem_growth_frac"]:
        return []
    # A peak-memory counter ("max memory_allocated") shows a leak as a staircase: it never falls, and it
    # steps up whenever the leaked total passes the old peak, with flat stretches between. Three rises or
    # more, with no fall, count; one or two steps up are what warm-up looks like.
    incs = [b - a for a, b in pairwise(wy) if b > a]
    if len(incs) < min(3, len(wy) - 1):
        return []
    # A peak-memory counter meeting ever larger batches rises by less and less (it saturates); a leak keeps
    # adding about the same amount: the last rises must still be a good part of the average one.
    if min(incs[-2:]) < p["mem_saturation_share"] * (sum(incs) / len(incs)):
        return []
    how = (
        f", rising at every one of its {len(wy)} points"
        if len(incs) == len(wy) - 1
        else f", never falling and stepping up {len(incs)} times in {len(wy)} points"
    )
    return _mem_growing(mem, wx, wy, growth, how)


def _mem_growing(
    mem: Series, wx: Sequence[float], wy: Sequence[float], growth: float, how: str
) -> list[Trend]:
    """The "growing" memory trend over the window wx/wy; ``how`` ends the note with why it counts as growth."""
    span = f"steps {_i(wx[0])}..{_i(wx[-1])}"
    line = mem.line_at(wx[-1])
    if wx[-1] <= wx[0]:  # the counter restarts inside the window (per layer, per epoch): cite the last point
        span = f"its last {len(wy)} points (the step counter restarts)"
        line = mem.lines[-1] if mem.lines else line
    return [
        Trend(
            "mem",
            "growing",
            value=round(growth, 4),
            step=_i(wx[0]),
            window_start=_i(wx[0]),
            window_end=_i(wx[-1]),
            points=len(wy),
            line=line,
            note=f"memory grew {growth:.0%} from {wy[0]:g} to {wy[-1]:g} over {span}{how}",
        )
    ]


def _growing(mem: Series, p: Mapping[str, float]) -> list[Trend]:
    """Memory that keeps growing after warm-up, over most of the run: the run after warm-up is cut into ten
    stretches, and most stretch-to-stretch steps of their medians rise (a peak-memory counter that creeps up
    in plateaus, or an allocated-memory curve that is noisy step to step, both count), with a large total."""
    xs, ys = mem.finite()
    if len(ys) < p["mem_min_points"]:
        return _short_monotone_growth(mem, p)
    skip = max(1, len(ys) // 10)  # the first steps allocate optimizer state and the caching pools
    wx, wy = xs[skip:], ys[skip:]
    if len(wy) < 2 or wy[0] <= 0:
        return []
    steps_up = sum(1 for a, b in pairwise(wy) if b > a) / (len(wy) - 1)
    bins = min(10, len(wy) // 2)
    meds = [_med(wy[k * len(wy) // bins : (k + 1) * len(wy) // bins]) for k in range(bins)]
    ups = sum(1 for a, b in pairwise(meds) if b > a)
    stretches_up = ups / (bins - 1)
    growth = (wy[-1] - wy[0]) / wy[0]
    if growth < p["mem_growth_frac"]:
        return []
    if steps_up < p["mem_increasing_share"] and stretches_up < p["mem_rising_stretches"]:
        return []
    return _mem_growing(
        mem,
        wx,
        wy,
        growth,
        f"; {steps_up:.0%} of {len(wy) - 1} intervals and {ups} of {bins - 1} stretches rose",
    )


def _throughput(tp: Series | None, st: Series | None, p: Mapping[str, float]) -> list[Trend]:
    if tp is not None:
        xs, ys = tp.finite()
        src, line_of = "throughput", tp.line_at
    elif st is not None:
        xs, sy = st.finite()
        ys = [1.0 / y for y in sy if y > 0]
        xs = [x for x, y in zip(xs, sy, strict=False) if y > 0]
        src, line_of = "step_time", st.line_at
    else:
        return []
    if len(ys) < p["curve_min_points"]:
        return []
    q = max(2, len(ys) // 4)
    early = _med(ys[max(1, len(ys) // 10) : max(1, len(ys) // 10) + q])
    late = _med(ys[-q:])
    if not early or early <= 0:
        return []
    drop = 1.0 - late / early
    # A steady slide is telling at a smaller size than a step down (a throttling GPU loses 15-30%).
    slide = _throughput_decay(xs, ys, drop, src, line_of, p) if drop >= p["throughput_decay_min_drop"] else []
    if drop < p["throughput_drop_frac"]:
        return slide
    ws = _i(xs[len(ys) - q])
    return [
        *slide,
        Trend(
            "throughput",
            "throughput_drop",
            value=round(drop, 4),
            step=ws,
            window_start=ws,
            window_end=_i(xs[-1]),
            points=q,
            line=line_of(xs[-1]),
            note=f"throughput (from {src}) fell {drop:.0%}: median {early:.4g} early vs {late:.4g} at the "
            "end",
        ),
    ]


def _throughput_decay(
    xs: Sequence[float], ys: Sequence[float], drop: float, src: str, line_of: Any, p: Mapping[str, float]
) -> list[Trend]:
    """A drop that came as a slow slide: the median fell from stretch to stretch over most of the run. A
    heating (throttling) GPU slows this way; a starved input pipeline is slow from the start or in steps."""
    start = max(1, len(ys) // 10)
    body = ys[start:]
    k = min(8, len(body) // 2)
    if k < max(2, p["throughput_decay_min_stretches"]):
        return []
    size = len(body) / k
    meds = [_med(body[int(i * size) : int((i + 1) * size)]) for i in range(k)]
    # Noise moves a median a little either way; a slide moves it down by more than throughput_decay_step.
    falls = sum(1 for a, b in pairwise(meds) if b < a * (1.0 - p["throughput_decay_step"])) / (k - 1)
    if falls < p["throughput_decay_stretches"]:
        return []
    return [
        Trend(
            "throughput",
            "throughput_decay",
            value=round(drop, 4),
            step=_i(xs[start]),
            window_start=_i(xs[start]),
            window_end=_i(xs[-1]),
            points=len(body),
            line=line_of(xs[-1]),
            note=f"throughput (from {src}) slid down {drop:.0%}, falling in {falls:.0%} of the run's stretches",
        )
    ]


def _data_wait(ss: SeriesSet, p: Mapping[str, float]) -> list[Trend]:
    """The share of step time spent waiting for the next batch: from data/time meters (torchvision, timm, the
    PyTorch examples' ``Time``/``Data``, detectron2, mmengine, Megatron's batch-generator timer), else from a
    profiler summary (one share for the whole profiled stretch)."""
    out = _meter_share(ss.get("data_time"), ss.get("step_time"), p)
    return (
        out
        or _meter_share(ss.get("data_time"), ss.get("compute_time"), p, apart=True)
        or _profile_share(ss, p)
    )


def _meter_share(
    data: Series | None, st: Series | None, p: Mapping[str, float], apart: bool = False
) -> list[Trend]:
    """``apart``: ``st`` is the compute time printed beside the data time, so the step is their sum."""
    if data is None or st is None:
        return []
    step_time = dict(zip(st.steps, st.values, strict=False))
    shares = []
    xs = []
    for x, d in zip(data.steps, data.values, strict=False):
        t = step_time.get(x)
        if apart and t is not None:
            t += d
        if t is not None and t > 0 and math.isfinite(d) and math.isfinite(t):
            shares.append(min(1.0, d / t))
            xs.append(x)
    if len(shares) < p["curve_min_points"]:
        return []
    skip = max(1, len(shares) // 10)  # the first batches wait for workers to start
    share = _med(shares[skip:])
    if share < p["data_wait_share"]:
        return _data_wait_stretch(shares, xs, data, p)
    return [
        Trend(
            "data_time",
            "data_wait",
            value=round(share, 4),
            step=_i(xs[skip]),
            window_start=_i(xs[skip]),
            window_end=_i(xs[-1]),
            points=len(shares) - skip,
            line=data.line_at(xs[-1]),
            note=f"median {share:.0%} of step time spent waiting for data over steps "
            f"{_i(xs[skip])}..{_i(xs[-1])}",
        )
    ]


def _data_wait_stretch(
    shares: Sequence[float], xs: Sequence[float], data: Series, p: Mapping[str, float]
) -> list[Trend]:
    """A run input-bound for a sustained stretch though not over most of it: every window of the longest
    stretch (at least curve_min_points logged steps, and a tenth of the run) waits for data over
    data_wait_share of its step time at every point. A first epoch read from cold storage, then served from the page cache,
    looks like this; a data wait of a step or two (a checkpoint, an evaluation) is too short to count."""
    w = max(int(p["curve_min_points"]), len(shares) // 10)
    best, at = 0.0, -1
    for i in range(1, len(shares) - w + 1):  # the very first point waits for workers to start
        # every point of the stretch waits (a noisy meter on millisecond steps alternates high and low shares)
        if min(shares[i : i + w]) < p["data_wait_share"]:
            continue
        m = _med(shares[i : i + w])
        if m > best:
            best, at = m, i
    if at < 0 or best < p["data_wait_share"]:
        return []
    return [
        Trend(
            "data_time",
            "data_wait_stretch",
            value=round(best, 4),
            step=_i(xs[at]),
            window_start=_i(xs[at]),
            window_end=_i(xs[at + w - 1]),
            points=w,
            line=data.line_at(xs[at + w - 1]),
            note=f"median {best:.0%} of step time spent waiting for data over steps {_i(xs[at])}.."
            f"{_i(xs[at + w - 1])} ({w} points), though not over the whole run",
        )
    ]


def _profile_share(ss: SeriesSet, p: Mapping[str, float]) -> list[Trend]:
    """Lightning's SimpleProfiler (train_dataloader_next vs run_training_batch totals) or torch.profiler's
    table (the DataLoader row's CPU total %): the profiled stretch's data share, one point."""
    data, compute, pct = ss.get("profile_data_s"), ss.get("profile_compute_s"), ss.get("data_share_pct")
    if data is not None and compute is not None and data.values[-1] + compute.values[-1] > 0:
        share = data.values[-1] / (data.values[-1] + compute.values[-1])
        src, s = "profiler: train_dataloader_next vs run_training_batch total time", data
    elif pct is not None and len(pct.finite()[1]) >= p["curve_min_points"]:
        return _pct_share(pct, p)  # a share logged step by step ("dataloader: 61%"): its median after warm-up
    elif pct is not None and math.isfinite(pct.values[-1]):
        share = pct.values[-1] / 100.0
        src, s = "profiler: the DataLoader row's CPU total %", pct
    else:
        return []
    if not math.isfinite(share) or share < p["data_wait_share"]:
        return []
    x = _i(s.steps[-1])
    return [
        Trend(
            "data_time",
            "data_wait",
            value=round(share, 4),
            step=x,
            window_start=x,
            window_end=x,
            points=1,
            line=s.lines[-1],
            note=f"{share:.0%} of the profiled time spent waiting for data ({src})",
        )
    ]


def _pct_share(pct: Series, p: Mapping[str, float]) -> list[Trend]:
    xs, ys = pct.finite()
    skip = max(1, len(ys) // 10)  # the first batches wait for workers to start
    share = _med(ys[skip:]) / 100.0
    if share < p["data_wait_share"]:
        return []
    return [
        Trend(
            "data_time",
            "data_wait",
            value=round(share, 4),
            step=_i(xs[skip]),
            window_start=_i(xs[skip]),
            window_end=_i(xs[-1]),
            points=len(ys) - skip,
            line=pct.line_at(xs[-1]),
            note=f"median {share:.0%} of step time spent waiting for data over steps {_i(xs[skip])}..{_i(xs[-1])} "
            "(the logged data share)",
        )
    ]


@dataclass
class PaceSummary:
    """One source's throughput, reduced for the comparison across sources (``stragglers``)."""

    source: str
    start: float  # the best of its first quarter: what it could do at the start
    settled: float  # the median after warm-up
    first: float
    last: float
    points: int
    line: int


def pace_summary(ss: SeriesSet, p: Mapping[str, float]) -> PaceSummary | None:
    tp = ss.get("throughput")
    if tp is None:
        return None
    xs, ys = tp.finite()
    if len(ys) < p["curve_min_points"]:
        return None
    skip = max(1, len(ys) // 10)
    return PaceSummary(
        ss.source,
        max(ys[: max(2, len(ys) // 4)]),
        _med(ys[skip:]),
        xs[0],
        xs[-1],
        len(ys) - skip,
        tp.line_at(xs[-1]),
    )


def stragglers(paces: Sequence[PaceSummary], p: Mapping[str, float]) -> list[tuple[str, Trend]]:
    """Throttling across logs: of several logs of one job (ranks, workers, identical jobs), one that started
    at its peers' speed and settled throughput_drop_frac or more below them. The same workload at the start
    rules out a different model or batch; a GPU that heats up and lowers its clocks, or a slower node, is
    left (and drags every synchronous peer with it)."""
    out: list[tuple[str, Trend]] = []
    if len(paces) < 2:
        return out
    for s in paces:
        peers = _med([o.settled for o in paces if o is not s])
        if (
            peers <= 0
            or s.start < p["straggler_start_share"] * peers
            or s.settled > (1.0 - p["throughput_drop_frac"]) * peers
        ):
            continue
        drop = 1.0 - s.settled / peers
        out.append(
            (
                s.source,
                Trend(
                    "throughput",
                    "throughput_straggler",
                    value=round(drop, 4),
                    step=_i(s.first),
                    window_start=_i(s.first),
                    window_end=_i(s.last),
                    points=s.points,
                    line=s.line,
                    note=f"this log's throughput settled at {s.settled:.4g}, {drop:.0%} below its {len(paces) - 1} "
                    f"peer log(s) ({peers:.4g}), though it started at their speed ({s.start:.4g})",
                ),
            )
        )
    return out


def merge(per_source: Sequence[tuple[str, list[Trend]]]) -> list[tuple[str, Trend]]:
    """One trend per (metric, trend) across sources: the one on the most points (ties: the first source)."""
    best: dict[tuple[str, str], tuple[str, Trend]] = {}
    for source, trends in per_source:
        for t in trends:
            key = (t.metric, t.trend)
            cur = best.get(key)
            if t.trend == "stopped":
                if cur is None or STOP_PRIORITY.get(t.note, 0) > STOP_PRIORITY.get(cur[1].note, 0):
                    best[key] = (source, t)
            elif cur is None or t.points > cur[1].points:
                best[key] = (source, t)
    return list(best.values())
