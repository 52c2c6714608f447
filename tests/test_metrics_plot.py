"""diagnose --plot: a picture when matplotlib is there, one clear line (and the report) when it is not."""

from __future__ import annotations

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
