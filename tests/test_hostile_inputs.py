"""Hostile and broken input (issue 18): one regression test per finding, each built from its reproducer.

Every test here bounds work by counts, sizes or "returns at all" under a generous subprocess timeout, never
by a measured duration."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mldebug_rules.engine.packs import load_packs
from mldebug_rules.engine.ruletest import run_pack_tests

MANIFEST = "pack: acme\nversion: 0.1.0\ndescription: test pack\nrequires: mldebug-rules/rules/v1\n"
GOOD_RULE = """rules:
  - id: r1
    title: t
    status: test
    description: d
    falsepositives: [none known]
    when:
      a: {kind: log.signature, match: {signature: cuda_oom}}
    then: {hypothesis: gpu_oom, weight: 0.5}
"""


def cli(*args: str, timeout: float = 120.0, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mldebug_rules.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        **kw,  # type: ignore[arg-type]
    )


def make_pack(root: Path, body: str = GOOD_RULE, tests: str | None = None) -> Path:
    d = root / "acme"
    d.mkdir(parents=True, exist_ok=True)
    (d / "pack.yaml").write_text(MANIFEST)
    (d / "rules.yaml").write_text(body)
    if tests is not None:
        (d / "rules.test.yaml").write_text(tests)
    return d


# -- 1. a pack's test case writes files only inside its temporary run directory ---------------------------


def test_pack_test_files_cannot_escape_the_case_directory(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    absolute = outside / "PWNED.txt"
    dotdot = "../../../../../../../../../../" + str(outside / "PWNED2.txt").lstrip("/")
    tests = (
        "cases:\n"
        "  - name: absolute\n"
        f"    files: {{{str(absolute)!r}: x}}\n"
        "    expect: {verdict: no_failure}\n"
        "  - name: dotdot\n"
        f"    files: {{{dotdot!r}: x}}\n"
        "    expect: {verdict: no_failure}\n"
        "  - name: nested relative paths still work\n"
        "    files: {'logs/rank0/train.log': 'hello'}\n"
        "    expect: {verdict: no_failure}\n"
    )
    d = make_pack(tmp_path, tests=tests)
    kb = load_packs([d], entry_points=False, strict=True)
    pack = next(p for p in kb.packs if p.name == "acme")
    results = list(run_pack_tests(kb, pack))
    assert not absolute.exists() and not (outside / "PWNED2.txt").exists()
    by_name = {r.name: r for r in results}
    assert not by_name["absolute"].ok and "relative path" in by_name["absolute"].diff[0]
    assert not by_name["dotdot"].ok and "relative path" in by_name["dotdot"].diff[0]
    assert by_name["nested relative paths still work"].ok, by_name["nested relative paths still work"].diff
