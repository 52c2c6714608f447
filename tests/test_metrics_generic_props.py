"""Property checks of the generic metric reader: lines rendered from known values, in any of the spellings it
promises (``name: v``, ``name=v``, ``name v``, ``'name': v`` with quoted numbers, ``name v (avg)``; units,
nan/inf, scientific notation, thousands separators; counters or none), read back to those values."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mldebug_rules.collectors.metrics_generic import parse_generic, parse_slow
from mldebug_rules.collectors.metrics_parse import parse_text_lines
from mldebug_rules.collectors.metrics_series import canonical

# Names in the shapes loggers print: plain, with a qualifier word, with `. / @` and digits, with a counter word
# inside (`step_time` is no step counter).
_NAMES = [
    "loss",
    "acc",
    "lr",
    "grad_norm",
    "ppl",
    "bleu",
    "top5",
    "kl_div",
    "aux.loss",
    "train/loss",
    "Acc@1",
    "nll_loss",
    "reward_mean",
    "train loss",
    "grad norm",
    "val loss",
    "avg reward",
    "data loading time",
    "avg train loss",
    "step_time",
    "epoch_time",
    "lr_step",
    "updates_per_sec",
]
_UNITS = {
    "time": (["time", "data_time", "fwd_time"], {"ms": 1e-3, "s": 1.0, "us": 1e-6}),
    "mem": (["memory", "max_mem", "mem_alloc"], {"GiB": 1024.0, "GB": 1024.0, "MiB": 1.0, "MB": 1.0}),
    "pct": (["mfu", "gpu_util"], {"%": 1.0}),
}
_NONFINITE = ["nan", "NaN", "NAN", "inf", "-inf", "Infinity", "-Infinity"]


def _render(v: float, style: str) -> str:
    return {
        "fixed": f"{v:.4f}",
        "sci": f"{v:.3e}",
        "sciE": f"{v:.2E}",
        "thousands": f"{v:,.2f}",
        "int": f"{round(v):,}",
    }[style]


@st.composite
def _pair(draw: st.DrawFn, name: str) -> tuple[str, float, str]:
    """(name, the value the reader must give, the pair's text)."""
    kind = draw(st.sampled_from(["plain", "nonfinite", "time", "mem", "pct"]))
    unit = ""
    if kind == "nonfinite":
        raw = draw(st.sampled_from(_NONFINITE))
        value = float(raw)
    else:
        v = draw(st.sampled_from([1e-6, 1e-3, 0.5, 3.0, 250.0, 12345.0, 3.2e7])) * draw(st.floats(0.1, 9.9))
        style = draw(st.sampled_from(["fixed", "sci", "sciE", "thousands", "int"]))
        if style in ("int", "fixed") and v < 1e-2:
            style = "sci"
        raw = _render(v, style)
        value = float(raw.replace(",", ""))
        if kind in _UNITS:
            names, units = _UNITS[kind]
            name = draw(st.sampled_from(names))
            unit = draw(st.sampled_from(sorted(units)))
            value *= units[unit]
    num = raw + (draw(st.sampled_from(["", " "])) if unit else "") + unit  # "412ms" or "412 ms"
    spelling = draw(st.sampled_from(["colon", "eq", "space", "quoted", "quoted_num", "avg"]))
    if spelling == "avg":  # the running average in parentheses is not the datapoint
        avg = draw(st.sampled_from(["0.5", "1.234e+00", "nan", "12,345"]))
        return name, value, f"{name} {num} ({avg}{unit})"
    text = {
        "colon": f"{name}: {num}",
        "eq": f"{name}={num}",
        "space": f"{name} {num}",
        "quoted": f"'{name}': {num}",
        "quoted_num": f"'{name}': '{num}'",
    }[spelling]
    return name, value, text


@st.composite
def _line(draw: st.DrawFn) -> tuple[str, dict[str, float], float | None]:
    """(line, {name: value}, x or None when the line has no counter)."""
    pairs: dict[str, tuple[float, str]] = {}
    for n in draw(st.lists(st.sampled_from(_NAMES), min_size=1, max_size=5, unique=True)):
        name, value, text = draw(_pair(n))
        pairs.setdefault(name, (value, text))
    sep = draw(st.sampled_from([" | ", "  ", ", ", "\t", " - ", "; "]))
    n = draw(st.integers(0, 99_999))
    e, b = draw(st.integers(0, 99)), draw(st.integers(0, 500))
    head, x = draw(
        st.sampled_from(
            [
                ("", None),
                (f"step {n}", float(n)),
                (f"step {n:,}", float(n)),
                (f"iter: {n}", float(n)),
                (f"global_step={n}", float(n)),
                (f"Epoch: [{e}][{b:4d}/500]", float(e * 500 + b)),
                (f"epoch {e} iter {b}/500", float(e * 500 + b)),
            ]
        )
    )
    body = sep.join(t for _, t in pairs.values())
    return (f"{head}{sep}{body}" if head else body), {k: v for k, (v, _) in pairs.items()}, x


def _same(got: float, want: float) -> bool:
    return math.isnan(got) if math.isnan(want) else math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-15)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_line())
