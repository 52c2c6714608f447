"""Regression tests for defects found while closing the engine core (issue 20): each failed before its fix."""

from __future__ import annotations

import re
from pathlib import Path

from mldebug_rules.engine.lint import lint_kb
from mldebug_rules.engine.packs import KnowledgeBase, load_packs
from test_packs import MANIFEST  # the same minimal pack as the pack-loading tests

from mldebug_rules import report
from mldebug_rules.diagnose import Request, diagnose

REPO = Path(__file__).resolve().parents[1]


def test_an_unexplained_traceback_read_from_no_file_cites_its_probe(
    tmp_path: Path, kb: KnowledgeBase
) -> None:
    """report.next_action read ``f.probe``, which a Fact does not have: a log tail that came from no file (a
    bundle, a live probe) raised AttributeError through the Python API instead of naming its source."""
    tail = kb.registry.make("log.tail", {"traceback": True, "total_lines": 40}, probe="bundle")
    read = kb.registry.make("log.file", {"lines": 40, "bytes": 900}, probe="bundle")
    d = diagnose(Request(run_dirs=[tmp_path], offline=True), kb=kb, extra_facts=[read, tail])
    assert d.gate.verdict == "uncertain" and d.unexplained == [tail]
    text = report.next_action(d)
    assert "no rule explains" in text and "probe:bundle" in text, text
    assert report.build(d)["next_action"] == text


def test_every_docs_page_the_code_points_to_exists() -> None:
    """backend_durable.py sent readers to docs/engine.md, which did not exist."""
    pointer = re.compile(r"\bdocs/([\w.-]+\.md)\b")
    missing = []
    for folder in ("engine", "collectors", "mldebug_rules"):
        for path in sorted((REPO / folder).rglob("*.py")):
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                missing += [
                    f"{path.relative_to(REPO)}:{n}: docs/{m}"
                    for m in pointer.findall(line)
                    if not (REPO / "docs" / m).is_file()
                ]
    assert not missing, missing
    assert "docs/engine.md" in (REPO / "engine" / "backend_durable.py").read_text(encoding="utf-8")


RULES = """\
rules:
  - id: oom_seen
    title: t
    status: test
    description: d
    falsepositives: [none known]
    when:
      a: {{kind: log.signature, match: {{signature: cuda_oom}}}}
    then:
      hypothesis: gpu_oom
      weight: 0.5
{derives}
  - id: oom_twice
    title: builds on a fact another rule derives
    status: test
    description: d
    falsepositives: [none known]
    when:
      d: {{kind: derived, match: {{name: oom_twice}}}}
    then: {{hypothesis: gpu_oom, weight: 0.2}}
"""


def _pack(root: Path, derives: str) -> Path:
    d = root / "acme"
    d.mkdir()
    (d / "pack.yaml").write_text(MANIFEST)
    (d / "rules.yaml").write_text(RULES.format(derives=derives))
    return d


def test_lint_finds_a_rule_waiting_on_a_derived_fact_no_rule_derives(tmp_path: Path) -> None:
    """lint.py promised "rules that can never fire (... a kind nothing emits)" and checked signatures only."""
    kb = load_packs([_pack(tmp_path, "")], entry_points=False, strict=True)
    dead = [p for p in lint_kb(kb, {"acme"}) if "can never fire" in p.message]
    assert len(dead) == 1 and dead[0].severity == "error", dead
    assert "acme.oom_twice" in dead[0].message and "oom_twice" in dead[0].message


def test_lint_accepts_a_derived_fact_another_rule_derives(tmp_path: Path) -> None:
    derives = "      derive:\n        - {kind: derived, attrs: {name: oom_twice}}"
    kb = load_packs([_pack(tmp_path, derives)], entry_points=False, strict=True)
    assert not [p for p in lint_kb(kb, {"acme"}) if "can never fire" in p.message]
