"""Smokes have one home (``mldebug_rules/smokes/``): the collectors only read its state file, and a smoke's
outcomes are put into words in one module, for the report and ``smoke plan`` alike."""

from __future__ import annotations

import ast
from pathlib import Path

from mldebug_rules.smokes.outcomes import outcome_lines, outcome_table

REPO = Path(__file__).resolve().parents[1]
SOURCES = ("engine", "collectors", "mldebug_rules")
# A fixture encoder kept beside the reader it mirrors (tests and fixtures/curves_make.py write event files
# with it); no probe calls it.
WRITERS_ALLOWED = {("collectors/tfevents.py", "write_scalars")}
# (`.replace` and `.rename` are left out: on a str they are not writes; os.replace and os.rename count.)
_WRITE_METHODS = {"write_text", "write_bytes", "mkdir", "touch", "unlink", "rmdir", "symlink_to", "chmod"}
_WRITE_FUNCS = {
    "replace",
    "rename",
    "remove",
    "unlink",
    "makedirs",
    "mkdir",
    "rmdir",
    "truncate",
    "ftruncate",
}
_WRITE_FLAGS = {"O_CREAT", "O_WRONLY", "O_RDWR", "O_APPEND", "O_TRUNC"}


def _writes(path: Path) -> list[tuple[str, int]]:
    """(enclosing function, line) of every call that writes or changes the file system."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    out: list[tuple[str, int]] = []

    def visit(node: ast.AST, func: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            func = node.name
        if isinstance(node, ast.Call):
            fn = node.func
            name = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else ""
            owner = fn.value.id if isinstance(fn, ast.Attribute) and isinstance(fn.value, ast.Name) else ""
            flags = {n.attr for a in node.args for n in ast.walk(a) if isinstance(n, ast.Attribute)}
            modes = [
                a.value
                for a in [*node.args[1:2], *(k.value for k in node.keywords if k.arg == "mode")]
                if isinstance(a, ast.Constant) and isinstance(a.value, str)
            ]
            if (
                (name == "open" and owner != "os" and any(set(m) & set("wax+") for m in modes))
                or (name == "open" and owner == "os" and flags & _WRITE_FLAGS)
                or (
                    owner in ("os", "shutil")
                    and name in _WRITE_FUNCS | {"rmtree", "copy", "copyfile", "move"}
                )
                or (
                    isinstance(fn, ast.Attribute) and owner not in ("os", "shutil") and name in _WRITE_METHODS
                )
            ):
                out.append((func, node.lineno))
        for child in ast.iter_child_nodes(node):
            visit(child, func)

    visit(tree, "<module>")
    return out


def test_the_walk_finds_writes(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text(
        "import os\ndef a(p):\n    p.write_text('x')\ndef b(p):\n    open(p, 'a')\n"
        "def c(p):\n    os.open(p, os.O_WRONLY | os.O_CREAT)\ndef d(p):\n    open(p)\n    os.open(p, os.O_RDONLY)\n"
    )
    assert [fn for fn, _ in _writes(f)] == ["a", "b", "c"]


def test_collectors_only_read() -> None:
    found = [
        f"{rel}:{line} in {fn}"
        for path in sorted((REPO / "collectors").glob("*.py"))
        for fn, line in _writes(path)
        if (rel := str(path.relative_to(REPO))) and (rel, fn) not in WRITERS_ALLOWED
    ]
    assert not found, f"collectors must not write: {found}"


def test_the_smoke_state_file_is_written_by_the_smokes_package_only() -> None:
    writers = {
        str(p.relative_to(REPO))
        for folder in SOURCES
        for p in sorted((REPO / folder).rglob("*.py"))
        if "STATE_FILE" in p.read_text(encoding="utf-8") and _writes(p)
    }
    assert writers and all(w.startswith("mldebug_rules/smokes/") for w in writers), writers


def test_smoke_modules_live_in_the_smokes_package() -> None:
    stray = [
        str(p.relative_to(REPO))
        for folder in SOURCES
        for p in sorted((REPO / folder).glob("smoke*.py"))
        if str(p.relative_to(REPO)) != "collectors/smoke_state.py"  # the probe that reads the state file
    ]
    assert not stray, stray


def test_outcomes_are_worded_in_one_module() -> None:
    wording = [
        str(p.relative_to(REPO))
        for folder in SOURCES
        for p in sorted((REPO / folder).rglob("*.py"))
        if "if the change " in p.read_text(encoding="utf-8")
    ]
    assert wording == ["mldebug_rules/smokes/outcomes.py"], wording


def test_a_timeout_decides_nothing_and_is_said_once() -> None:
    spec = {
        "outcomes": {
            "passed": {"confirms": ["gpu_oom"], "refutes": [], "meaning": "it fits"},
            "timed_out": {"meaning": "inconclusive", "confirms": ["gpu_oom"]},
        }
    }
    lines = outcome_lines(outcome_table(spec), "")
    assert lines == [
        "if the change passed: confirms gpu_oom - it fits",
        "if the change timed_out: decides nothing",
    ]


def test_report_and_plan_show_the_same_outcomes(tmp_path: Path) -> None:
    import argparse

    from mldebug_rules import report
    from mldebug_rules.diagnose import Request, diagnose
    from mldebug_rules.smokes.plan import plan_data

    run = tmp_path / "run"
    run.mkdir()
    (run / "train.log").write_text(
        "step 1 loss 2.0\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
    )
    rep = report.build(diagnose(Request(run_dirs=[run], offline=True)))
    ns = argparse.Namespace(run_dir=str(run), hypothesis=None, cmd=None, timeout=600.0, rules=[])
    plan = plan_data(ns)
    in_report = {h["smoke"]["id"]: h["smoke"]["outcomes"] for h in rep["hypotheses"] if h.get("smoke")}
    in_plan = {s["id"]: s["outcomes"] for h in plan["hypotheses"] for s in h["smokes"]}
    shared = set(in_report) & set(in_plan)
    assert shared, (in_report, in_plan)
    assert all(in_report[s] == in_plan[s] for s in shared)
