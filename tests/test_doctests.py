"""The examples in the package's docstrings run, so they stay true: a doctest nobody runs goes stale (one in
collectors/trends.py did)."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The source folders and the package names setuptools maps them to (pyproject.toml's package-dir).
FOLDERS = {
    "collectors": "mldebug_rules.collectors",
    "engine": "mldebug_rules.engine",
    "mldebug_rules": "mldebug_rules",
    "mldebug_rules/smokes": "mldebug_rules.smokes",
}
MODULES = sorted(
    f"{pkg}.{path.stem}"
    for folder, pkg in FOLDERS.items()
    for path in (ROOT / folder).glob("*.py")
    if path.stem != "__main__" and ">>> " in path.read_text(encoding="utf-8")
)


def test_modules_with_examples_are_found() -> None:
    assert len(MODULES) >= 20, MODULES


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, (
        f"{name}: {result.failed} of {result.attempted} examples failed (see the output)"
    )
