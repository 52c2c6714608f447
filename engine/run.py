"""Run compiled rules over facts on a backend, collecting firings on the Python side.

Actions are generic (raise a hypothesis, derive facts) with static arguments from the YAML; they build facts
and record firings, nothing else, so both backends give the same result for the same facts.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from . import backend_durable
from .backend_python import PythonBackend
from .compile import ActionSpec, CompiledRules
from .facts import Fact, FactRegistry


@dataclass(frozen=True)
class Firing:
    rule: str
    hypothesis: str
    weight: float
    role: str
    cites: tuple[str, ...]  # fact keys, in the rule's cite order
    explains: tuple[str, ...]
    alternatives: tuple[str, ...]
    smoke: str | None
    summary: str


@dataclass
class EngineResult:
    backend: str
    firings: list[Firing] = field(default_factory=list)
    derived: list[Fact] = field(default_factory=list)
    facts: dict[str, Fact] = field(default_factory=dict)  # every fact by key, inputs and derived

    def signature(self) -> str:
        """Order-independent digest of the outcome, for comparing backends."""
        fir = sorted(
            json.dumps([f.rule, f.hypothesis, f.weight, f.role, f.cites], sort_keys=True)
            for f in self.firings
        )
        der = sorted(f.key for f in self.derived)
        return json.dumps({"firings": fir, "derived": der}, sort_keys=True)


def choose_backend(requested: str | None = None) -> str:
    """``durable`` when importable, else ``python``. MLDEBUG_ENGINE or the argument can force one."""
    want = (requested or os.environ.get("MLDEBUG_ENGINE") or "auto").lower()
    if want in ("python", "py"):
        return "python"
    ok, why = backend_durable.available()
    if want in ("durable", "durable-rules"):
        if not ok:
            raise RuntimeError(f"durable-rules cannot be used here: {why}")
        return "durable"
    return "durable" if ok else "python"


def backend_label(name: str) -> str:
    if name == "durable":
        return f"durable-rules {backend_durable.version()}"
    return "python (built-in fallback)"


class _Collector:
    def __init__(self, compiled: CompiledRules, registry: FactRegistry, facts: dict[str, Fact]):
        self.compiled = compiled
        self.registry = registry
        self.facts = facts
        self.firings: dict[tuple[str, tuple[str, ...]], Firing] = {}
        self.derived: dict[str, Fact] = {}
        self._hyps: dict[tuple[str, str], Fact] = {}

    def __call__(self, rule: str, bindings: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
        spec: ActionSpec | None = self.compiled.actions.get(rule)
        if spec is None:  # a keep rule, which never fires
            return []
        out: list[dict[str, Any]] = []
        for d in spec.derive:
            attrs = {k: _resolve(v, bindings) for k, v in d["attrs"].items()}
            first = bindings[spec.patterns[0]]
            fact = self.registry.make(
                d["kind"],
                attrs,
                origin="derived",
                probe=f"rule:{rule}",
                rank=None if first.get("rank", -1) < 0 else first["rank"],
                host=first.get("host", ""),
            )
            out += self._keep(fact)
        if spec.hypothesis:
            cites = tuple(bindings[name]["key"] for name in spec.cite)
            role = spec.role or firing_role([bindings[n] for n in spec.cite])
            firing = Firing(
                rule=rule,
                hypothesis=spec.hypothesis,
                weight=spec.weight,
                role=role,
                cites=cites,
                explains=spec.explains,
                alternatives=spec.alternatives,
                smoke=spec.smoke,
                summary=spec.summary,
            )
            self.firings.setdefault((rule, cites), firing)
            # One hypothesis fact per rule and role, however many times the rule fires: build it once.
            hyp = self._hyps.get((rule, role))
            if hyp is None:
                hyp = self._hyps[(rule, role)] = self.registry.make(
                    "hypothesis",
                    {"hyp": spec.hypothesis, "rule": rule, "weight": spec.weight, "role": role},
                    origin="derived",
                    probe=f"rule:{rule}",
                )
                out += self._keep(hyp)
        return out

    def _keep(self, fact: Fact) -> list[dict[str, Any]]:
        if fact.key not in self.facts:
            self.facts[fact.key] = fact
            self.derived[fact.key] = fact
        return [fact.to_engine()] if fact.kind in self.compiled.consumed else []


def firing_role(cited: Sequence[dict[str, Any]]) -> str:
    """The role of a firing that declares none, from the facts it cites (as the engine matched them). A firing resting only on cascade signatures is a cascade: look for the initiating fact. Context
    signatures (start-up lines, settings, advice) refine a diagnosis without saying where a failure began, so
    they count for neither: next to a root or cascade signature the firing takes that one's role, and alone
    the firing is "context" (never discounted as a consequence, never a root that discounts others)."""
    sigs = [c for c in cited if c.get("kind") == "log.signature"]
    if not sigs or len(sigs) != len(cited):
        return "root"
    failing = [c for c in sigs if c.get("role") != "context"]
    if not failing:
        return "context"
    return "cascade" if all(c.get("role") == "cascade" for c in failing) else "root"


def _resolve(value: Any, bindings: dict[str, dict[str, Any]]) -> Any:
    if isinstance(value, dict) and len(value) == 1:
        ((ref, attr),) = value.items()
        if ref in bindings:
            return bindings[ref].get(attr)
    return value


def run_rules(
    compiled: CompiledRules, registry: FactRegistry, facts: Sequence[Fact], backend: str | None = None
) -> EngineResult:
    name = choose_backend(backend)
    by_key: dict[str, Fact] = {}
    for f in facts:
        by_key.setdefault(f.key, f)
    collector = _Collector(compiled, registry, by_key)
    engine_facts = [f.to_engine() for f in by_key.values() if f.kind in compiled.consumed]
    if name == "durable":
        backend_durable.DurableBackend(compiled.name, compiled.ruleset, collector).run(engine_facts)
    else:
        PythonBackend(compiled.ruleset, collector).run(engine_facts)
    return EngineResult(
        backend=backend_label(name),
        firings=sorted(collector.firings.values(), key=lambda f: (f.rule, f.cites)),
        derived=sorted(collector.derived.values(), key=lambda f: f.key),
        facts=by_key,
    )
