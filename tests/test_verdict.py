"""The verdict has one home: engine/gate.py decides it (``decide``, through ``apply_smokes``), from the
hypotheses' statuses and what the probes could read; every other module only renders it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from mldebug_rules.engine.facts import FactRegistry
from mldebug_rules.engine.gate import Coverage, decide
from mldebug_rules.engine.rank import Hypothesis

REPO = Path(__file__).resolve().parents[1]
REG = FactRegistry.load()
TRACEBACK = REG.make("log.tail", {"traceback": True}, file="train.log", line=40)


def hyp(hid: str = "gpu_oom", status: str = "hypothesis", failure: bool = True) -> Hypothesis:
    return Hypothesis(hid, 0.5, "root", failure, [], [], [], None, hid, status=status)


@pytest.mark.parametrize(
    ("hyps", "coverage", "expected"),
    [
        ([hyp(status="confirmed")], Coverage(evidence_seen=False), ("cause", "gpu_oom")),
        ([hyp()], Coverage(), ("uncertain", None)),
        ([hyp(status="refuted")], Coverage(), ("uncertain", None)),
        ([], Coverage(), ("no_failure", None)),
        ([hyp("completed_normally", failure=False)], Coverage(), ("no_failure", None)),
        ([], Coverage(evidence_seen=False), ("uncertain", None)),  # nothing read is not a healthy run
        ([], Coverage(blocked=True), ("uncertain", None)),  # a named input held nothing to read
        ([], Coverage(skipped=True), ("uncertain", None)),  # input passed over may hold the failure
        ([], Coverage(unexplained=(TRACEBACK,)), ("uncertain", None)),
    ],
)
def test_decide(hyps: list[Hypothesis], coverage: Coverage, expected: tuple[str, str | None]) -> None:
    verdict, cause, _ = decide(hyps, coverage)
    assert (verdict, cause) == expected


def test_unexplained_evidence_is_kept_only_when_it_held_back_no_failure() -> None:
    assert decide([], Coverage(unexplained=(TRACEBACK,)))[2] == [TRACEBACK]
    # Already uncertain for another reason: the traceback is not what the verdict rests on.
    assert decide([hyp()], Coverage(unexplained=(TRACEBACK,)))[2] == []
    assert decide([], Coverage(skipped=True, unexplained=(TRACEBACK,)))[2] == []


def _verdict_writes(path: Path, root: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, (ast.AugAssign, ast.AnnAssign))
            else []
        )
        for t in targets:
            for el in t.elts if isinstance(t, ast.Tuple) else [t]:
                if isinstance(el, ast.Attribute) and el.attr in ("verdict", "cause"):
                    out.append(f"{path.relative_to(root)}:{node.lineno}: .{el.attr} =")
    return out


def test_the_walk_finds_verdict_writes(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text("def f(d):\n    d.gate.verdict = 'uncertain'\n    g.verdict, g.cause = 'cause', 'x'\n")
    assert [w.split(": ", 1)[1] for w in _verdict_writes(f, tmp_path)] == [
        ".verdict =",
        ".verdict =",
        ".cause =",
    ]


def test_no_module_but_the_gate_writes_the_verdict() -> None:
    writes = []
    for folder in ("engine", "collectors", "mldebug_rules"):
        for path in sorted((REPO / folder).rglob("*.py")):
            writes += _verdict_writes(path, REPO)
    assert writes, "the gate itself must be found writing the verdict (else the walk is broken)"
    assert all(w.startswith("engine/gate.py:") for w in writes), writes
