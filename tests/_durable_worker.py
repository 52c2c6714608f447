"""Runs one durable-rules evaluation in a fresh interpreter (spawned by tests/test_engine.py).

durable-rules' C engine keeps every ruleset a process registers; after many generated rulesets in one process
it was seen to crash. Production registers one ruleset per process, so the parity property test gives each
generated ruleset its own process too, which is the condition the product runs under.
"""

from __future__ import annotations

from mldebug_rules.engine.compile import compile_kb
from mldebug_rules.engine.facts import FactRegistry
from mldebug_rules.engine.packs import KnowledgeBase, Rule, load_taxonomy
from mldebug_rules.engine.run import run_rules


def signature(rules: list[dict], raw_facts: list[dict], backend: str) -> str:
    reg = FactRegistry.load()
    kb = KnowledgeBase(registry=reg, taxonomy=load_taxonomy())
    for i, spec in enumerate(rules):
        kb.rules.append(Rule(id=f"t.r{i}", pack="t", spec=spec, where=f"gen:{i}", path="gen", line=i))
    compiled = compile_kb(kb)
    facts = [reg.make("kernel.xid", f, file="dmesg.txt", line=i + 1) for i, f in enumerate(raw_facts)]
    return run_rules(compiled, reg, facts, backend).signature()


def joined_patterns(n: int) -> list[dict]:
    """n rules, each joining an Xid to a log signature on rank: n joins behind the kernel.xid kind test."""
    return [
        {
            "title": f"j{i}",
            "when": {
                "s": {"kind": "log.signature", "match": {"signature": f"sig{i}"}},
                "x": {"kind": "kernel.xid", "match": {"rank": "$s.rank"}},
            },
            "then": {
                "hypothesis": "gpu_hardware_fault",
                "weight": 0.5,
                "alternatives": ["gpu_oom"],
                "smoke": "s",
            },
        }
        for i in range(n)
    ]


def run_joined(n: int, backend: str) -> str:
    """Firings of joined_patterns(n) on one matching pair of facts, or the engine's error."""
    reg = FactRegistry.load()
    kb = KnowledgeBase(registry=reg, taxonomy=load_taxonomy())
    for i, spec in enumerate(joined_patterns(n)):
        kb.rules.append(Rule(id=f"t.r{i}", pack="t", spec=spec, where=f"gen:{i}", path="gen", line=i))
    facts = [
        reg.make("log.signature", {"signature": "sig1"}, file="t.log", line=1, rank=1),
        reg.make("kernel.xid", {"code": 79}, file="dmesg.txt", line=1, rank=1),
    ]
    try:
        return f"ok {len(run_rules(compile_kb(kb), reg, facts, backend).firings)}"
    except Exception as e:
        return str(e)
