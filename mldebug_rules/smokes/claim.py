"""``gate RUN_DIR --claim ID``: exit 0 only if the claimed hypothesis is smoke-confirmed; otherwise say what is
missing and the pair that would settle it.
"""

from __future__ import annotations

import argparse
import shlex
from typing import Any

from ..diagnose import diagnose
from ..engine.gate import claim_allowed
from ..engine.rank import Hypothesis
from .common import (
    MISSING_HALF,
    check_hypothesis,
    concrete_recipe,
    pair_state,
    request_for,
    run_dir_path,
    smoke_record_cmd,
    smoke_run_cmd,
    smokes_for,
)
from .outcomes import pair_lines
from .recipe import apply_recipe, conditions_of, find_command


def _last_decisive(h: Hypothesis) -> Any:
    """The smoke result that set the status (the change of the deciding pair, or a trusted record)."""
    return next((f for f in reversed(h.smoke_results) if f.attrs.get("role") in ("change", "record")), None)


def gate_check(args: argparse.Namespace) -> dict[str, Any]:
    """The gate's decision as data: passed, the hypothesis' status, the missing half of its pair (None when
    a pair decided it), its pairs, and the explanation `gate` prints (its first line is the verdict)."""
    run_dir = run_dir_path(args.run_dir)
    trust = bool(getattr(args, "trust_recorded", False))
    d = diagnose(request_for(run_dir, args, trust_recorded=trust))
    g = d.gate
    claim = check_hypothesis(d.kb, args.claim, "--claim")
    allowed, h = claim_allowed(g, claim)
    lines: list[str] = []
    state = pair_state(g, claim)
    out: dict[str, Any] = {
        "claim": claim,
        "passed": bool(allowed and h is not None),
        "status": h.status if h else "not raised",
        "missing": None if allowed else state["missing"],
        "pairs": state["pairs"],
        "lines": lines,
    }
    if allowed and h is not None:
        last = _last_decisive(h)
        how = (
            "a hand-recorded result (trusted)"
            if last is not None and last.attrs.get("role") == "record"
            else ("a smoke pair")
        )
        via = f" by {how}, {last.source}" if last is not None else ""
        lines.append(f"gate: PASS: {claim} is smoke-confirmed{via}")
        out["reason"] = f"{claim} is smoke-confirmed{via}"
        return out
    lines.append(f"gate: FAIL: {claim} is not smoke-confirmed; do not claim it as the cause yet")
    if claim in g.not_decided:
        lines.append(f"  a smoke result for it was not counted: {g.not_decided[claim]}")
    if h is None:
        lines.append(f"  missing: nothing in {args.run_dir} raised {claim}, and no smoke pair confirmed it")
    elif h.status == "refuted":
        last = _last_decisive(h)
        lines.append(
            f"  refuted by a smoke ({last.source if last is not None else 'state file'}); look elsewhere"
        )
    else:
        cites = ", ".join(f.source for f in h.evidence[:3]) or "none"
        lines.append(f"  status: hypothesis (score {h.score:.2f}; evidence {cites})")
    hand = [r for r in g.recorded if r.hypothesis == claim and r.outcome == "confirmed"]
    if hand and not trust:
        lines.append(
            f"  recorded by hand as confirmed ({', '.join(r.source for r in hand)}), which the gate counts only "
            "with --trust-recorded"
        )
    for pr in state["pairs"]:
        lines.extend(pair_lines(pr, "  "))
    if state["missing"] and (h is None or h.status == "hypothesis"):
        lines.append(f"  missing: {MISSING_HALF[state['missing']]}")
    confirmed = [x.id for x in g.hypotheses if x.status == "confirmed" and x.id != claim]
    if confirmed:
        lines.append(f"  smoke-confirmed instead: {', '.join(confirmed)}")
    sids = smokes_for(d.kb, claim, h)
    if sids:
        spec = d.kb.smokes[sids[0]]
        found = find_command(run_dir, None)
        if found is not None and found.review:  # never suggest running what needs a human's review
            found = None
        recipe, _ = concrete_recipe(d, args.run_dir, spec)
        base = apply_recipe(found.argv, conditions_of(recipe)).argv if found else None
        change = apply_recipe(found.argv, recipe).argv if found else None
        lines.append(f"  settle it with smoke {sids[0]}: {spec['description']}")
        lines.append(
            f"    1. baseline: {smoke_run_cmd(args.run_dir, claim, sids[0], True, 600.0, base, baseline=True)}"
        )
        lines.append(f"    2. change:   {smoke_run_cmd(args.run_dir, claim, sids[0], True, 600.0, change)}")
    else:
        hint = d.kb.taxonomy.get(claim, {}).get("smoke")
        lines.append(
            f"  no smoke is declared for it in the packs; suggested check: {hint or 'a discriminating check'}"
        )
        lines.append(
            f"    run it as a pair: smoke run {shlex.quote(args.run_dir)} --hypothesis {claim} --baseline -- "
            "COMMAND, then the changed command"
        )
    lines.append(
        f"    a check run by hand (counted only with --trust-recorded): {smoke_record_cmd(args.run_dir, claim)}"
    )
    # The first line after the verdict says why: not counted, not raised, refuted, or still a hypothesis.
    out["reason"] = lines[1].strip()
    return out
