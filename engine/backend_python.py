"""A small pure-Python interpreter for the compiled (durable-rules form) rulesets.

Used where durable-rules cannot be imported (CPython 3.13 removed a C API it needs) and as the oracle in
property tests. Semantics follow what durable-rules was measured to do:
- a rule fires once per combination of *distinct* facts matching its patterns in order;
- a join refers only to earlier patterns; a comparison with a missing attribute does not match;
- facts are never retracted, so the fixpoint is the set of every firing (monotonic forward chaining).
"""

from __future__ import annotations

import operator
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from typing import Any

Fact = dict[str, Any]
Bindings = dict[str, Fact]
Action = Callable[[str, Bindings], list[Fact]]
Cond = Callable[[Fact, Bindings], bool]

_CMP: dict[str, Callable[[Any, Any], bool]] = {
    "$neq": operator.ne,
    "$gt": operator.gt,
    "$gte": operator.ge,
    "$lt": operator.lt,
    "$lte": operator.le,
}
_MISSING = object()


def _operand(value: Any) -> Callable[[Bindings], Any]:
    if isinstance(value, dict):
        ((ref, attr),) = value.items()
        return lambda b: b[ref].get(attr, _MISSING) if ref in b else _MISSING
    return lambda b: value


def _comparable(a: Any, b: Any) -> bool:
    if a is _MISSING or b is _MISSING:
        return False
    num = (int, float)
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool)
    return (isinstance(a, num) and isinstance(b, num)) or type(a) is type(b)


def compile_cond(node: Mapping[str, Any]) -> Cond:
    ((key, value),) = node.items()
    if key == "$and":
        parts = [compile_cond(x) for x in value]
        return lambda f, b: all(p(f, b) for p in parts)
    if key == "$or":
        parts = [compile_cond(x) for x in value]
        return lambda f, b: any(p(f, b) for p in parts)
    if key in _CMP:
        ((attr, operand),) = value.items()
        op, get = _CMP[key], _operand(operand)

        def cmp(f: Fact, b: Bindings) -> bool:
            left, right = f.get(attr, _MISSING), get(b)
            return _comparable(left, right) and op(left, right)

        return cmp
    if key.startswith("$"):
        raise ValueError(f"operator {key} is not supported by the compiler")
    get = _operand(value)

    def eq(f: Fact, b: Bindings) -> bool:
        left, right = f.get(key, _MISSING), get(b)
        return _comparable(left, right) and left == right

    return eq


def _kind_of(node: Mapping[str, Any]) -> str | None:
    ((key, value),) = node.items()
    if key == "kind" and isinstance(value, str):
        return value
    if key == "$and":
        for x in value:
            k = _kind_of(x)
            if k:
                return k
    return None


def _is_static(node: Mapping[str, Any]) -> bool:
    """True when a condition refers to no earlier pattern, so it can be tested once per fact."""
    ((key, value),) = node.items()
    if key in ("$and", "$or"):
        return all(_is_static(x) for x in value)
    if key in _CMP:
        ((_, operand),) = value.items()
        return not isinstance(operand, dict)
    return not isinstance(value, dict)


