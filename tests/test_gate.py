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


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    evidence(),
    st.lists(
        st.tuples(st.sampled_from(HYPS), st.sampled_from(["confirmed", "refuted", "inconclusive"])),
        max_size=4,
    ),
)
def test_only_smokes_decide(facts: list, smokes: list) -> None:
    smoke_facts = [
        KB.registry.make(
            "smoke.result",
            {"hypothesis": h, "outcome": o, "seq": i},
            origin="smoke",
            file=".mldebug/smokes.jsonl",
            line=i,
        )
        for i, (h, o) in enumerate(smokes, 1)
    ]
    g = _diagnose(facts + smoke_facts)
    last: dict[str, str] = {}
    for h, o in smokes:
        if o != "inconclusive":
            last[h] = o
    for h in g.hypotheses:
        expected = last.get(h.id, "hypothesis")
        assert h.status == expected, (h.id, h.status, expected)
    if g.verdict == "cause":
        assert g.hypotheses[0].status == "confirmed" and g.cause == g.hypotheses[0].id
    confirmed = [h for h in g.hypotheses if h.status == "confirmed"]
    if confirmed:
        assert g.verdict == "cause" and g.hypotheses[0].status == "confirmed"
    refuted_positions = [i for i, h in enumerate(g.hypotheses) if h.status == "refuted"]
    live_positions = [i for i, h in enumerate(g.hypotheses) if h.status != "refuted"]
    assert not refuted_positions or not live_positions or max(live_positions) < min(refuted_positions)
