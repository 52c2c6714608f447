"""``diagnose --plot FILE.png``: the curves behind the top hypotheses, with the detected onset/window marked.

Training and validation loss share one panel (validation is often logged every N steps: its points are
marked); each detected window has its own colour. matplotlib is an optional extra
(``pip install 'mldebug-rules[plot]'``); without it ``PlotUnavailable`` says so in one line and the report is
written anyway. A plot file that cannot be written is a usage error (exit 2, one line).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .diagnose import Diagnosis
from .errors import UsageError

MAX_PANELS = 4
_SKIPPED_PANELS = ("loss_scale", "skipped_iters", "skipped_total")
_ORDER = ("loss", "val_loss", "grad_norm", "loss_scale", "mem", "data_time", "throughput", "step_time")
# Overlaid on the panel of the first metric: (panel metric, overlaid metric).
_OVERLAYS = {"loss": "val_loss", "step_time": "data_time"}
_OVERLAID_ON = {v: k for k, v in _OVERLAYS.items()}
# Window colours, one per detected trend on a panel (the curves use blue and black).
_WINDOW_COLOURS = ("tab:orange", "tab:green", "tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan")


def _window_colour(k: int) -> Any:
    """The k-th window's colour: the named ones first, then evenly spaced hues (never a repeat)."""
    if k < len(_WINDOW_COLOURS):
        return _WINDOW_COLOURS[k]
    import colorsys

    hue = (0.13 + 0.618034 * k) % 1.0  # golden-ratio steps keep successive hues apart
    return colorsys.hsv_to_rgb(hue, 0.75, 0.8)


class PlotUnavailable(Exception):
    """The picture cannot be drawn here (matplotlib missing, nothing to plot)."""


def _payload(d: Diagnosis) -> dict[str, Any]:
    for o in d.probes:
        if o.name == "metrics":
            return dict(o.payload.get("series") or {})
    return {}


def _cited_trends(d: Diagnosis) -> list[Mapping[str, Any]]:
    """metric.trend facts cited by the top hypotheses, best first: they say which curves matter. A fact that
    several hypotheses cite (a sudden NaN: the data or the loss) is one window, drawn once."""
    out: list[Mapping[str, Any]] = []
    seen: set[tuple[Any, ...]] = set()
    for h in d.gate.hypotheses[:3]:
        for f in h.evidence:
            if f.kind == "metric.trend" and f.attrs["trend"] != "stopped":
                key = (
                    f.file,
                    f.attrs["metric"],
                    f.attrs["trend"],
                    f.attrs["window_start"],
                    f.attrs["window_end"],
                )
                if key not in seen:
                    seen.add(key)
                    out.append({**f.attrs, "file": f.file})
    return out


def choose_panels(series: Mapping[str, Any], trends: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """(source, metric) panels: the cited trends' metrics first (with their companions), then the loss."""
    panels: list[tuple[str, str]] = []

    def add(source: str, metric: str) -> None:
        have = series.get(source, {}).get("series", {})
        host = _OVERLAID_ON.get(metric)
        if host is not None and host in have:
            metric = host  # validation loss is drawn on the training-loss panel (data time on step time)
        if metric in have and (source, metric) not in panels:
            panels.append((source, metric))

    companions = {
        "loss": ("grad_norm",),
        "val_loss": ("grad_norm",),
        "data_time": (),
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


def check_target(out: Path) -> None:
    """A plot file that cannot be written is a usage error, said before the diagnosis spends any time."""
    if out.is_dir():
        raise UsageError(f"--plot {out}: cannot write the plot: it is a directory")
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(f"--plot {out}: cannot write the plot: no directory {parent}")
    # Opening it is the only test that holds for root, read-only mounts and /sys alike; a file this made is
    # removed again (the picture may yet not be drawn).
    existed = out.exists()
    try:
        with open(out, "ab"):
            pass
    except OSError as e:
        raise UsageError(f"--plot {out}: cannot write the plot: {e.strerror or e}") from None
    if not existed:
        out.unlink()


def plot_diagnosis(d: Diagnosis, out: Path) -> Path:
    check_target(out)
    fig = figure(d)  # PlotUnavailable without matplotlib
    import matplotlib.pyplot as plt

    try:
        # The format is named, so a file without an extension is written as named (matplotlib would otherwise
        # add ".png" and the report would cite a file that is not there).
        fig.savefig(out, dpi=110, format=out.suffix[1:].lower() or "png")
    except OSError as e:  # a missing directory, no permission, a directory given as the file
        raise UsageError(f"--plot {out}: cannot write the plot: {e.strerror or e}") from None
    except ValueError as e:  # an image format matplotlib does not know (--plot curves.xyz)
        raise UsageError(f"--plot {out}: cannot write the plot: {e}") from None
    finally:
        plt.close(fig)
    return out


def figure(d: Diagnosis) -> Any:
    """The matplotlib figure: one panel per chosen (source, metric), overlays and windows drawn."""
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
        have = series[source]["series"]
        x_name = "step" if series[source]["step_kind"] == "step" else "log entry"
        pts = have[metric]
        xs = [p[0] for p in pts if p[1] is not None]
        ys = [p[1] for p in pts if p[1] is not None]
        ax.plot(xs, ys, lw=1.0, color="tab:blue", label=metric)
        shown = [metric]
        over = _OVERLAYS.get(metric)
        if over in have:
            ops = [p for p in have[over] if p[1] is not None]
            ax.plot(
                [p[0] for p in ops], [p[1] for p in ops], lw=1.2, color="black", marker="o", ms=3, label=over
            )
            ys = ys + [p[1] for p in ops]
            shown.append(over)
            pts = pts + have[over]
        bad = sorted(p[0] for p in pts if p[1] is None)
        if bad:
            ax.axvline(bad[0], color="red", lw=1.2, ls="--", label=f"first NaN/Inf ({x_name} {bad[0]:g})")
        positive = ys and min(ys) > 0 and max(ys) / max(min(ys), 1e-300) > 1e3
        if positive:
            ax.set_yscale("log")  # divergence spans orders of magnitude
        wanted = set(shown) | ({"skipped_iters"} if metric in _SKIPPED_PANELS else set())
        for k, t in enumerate(trends):
            if t["file"] != source or t["metric"] not in wanted:
                continue
            colour = _window_colour(k)  # one colour per detected window, figure-wide
            if t["window_start"] >= 0 and t["window_end"] > t["window_start"]:
                ax.axvspan(t["window_start"], t["window_end"], color=colour, alpha=0.2, label=t["trend"])
            elif t["step"] >= 0:
                ax.axvline(t["step"], color=colour, lw=1.2, label=t["trend"])
        metric = " / ".join(shown)
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
    return fig