def _parts(node: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """A pattern's top-level conjuncts."""
    return list(node["$and"]) if set(node) == {"$and"} else [node]


def _constant_eq(node: Mapping[str, Any]) -> tuple[str, Any] | None:
    """The first top-level `attr == constant` test of a pattern (other than its kind), if any."""
    for x in _parts(node):
        ((key, value),) = x.items()
        if key == "kind" or key.startswith("$") or isinstance(value, (dict, list)):
            continue
        return key, value
    return None


def _eq_join(node: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """The first top-level `attr == $pattern.attr` join of a pattern, for a hash join."""
    for x in _parts(node):
        ((key, value),) = x.items()
        if not key.startswith("$") and isinstance(value, dict) and len(value) == 1:
            ((ref, attr),) = value.items()
            return key, ref, attr
    return None


def _split(node: Mapping[str, Any]) -> tuple[Cond, Cond | None]:
    """(static part, join part or None) of a pattern's condition."""
    parts = _parts(node)
    static = [x for x in parts if _is_static(x)]
    joins = [x for x in parts if not _is_static(x)]
    s = compile_cond({"$and": static}) if static else (lambda f, b: True)
    j = compile_cond({"$and": joins}) if joins else None
    return s, j


class PythonBackend:
    name = "python"

    def __init__(self, ruleset: Mapping[str, Any], action: Action):
        self._action = action
        # rule -> [(pattern name, kind, static condition, join condition or None)]
        self._rules: list[tuple[str, list[tuple[str, str | None, Cond, Cond | None, Any]]]] = []
        # Patterns by kind, and, where a pattern tests an attribute against a constant, by that value too
        # (a hash lookup instead of testing every pattern of the kind against every fact).
        self._by_kind: dict[str | None, list[tuple[int, int]]] = defaultdict(list)
        self._by_value: dict[tuple[str | None, str], dict[Any, list[tuple[int, int]]]] = {}
        for rname in sorted(ruleset):
            pats = []
            for i, pat in enumerate(ruleset[rname]["all"]):
                ((pname, cond),) = pat.items()
                kind = _kind_of(cond)
                pats.append((pname, kind, *_split(cond), _eq_join(cond)))
                slot = (len(self._rules), i)
                key = _constant_eq(cond)
                if key is None:
                    self._by_kind[kind].append(slot)
                else:
                    self._by_value.setdefault((kind, key[0]), {}).setdefault(key[1], []).append(slot)
            self._rules.append((rname, pats))
        self._value_attrs: dict[str | None, list[str]] = defaultdict(list)
        for kind, attr in self._by_value:
            self._value_attrs[kind].append(attr)

    def _slots_for(self, fact: Fact) -> list[tuple[int, int]]:
        kind = fact.get("kind")
        out = self._by_kind.get(kind, []) + self._by_kind.get(None, [])
        for k in (kind, None) if kind is not None else (None,):
            for attr in self._value_attrs.get(k, ()):
                v = fact.get(attr, _MISSING)
                if v is _MISSING or isinstance(v, (list, dict)):
                    continue
                out = out + self._by_value[(k, attr)].get(v, [])
        return sorted(out)

    def run(self, facts: list[Fact]) -> None:
        """Assert facts and run every rule to quiescence."""
        # Facts that passed each pattern's static test (an alpha memory per pattern): joins then only test
        # the conditions that refer to earlier patterns, instead of every condition against every fact.
        slots: dict[tuple[int, int], list[Fact]] = defaultdict(list)
        # The same memories hashed by the attribute a pattern joins on with `==`, where it has such a join.
        hashed: dict[tuple[int, int], dict[Any, list[Fact]]] = defaultdict(lambda: defaultdict(list))
        seen: set[str] = set()
        queue = list(facts)
        qi = 0
        while qi < len(queue):
            fact = queue[qi]
            qi += 1
            k = fact.get("key")
            if k in seen:
                continue
            seen.add(k)
            fact.get("kind")
            new: list[Fact] = []
            passed: list[tuple[int, int]] = []
            for ri, pi in self._slots_for(fact):
                rname, pats = self._rules[ri]
                if not pats[pi][2](fact, {}):
                    continue
                passed.append((ri, pi))
                # Semi-naive evaluation: each combination fires when its last fact arrives.
                for bindings in self._combos(ri, pats, pi, fact, slots, hashed):
                    new += self._action(rname, bindings)
            for slot in passed:
                slots[slot].append(fact)
                ej = self._rules[slot[0]][1][slot[1]][4]
                if ej is not None:
                    v = fact.get(ej[0], _MISSING)
                    if v is not _MISSING and not isinstance(v, (list, dict)):
                        hashed[slot][v].append(fact)
            queue += new

    def _combos(
        self,
        ri: int,
        pats: list[tuple[str, str | None, Cond, Cond | None, tuple[str, str, str] | None]],
        fixed: int,
        fact: Fact,
        slots: Mapping[tuple[int, int], list[Fact]],
        hashed: Mapping[tuple[int, int], Mapping[Any, list[Fact]]],
    ) -> Iterator[Bindings]:
        def rec(i: int, b: Bindings, used: tuple[int, ...]) -> Iterator[Bindings]:
            if i == len(pats):
                yield dict(b)
                return
            pname, _kind, _static, join, ej = pats[i]
            if i == fixed:
                if join is None or join(fact, b):
                    b[pname] = fact
                    yield from rec(i + 1, b, (*used, id(fact)))
                    del b[pname]
                return
            pool: Any = slots.get((ri, i), ())
            if ej is not None and ej[1] in b:
                v = b[ej[1]].get(ej[2], _MISSING)
                if v is _MISSING or isinstance(v, (list, dict)):
                    return
                pool = hashed[(ri, i)].get(v, ()) if (ri, i) in hashed else ()
            for cand in pool:
                if id(cand) in used:
                    continue
                if join is None or join(cand, b):
                    b[pname] = cand
                    yield from rec(i + 1, b, (*used, id(cand)))
                    del b[pname]

        yield from rec(0, {}, ())
