"""`^` in a signature means the start of the printed text, after a logger's or launcher's prefix."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from mldebug_rules.engine.packs import line_prefix, load_data, with_line_prefixes

PREFIXES = load_data(
    (Path(__file__).resolve().parents[1] / "engine" / "line_prefixes.yaml").read_text("utf-8")
)


@pytest.mark.parametrize("spec", PREFIXES["prefixes"], ids=lambda s: s["id"])
def test_each_prefix_matches_its_examples_whole(spec: dict) -> None:
    for ex in spec["examples"]:
        assert re.fullmatch(spec["regex"], ex), (spec["id"], ex)


def test_caret_skips_up_to_two_prefixes() -> None:
    rx = re.compile(with_line_prefixes(r"^Segmentation fault"), re.M)
    for line in (
        "Segmentation fault (core dumped)",
        "2024-05-01 12:00:03 | Segmentation fault (core dumped)",
        "[rank0]: Segmentation fault",
        "2024-05-01 12:00:03,123 [rank1]: Segmentation fault",
        "May  1 12:00:03 node017 python[42]: Segmentation fault",
        "ERROR:root: Segmentation fault",
    ):
        assert rx.search(line), line
    for line in (
        "a Segmentation fault",
        "2024-05-01 12:00:03 INFO Segmentation fault handler installed",
        "Epoch 3: Segmentation fault counts 0",
    ):
        assert not rx.search(line), line


def test_prefix_never_crosses_a_line() -> None:
    rx = re.compile(with_line_prefixes(r"^Killed\s*$"), re.M)
    assert not rx.search("12:00:03\nx Killed")
    assert "\\s" not in line_prefix()


def test_classes_and_escapes_keep_their_caret() -> None:
    assert with_line_prefixes(r"[^a-z^]x\^y") == r"[^a-z^]x\^y"
    assert with_line_prefixes(r"[]^]x") == r"[]^]x"
    out = with_line_prefixes(r"(?:^|[^A-Za-z_])epoch")
    assert out.startswith("(?:^" + line_prefix() + "|[^A-Za-z_])")
    re.compile(out)


def test_a_caret_signature_gets_a_loose_prefilter_that_covers_it() -> None:
    """The fast scanner looks for `^[^\\n]*...` (what a bare `^` cost), the regex confirms the prefixes."""
    from mldebug_rules.engine.packs import load_packs

    kb = load_packs([], strict=False)
    anchored = [s for s in kb.signatures if line_prefix() in s.regex]
    assert anchored
    for s in anchored:
        assert s.prefilter and line_prefix() not in s.prefilter, s.id
        loose = re.compile(s.prefilter, re.M | (re.I if s.ignore_case else 0))
        for ex in s.examples_match:
            assert loose.search(ex), (s.id, ex)


def test_caret_skips_a_progress_bar_that_did_not_end_its_line() -> None:
    """A shell's message lands after a tqdm bar (pasted terminal output) or after its last carriage return."""
    rx = re.compile(with_line_prefixes(r"^Segmentation fault"), re.M)
    for line in (
        " 20%|##        | 11/56 [00:02<00:08,  5.02it/s]Segmentation fault (core dumped)",
        "Epoch 3:  20%|##  | 11/56 [00:02<00:08,  5.02it/s, loss=0.4]Segmentation fault (core dumped)",
        "Epoch 3:  18%|#8  | 10/56 [00:02<00:08,  5.0it/s]\rEpoch 3:  20%|##  | 11/56 [00:02<00:08,  5.02it/s]\rSegmentation fault",
    ):
        assert rx.search(line), line
    for line in (
        "Epoch 3:  20%|##  | 11/56 [00:02<00:08,  5.02it/s] no Segmentation fault here",
        "Epoch 3:  20% done, Segmentation fault counts 0",
    ):
        assert not rx.search(line), line


def test_caret_skips_a_keras_progress_bar_that_did_not_end_its_line() -> None:
    rx = re.compile(with_line_prefixes(r"^zsh: segmentation fault"), re.M)
    assert rx.search(
        "5000/5000 [==========] - ETA: 0s - loss: 2.3416 - accuracy: 0.3065zsh: segmentation fault  python t.py"
    )
    assert not rx.search("5000/5000 [==========] - 3s - loss: 0.31 - note zsh: segmentation fault earlier")
