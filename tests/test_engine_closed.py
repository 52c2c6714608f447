"""engine/ is a closed core: it imports the standard library, yaml, cerberus, regex and its own backends,
never the collectors or the command line above it. What it needs from them (the cache, the probes) is
handed in. This walks every engine module's imports, relative ones included, so a shortcut upward fails
here rather than in a review."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ENGINE = Path(__file__).resolve().parents[1] / "engine"
# The installed package maps engine/ to mldebug_rules.engine, so `..` from an engine module is mldebug_rules.
PACKAGE = ("mldebug_rules", "engine")
FORBIDDEN = ("mldebug_rules", "collectors")
ALLOWED_ROOTS = ("mldebug_rules.engine",)


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """Every module an engine file imports, as an absolute dotted name (relative imports resolved)."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(PACKAGE[: len(PACKAGE) - (node.level - 1)]) if node.level <= len(PACKAGE) else []
                head = ".".join([*base, *([node.module] if node.module else [])]) or "."
                # `from .. import cache` imports the module mldebug_rules.cache, not a name of mldebug_rules.
                out += [(node.lineno, f"{head}.{a.name}") for a in node.names] if not node.module else []
                out.append((node.lineno, head))
            else:
                out.append((node.lineno, node.module or ""))
        elif isinstance(node, ast.Call):  # importlib.import_module("...") / __import__("...")
            fn = node.func
            name = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else ""
            if name in ("import_module", "__import__") and node.args:
                arg = node.args[0]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    out.append((node.lineno, arg.value))
    return out


def upward(module: str) -> bool:
    if any(module == a or module.startswith(a + ".") for a in ALLOWED_ROOTS):
        return False
    return any(module == f or module.startswith(f + ".") for f in FORBIDDEN)


def test_the_walker_sees_relative_and_absolute_imports(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text(
        "from .. import cache\nfrom ..collectors.logscan import Scanner\nimport mldebug_rules.report\n"
        "from .facts import Fact\nimport importlib\nimportlib.import_module('collectors.logs')\n"
        "def late():\n    from ..diagnose import diagnose\n"
    )
    found = {m for _, m in imported_modules(f) if upward(m)}
    assert found == {
        "mldebug_rules",
        "mldebug_rules.cache",
        "mldebug_rules.collectors.logscan",
        "mldebug_rules.report",
        "collectors.logs",
        "mldebug_rules.diagnose",
    }
    assert not upward("mldebug_rules.engine.facts")


@pytest.mark.parametrize("path", sorted(ENGINE.glob("*.py")), ids=lambda p: p.name)
def test_engine_imports_nothing_above_it(path: Path) -> None:
    bad = [f"{path.name}:{line}: {mod}" for line, mod in imported_modules(path) if upward(mod)]
    assert not bad, "engine/ must not import collectors/ or mldebug_rules/: " + "; ".join(bad)
