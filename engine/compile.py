"""Compile YAML rules into durable-rules' declarative ruleset form.

Only this module writes rule dicts, from a whitelist of operators, so both backends see the same artefact:

>>> from mldebug_rules.engine.compile import compile_condition
>>> compile_condition("log.signature", {"signature": "cuda_oom", "line": {"gt": "$a.line"}}, {}, None)
{'$and': [{'kind': 'log.signature'}, {'signature': 'cuda_oom'}, {'$gt': {'line': {'a': 'line'}}}]}
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .packs import KnowledgeBase, Rule

_OPS = {"neq": "$neq", "gt": "$gt", "gte": "$gte", "lt": "$lt", "lte": "$lte"}
# Keep rules exist only for durable-rules' storage semantics (see compile_kb); the Python backend skips them.
KEEP_PREFIX = "__keep__."
_NEVER = "__keep__"  # a kind no fact has


@dataclass(frozen=True)
class ActionSpec:
    """Static arguments of one rule's action, taken from its YAML ``then``."""

    rule: str
    hypothesis: str | None
    weight: float
    role: str | None
    cite: tuple[str, ...]
    alternatives: tuple[str, ...]
    smoke: str | None
    explains: tuple[str, ...]
    summary: str
    derive: tuple[Mapping[str, Any], ...]
    patterns: tuple[str, ...]


@dataclass
class CompiledRules:
    name: str
    ruleset: dict[str, Any]
    actions: dict[str, ActionSpec] = field(default_factory=dict)
    # Fact kinds some rule's pattern reads. Facts of other kinds cannot match anything: they stay on the
    # Python side instead of costing an assertion (and, for derived facts, a retain action) each.
    consumed: frozenset[str] = frozenset()

    def to_json(self) -> str:
        """The immutable artefact: sorted JSON, snapshot-tested."""
        return json.dumps({"name": self.name, "rules": self.ruleset}, sort_keys=True, indent=1)


def _value(v: Any, params: Mapping[str, Any], coerce: str | None) -> Any:
    if isinstance(v, dict) and set(v) == {"param"}:
        v = params[v["param"]]
    if isinstance(v, str) and v.startswith("$$"):
        return v[1:]
    if isinstance(v, str) and v.startswith("$"):
        ref, attr = v[1:].split(".", 1)
        return {ref: attr}
    if coerce == "float" and isinstance(v, int) and not isinstance(v, bool):
        return float(v)
    return v


