"""diagnose --plot: a picture when matplotlib is there, one clear line (and the report) when it is not."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import FIXTURES

from mldebug_rules.cli import main


def test_plot_written_and_linked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    png, md = tmp_path / "curves.png", tmp_path / "report.md"
    rc = main(
        [
            "diagnose",
            "--offline",
            "--format",
            "markdown",
            "--plot",
            str(png),
            "--out",
            str(md),
            str(FIXTURES / "curves_hf_logdict_divergence"),
        ]
    )
    assert rc == 0 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"![training curves]({png})" in md.read_text()


def test_plot_without_matplotlib_keeps_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import builtins

    real_import = builtins.__import__

    def no_mpl(name: str, *a: object, **k: object) -> object:
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError("no matplotlib")
        return real_import(name, *a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", no_mpl)
    rc = main(
        [
            "diagnose",
            "--offline",
            "--plot",
            str(tmp_path / "x.png"),
            str(FIXTURES / "curves_wandb_divergence"),
        ]
    )
    out, err = capsys.readouterr()
    assert rc == 0 and "optimizer_divergence" in out
    assert err.strip().count("\n") == 0 and "matplotlib" in err
    assert not (tmp_path / "x.png").exists()


def test_choose_panels_follows_the_cited_trends() -> None:
    from mldebug_rules.plot import choose_panels

    series = {
        "m.jsonl": {
            "series": {"loss": [[0, 1.0]], "grad_norm": [[0, 1.0]], "mem": [[0, 1.0]]},
            "step_kind": "step",
        }
    }
    trends = [
        {
            "file": "m.jsonl",
            "metric": "mem",
            "trend": "growing",
            "step": 0,
            "window_start": 0,
            "window_end": 1,
        }
    ]
    assert choose_panels(series, trends) == [("m.jsonl", "mem"), ("m.jsonl", "loss")]
    assert choose_panels(series, []) == [("m.jsonl", "loss"), ("m.jsonl", "grad_norm"), ("m.jsonl", "mem")]


def test_skipped_steps_panel_without_a_loss_scale_series() -> None:
    """DeepSpeed logs a running skipped total but no loss scale: the cited trend still gets its panel."""
    from mldebug_rules.plot import choose_panels

    series = {"train.log": {"series": {"loss": [[0, 1.0]], "skipped_total": [[0, 3.0]]}, "step_kind": "step"}}
    trends = [{"file": "train.log", "metric": "skipped_iters", "trend": "skipped_steps", "step": 0}]
    assert choose_panels(series, trends) == [("train.log", "skipped_total"), ("train.log", "loss")]
    series["train.log"]["series"]["loss_scale"] = [[0, 65536.0]]
    assert choose_panels(series, trends)[0] == ("train.log", "loss_scale")


def test_train_and_val_share_one_panel_and_windows_have_their_own_colours(kb: object) -> None:
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from mldebug_rules.diagnose import Request, diagnose
    from mldebug_rules.plot import choose_panels, figure

    d = diagnose(Request(run_dirs=[FIXTURES / "curves_plain_prints_overfitting"], offline=True), kb=kb)  # type: ignore[arg-type]
    fig = figure(d)
    try:
        (ax,) = [a for a in fig.axes if a.get_ylabel() == "loss / val_loss"]
        assert {ln.get_label() for ln in ax.get_lines()} >= {"loss", "val_loss"}
        assert not [a for a in fig.axes if a.get_ylabel() == "val_loss"]  # no separate val panel
    finally:
        plt.close(fig)
    series = {"t.log": {"series": {"loss": [[0, 1.0]], "val_loss": [[0, 1.0]]}, "step_kind": "step"}}
    cited = [{"file": "t.log", "metric": "val_loss", "trend": "overfitting", "step": 0}]
    assert choose_panels(series, cited) == [("t.log", "loss")]


def test_each_detected_window_gets_a_distinct_colour(kb: object) -> None:
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_hex

    from mldebug_rules.diagnose import Request, diagnose
    from mldebug_rules.plot import figure

    d = diagnose(Request(run_dirs=[FIXTURES / "curves_fairseq_fp16_collapse"], offline=True), kb=kb)  # type: ignore[arg-type]
    fig = figure(d)
    try:
        spans = {
            (p.get_label(), to_hex(p.get_facecolor()))
            for a in fig.axes
            for p in a.patches
            if not p.get_label().startswith("_")
        }
        assert {label for label, _ in spans} >= {"loss_scale_collapse", "diverging"}
        colour_of = dict(spans)
        assert len(colour_of) == len(spans) == len(set(colour_of.values())), spans  # one colour per window
    finally:
        plt.close(fig)


def _unwritable(target: str, tmp_path: Path) -> Path:
    (tmp_path / "a-directory.png").mkdir()
    (tmp_path / "a-directory").mkdir()
    if target != "read-only-dir":
        return tmp_path / target
    if os.geteuid() == 0:  # root writes into a read-only directory; /sys refuses even root
        if not os.path.isdir("/sys"):
            pytest.skip("running as root without /sys: no directory root cannot write")
        return Path("/sys/mldebug-rules-plot.png")
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    return ro / "curves.png"


@pytest.mark.parametrize(
    "target", ["missing-dir/curves.png", "a-directory.png", "a-directory", "read-only-dir"]
)
def test_an_unwritable_plot_file_exits_2_with_one_line_before_diagnosing(
    target: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No matplotlib needed: the target is checked first, so a long diagnosis is not spent for nothing."""
    import mldebug_rules.diagnose

    out = _unwritable(target, tmp_path)

    def no_diagnosis(*a: object, **k: object) -> None:
        raise AssertionError("diagnosed before checking the plot file")

    monkeypatch.setattr(mldebug_rules.diagnose, "diagnose", no_diagnosis)
    rc = main(["diagnose", "--offline", "--plot", str(out), str(FIXTURES / "curves_wandb_divergence")])
    got, err = capsys.readouterr()
    assert rc == 2 and not got
    assert err.strip().count("\n") == 0 and f"--plot {out}: cannot write the plot: " in err, err
    assert not (tmp_path / "a-directory.png.png").exists() and not (tmp_path / "a-directory.png").is_file()


