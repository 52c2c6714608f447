"""The ``metrics`` probe (offline): metric series from every logger we know, as ``metric.trend`` facts.

Sources: the run directories' metrics files (JSONL, CSV, trainer_state.json, TensorBoard events,
wandb-summary.json) and their training logs (printed metric lines, in one Scanner pass per file; see
metric_lines.yaml), plus logs named with ``--log``. Each trend fact states its window and datapoints; the
series themselves stay on the Python side (``payload["series"]``) for ``diagnose --plot``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ..engine.facts import Fact, FactError
from .base import Context, ProbeOutput, ProbeUnavailable
from .logs import stream_pass
from .metrics_parse import LineReader, read_any
from .metrics_series import SeriesSet
from .rundir import RunFiles
from .trends import STOP_PRIORITY, PaceSummary, Trend, detect, merge, pace_summary, params_from, stragglers

PLOT_POINTS = 2000  # per series in the payload: enough for a picture, small enough to keep around
PLOT_METRICS = (
    "loss",
    "val_loss",
    "grad_norm",
    "loss_scale",
    "skipped_iters",
    "skipped_total",
    "mem",
    "throughput",
    "data_time",
    "step_time",
)
MAX_SOURCES = 200


def _sources(ctx: Context) -> tuple[list[tuple[Path, str]], list[tuple[Path, str]]]:
    """(metrics files, training logs) as (path, display) pairs."""
    metric_files: list[tuple[Path, str]] = []
    logs: list[tuple[Path, str]] = []
    for root in ctx.run_dirs:
        files: RunFiles = ctx.files_of(root)
        prefix = "" if len(ctx.run_dirs) == 1 else root.name.rstrip("/") + "/"
        metric_files += [(p, prefix + files.rel(p)) for p in files.files("metrics")]
        logs += [(p, prefix + files.rel(p)) for p in files.files("train")]
    logs += [(p, str(p)) for p in ctx.logs]
    return metric_files[:MAX_SOURCES], logs[:MAX_SOURCES]


def _downsample(xs: list[float], ys: list[float], n: int) -> list[list[float | None]]:
    stride = max(1, math.ceil(len(xs) / n))
    keep = set(range(0, len(xs), stride)) | {len(xs) - 1}
    # Non-finite points must survive: they are the onset a plot marks.
    keep |= {i for i, y in enumerate(ys) if not math.isfinite(y)}
    return [[xs[i], ys[i] if math.isfinite(ys[i]) else None] for i in sorted(keep) if i < len(xs)][: 2 * n]


def _plot(ss: SeriesSet) -> dict[str, Any] | None:
    """One source's curves for ``diagnose --plot``, downsampled, or None when it has none to draw."""
    series = {}
    for name in PLOT_METRICS:
        s = ss.get(name)
        if s is not None:
            series[name] = _downsample(s.steps, s.values, PLOT_POINTS)
    return {"series": series, "step_kind": ss.step_kind} if series else None


def _fact(ctx: Context, source: str, t: Trend, run_end: str) -> Fact | None:
    attrs = {
        "metric": t.metric,
        "trend": t.trend,
        "value": t.value if math.isfinite(t.value) else -1.0,
        "step": t.step,
        "window_start": t.window_start,
        "window_end": t.window_end,
        "points": t.points,
        "note": t.note[:300],
        "run_end": run_end,
    }
    try:
        # The cited text states the window and the datapoints too: a reader must see what the trend rests on.
        span = f"steps {t.window_start}..{t.window_end}" if t.window_end >= 0 else "no step window"
        text = f"{t.trend}: {t.note} [{span}, {t.points} point(s)]"
        return ctx.registry.make("metric.trend", attrs, file=source, line=t.line, text=text)
    except FactError:
        return None


def probe_metrics(ctx: Context) -> ProbeOutput:
    metric_files, logs = _sources(ctx)
    if not metric_files and not logs:
        raise ProbeUnavailable("no metrics files or training logs")
    params = dict(getattr(ctx.kb, "params", {}) or {})
    tail_window = int(params.get("completed_tail_lines", 40))
    # Each source is reduced to its trends, its stop reason and a downsampled plot as soon as it is read,
    # and its series dropped: a thousand ranks' logs then cost the memory of one, not of all of them.
    per_source: list[tuple[str, list[Trend]]] = []
    stops: list[str] = []
    issues: list[str] = []
    parsers: set[str] = set()
    plots: dict[str, Any] = {}
    with_points = 0

    paces: list[PaceSummary] = []
    trend_params = params_from(params)

    def take(ss: SeriesSet) -> None:
        nonlocal with_points
        per_source.append((ss.source, detect(ss, params)))
        pace = pace_summary(ss, trend_params)
        if pace is not None:
            paces.append(pace)
        stops.append(ss.stop)
        issues.extend(ss.issues)
        if ss.series:
            with_points += 1
            parsers.update(ss.parsers)
            plot = _plot(ss)
            if plot is not None:
                plots[ss.source] = plot

    for path, display in metric_files:
        ss = read_any(path, display)
        if ss is not None:
            take(ss)
    if logs:
        # The train logs' metric lines come from the logs probe's pass over them (one read per log); without
        # packs to build that pass from, each log is read here.
        sampled: dict[Path, Any] = {}
        if ctx.kb is not None:
            _, group, results = stream_pass(ctx, "train")
            sampled = {src.path: res.sampled for src, res in zip(group, results, strict=False)}
        reader = LineReader()
        for path, display in logs:
            ss = sampled.get(path)
            if isinstance(ss, SeriesSet):
                ss.source = display
            else:
                ss = reader.read(path, display, tail_window)
            take(ss)
    # Throughput compared across the logs of one run (ranks, workers, identical jobs): a straggler
    per_source += [(src, [t]) for src, t in stragglers(paces, trend_params)]
    merged = merge(per_source)
    run_end = max(stops, key=lambda s: STOP_PRIORITY.get(s, 0), default="")
    out = ProbeOutput("metrics")
    for source, t in sorted(merged, key=lambda st: (st[1].metric, st[1].trend, st[0])):
        f = _fact(ctx, source, t, run_end)
        if f is not None:
            out.facts.append(f)
    out.detail = (
        f"{with_points} source(s) with metrics ({', '.join(sorted(parsers)) or 'none'}); "
        f"{len(out.facts)} trend(s)" + (f"; {'; '.join(issues[:3])}" if issues else "")
    )
    out.payload["series"] = plots
    out.payload["trends"] = [{"source": s, **t.__dict__} for s, t in merged]
    return out
