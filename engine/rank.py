"""Rank hypotheses: scores in [0, 1] from rule weights, roots above the cascades they explain.

- Each rule counts once per hypothesis (its strongest firing); independent rules combine by noisy-OR.
- A hypothesis resting only on cascade evidence (watchdog timeouts, "worker exited unexpectedly") is a
  consequence: when a root hypothesis exists it is discounted and listed as explained by that root.
- A firing may name hypotheses it ``explains``; those are capped below it. When two hypotheses explain each
  other, the more specific firing (more joined facts) decides, whatever order the firings came in.
- A rule may derive ``ruled_out`` facts: a hypothesis ruled out that way is not listed (a process that is
  still printing is not hung, however long another of its logs has been silent).
- Ties break on the id, so the order is deterministic.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .facts import Fact
from .packs import KnowledgeBase
from .run import Firing

CASCADE_DISCOUNT = 0.5
EXPLAINED_CAP = 0.8
STATUS_ORDER = {"confirmed": 0, "hypothesis": 1, "refuted": 2}


@dataclass
class Hypothesis:
    id: str
    score: float
    role: str
    failure: bool
    rules: list[str]
    evidence: list[Fact]
    alternatives: list[str]
    smoke: str | None
    summary: str
    status: str = "hypothesis"
    explained_by: list[str] = field(default_factory=list)
    smoke_results: list[Fact] = field(default_factory=list)


def _noisy_or(weights: Sequence[float]) -> float:
    p = 1.0
    for w in weights:
        p *= 1.0 - max(0.0, min(1.0, w))
    return 1.0 - p


def _evidence_order(f: Fact) -> tuple[object, ...]:
    # On one line, the signature (the wording that matched) comes before other views of it (an exception fact).
    return (f.file == "", f.file, f.line, f.source, f.kind != "log.signature", f.key)


def _distinct(facts: list[Fact]) -> list[Fact]:
    """One piece of evidence per quoted line: a signature and the exception parsed from the same line quote
    the same text."""
    seen: set[tuple[str, str]] = set()
    out = []
    for f in facts:
        mark = (f.source, f.text)
        if f.text and mark in seen:
            continue
        seen.add(mark)
        out.append(f)
    return out


def rank(kb: KnowledgeBase, firings: Sequence[Firing], facts: Mapping[str, Fact]) -> list[Hypothesis]:
    ruled_out = {str(f.attrs.get("hyp")) for f in facts.values() if f.kind == "ruled_out"}
    by_hyp: dict[str, list[Firing]] = defaultdict(list)
    for f in firings:
        if f.hypothesis not in ruled_out:
            by_hyp[f.hypothesis].append(f)
    hyps: dict[str, Hypothesis] = {}
    for hid, fs in by_hyp.items():
        per_rule: dict[str, float] = {}
        for f in fs:
            per_rule[f.rule] = max(per_rule.get(f.rule, 0.0), f.weight)
        info = kb.hypothesis_info(hid)
        best = max(fs, key=lambda f: (f.weight, f.role == "root", f.rule))
        evidence = _distinct(
            sorted({k: facts[k] for f in fs for k in f.cites if k in facts}.values(), key=_evidence_order)
        )
        hyps[hid] = Hypothesis(
            id=hid,
            score=_noisy_or(list(per_rule.values())),
            role=next((r for r in ("root", "cascade") if any(f.role == r for f in fs)), "context"),
            failure=kb.is_failure(hid),
            rules=sorted(per_rule),
            evidence=evidence,
            alternatives=list(best.alternatives or info.get("alternatives", [])),
            smoke=best.smoke or info.get("smoke"),
            summary=best.summary,
        )
    roots = [h for h in hyps.values() if h.role == "root" and h.failure]
    for h in hyps.values():
        if h.role == "cascade" and roots:
            h.score *= CASCADE_DISCOUNT
            h.explained_by = sorted(r.id for r in roots)
    _apply_explains(kb, firings, hyps)
    for h in hyps.values():
        h.score = round(h.score, 4)
    return sort_hypotheses(list(hyps.values()))


def _apply_explains(kb: KnowledgeBase, firings: Sequence[Firing], hyps: dict[str, Hypothesis]) -> None:
    """Cap each explained hypothesis below the one that explains it.

    Two hypotheses may explain each other (a native crash explains a peer's watchdog timeout; the watchdog's own
    abort after a timeout is no native crash). The more specific firing decides, as in OPS5's conflict
    resolution: the one whose rule joins more facts, then the heavier, then the rule id. Once A has explained B,
    B no longer explains A. Firings are applied in that order, never in firing order, so the ranking does not
    depend on which backend ran or on the order facts arrived in.
    """
    joins = {r.id: len(r.spec.get("when") or {}) for r in kb.rules}
    explaining = [f for f in firings if f.explains and f.hypothesis in hyps]
    explaining.sort(
        key=lambda f: (-joins.get(f.rule, 1), -f.weight, -hyps[f.hypothesis].score, f.rule, f.hypothesis)
    )
    applied: set[tuple[str, str]] = set()
    for f in explaining:
        source = hyps[f.hypothesis]
        for target in f.explains:
            t = hyps.get(target)
            if t is None or t.id == source.id or (t.id, source.id) in applied:
                continue
            applied.add((source.id, t.id))
            t.score = min(t.score, source.score * EXPLAINED_CAP)
            if source.id not in t.explained_by:
                t.explained_by = sorted([*t.explained_by, source.id])
            # A rule that names what it explains overrides the generic "cascades follow any root" reading.
            source.explained_by = [e for e in source.explained_by if e != t.id]


def sort_hypotheses(hyps: list[Hypothesis]) -> list[Hypothesis]:
    return sorted(hyps, key=lambda h: (STATUS_ORDER[h.status], -h.score, h.id))
