"""fixtures/realworld, measured as a corpus: top-1 and top-3 over all cases and top-1 over the blind third stay
above floors. Cases are not tests one by one: a third of them is blind (fixtures/realworld/blind.txt), and a
failing per-case test would show a blind case to whoever reads it. Failures name non-blind misses only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mldebug_rules.engine.packs import KnowledgeBase

from mldebug_rules import report
from mldebug_rules.diagnose import Request, diagnose
from mldebug_rules.evaluate import Result, hit, load_cases, summarize

REALWORLD = Path(__file__).resolve().parents[1] / "fixtures" / "realworld"
MIN_CASES = 20
# Set at what the rules achieve; raise them as the rules improve, never lower them to pass. Per-case results
# of the non-blind cases: `mldebug-rules eval fixtures/realworld` (it withholds the blind cases' details too).
FLOORS = {
    "all_top1": 0.921,
    "all_top3": 0.940,
    "blind_top1": 0.823,
}  # 537 cases, blind drawn 2026-12-05 (stable draw)


def test_realworld_corpus_accuracy(kb: KnowledgeBase) -> None:
    if not REALWORLD.is_dir() or len(list(REALWORLD.glob("*/expected.yaml"))) < MIN_CASES:
        pytest.skip("fixtures/realworld holds fewer cases than MIN_CASES")
    results = []
    for c in load_cases(REALWORLD, None):
        d = diagnose(Request(run_dirs=[c.path], offline=True), kb=kb)
        rep = json.loads(report.to_json(report.build(d)))
        got = [h["id"] for h in rep["hypotheses"]]
        results.append(
            Result(
                c.name,
                c.expected,
                c.accept,
                c.difficulty,
                rep["verdict"],
                got[:3],
                hit(got[:1], rep["verdict"], c),
                hit(got[:3], rep["verdict"], c),
                blind=c.blind,
            )
        )
    s = summarize(results)
    split = s.get("split", {"all": s, "blind": {"cases": 0}})
    figures = {
        "all_top1": split["all"]["top1"]["accuracy"],
        "all_top3": split["all"]["top3"]["accuracy"],
        "blind_top1": split["blind"]["top1"]["accuracy"] if split["blind"]["cases"] else 1.0,
    }
    low = {k: (v, FLOORS[k]) for k, v in figures.items() if v < FLOORS[k]}
    seen = [f"{m['case']}: expected {m['expected']}, got {m['got']}" for m in s["misses"]]  # non-blind only
    assert not low, f"below the floors (figure, floor): {low}; non-blind misses: {seen}"
