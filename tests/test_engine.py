"""Compiler and backends: golden tests per operator, and the two backends agreeing on generated fact sets."""

from __future__ import annotations

import json
import multiprocessing
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mldebug_rules.engine import backend_durable
from mldebug_rules.engine.compile import compile_condition, compile_kb
from mldebug_rules.engine.facts import FactRegistry
from mldebug_rules.engine.packs import KnowledgeBase, Rule, load_taxonomy
from mldebug_rules.engine.run import run_rules

sys.path.insert(0, str(Path(__file__).parent))
import _durable_worker

DURABLE, WHY = backend_durable.available()
BACKENDS = ["python"] + (["durable"] if DURABLE else [])


@pytest.mark.parametrize(
    ("match", "expected"),
    [
        ({"code": 79}, [{"kind": "kernel.xid"}, {"code": 79}]),
        ({"code": {"neq": 13}}, [{"kind": "kernel.xid"}, {"$neq": {"code": 13}}]),
        ({"code": {"gt": 1}}, [{"kind": "kernel.xid"}, {"$gt": {"code": 1}}]),
        ({"code": {"gte": 1}}, [{"kind": "kernel.xid"}, {"$gte": {"code": 1}}]),
        ({"code": {"lt": 1}}, [{"kind": "kernel.xid"}, {"$lt": {"code": 1}}]),
        ({"code": {"lte": 1}}, [{"kind": "kernel.xid"}, {"$lte": {"code": 1}}]),
        ({"code": {"in": [48, 79]}}, [{"kind": "kernel.xid"}, {"$or": [{"code": 48}, {"code": 79}]}]),
        ({"code": {"in": [48]}}, [{"kind": "kernel.xid"}, {"code": 48}]),
        ({"pid": "$a.pid"}, [{"kind": "kernel.xid"}, {"pid": {"a": "pid"}}]),
        # constant equalities first, then other constant tests, then joins (see alpha_fanout)
        ({"pid": "$a.pid", "code": 79}, [{"kind": "kernel.xid"}, {"code": 79}, {"pid": {"a": "pid"}}]),
        ({"pid": {"lt": 9}, "code": 79}, [{"kind": "kernel.xid"}, {"code": 79}, {"$lt": {"pid": 9}}]),
        (
            {"code": {"gte": 1, "lt": 9}},
            [{"kind": "kernel.xid"}, {"$gte": {"code": 1}}, {"$lt": {"code": 9}}],
        ),
    ],
)
def test_golden_operator(match: dict, expected: list) -> None:
    assert compile_condition("kernel.xid", match, {}, None) == {"$and": expected}


# --- generated rulesets and facts: both backends must agree ----------------------------------------------
REG = FactRegistry.load()


def _kb(rules: list[dict]) -> KnowledgeBase:
    kb = KnowledgeBase(registry=REG, taxonomy=load_taxonomy())
    for i, spec in enumerate(rules):
        kb.rules.append(Rule(id=f"t.r{i}", pack="t", spec=spec, where=f"gen:{i}", path="gen", line=i))
    return kb


_attr = st.sampled_from(["code", "pid"])
_op = st.sampled_from(["eq", "neq", "gt", "gte", "lt", "lte"])


@st.composite
def rule_spec(draw: st.DrawFn) -> dict:
    n = draw(st.integers(1, 3))
    when = {}
    for i in range(n):
        match: dict = {}
        for _ in range(draw(st.integers(0, 2))):
            attr = draw(_attr)
            op = draw(_op)
            if i > 0 and draw(st.booleans()):
                value: object = f"$p{draw(st.integers(0, i - 1))}.{draw(_attr)}"
            else:
                value = draw(st.integers(0, 4))
            match[attr] = {op: value}
        when[f"p{i}"] = {"kind": "kernel.xid", "match": match}
    then: dict = {
        "hypothesis": draw(st.sampled_from(["gpu_hardware_fault", "illegal_memory_access"])),
        "weight": draw(st.sampled_from([0.3, 0.6, 0.9])),
        "alternatives": ["gpu_oom"],
        "smoke": "s",
    }
    if draw(st.booleans()):
        then["derive"] = [{"kind": "derived", "attrs": {"name": "x", "number": "$p0.code"}}]
    return {"title": "t", "when": when, "then": then}


@st.composite
def chain_rule(draw: st.DrawFn) -> dict:
    return {
        "title": "chain",
        "when": {"d": {"kind": "derived", "match": {"number": {"gte": draw(st.integers(0, 4))}}}},
        "then": {"hypothesis": "gpu_oom", "weight": 0.5, "alternatives": ["gpu_oom"], "smoke": "s"},
    }


facts_strategy = st.lists(
    st.fixed_dictionaries({"code": st.integers(0, 4), "pid": st.integers(0, 4)}), min_size=0, max_size=6
)


@pytest.mark.skipif(not DURABLE, reason=f"durable-rules not importable here: {WHY}")
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(rule_spec(), min_size=1, max_size=4), st.lists(chain_rule(), max_size=1), facts_strategy)
def test_backends_agree(rules: list[dict], chains: list[dict], raw_facts: list[dict]) -> None:
    for r in rules:
        r["then"].setdefault("derive", [])
    a = _durable_worker.signature(rules + chains, raw_facts, "python")
    # One generated ruleset per durable process, as in production (see tests/_durable_worker.py).
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as ex:
        b = ex.submit(_durable_worker.signature, rules + chains, raw_facts, "durable").result()
    assert a == b


