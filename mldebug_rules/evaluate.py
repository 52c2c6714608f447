"""``mldebug-rules eval CASES_DIR [LABELS_DIR]``: top-1 / top-3 accuracy of the diagnosis over labelled cases.

Labels come either from LABELS_DIR (one ``<case>.yaml`` per case: ``expected``, optional ``accept`` and
``difficulty``) or, when LABELS_DIR is omitted, from each case's own ``expected.yaml`` (``diagnosis``,
optional ``accept``, ``difficulty`` defaulting to ``fixture``). Every case is diagnosed in-process and
offline with one knowledge base. ``completed_normally`` counts as a hit when the verdict is ``no_failure``.

A ``blind.txt`` in CASES_DIR (one case name per line, ``#`` comments) marks the cases nobody may look at while
writing rules: the figures are reported for all cases, the non-blind ones and the blind ones, and the per-case
lines (misses, results) leave the blind cases out unless ``--show-blind`` is given. ``--subset`` evaluates only
the non-blind or the blind cases.

A ``fresh.txt`` beside it (same format) names the cases written after the rules they are measured against, by
people who write no rules: the round's honest measure of generalisation, reported as the ``fresh`` split. Each
round replaces the list, since fresh non-blind cases may be studied once the round's figures are taken.

A ``read-by-rule-authors.txt`` beside them lists the source URLs of threads that rule authors read while writing
rules (one a line, ``#`` comments). A blind case whose ``source`` is one of them is no longer blind to the rules
in fact, whatever its draw: the ``blind, unread`` split leaves such cases out.

Exit status: 0 whatever the accuracy; 2 for bad input (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .errors import UsageError

SCHEMA = "mldebug-rules/eval/v1"
NO_FAILURE_ID = "completed_normally"
_MAX_DEPTH = 4  # how deep expected.yaml files are looked for under CASES_DIR
BLIND_FILE = "blind.txt"
FRESH_FILE = "fresh.txt"
READ_FILE = "read-by-rule-authors.txt"
SUBSETS = ("all", "non-blind", "blind", "fresh")


@dataclass
class Case:
    name: str
    path: Path
    expected: str
    accept: list[str] = field(default_factory=list)
    difficulty: str = "fixture"
    blind: bool = False
    fresh: bool = False
    source: str = ""
    read: bool = False  # its source thread was read by rule authors (READ_FILE)


@dataclass
class Result:
    case: str
    expected: str
    accept: list[str]
    difficulty: str
    verdict: str | None
    got: list[str]
    top1: bool
    top3: bool
    error: str | None = None
    blind: bool = False
    fresh: bool = False
    read: bool = False


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{path}: cannot read ({getattr(e, 'strerror', None) or e})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(e, "problem", None) or "invalid YAML"
        raise UsageError(f"{where}: {problem}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: expected a mapping")
    return data


def _ids(value: Any, path: Path, key: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise UsageError(f"{path}: {key!r} must be an id or a list of ids")


def _case_from(data: dict[str, Any], path: Path, key: str, name: str, case_dir: Path) -> Case:
    expected = data.get(key)
    if not isinstance(expected, str) or not expected.strip():
        raise UsageError(f"{path}: missing {key!r} (the expected hypothesis id)")
    difficulty = data.get("difficulty", "fixture")
    return Case(
        name=name,
        path=case_dir,
        expected=expected.strip(),
        accept=_ids(data.get("accept"), path, "accept"),
        difficulty=str(difficulty) if difficulty is not None else "fixture",
        source=str(data.get("source") or "").strip(),
    )


def _find_expected(root: Path) -> list[Path]:
    out: list[Path] = []

    def walk(d: Path, depth: int) -> None:
        try:
            entries = sorted(d.iterdir())
        except OSError:
            return
        for e in entries:
            if e.name == "expected.yaml" and e.is_file():
                out.append(e)
        if depth >= _MAX_DEPTH:
            return
        for e in entries:
            if e.is_dir() and not e.is_symlink() and e.name not in (".git", ".mldebug", "__pycache__"):
                walk(e, depth + 1)

    walk(root, 0)
    return out


def read_case_list(cases_dir: Path, name: str) -> set[str]:
    """Case names listed in CASES_DIR/NAME (blind.txt, fresh.txt: one a line, # comments); empty without one."""
    path = cases_dir / name
    if not path.is_file():
        return set()
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{path}: cannot read ({getattr(e, 'strerror', None) or e})") from None
    return {ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")}


def load_cases(cases_dir: Path, labels_dir: Path | None) -> list[Case]:
    cases = _load_cases(cases_dir, labels_dir)
    blind = read_case_list(cases_dir, BLIND_FILE)
    fresh = read_case_list(cases_dir, FRESH_FILE)
    read = read_case_list(cases_dir, READ_FILE)
    for c in cases:
        c.blind = c.name in blind or c.path.name in blind
        c.fresh = c.name in fresh or c.path.name in fresh
        c.read = bool(c.source) and c.source in read
    return cases


def _load_cases(cases_dir: Path, labels_dir: Path | None) -> list[Case]:
    if not cases_dir.is_dir():
        raise UsageError(f"{cases_dir}: no such cases directory")
    cases: list[Case] = []
    if labels_dir is not None:
        if not labels_dir.is_dir():
            raise UsageError(f"{labels_dir}: no such labels directory")
        labels = sorted(p for p in labels_dir.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())
        if not labels:
            raise UsageError(f"{labels_dir}: no <case>.yaml labels")
        for lab in labels:
            case_dir = cases_dir / lab.stem
            if not case_dir.is_dir():
                raise UsageError(f"{lab}: no case directory {case_dir}")
            cases.append(_case_from(_read_yaml(lab), lab, "expected", lab.stem, case_dir))
        return cases
    for exp in _find_expected(cases_dir):
        case_dir = exp.parent
        name = case_dir.relative_to(cases_dir).as_posix() if case_dir != cases_dir else case_dir.name
        cases.append(_case_from(_read_yaml(exp), exp, "diagnosis", name, case_dir))
    if not cases:
        raise UsageError(f"{cases_dir}: no cases (no expected.yaml found; give LABELS_DIR)")
    return cases


def hit(ids: Sequence[str], verdict: str | None, case: Case) -> bool:
    """Whether a diagnosis that ranked ``ids`` (top-1 or top-3) with ``verdict`` scores on ``case``: its
    expected id or one it accepts is among them; for a healthy case, the verdict says "no_failure" (or an id the
    case accepts is among them: a run that completed with a wrong setting may accept config_error)."""
    fair = {case.expected, *case.accept}
    if case.expected == NO_FAILURE_ID:  # "nothing failed" is judged by the verdict, not by a listed id
        return verdict == "no_failure" or any(i in case.accept for i in ids)
    return any(i in fair for i in ids)


def evaluate(cases: Sequence[Case], rules_dirs: Sequence[Path] = ()) -> list[Result]:
    from . import report
    from .diagnose import Request, diagnose, load_kb

    kb = load_kb(Request(rules_dirs=list(rules_dirs), offline=True))
    results: list[Result] = []
    for c in cases:
        try:
            d = diagnose(Request(run_dirs=[c.path], rules_dirs=list(rules_dirs), offline=True), kb=kb)
            rep = report.build(d)
            got = [h["id"] for h in rep.get("hypotheses", [])]
            verdict, error = rep.get("verdict"), None
        except UsageError as e:
            got, verdict, error = [], None, str(e)
        except Exception as e:  # one broken case must not hide the others' figures
            got, verdict, error = [], None, f"{type(e).__name__}: {e}"
        results.append(
            Result(
                case=c.name,
                expected=c.expected,
                accept=list(c.accept),
                difficulty=c.difficulty,
                verdict=verdict,
                got=got[:3],
                top1=hit(got[:1], verdict, c),
                top3=hit(got[:3], verdict, c),
                error=error,
                blind=c.blind,
                fresh=c.fresh,
                read=c.read,
            )
        )
    return results


def _ratio(hits: int, total: int) -> dict[str, Any]:
    return {"hits": hits, "total": total, "accuracy": round(hits / total, 4) if total else 0.0}


def _figures(results: Sequence[Result]) -> dict[str, Any]:
    return {
        "cases": len(results),
        "top1": _ratio(sum(r.top1 for r in results), len(results)),
        "top3": _ratio(sum(r.top3 for r in results), len(results)),
    }


def summarize(results: Sequence[Result], show_blind: bool = False) -> dict[str, Any]:
    """Figures over every case, and per split when some are blind; per-case lines for the cases one may see
    (blind ones only with ``show_blind``)."""
    by: dict[str, list[Result]] = {}
    for r in results:
        by.setdefault(r.difficulty, []).append(r)
    shown = [r for r in results if show_blind or not r.blind]
    out: dict[str, Any] = {
        "schema": SCHEMA,
        **_figures(results),
        "by_difficulty": {k: _figures(v) for k, v in sorted(by.items())},
    }
    if any(r.blind for r in results):
        out["split"] = {
            "all": _figures(results),
            "non_blind": _figures([r for r in results if not r.blind]),
            "blind": _figures([r for r in results if r.blind]),
        }
        if any(r.blind and r.read for r in results):
            out["split"]["blind_unread"] = _figures([r for r in results if r.blind and not r.read])
        out["blind_details"] = "shown" if show_blind else "withheld"
    if any(r.fresh for r in results):
        out.setdefault("split", {"all": _figures(results)})["fresh"] = _figures(
            [r for r in results if r.fresh]
        )
    out["misses"] = [
        {
            "case": r.case,
            "expected": r.expected,
            "accept": r.accept,
            "difficulty": r.difficulty,
            "verdict": r.verdict,
            "got": r.got,
            "top3_hit": r.top3,
            **({"error": r.error} if r.error else {}),
            **({"blind": True} if r.blind else {}),
        }
        for r in shown
        if not r.top1
    ]
    out["results"] = [asdict(r) for r in shown]
    return out


def _pct(x: dict[str, Any]) -> str:
    return f"{x['hits']}/{x['total']} ({100 * x['accuracy']:.1f}%)"


def to_text(s: dict[str, Any]) -> str:
    lines = [f"cases: {s['cases']}   top-1: {_pct(s['top1'])}   top-3: {_pct(s['top3'])}", ""]
    lines.append("by difficulty:")
    for k, v in s["by_difficulty"].items():
        t1, t3 = _pct(v["top1"]), _pct(v["top3"])
        lines.append(f"  {k:12s} {v['cases']:4d} cases   top-1 {t1:>16s}   top-3 {t3:>16s}")
    if s.get("split"):
        lines.append("")
        lines.append("split:")
        for key, label in (
            ("all", "all"),
            ("non_blind", "non-blind"),
            ("blind", "blind"),
            ("blind_unread", "blind,unread"),
            ("fresh", "fresh"),
        ):
            if key not in s["split"]:
                continue
            v = s["split"][key]
            t1, t3 = _pct(v["top1"]), _pct(v["top3"])
            lines.append(f"  {label:12s} {v['cases']:4d} cases   top-1 {t1:>16s}   top-3 {t3:>16s}")
        if s.get("blind_details") == "withheld":
            lines.append("  (per-case lines below leave the blind cases out; --show-blind shows them)")
    lines.append("")
    if s["misses"]:
        lines.append(f"misses (top-1): {len(s['misses'])}")
        for m in s["misses"]:
            got = ", ".join(m["got"]) or "-"
            mark = " (in top-3)" if m["top3_hit"] else ""
            extra = f"  error: {m['error']}" if m.get("error") else ""
            lines.append(
                f"  {m['case']}: expected {m['expected']}, got [{got}] verdict {m['verdict']}{mark}{extra}"
            )
    else:
        lines.append("misses (top-1): none")
    return "\n".join(lines) + "\n"


def main(args: argparse.Namespace) -> int:
    cases = load_cases(Path(args.cases_dir), Path(args.labels_dir) if args.labels_dir else None)
    subset = getattr(args, "subset", "all")
    if subset == "non-blind":
        cases = [c for c in cases if not c.blind]
    elif subset == "blind":
        cases = [c for c in cases if c.blind]
    elif subset == "fresh":
        cases = [c for c in cases if c.fresh]
    rules = [Path(x) for x in getattr(args, "rules", [])]
    for r in rules:
        if not r.is_dir():
            raise UsageError(f"--rules {r}: no such pack directory")
    s = summarize(evaluate(cases, rules), show_blind=getattr(args, "show_blind", False))
    fmt = getattr(args, "format", "text")
    sys.stdout.write(json.dumps(s, indent=2, sort_keys=False) + "\n" if fmt == "json" else to_text(s))
    return 0
