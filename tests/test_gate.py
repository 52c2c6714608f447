"""The evidence gate as a property: no rule can confirm anything; only smoke results can."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mldebug_rules.engine.compile import compile_kb
from mldebug_rules.engine.gate import apply_smokes
from mldebug_rules.engine.packs import load_packs
from mldebug_rules.engine.rank import rank
from mldebug_rules.engine.run import run_rules

KB = load_packs(entry_points=False)
COMPILED = compile_kb(KB)
SIGS = sorted(s.id for s in KB.signatures)
HYPS = sorted(KB.hypotheses)


@st.composite
def evidence(draw: st.DrawFn) -> list:
    facts = []
    for i in range(draw(st.integers(0, 8))):
        sid = draw(st.sampled_from(SIGS))
        sig = next(s for s in KB.signatures if s.id == sid)
        facts.append(
            KB.registry.make(
                "log.signature",
                {"signature": sig.id, "role": sig.role, "from_end": draw(st.integers(0, 100))},
                file="train.log",
                line=i + 1,
            )
        )
    if draw(st.booleans()):
        facts.append(KB.registry.make("kernel.oom_kill", {"pid": 7}, file="dmesg.txt", line=1))
    if draw(st.booleans()):
        facts.append(KB.registry.make("disk.usage", {"used_pct": draw(st.floats(0, 100))}, probe="disks"))
    return facts


def _diagnose(facts: list) -> object:
    res = run_rules(COMPILED, KB.registry, facts, "python")
    return apply_smokes(KB, rank(KB, res.firings, res.facts), facts)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(evidence())
def test_no_rule_confirms(facts: list) -> None:
    g = _diagnose(facts)
    assert g.verdict != "cause" and g.cause is None
    assert all(h.status == "hypothesis" for h in g.hypotheses)
    assert all(0.0 <= h.score <= 1.0 for h in g.hypotheses)
    assert [h.id for h in g.hypotheses] == [
        h.id for h in sorted(g.hypotheses, key=lambda h: (-h.score, h.id))
    ]


ROLES = ["baseline", "change", "record", ""]
CLASSES = ["passed", "reproduced", "failed_differently", "no_progress", "timed_out"]


def _smoke_fact(i: int, hid: str, role: str, cls: str, prog: str, variant: int, outcome: str) -> object:
    return KB.registry.make(
        "smoke.result",
        {
            "hypothesis": hid,
            "outcome": outcome if role == "record" else "inconclusive",
            "seq": i,
            "role": role,
            "classification": "" if role == "record" else cls,
            "program": prog,
            "smoke": KB.hypothesis_info(hid).get("smoke") or "",
        },
        origin="smoke",
        file=".mldebug/smokes.jsonl",
        line=i,
        extra={"command": f"{prog} --bs {variant}"},
    )


SMOKES = st.lists(
    st.tuples(
        st.sampled_from(HYPS),
        st.sampled_from(ROLES),
        st.sampled_from(CLASSES),
        st.sampled_from(["python a.py", "python b.py", "true"]),
        st.integers(0, 2),
        st.sampled_from(["confirmed", "refuted", "inconclusive"]),
    ),
    max_size=6,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(evidence(), SMOKES, st.booleans())
def test_only_smoke_pairs_decide(facts: list, smokes: list, trust: bool) -> None:
    """Whatever the state file holds, a hypothesis is confirmed only by a pair (a reproduced baseline, then a
    change of the same program with another argv that passed) or, when trusted, a recorded result; and only
    a hypothesis the evidence raised, or an alternative of a refuted one."""
    smoke_facts = [_smoke_fact(i, *t) for i, t in enumerate(smokes, 1)]
    res = run_rules(COMPILED, KB.registry, facts, "python")
    raised = {h.id: h for h in rank(KB, res.firings, res.facts)}
    g = apply_smokes(KB, rank(KB, res.firings, res.facts), facts + smoke_facts, trust_recorded=trust)
    refuted = {h.id for h in g.hypotheses if h.status == "refuted"}
    opened = {a for h in g.hypotheses if h.id in refuted for a in h.alternatives}
    for h in g.hypotheses:
        if h.status == "hypothesis":
            continue
        assert h.id in raised or h.id in opened, (h.id, h.status)
        if h.status != "confirmed":
            continue
        roles = {f.attrs["role"] for f in h.smoke_results}
        if "record" in roles:
            assert trust
            continue
        change = next(f for f in reversed(h.smoke_results) if f.attrs["role"] == "change")
        base = next(f for f in h.smoke_results if f.attrs["role"] == "baseline")
        assert change.attrs["classification"] in ("passed", "reproduced")
        assert base.attrs["classification"] == "reproduced" and base.attrs["seq"] < change.attrs["seq"]
        assert base.attrs["program"] == change.attrs["program"]
        assert base.extra["command"] != change.extra["command"]
    if not trust and not any(r == "change" and c in ("passed", "reproduced") for _, r, c, *_ in smokes):
        assert all(h.status == "hypothesis" for h in g.hypotheses)
    if g.verdict == "cause":
        assert g.hypotheses[0].status == "confirmed" and g.cause == g.hypotheses[0].id
    confirmed = [h for h in g.hypotheses if h.status == "confirmed"]
    if confirmed:
        assert g.verdict == "cause" and g.hypotheses[0].status == "confirmed"
    refuted_positions = [i for i, h in enumerate(g.hypotheses) if h.status == "refuted"]
    live_positions = [i for i, h in enumerate(g.hypotheses) if h.status != "refuted"]
    assert not refuted_positions or not live_positions or max(live_positions) < min(refuted_positions)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    evidence(),
    st.lists(st.tuples(st.sampled_from(HYPS), st.sampled_from(["confirmed", "refuted"])), max_size=4),
)
def test_trusted_records_decide_raised_hypotheses(facts: list, records: list) -> None:
    smoke_facts = [_smoke_fact(i, h, "record", "", "", 0, o) for i, (h, o) in enumerate(records, 1)]
    res = run_rules(COMPILED, KB.registry, facts, "python")
    raised = {h.id for h in rank(KB, res.firings, res.facts)}
    untrusted = apply_smokes(KB, rank(KB, res.firings, res.facts), facts + smoke_facts)
    assert all(h.status == "hypothesis" for h in untrusted.hypotheses)
    g = apply_smokes(KB, rank(KB, res.firings, res.facts), facts + smoke_facts, trust_recorded=True)
    last = {h: o for h, o in records}
    for h in g.hypotheses:
        if h.id in raised:
            assert h.status == last.get(h.id, "hypothesis"), (h.id, h.status)
