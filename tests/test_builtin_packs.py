"""The built-in packs check themselves: every case of every ``rules/**/*.test.yaml`` is its own test, the
packs lint clean, and every rule file has its test file. A broken built-in is an internal error caught here,
never a warning at a user's diagnosis."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from mldebug_rules.engine import lint as lint_module
from mldebug_rules.engine.packs import KnowledgeBase

from mldebug_rules.pack_lint import lint
from mldebug_rules.pack_tests import load_cases, run_case

RULES = Path(__file__).resolve().parents[1] / "rules"
TEST_FILES = sorted(RULES.rglob("*.test.yaml"))


def collect(test_files: list[Path]) -> list[Any]:
    """One pytest parameter per case, named by file, line and case name."""
    out = []
    for path in test_files:
        for line, case in load_cases(path):
            ident = f"{path.relative_to(path.parents[1])}:{line}: {case['name']}"
            out.append(pytest.param(path, case, id=ident))
    return out


def test_the_builtin_packs_have_cases() -> None:
    assert len(TEST_FILES) >= 10
    assert len(collect(TEST_FILES)) >= 150


@pytest.mark.parametrize(("path", "case"), collect(TEST_FILES))
def test_case(kb: KnowledgeBase, path: Path, case: dict[str, Any]) -> None:
    diff = run_case(kb, path, case)
    assert not diff, "\n".join(diff)


def test_builtin_packs_lint_clean(kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch) -> None:
    # Everything `rules lint` checks except its timings of each regex on 1 MB lines: a wall-clock limit
    # would make this test depend on the machine's load (no timed unit tests; bench/ measures speed).
    monkeypatch.setattr(lint_module, "ADVERSARIAL_LINES", ())
    builtin = {p.name for p in kb.packs if p.origin == "builtin"}
    errors = [p.format() for p in lint(kb, only_packs=builtin) if p.severity == "error"]
    assert not errors, "\n".join(errors)


def test_every_rule_file_has_its_test_file() -> None:
    missing = []
    for f in sorted(RULES.rglob("*.yaml")):
        if f.name == "pack.yaml" or f.name.endswith(".test.yaml"):
            continue
        doc = yaml.safe_load(f.read_text(encoding="utf-8")) or {}
        if (doc.get("rules") or doc.get("signatures")) and not f.with_suffix(".test.yaml").is_file():
            missing.append(str(f.relative_to(RULES)))
    assert not missing, f"rule files without a .test.yaml: {missing}"


def test_a_changed_expectation_fails(kb: KnowledgeBase, tmp_path: Path) -> None:
    """The cases can fail: one expectation changed in a copy of a core test file makes exactly that case fail,
    through the same collection and run as the real items above."""
    src = RULES / "core" / "storage.test.yaml"
    copy = tmp_path / "core" / src.name
    copy.parent.mkdir()
    shutil.copy(src, copy)
    text = copy.read_text(encoding="utf-8")
    assert text.count("expect: {top: disk_full, cites:") == 1
    copy.write_text(text.replace("expect: {top: disk_full, cites:", "expect: {top: gpu_oom, cites:"))
    results = {p.id: run_case(kb, *p.values) for p in collect([copy])}
    failing = [name for name, diff in results.items() if diff]
    assert len(failing) == 1 and "ENOSPC" in failing[0], failing
    assert "top: expected 'gpu_oom', got 'disk_full'" in results[failing[0]][0]
