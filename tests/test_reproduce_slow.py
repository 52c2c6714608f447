"""End to end, slow: re-run a few fixtures/reproduce scripts with real PyTorch and check that the fresh
recording still gets its expected diagnosis. The scripts run from a copy of fixtures/reproduce in a temporary
directory, so the committed fixtures are never rewritten.

Needs an interpreter with torch: $MLDEBUG_TORCH_PYTHON, else /tmp/torchvenv/bin/python, else this one.
Skipped unless selected: ``pytest -m slow`` (or MLDEBUG_SLOW=1)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from mldebug_rules.engine.packs import KnowledgeBase

from mldebug_rules import report
from mldebug_rules.diagnose import Request, diagnose

REPO = Path(__file__).resolve().parents[1]
REPRO = REPO / "fixtures" / "reproduce"

# Scripts that need no root, cgroups, tmpfs mounts or signals from outside: they reproduce anywhere.
SCRIPTS = ["nan_lr_too_high", "dtype_mismatch", "completed_normally", "dist_peer_crash"]


def _torch_python() -> str | None:
    candidates = [os.environ.get("MLDEBUG_TORCH_PYTHON"), "/tmp/torchvenv/bin/python", sys.executable]
    for c in candidates:
        if not c or not Path(c).exists():
            continue
        try:
            r = subprocess.run([c, "-c", "import torch"], capture_output=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if r.returncode == 0:
            return c
    return None


@pytest.fixture(scope="module")
def torch_python(request: pytest.FixtureRequest) -> str:
    if "slow" not in (request.config.getoption("markexpr", "") or "") and not os.environ.get("MLDEBUG_SLOW"):
        pytest.skip("slow: select with -m slow (or MLDEBUG_SLOW=1)")
    py = _torch_python()
    if py is None:
        pytest.skip("no interpreter with torch (set MLDEBUG_TORCH_PYTHON or create /tmp/torchvenv)")
    return py


@pytest.mark.slow
@pytest.mark.parametrize("name", SCRIPTS)
def test_reproduction_still_diagnosed(
    name: str, torch_python: str, tmp_path: Path, kb: KnowledgeBase
) -> None:
    if not (REPRO / f"{name}.py").exists():
        pytest.skip(f"fixtures/reproduce/{name}.py not present")
    copy = tmp_path / "fixtures" / "reproduce"
    shutil.copytree(REPRO, copy, ignore=shutil.ignore_patterns("__pycache__"))
    r = subprocess.run(
        [sys.executable, str(copy / f"{name}.py"), "--python", torch_python],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert r.returncode == 0, f"{name}.py failed to reproduce:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
    run_dir = tmp_path / "fixtures" / name
    want = yaml.safe_load((run_dir / "expected.yaml").read_text(encoding="utf-8"))["diagnosis"]
    committed = yaml.safe_load((REPO / "fixtures" / name / "expected.yaml").read_text(encoding="utf-8"))
    assert want == committed["diagnosis"]
    d = diagnose(Request(run_dirs=[run_dir], offline=True), kb=kb)
    rep = json.loads(report.to_json(report.build(d)))
    got = [h["id"] for h in rep["hypotheses"][:3]]
    if want == "completed_normally":
        assert rep["verdict"] == "no_failure", f"verdict {rep['verdict']} got {got}"
    else:
        assert got and got[0] == want, f"expected {want}, got {got} (verdict {rep['verdict']})"