def test_an_unknown_image_format_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("matplotlib")
    rc = main(
        [
            "diagnose",
            "--offline",
            "--plot",
            str(tmp_path / "c.notaformat"),
            str(FIXTURES / "curves_wandb_divergence"),
        ]
    )
    _, err = capsys.readouterr()
    assert rc == 2 and err.strip().count("\n") == 0 and "cannot write the plot" in err


def test_a_plot_file_without_an_extension_is_written_as_named(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "curves"
    assert main(["diagnose", "--offline", "--plot", str(out), str(FIXTURES / "curves_wandb_divergence")]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and not (tmp_path / "curves.png").exists()


def test_a_window_cited_by_two_hypotheses_is_drawn_once(kb: object) -> None:
    """A sudden NaN is evidence for the data and for the loss: one window, one colour, one legend entry."""
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from mldebug_rules.diagnose import Request, diagnose
    from mldebug_rules.plot import figure

    d = diagnose(Request(run_dirs=[FIXTURES / "curves_generic_step_sudden_nan"], offline=True), kb=kb)  # type: ignore[arg-type]
    citing = [
        h.id for h in d.gate.hypotheses if any(f.attrs.get("trend") == "nan_sudden" for f in h.evidence)
    ]
    assert len(citing) >= 2, citing
    fig = figure(d)
    try:
        for a in fig.axes:
            labels = [
                x.get_label() for x in [*a.patches, *a.get_lines()] if not x.get_label().startswith("_")
            ]
            assert len(labels) == len(set(labels)), labels
    finally:
        plt.close(fig)


def test_window_colours_never_repeat() -> None:
    pytest.importorskip("matplotlib")
    from matplotlib.colors import to_hex

    from mldebug_rules.plot import _window_colour

    colours = [to_hex(_window_colour(k)) for k in range(40)]
    assert len(set(colours)) == len(colours)
