"""Pack test cases (``<name>.test.yaml``): inputs in, expected hypotheses out, like ``promtool test rules``.

Each case runs the whole offline pipeline (scanner, collectors, engine, ranking, gate) on a temporary run
directory, so a pack's tests exercise its signatures and rules exactly as ``diagnose`` does. That is why this
lives in the face, beside ``diagnose``, and not in the engine (which may not import the collectors).
"""

from __future__ import annotations

import copy
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

import cerberus

from .collectors.registry import default_probes
from .diagnose import Request, diagnose
from .engine.packs import KnowledgeBase, PackError, PackInfo, coerce_param
from .engine.yamlload import line_of, load_file

CASE_SCHEMA: dict[str, Any] = {
    "cases": {
        "type": "list",
        "required": True,
        "schema": {
            "type": "dict",
            "schema": {
                "name": {"type": "string", "required": True},
                "log": {"type": "string"},
                "files": {"type": "dict", "valuesrules": {"type": "string"}},
                "run_dir": {"type": "string"},
                "facts": {"type": "list", "schema": {"type": "dict"}},
                "smokes": {"type": "list", "schema": {"type": "dict"}},
                "params": {"type": "dict"},
                "expect": {
                    "type": "dict",
                    "required": True,
                    "schema": {
                        "top": {"type": "string", "nullable": True},
                        "verdict": {"type": "string", "allowed": ["cause", "uncertain", "no_failure"]},
                        "includes": {"type": "list", "schema": {"type": "string"}},
                        "excludes": {"type": "list", "schema": {"type": "string"}},
                        "order": {"type": "list", "schema": {"type": "string"}},
                        "cites": {"type": "list", "schema": {"type": "string"}},
                    },
                },
            },
        },
    }
}


@dataclass
class CaseResult:
    name: str
    where: str
    ok: bool
    diff: list[str] = field(default_factory=list)


def load_cases(path: Path) -> list[tuple[int, dict[str, Any]]]:
    raw = load_file(path)
    v = cerberus.Validator(CASE_SCHEMA)
    if not isinstance(raw, dict) or not v.validate(raw):
        err = v.errors if isinstance(raw, dict) else {"cases": ["expected a mapping with `cases`"]}
        raise PackError(str(path), line_of(raw, ("cases",)), f"invalid test file: {err}")
    return [(line_of(raw, ("cases", i)), c) for i, c in enumerate(v.document["cases"])]


def run_case(kb: KnowledgeBase, path: Path, case: dict[str, Any], engine: str | None = None) -> list[str]:
    """The differences between expected and actual (empty: the case passes)."""

    case_kb = kb
    if case.get("params"):
        case_kb = copy.copy(kb)
        case_kb.params = dict(kb.params)
        for k, val in case["params"].items():
            if k not in kb.params:
                return [f"unknown parameter {k!r}"]
            case_kb.params[k] = coerce_param(kb.params[k], val, k)
    extra = []
    for f in case.get("facts", []):
        extra.append(
            kb.registry.make(
                f["kind"],
                f.get("attrs", {}),
                file=f.get("file", ""),
                line=int(f.get("line", 0)),
                probe=f.get("probe", "test"),
                text=f.get("text", ""),
                rank=f.get("rank"),
                host=f.get("host", ""),
                ts=f.get("ts"),
            )
        )
    for i, s in enumerate(case.get("smokes", []), 1):
        extra.append(
            kb.registry.make(
                "smoke.result",
                {
                    "hypothesis": s["hypothesis"],
                    "outcome": s["outcome"],
                    "smoke": s.get("smoke", ""),
                    "seq": i,
                    # A case's smoke result stands for one the author obtained and checked: a trusted
                    # record (the diagnosis below trusts records), not a pair the gate would rebuild.
                    "role": "record",
                },
                origin="smoke",
                file=".mldebug/smokes.jsonl",
                line=i,
            )
        )
    with tempfile.TemporaryDirectory(prefix="mldebug-ruletest-") as tmp:
        run_dirs: list[Path] = []
        if case.get("run_dir"):
            run_dirs.append((path.parent / case["run_dir"]).resolve())
        if case.get("log") is not None or case.get("files"):
            d = Path(tmp) / "run"
            d.mkdir()
            if case.get("log") is not None:
                (d / "train.log").write_text(case["log"], encoding="utf-8")
            for rel, content in (case.get("files") or {}).items():
                _write_inside(d, rel, content, str(path))
            run_dirs.append(d)
        if not run_dirs:
            run_dirs.append(Path(tmp))
        probes = default_probes(live=False)
        d = diagnose(
            Request(run_dirs=run_dirs, offline=True, engine=engine, options={"trust_recorded": True}),
            kb=case_kb,
            probes=probes,
            extra_facts=extra,
        )
    return compare(case["expect"], d)


