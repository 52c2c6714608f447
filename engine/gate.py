"""The evidence gate: only smoke results move a hypothesis to ``confirmed`` or ``refuted``.

Rules cannot reach this: ``smoke.result`` facts may only have origin ``smoke`` (the fact registry refuses any
other), and the status is decided here in Python from those facts alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .facts import Fact
from .packs import KnowledgeBase
from .rank import Hypothesis, sort_hypotheses

VERDICTS = ("cause", "uncertain", "no_failure")


@dataclass
class GateResult:
    hypotheses: list[Hypothesis]
    verdict: str
    cause: str | None


def apply_smokes(kb: KnowledgeBase, hyps: list[Hypothesis], facts: Sequence[Fact]) -> GateResult:
    smoke_facts = sorted(
        (f for f in facts if f.kind == "smoke.result" and f.origin == "smoke"),
        key=lambda f: (f.attrs["seq"], f.key),
    )
    by_id = {h.id: h for h in hyps}
    for f in smoke_facts:
        hid = f.attrs["hypothesis"]
        outcome = f.attrs["outcome"]
        h = by_id.get(hid)
        if h is None:
            if outcome != "confirmed":
                continue
            # A smoke the user ran confirmed something no rule raised: the smoke is the evidence.
            info = kb.hypothesis_info(hid)
            h = Hypothesis(
                id=hid,
                score=0.0,
                role="root",
                failure=kb.is_failure(hid),
                rules=[],
                evidence=[],
                alternatives=list(info.get("alternatives", [])),
                smoke=f.attrs["smoke"] or info.get("smoke"),
                summary=info.get("title") or info.get("claim", hid),
            )
            by_id[hid] = h
            hyps.append(h)
        h.smoke_results.append(f)
        if outcome == "confirmed":
            h.status = "confirmed"
        elif outcome == "refuted":
            h.status = "refuted"
        # inconclusive (a timeout, a different failure) decides nothing
    ordered = sort_hypotheses(hyps)
    if ordered and ordered[0].status == "confirmed":
        return GateResult(ordered, "cause", ordered[0].id)
    live_failures = [h for h in ordered if h.failure and h.status != "refuted"]
    refuted = [h for h in ordered if h.status == "refuted"]
    if not live_failures and not refuted:
        return GateResult(ordered, "no_failure", None)
    return GateResult(ordered, "uncertain", None)


def claim_allowed(result: GateResult, claim: str) -> tuple[bool, Hypothesis | None]:
    for h in result.hypotheses:
        if h.id == claim:
            return h.status == "confirmed", h
    return False, None