def test_any_spelling_reads_back_its_values_and_counter(
    case: tuple[str, dict[str, float], float | None],
) -> None:
    text, want, x = case
    for read in (parse_generic, parse_slow):  # the plan cache's replay and the analysis from scratch
        got, counters = read(text)
        assert set(got) == set(want), (text, got)
        assert all(_same(got[k], v) for k, v in want.items()), (text, got, want)
        assert counters == ({} if x is None else {"x": x}), (text, counters)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.floats(0.01, 20.0), min_size=2, max_size=12),
    st.sampled_from(["acc", "bleu", "reward_mean"]),
    st.booleans(),
    st.integers(0, 10),
)
def test_a_file_learns_its_names_and_without_a_counter_uses_line_order(
    losses: list[float], other: str, counted: bool, at: int
) -> None:
    """Every line's values land in order on x = the counter (or, with none, the metric line's ordinal); a
    name seen on one line only (a chatter line's stray `word number`) makes no series."""
    lines = [
        (f"step {10 * (i + 1)} | " if counted else "") + f"loss: {v:.4f} - {other}: {v / 2:.4f}"
        for i, v in enumerate(losses)
    ]
    stray = ("step 5 | " if counted else "") + "loss: 1.0 - restarts: 3"
    lines.insert(min(at, len(lines)), "Loading shard 3 of 8 from /data/part-0003")
    lines.insert(0, stray)
    ss = parse_text_lines("\n".join(lines) + "\n")
    assert "restarts" not in ss.series and "shard" not in ss.series
    want_x = (
        [10.0 * (i + 1) for i in range(len(losses))]
        if counted
        else [float(i + 2) for i in range(len(losses))]
    )
    s = ss.series[canonical(other)]
    assert s.values == [float(f"{v / 2:.4f}") for v in losses] and s.steps == want_x
    assert ss.series["loss"].values[1:] == [float(f"{v:.4f}") for v in losses]
    assert ss.step_kind == ("step" if counted else "entry")


def test_an_averaged_name_is_its_series() -> None:
    """Prose prints of per-epoch averages ("average training loss is ...") are the loss and val loss."""
    ss = parse_text_lines(
        "".join(
            f"In epoch {e}, average training loss is {2.0 - e / 10:.4f}, average training acc is {0.3 + e / 50:.2f}.\n"
            f"In epoch {e}, average validation loss is {1.5 - e / 20:.4f}, average validation acc is 0.5.\n"
            for e in range(6)
        )
    )
    assert ss.series["loss"].values[:2] == [2.0, 1.9] and ss.series["val_loss"].values[:2] == [1.5, 1.45]
    assert "acc" in ss.series and "val_acc" in ss.series
