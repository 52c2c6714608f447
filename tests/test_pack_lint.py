"""``rules lint`` is the engine's lint plus the face's check that runs the log scanner: every signature
against its own example lines, in both scanner engines."""

from __future__ import annotations

from pathlib import Path

import pytest
from mldebug_rules.engine import lint as engine_lint
from mldebug_rules.engine.lint import lint_kb
from mldebug_rules.engine.packs import load_packs
from test_packs import MANIFEST  # the same minimal pack as the pack-loading tests

from mldebug_rules.pack_lint import SCANNER_ENGINES, example_problems, lint

BODY = """signatures:
  - id: acme_fatal
    title: t
    role: root
    hypotheses: [gpu_oom]
    regex: 'acme fatal: \\d+'
    examples: {match: ["acme fatal: 12", "acme fatal: twelve"], no_match: ["acme ok", "acme fatal: 7 again"]}
rules:
  - id: r1
    title: t
    status: test
    description: d
    falsepositives: [none known]
    when:
      a: {kind: log.signature, match: {signature: acme_fatal}}
    then: {hypothesis: gpu_oom, weight: 0.5}
"""


def _kb(tmp_path: Path):
    d = tmp_path / "acme"
    d.mkdir()
    (d / "pack.yaml").write_text(MANIFEST)
    (d / "rules.yaml").write_text(BODY)
    return load_packs([d], entry_points=False, strict=True)


def test_examples_run_through_the_scanner_in_both_engines(tmp_path: Path) -> None:
    kb = _kb(tmp_path)
    found = sorted(p.message for p in example_problems(kb, {"acme"}))
    missed = [m for m in found if "does not match its example 'acme fatal: twelve'" in m]
    hit = [m for m in found if "matches its no_match example 'acme fatal: 7 again'" in m]
    assert len(missed) == len(hit) == len(SCANNER_ENGINES), found
    assert not [m for m in found if "'acme fatal: 12'" in m or "'acme ok'" in m], found


def test_rules_lint_is_the_engine_lint_plus_the_examples(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine_lint, "ADVERSARIAL_LINES", ())  # timings would differ between the two runs
    kb = _kb(tmp_path)
    engine_only = lint_kb(kb, {"acme"})
    full = lint(kb, {"acme"})
    assert not [p for p in engine_only if "example" in p.message and "of " not in p.message]
    assert set(engine_only) <= set(full)
    assert set(full) - set(engine_only) == set(example_problems(kb, {"acme"}))
    assert [p.severity for p in full] == sorted((p.severity for p in full), key=lambda s: s != "error")
