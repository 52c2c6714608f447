"""`explains` caps: the ranking must not depend on the order firings arrive in, and when two hypotheses explain
each other the more specific rule (more joined facts) decides."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from mldebug_rules.engine.facts import FactRegistry
from mldebug_rules.engine.packs import KnowledgeBase, Rule
from mldebug_rules.engine.rank import EXPLAINED_CAP, rank
from mldebug_rules.engine.run import Firing

HYPS = ["aa", "bb", "cc", "dd"]


def _kb(joins: dict[str, int]) -> KnowledgeBase:
    rules = [
        Rule(
            id=rid,
            pack="t",
            spec={"when": {f"p{i}": {"kind": "log.signature"} for i in range(n)}},
            where="",
            path="",
            line=0,
        )
        for rid, n in joins.items()
    ]
    taxonomy = {h: {"claim": h} for h in HYPS}
    return KnowledgeBase(registry=FactRegistry.load(), taxonomy=taxonomy, rules=rules)


def _firing(rule: str, hyp: str, weight: float, role: str = "root", explains: tuple[str, ...] = ()) -> Firing:
    return Firing(
        rule=rule,
        hypothesis=hyp,
        weight=weight,
        role=role,
        cites=(),
        explains=explains,
        alternatives=(),
        smoke=None,
        summary="",
    )


def _outcome(kb: KnowledgeBase, firings: list[Firing]) -> list[tuple[str, float, tuple[str, ...]]]:
    return [(h.id, h.score, tuple(h.explained_by)) for h in rank(kb, firings, {})]


def test_mutual_explains_the_more_specific_rule_decides_in_either_order() -> None:
    # A one-fact rule says a native crash explains a peer failure; a two-fact rule (the abort came after the
    # watchdog timeout) says the peer failure explains the abort. The two-fact rule wins, whatever the order.
    kb = _kb({"t.crash": 1, "t.abort_after_timeout": 2})
    crash = _firing("t.crash", "aa", 0.8, explains=("bb",))
    abort = _firing("t.abort_after_timeout", "bb", 0.6, explains=("aa",))
    forward, backward = _outcome(kb, [crash, abort]), _outcome(kb, [abort, crash])
    assert forward == backward
    assert [h for h, _, _ in forward] == ["bb", "aa"]
    by_id = {h: (score, by) for h, score, by in forward}
    assert by_id["aa"] == (round(0.6 * EXPLAINED_CAP, 4), ("bb",))
    assert by_id["bb"][1] == ()  # never "explained by" what it explains


def test_explicit_explains_overrides_the_cascade_default() -> None:
    # A cascade is discounted and listed as explained by every root; a rule that names the root as its own
    # consequence drops that contradiction.
    kb = _kb({"t.crash": 1, "t.abort_after_timeout": 2})
    crash = _firing("t.crash", "aa", 0.8)
    abort = _firing("t.abort_after_timeout", "bb", 0.6, role="cascade", explains=("aa",))
    out = {h: by for h, _, by in _outcome(kb, [crash, abort])}
    assert out == {"bb": (), "aa": ("bb",)}


def test_a_chain_caps_from_the_already_capped_score() -> None:
    kb = _kb({"t.a": 3, "t.b": 2, "t.c": 1})
    fs = [
        _firing("t.c", "cc", 0.9),
        _firing("t.b", "bb", 0.9, explains=("cc",)),
        _firing("t.a", "aa", 0.5, explains=("bb",)),
    ]
    scores = {h: s for h, s, _ in _outcome(kb, fs)}
    assert scores["bb"] == round(0.5 * EXPLAINED_CAP, 4)
    assert scores["cc"] == round(0.5 * EXPLAINED_CAP * EXPLAINED_CAP, 4)


_firings = st.lists(
    st.tuples(
        st.sampled_from(["t.r1", "t.r2", "t.r3", "t.r4", "t.r5"]),
        st.sampled_from(HYPS),
        st.sampled_from([0.3, 0.5, 0.6, 0.8, 0.9]),
        st.sampled_from(["root", "cascade", "context"]),
        st.lists(st.sampled_from(HYPS), max_size=2, unique=True),
    ),
    min_size=1,
    max_size=8,
    unique_by=lambda t: (t[0], t[1]),
)


@settings(max_examples=200, deadline=None)
@given(_firings, st.randoms(use_true_random=False))
def test_ranking_never_depends_on_firing_order(spec: list, rnd) -> None:  # type: ignore[no-untyped-def]
    kb = _kb({"t.r1": 1, "t.r2": 2, "t.r3": 1, "t.r4": 3, "t.r5": 2})
    firings = [_firing(r, h, w, role, tuple(e)) for r, h, w, role, e in spec]
    shuffled = list(firings)
    rnd.shuffle(shuffled)
    assert _outcome(kb, firings) == _outcome(kb, shuffled)