def _write_inside(root: Path, rel: str, content: str, where: str) -> None:
    """Write one test file under `root`, refusing any path that could land outside it.

    A pack is third-party code's data: its test cases must not write anywhere else on disk. Absolute paths
    and ``..`` are refused outright; a symlink on the way (none is made here, but the check is cheap) is
    caught by resolving the parent and requiring it to stay under `root`."""
    pure = PurePosixPath(rel.replace("\\", "/"))
    if not rel or pure.is_absolute() or PureWindowsPath(rel).drive or ".." in pure.parts:
        raise PackError(where, 0, f"files: {rel!r}: must be a relative path inside the case's run directory")
    root_real = root.resolve()
    target = root.joinpath(*pure.parts)
    target.parent.mkdir(parents=True, exist_ok=True)
    parent_real = target.parent.resolve()
    if parent_real != root_real and root_real not in parent_real.parents:
        raise PackError(where, 0, f"files: {rel!r}: leaves the case's run directory")
    # O_NOFOLLOW: a symlink already standing at the final component is not followed out of the directory.
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(content)


def compare(expect: dict[str, Any], d: Any) -> list[str]:
    hyps = d.gate.hypotheses
    ids = [h.id for h in hyps]
    diff: list[str] = []
    if "top" in expect:
        top = ids[0] if ids else None
        if top != expect["top"]:
            diff.append(f"top: expected {expect['top']!r}, got {top!r} (ranked: {_ranked(hyps)})")
    if "verdict" in expect and d.gate.verdict != expect["verdict"]:
        diff.append(f"verdict: expected {expect['verdict']!r}, got {d.gate.verdict!r}")
    for h in expect.get("includes", []):
        if h not in ids:
            diff.append(f"includes: {h!r} missing (ranked: {_ranked(hyps)})")
    for h in expect.get("excludes", []):
        if h in ids:
            diff.append(f"excludes: {h!r} present at rank {ids.index(h) + 1}")
    order = expect.get("order", [])
    if order:
        positions = [ids.index(h) if h in ids else -1 for h in order]
        if -1 in positions or positions != sorted(positions):
            diff.append(f"order: expected {order}, got {[h for h in ids if h in order]}")
    if expect.get("cites") and hyps:
        sources = {f.source for f in hyps[0].evidence}
        for c in expect["cites"]:
            if c not in sources:
                diff.append(f"cites: {c!r} not cited by {hyps[0].id} (cited: {sorted(sources)})")
    return diff


def _ranked(hyps: list[Any]) -> str:
    return ", ".join(f"{h.id}={h.score:.2f}" for h in hyps[:5]) or "none"


def run_pack_tests(kb: KnowledgeBase, pack: PackInfo, engine: str | None = None) -> Iterator[CaseResult]:
    for test_file in sorted(pack.tests):
        path = Path(test_file)
        try:
            cases = load_cases(path)
        except (PackError, ValueError) as e:
            yield CaseResult("(test file)", str(path), False, [str(e)])
            continue
        for line, case in cases:
            try:
                diff = run_case(kb, path, case, engine)
            except Exception as e:  # a case that crashes the pipeline is a failing case, with the reason
                diff = [f"error: {type(e).__name__}: {e}"]
            yield CaseResult(case["name"], f"{path}:{line}", not diff, diff)
