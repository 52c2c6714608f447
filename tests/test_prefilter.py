"""A signature's `prefilter`: what the fast scanner looks for instead of its regex, which then confirms.

The prefilter is a speed device only: with a correct one, every engine finds exactly the lines the regex finds;
the loader and lint refuse one that could lose lines."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mldebug_rules.collectors.logscan import Pattern, Scanner, hyperscan_available
from mldebug_rules.engine.lint import lint_kb
from mldebug_rules.engine.packs import load_packs
from test_packs import error_of, pack

from mldebug_rules.pack_lint import lint

# A finite loss term, anything, then a NaN one: the shape that made a prefilter worth having.
REGEX = r"loss[:=] ?\d+(?:\.\d+)?\b.*loss[:=] ?nan\b"
PREFILTER = r"loss[:=] ?nan\b"
ENGINES = ["python", *(["hyperscan"] if hyperscan_available() else [])]

SIGNATURE = """signatures:
  - id: sig1
    title: t
    role: root
    hypotheses: [loss_computation_error]
    regex: '{regex}'
    prefilter: '{prefilter}'
    examples: {{match: ["{example}"], no_match: ["loss=1.0 kl_loss=0.5"]}}
"""


def _found(patterns: list[Pattern], engine: str, text: str) -> list[tuple[int, int, str]]:
    res = Scanner(patterns, tail_lines=0, engine=engine, progress=False).scan_bytes(text.encode())
    return [(h.pattern, h.line_no, h.text) for h in res.hits]


LINES = st.sampled_from(
    [
        "step 1 | loss=2.31 | lr 1e-4",
        "step 2 | recon_loss=0.04 | kl_loss=nan",
        "step 3 | loss: 1.5 aux_loss: nan",
        "loss=nan only",
        "number of nan iterations: 0 | lm loss: 2.1",
        "loss=nan before loss=1.0",
        "",
        "Traceback (most recent call last):",
    ]
)


@pytest.mark.parametrize("engine", ENGINES)
@settings(max_examples=40, deadline=None)
@given(lines=st.lists(LINES, max_size=30))
def test_a_correct_prefilter_finds_exactly_the_regex_lines(engine: str, lines: list[str]) -> None:
    text = "\n".join(lines) + "\n"
    plain = _found([Pattern("s", REGEX)], engine, text)
    assert _found([Pattern("s", REGEX, prefilter=PREFILTER)], engine, text) == plain


@pytest.mark.skipif(not hyperscan_available(), reason="hyperscan is not installed")
def test_hyperscan_looks_for_the_prefilter_not_the_regex() -> None:
    """Proof the prefilter is what hyperscan searches: one that (wrongly) misses a line loses that line there,
    while the Python engine, which searches with the regex, still finds it. Lint refuses such a prefilter."""
    text = "step 2 | loss=0.04 | loss=nan\n"
    wrong = Pattern("s", REGEX, prefilter=r"never-in-this-line")
    assert _found([wrong], "hyperscan", text) == []
    assert _found([wrong], "python", text) == [(0, 1, "step 2 | loss=0.04 | loss=nan")]


def test_a_prefilter_that_does_not_compile_names_its_line(tmp_path: Path) -> None:
    body = SIGNATURE.format(regex=REGEX, prefilter="loss[:= nan", example="loss=1.0 loss=nan")
    msg = error_of(tmp_path, body)
    assert msg.startswith(str(tmp_path / "acme" / "rules.yaml") + ":7: sig1: prefilter does not compile"), msg


def test_a_prefilter_that_misses_a_match_example_is_a_lint_error(tmp_path: Path) -> None:
    body = SIGNATURE.format(regex=REGEX, prefilter=r"kl_loss[:=] ?nan", example="loss=1.0 loss=nan")
    kb = load_packs([pack(tmp_path, body)], entry_points=False, strict=True)
    problems = [p for p in lint_kb(kb, {"acme"}) if "prefilter" in p.message]
    assert [p.severity for p in problems] == ["error"], problems
    assert "loss=1.0 loss=nan" in problems[0].message
    # ...and the scanner-level lint, through hyperscan, says the example is not found at all
    if hyperscan_available():
        assert any("does not match its example" in p.message for p in lint(kb, {"acme"}))


def test_a_good_prefilter_lints_clean(tmp_path: Path) -> None:
    body = SIGNATURE.format(regex=REGEX, prefilter=PREFILTER, example="loss=1.0 loss=nan")
    kb = load_packs([pack(tmp_path, body)], entry_points=False, strict=True)
    assert not [p for p in lint(kb, {"acme"}) if p.severity == "error"]


def test_builtin_prefilters_match_every_example_line_their_regex_matches() -> None:
    """Every example line of every built-in signature, not only the signature's own: a prefilter must keep each
    line its regex matches."""
    import regex

    kb = load_packs()
    lines = {ex for s in kb.signatures for ex in (*s.examples_match, *s.examples_no_match)}
    with_prefilter = [s for s in kb.signatures if s.prefilter]
    assert with_prefilter, "the built-in pack declares at least one prefilter"
    for s in with_prefilter:
        flags = regex.IGNORECASE if s.ignore_case else 0
        full, pre = regex.compile(s.regex, flags), regex.compile(s.prefilter or "", flags)
        lost = [ln for ln in lines if full.search(ln) and not pre.search(ln)]
        assert not lost, f"{s.id}: the prefilter loses {lost}"


def test_builtin_prefilters_keep_every_fixture_line_their_regex_matches() -> None:
    """The same over every line of the recorded failures under fixtures/ (and the packs' test logs): thousands of
    real wordings the examples do not list. A prefilter narrowed for speed must not lose one of them."""
    import bisect
    import re

    import yaml

    root = Path(__file__).resolve().parents[1]
    lines: set[str] = set()
    files = [*(root / "fixtures").rglob("*"), *(root / "rules").rglob("*.test.yaml")]
    for f in files:
        if f.is_file() and f.stat().st_size < 2_000_000 and f.suffix not in (".gz", ".zst", ".pt", ".bin"):
            lines.update(f.read_text("utf-8", errors="replace").splitlines())
    assert len(lines) > 10_000, "the fixtures are where this test expects them"
    # One search over all the lines joined (line by line took a minute): each match's first line is then checked
    # alone, with the regex and with the prefilter. A match that runs across lines is checked on its first line only.
    text = "\n".join(sorted(lines))
    starts = [0]
    starts += [i + 1 for i, c in enumerate(text) if c == "\n"]
    # Only the prefilters written by hand: the loader derives the others from the regex (its `^`s loosened to
    # ``^[^\n]*``), a superset by construction.
    declared = {
        sig["id"]
        for f in (root / "rules").rglob("*.yaml")
        if not f.name.endswith(".test.yaml")
        for sig in (yaml.safe_load(f.read_text("utf-8")) or {}).get("signatures", [])
        if sig.get("prefilter")
    }
    assert declared
    for s in load_packs().signatures:
        if s.id not in declared:
            continue
        flags = re.MULTILINE | (re.IGNORECASE if s.ignore_case else 0)
        full, pre = re.compile(s.regex, flags), re.compile(s.prefilter or "", flags)
        lost = []
        for m in full.finditer(text):
            i = bisect.bisect_right(starts, m.start()) - 1
            line = text[starts[i] : (starts[i + 1] - 1) if i + 1 < len(starts) else len(text)]
            if full.search(line) and not pre.search(line):
                lost.append(line)
        assert not lost, f"{s.id}: the prefilter loses {lost[:3]}"


@pytest.mark.skipif(not hyperscan_available(), reason="hyperscan is not installed")
def test_hyperscan_takes_every_builtin_pattern() -> None:
    """A pattern hyperscan refuses is not lost (the Python path takes it), but every run then pays for the failed
    compiles again, since only databases that compile are cached: the metric parsers' table header, with a `^`
    inside a group, cost each diagnosis ~0.07 s of CPU that way. The built-in patterns must all compile."""
    from mldebug_rules.collectors.logs import stream_patterns
    from mldebug_rules.collectors.metrics_parse import LineReader

    kb = load_packs()
    for stream in ("train", "kernel"):
        sc = Scanner(list(stream_patterns(kb, stream)), trusted=True)
        assert sc.fallbacks == [], (stream, sc.fallbacks)
    assert LineReader().scanner.fallbacks == []