def compile_condition(
    kind: str,
    match: Mapping[str, Any],
    params: Mapping[str, Any],
    kb: KnowledgeBase | None,
    extra: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    terms: list[dict[str, Any]] = [{"kind": kind}]
    for attr in match:  # YAML order: authors put the most selective test first
        cond = match[attr]
        atype = kb.registry.attr_type(kind, attr) if kb is not None else None
        ops = cond if isinstance(cond, dict) and set(cond) != {"param"} else {"eq": cond}
        for op in sorted(ops, key=lambda o: ("eq", "in", "neq", "gt", "gte", "lt", "lte").index(o)):
            raw = ops[op]
            if op == "eq":
                terms.append({attr: _value(raw, params, atype)})
            elif op == "in":
                alts = [{attr: _value(x, params, atype)} for x in raw]
                terms.append(alts[0] if len(alts) == 1 else {"$or": alts})
            else:
                terms.append({_OPS[op]: {attr: _value(raw, params, atype)}})
    terms += extra or []
    # Constant equalities first, then other constant tests, then joins (a stable sort keeps the authors' order
    # within each group). The order changes nothing logically, but durable-rules hangs every non-equality
    # test as a list child of the node before it and overflows at 64 (error 303): behind a constant
    # equality, the lists of different rules spread over different nodes. See alpha_fanout().
    terms.sort(key=_term_rank)
    terms = _joins_before_or(terms)
    return terms[0] if len(terms) == 1 else {"$and": terms}


def _joins_before_or(terms: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """durable-rules silently drops a join that follows an `$or` in the same `$and` (a constant test there is
    kept), so the pattern then matches a fact of any file or line. An `$or` placed after the joins is kept:
    move the constant `$or` terms (from `in`) behind the joins when a pattern has both."""
    if not any(is_join(t) for t in terms):
        return terms
    ors = [t for t in terms if set(t) == {"$or"} and not is_join(t)]
    if not ors:
        return terms
    return [t for t in terms if not (set(t) == {"$or"} and not is_join(t))] + ors


def _term_rank(term: Mapping[str, Any]) -> int:
    if "kind" in term:
        return 0
    if is_join(term):
        return 3
    return 1 if is_constant_eq(term) else 2


# --- reading the compiled condition form (shared by the Python backend and the linter) -----------------
def parts(cond: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """A pattern's top-level conjuncts."""
    return list(cond["$and"]) if set(cond) == {"$and"} else [cond]


def kind_of(cond: Mapping[str, Any]) -> str | None:
    """The fact kind a condition tests, if it tests one."""
    ((key, value),) = cond.items()
    if key == "kind" and isinstance(value, str):
        return value
    if key == "$and":
        for x in value:
            k = kind_of(x)
            if k:
                return k
    return None


def is_join(term: Mapping[str, Any]) -> bool:
    """Whether a test refers to another pattern (else it can be decided on the fact alone)."""
    ((key, value),) = term.items()
    if key in ("$and", "$or"):
        return any(is_join(x) for x in value)
    if key.startswith("$"):
        ((_, operand),) = value.items()
        return isinstance(operand, dict)
    return isinstance(value, dict)


def is_constant_eq(term: Mapping[str, Any]) -> bool:
    """`attr == constant`: what durable-rules hashes in its alpha network."""
    ((key, value),) = term.items()
    return not key.startswith("$") and not isinstance(value, (dict, list))


def compile_rule(kb: KnowledgeBase, rule: Rule) -> tuple[dict[str, Any], ActionSpec]:
    spec = rule.spec
    when = spec["when"]
    patterns: list[dict[str, Any]] = []
    guards: dict[str, list[dict[str, Any]]] = {n: [] for n in when}
    for pname, pat in when.items():
        if pat.get("after"):
            ref = pat["after"]
            guards[pname] += [{"file": {ref: "file"}}, {"$gt": {"line": {ref: "line"}}}]
        if pat.get("after_time"):
            ref = pat["after_time"]
            # Unknown timestamps are -1: both sides must be known for a time order to mean anything.
            guards[pname] += [{"$gte": {"ts": 0.0}}, {"$gt": {"ts": {ref: "ts"}}}]
            guards[ref].append({"$gte": {"ts": 0.0}})
    for pname, pat in when.items():
        cond = compile_condition(pat["kind"], pat.get("match", {}), kb.params, kb, guards[pname])
        patterns.append({pname: cond})
    then = spec["then"]
    weight = float(then.get("weight", 0.0))
    if rule.weight_override is not None:
        weight = rule.weight_override
    action = ActionSpec(
        rule=rule.id,
        hypothesis=then.get("hypothesis"),
        weight=weight,
        role=then.get("role"),
        cite=tuple(then.get("cite") or list(when)),
        alternatives=tuple(then.get("alternatives") or ()),
        smoke=then.get("smoke"),
        explains=tuple(then.get("explains") or ()),
        summary=then.get("summary") or spec["title"],
        derive=tuple(
            {"kind": d["kind"], "attrs": {k: _value(v, kb.params, None) for k, v in d["attrs"].items()}}
            for d in then.get("derive", [])
        ),
        patterns=tuple(when),
    )
    return {"all": patterns, "run": rule.id}, action


def compile_kb(kb: KnowledgeBase) -> CompiledRules:
    rules: dict[str, Any] = {}
    actions: dict[str, ActionSpec] = {}
    for rule in sorted(kb.rules, key=lambda r: r.id):
        if rule.disabled:
            continue
        body, action = compile_rule(kb, rule)
        rules[rule.id] = body
        actions[rule.id] = action
    consumed = frozenset(
        kind
        for body in rules.values()
        for pat in body["all"]
        for cond in pat.values()
        if (kind := kind_of(cond))
    )
    for kind in sorted(consumed):
        # durable-rules refuses a fact that no rule's tests take in (and silently drops one asserted by an
        # action), and one refused fact fails a whole batch. A keep rule takes in every fact of a kind that
        # rules read, but waits on a kind no fact has, so it never fires: no action costs anything, and the
        # input facts can go in as one batch. Facts of kinds no rule reads are never asserted at all.
        rules[f"{KEEP_PREFIX}{kind}"] = {
            "all": [{"f": {"kind": kind}}, {"never": {"kind": _NEVER}}],
            "run": f"{KEEP_PREFIX}{kind}",
        }
    digest = hashlib.sha1(json.dumps(rules, sort_keys=True).encode()).hexdigest()[:12]
    # A durable-rules ruleset name can be registered only once per process: name it by content.
    return CompiledRules(name=f"mldebug_{digest}", ruleset=rules, actions=actions, consumed=consumed)


def distinct_constants(compiled: CompiledRules) -> dict[str, int]:
    """Distinct equality constants per field across the ruleset (durable-rules hangs at 512)."""
    seen: dict[str, set[str]] = {}

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if k in ("$and", "$or"):
                    for x in v:
                        walk(x)
                elif not k.startswith("$") and not isinstance(v, dict):
                    seen.setdefault(k, set()).add(json.dumps(v))
                elif k.startswith("$"):
                    walk(v)

    for body in compiled.ruleset.values():
        for pat in body["all"]:
            for cond in pat.values():
                walk(cond)
    return {k: len(v) for k, v in sorted(seen.items())}


def alpha_fanout(compiled: CompiledRules) -> dict[str, int]:
    """The widest list fan-out in durable-rules' alpha network, per path prefix.

    durable-rules chains a pattern's tests into an alpha network. Equality with a constant is a hashed child,
    but every other test (a range, `$neq`, `$or`, and every join, which is never shared between rules) is a
    *list* child, and asserting a fact pushes all list children of a node on a fixed stack of 64: one more is
    error 303. This mirrors that tree (identical constant tests share a node) and returns, per node reached
    by a prefix of tests, its number of list children, so the linter can refuse a ruleset before the engine
    does.
    """
    children: dict[str, set[str]] = {}
    for rname, body in compiled.ruleset.items():
        for pat in body["all"]:
            for cond in pat.values():
                prefix = ""
                for term in parts(cond):
                    text = json.dumps(term, sort_keys=True)
                    if is_join(term):
                        text = f"{rname}:{text}"  # joins belong to their rule's beta network
                    if not is_constant_eq(term):
                        children.setdefault(prefix, set()).add(text)
                    prefix = f"{prefix}/{text}"
    return {p or "/": len(c) for p, c in children.items()}
