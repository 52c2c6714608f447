"""Shared test fixtures. One KnowledgeBase and one durable-rules Host per test session (the Host's threads
never stop, and a ruleset name registers once per process)."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from mldebug_rules.engine.packs import KnowledgeBase, load_packs

from mldebug_rules import report
from mldebug_rules.diagnose import Request, diagnose

# The tests (and the CLI processes they start) get a cache of their own, not the user's ~/.cache.
os.environ.setdefault("MLDEBUG_CACHE_DIR", tempfile.mkdtemp(prefix="mldebug-test-cache-"))

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "fixtures"


@pytest.fixture(scope="session")
def kb() -> KnowledgeBase:
    return load_packs(entry_points=False)


def make_run_dir(root: Path, files: Mapping[str, str | bytes]) -> Path:
    for rel, content in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content, encoding="utf-8")
    return root


@pytest.fixture
def diagnose_files(tmp_path: Path, kb: KnowledgeBase) -> Callable[..., dict[str, Any]]:
    """Write files into a fresh run directory, diagnose it offline, return the JSON report as a dict."""

    def run(files: Mapping[str, str | bytes], **kw: Any) -> dict[str, Any]:
        run_dir = make_run_dir(tmp_path / "run", files)
        d = diagnose(
            Request(run_dirs=[run_dir], offline=True, **kw), kb=kb if not kw.get("rules_dirs") else None
        )
        return json.loads(report.to_json(report.build(d)))

    return run


def diagnose_dir(path: Path, kb: KnowledgeBase | None = None, **kw: Any) -> dict[str, Any]:
    d = diagnose(Request(run_dirs=[path], offline=True, **kw), kb=kb)
    return json.loads(report.to_json(report.build(d)))


def top_id(rep: Mapping[str, Any]) -> str | None:
    return rep["hypotheses"][0]["id"] if rep["hypotheses"] else None
