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
        (ref, attr), = value.items()
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
    (key, value), = node.items()
    if key == "$and":
        parts = [compile_cond(x) for x in value]
        return lambda f, b: all(p(f, b) for p in parts)
    if key == "$or":
        parts = [compile_cond(x) for x in value]
        return lambda f, b: any(p(f, b) for p in parts)
    if key in _CMP:
        (attr, operand), = value.items()
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
    (key, value), = node.items()
    if key == "kind" and isinstance(value, str):
        return value
    if key == "$and":
        for x in value:
            k = _kind_of(x)
            if k:
                return k
    return None


class PythonBackend:
    name = "python"

    def __init__(self, ruleset: Mapping[str, Any], action: Action):
        self._action = action
        # rule name -> [(pattern name, kind, condition)]
        self._rules: list[tuple[str, list[tuple[str, str | None, Cond]]]] = []
        self._by_kind: dict[str | None, list[tuple[int, int]]] = defaultdict(list)
        for rname in sorted(ruleset):
            pats = []
            for i, pat in enumerate(ruleset[rname]["all"]):
                (pname, cond), = pat.items()
                kind = _kind_of(cond)
                pats.append((pname, kind, compile_cond(cond)))
                self._by_kind[kind].append((len(self._rules), i))
            self._rules.append((rname, pats))

    def run(self, facts: list[Fact]) -> None:
        """Assert facts and run every rule to quiescence."""
        store: dict[str | None, list[Fact]] = defaultdict(list)
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
            kind = fact.get("kind")
            new: list[Fact] = []
            # Semi-naive evaluation: each combination fires when its last fact arrives.
            for ri, pi in self._by_kind.get(kind, []) + self._by_kind.get(None, []):
                rname, pats = self._rules[ri]
                for bindings in self._combos(pats, pi, fact, store):
                    new += self._action(rname, bindings)
            store[kind].append(fact)
            queue += new

    def _combos(
        self, pats: list[tuple[str, str | None, Cond]], fixed: int, fact: Fact, store: Mapping[str | None, list[Fact]]
    ) -> Iterator[Bindings]:
        def rec(i: int, b: Bindings, used: tuple[int, ...]) -> Iterator[Bindings]:
            if i == len(pats):
                yield dict(b)
                return
            pname, kind, cond = pats[i]
            if i == fixed:
                if cond(fact, b):
                    b[pname] = fact
                    yield from rec(i + 1, b, (*used, id(fact)))
                    del b[pname]
                return
            pool = store.get(kind, []) if kind is not None else [f for v in store.values() for f in v]
            for cand in pool:
                if id(cand) in used:
                    continue
                if cond(cand, b):
                    b[pname] = cand
                    yield from rec(i + 1, b, (*used, id(cand)))
                    del b[pname]

        yield from rec(0, {}, ())