@pytest.mark.parametrize("backend", BACKENDS)
def test_forward_chaining_and_isolation(backend: str) -> None:
    rules = [
        {
            "title": "derive",
            "when": {"x": {"kind": "kernel.xid", "match": {"code": 79}}},
            "then": {"derive": [{"kind": "derived", "attrs": {"name": "gpu_lost", "number": "$x.code"}}]},
        },
        {
            "title": "chain",
            "when": {"d": {"kind": "derived", "match": {"name": "gpu_lost"}}},
            "then": {
                "hypothesis": "gpu_hardware_fault",
                "weight": 0.9,
                "alternatives": ["gpu_oom"],
                "smoke": "s",
            },
        },
    ]
    compiled = compile_kb(_kb(rules))
    f = REG.make("kernel.xid", {"code": 79}, file="dmesg.txt", line=1)
    first = run_rules(compiled, REG, [f], backend)
    assert [x.hypothesis for x in first.firings] == ["gpu_hardware_fault"]
    # a second diagnosis on the same process sees none of the first one's facts
    second = run_rules(compiled, REG, [], backend)
    assert second.firings == [] and second.derived == []
    third = run_rules(compiled, REG, [f], backend)
    assert third.signature() == first.signature()


@pytest.mark.parametrize("backend", BACKENDS)
def test_missing_join_value_never_matches(backend: str) -> None:
    rules = [
        {
            "title": "t",
            "when": {
                "a": {"kind": "log.signature", "match": {"signature": "x"}},
                "b": {"kind": "kernel.oom_kill", "after_time": "a"},
            },
            "then": {"hypothesis": "host_oom_kill", "weight": 0.9, "alternatives": ["gpu_oom"], "smoke": "s"},
        }
    ]
    compiled = compile_kb(_kb(rules))
    a = REG.make("log.signature", {"signature": "x"}, file="t.log", line=1)  # no timestamp
    b = REG.make("kernel.oom_kill", {"pid": 1}, file="dmesg", line=1, ts=100.0)
    assert run_rules(compiled, REG, [a, b], backend).firings == []
    a2 = REG.make("log.signature", {"signature": "x"}, file="t.log", line=2, ts=50.0)
    assert len(run_rules(compiled, REG, [a2, b], backend).firings) == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_join_after_an_in_list_is_kept(backend: str) -> None:
    # durable-rules drops a join written after an $or (an `in` list) in the same pattern; the compiler puts
    # the $or last so that `after` still means the same file and a later line on both backends.
    rules = [
        {
            "title": "t",
            "when": {
                "a": {"kind": "log.signature", "match": {"signature": "x"}},
                "b": {"kind": "log.signature", "match": {"signature": {"in": ["y", "z"]}}, "after": "a"},
            },
            "then": {"hypothesis": "host_oom_kill", "weight": 0.9, "alternatives": ["gpu_oom"], "smoke": "s"},
        }
    ]
    compiled = compile_kb(_kb(rules))
    a = REG.make("log.signature", {"signature": "x"}, file="a.log", line=5)
    other_file = REG.make("log.signature", {"signature": "y"}, file="b.log", line=9)
    earlier = REG.make("log.signature", {"signature": "z"}, file="a.log", line=2)
    assert run_rules(compiled, REG, [a, other_file, earlier], backend).firings == []
    later = REG.make("log.signature", {"signature": "z"}, file="a.log", line=7)
    assert len(run_rules(compiled, REG, [a, later], backend).firings) == 1


def test_compiled_ruleset_is_sorted_json_and_stable() -> None:
    from mldebug_rules.engine.packs import load_packs

    c1 = compile_kb(load_packs(entry_points=False))
    c2 = compile_kb(load_packs(entry_points=False))
    assert c1.to_json() == c2.to_json() and c1.name == c2.name
    assert json.loads(c1.to_json())["rules"]


def test_lint_refuses_what_would_overflow_durable_alpha_stack() -> None:
    from mldebug_rules.engine.compile import alpha_fanout
    from mldebug_rules.engine.lint import MAX_FANOUT, lint_kb

    def crowded(n: int) -> list[str]:
        kb = _kb(_durable_worker.joined_patterns(n))
        return [p.message for p in lint_kb(kb) if "error 303" in p.message]

    assert max(alpha_fanout(compile_kb(_kb(_durable_worker.joined_patterns(70)))).values()) == 70
    assert crowded(MAX_FANOUT) == []
    (msg,) = crowded(MAX_FANOUT + 1)
    assert f"{MAX_FANOUT + 1} range tests" in msg and '"kind": "kernel.xid"' in msg
    # Behind a constant equality each rule's join hangs under its own node: no crowding.
    spread = _durable_worker.joined_patterns(70)
    for i, r in enumerate(spread):
        r["when"]["x"]["match"]["code"] = i
    assert max(alpha_fanout(compile_kb(_kb(spread))).values()) < MAX_FANOUT


@pytest.mark.skipif(not DURABLE, reason=f"durable-rules not importable here: {WHY}")
def test_alpha_fanout_model_matches_durable_limit() -> None:
    """The linter's model of error 303 is checked against the engine itself, each case in its own process."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as ex:
        fine = ex.submit(_durable_worker.run_joined, 60, "durable").result()
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as ex:
        over = ex.submit(_durable_worker.run_joined, 70, "durable").result()
    assert fine == "ok 1" == _durable_worker.run_joined(60, "python")
    assert "error code: 303" in over and "rules lint" in over
    assert _durable_worker.run_joined(70, "python") == "ok 1"
