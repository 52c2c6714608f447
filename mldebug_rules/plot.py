"""``diagnose --plot FILE.png``: the curves behind the top hypotheses, with the detected onset/window marked.

matplotlib is an optional extra (``pip install 'mldebug-rules[plot]'``); without it ``PlotUnavailable`` says
so in one line and the report is written anyway.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .diagnose import Diagnosis

MAX_PANELS = 4
_SKIPPED_PANELS = ("loss_scale", "skipped_iters", "skipped_total")
_ORDER = ("loss", "val_loss", "grad_norm", "loss_scale", "mem", "data_time", "throughput", "step_time")


class PlotUnavailable(Exception):
    """The picture cannot be drawn here (matplotlib missing, nothing to plot)."""


def _payload(d: Diagnosis) -> dict[str, Any]:
    for o in d.probes:
        if o.name == "metrics":
            return dict(o.payload.get("series") or {})
    return {}


def _cited_trends(d: Diagnosis) -> list[Mapping[str, Any]]:
    """metric.trend facts cited by the top hypotheses, best first: they say which curves matter."""
    out: list[Mapping[str, Any]] = []
    for h in d.gate.hypotheses[:3]:
        for f in h.evidence:
            if f.kind == "metric.trend" and f.attrs["trend"] != "stopped":
                out.append({**f.attrs, "file": f.file})
    return out


def choose_panels(series: Mapping[str, Any], trends: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """(source, metric) panels: the cited trends' metrics first (with their companions), then the loss."""
    panels: list[tuple[str, str]] = []

    def add(source: str, metric: str) -> None:
        if source in series and metric in series[source]["series"] and (source, metric) not in panels:
            panels.append((source, metric))

    companions = {
        "loss": ("grad_norm", "val_loss"),
        "val_loss": ("loss",),
        "data_time": ("step_time",),
        "loss_scale": ("loss",),
        "mem": ("loss",),
        "skipped_iters": ("loss",),
        "skipped_total": ("loss",),
    }
    for t in trends:
        metric = t["metric"]
        if metric == "skipped_iters":  # skipped steps show on the loss scale, else on their own counter
            have = series.get(t["file"], {}).get("series", {})
            metric = next((m for m in _SKIPPED_PANELS if m in have), "loss_scale")
        add(t["file"], metric)
        for c in companions.get(metric, ()):
            add(t["file"], c)
    if not panels:
        for source in sorted(series):
            for m in _ORDER:
                add(source, m)
    return panels[:MAX_PANELS]


def plot_diagnosis(d: Diagnosis, out: Path) -> Path:
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only, never a window (and no display on a cluster node)
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlotUnavailable(
            "--plot needs matplotlib (pip install 'mldebug-rules[plot]'); "
            "the report is written without the plot"
        ) from None
    series = _payload(d)
    trends = _cited_trends(d)
    panels = choose_panels(series, trends)
    if not panels:
        raise PlotUnavailable("--plot: no metric series were found in the inputs; nothing to plot")
    fig, axes = plt.subplots(
        len(panels), 1, figsize=(9, 2.4 * len(panels) + 0.6), sharex=False, squeeze=False
    )
    for ax, (source, metric) in zip(axes[:, 0], panels, strict=True):
        pts = series[source]["series"][metric]
        x_name = "step" if series[source]["step_kind"] == "step" else "log entry"
        xs = [p[0] for p in pts if p[1] is not None]
        ys = [p[1] for p in pts if p[1] is not None]
        ax.plot(xs, ys, lw=1.0, color="tab:blue")
        bad = [p[0] for p in pts if p[1] is None]
        if bad:
            ax.axvline(bad[0], color="red", lw=1.2, ls="--", label=f"first NaN/Inf ({x_name} {bad[0]:g})")
        positive = ys and min(ys) > 0 and max(ys) / max(min(ys), 1e-300) > 1e3
        if positive:
            ax.set_yscale("log")  # divergence spans orders of magnitude
        for t in trends:
            if t["file"] != source or t["metric"] not in (
                metric,
                "skipped_iters" if metric in _SKIPPED_PANELS else "",
            ):
                continue
            if t["window_start"] >= 0 and t["window_end"] > t["window_start"]:
                ax.axvspan(t["window_start"], t["window_end"], color="orange", alpha=0.2, label=t["trend"])
            elif t["step"] >= 0:
                ax.axvline(t["step"], color="orange", lw=1.2, label=t["trend"])
        ax.set_ylabel(metric)
        ax.set_title(f"{source}: {metric}", fontsize=9, loc="left")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, loc="best")
    kind = next((series[s]["step_kind"] for s, _ in panels), "step")
    axes[-1, 0].set_xlabel("step" if kind == "step" else "log entry")
    top = d.gate.hypotheses[0].id if d.gate.hypotheses else "no hypothesis"
    fig.suptitle(f"mldebug-rules: {top} ({d.gate.verdict})", fontsize=10)
    fig.tight_layout()
    try:
        fig.savefig(out, dpi=110)
    except OSError as e:
        raise PlotUnavailable(f"--plot {out}: {e.strerror or e}") from None
    finally:
        plt.close(fig)
    return out
