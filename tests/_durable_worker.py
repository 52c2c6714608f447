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
