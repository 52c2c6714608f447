"""A small pure-Python interpreter for the compiled (durable-rules form) rulesets.

Used where durable-rules cannot be imported (CPython 3.13 removed a C API it needs) and as the oracle in
property tests. Semantics follow what durable-rules was measured to do:
- a rule fires once per combination of *distinct* facts matching its patterns in order;
- a join refers only to earlier patterns; a comparison with a missing attribute does not match;
- facts are never retracted, so the fixpoint is the set of every firing (monotonic forward chaining).
"""

from __future__ import annotations

import json
import operator
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from .compile import KEEP_PREFIX, is_constant_eq, is_join, kind_of, parts

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


def _constant_eq(node: Mapping[str, Any]) -> tuple[str, Any] | None:
    """The first top-level `attr == constant` test of a pattern (other than its kind), if any."""
    for x in parts(node):
        if "kind" not in x and is_constant_eq(x):
            ((key, value),) = x.items()
            return key, value
    return None


def _eq_joins(node: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """Every top-level `attr == $pattern.attr` join of a pattern: (own attribute, pattern, its attribute)."""
    out = []
    for x in parts(node):
        ((key, value),) = x.items()
        if not key.startswith("$") and isinstance(value, dict) and len(value) == 1:
            ((ref, attr),) = value.items()
            out.append((key, ref, attr))
    return out


def _split(node: Mapping[str, Any]) -> tuple[str, Cond, Cond | None]:
    """(canonical text of the static part, static part, join part or None) of a pattern's condition."""
    terms = parts(node)
    static = [x for x in terms if not is_join(x)]  # decided on the fact alone: tested once per fact
    joins = [x for x in terms if is_join(x)]
    s = compile_cond({"$and": static}) if static else (lambda f, b: True)
    j = compile_cond({"$and": joins}) if joins else None
    return json.dumps(static, sort_keys=True, default=str), s, j


def _hashable(v: Any) -> bool:
    return v is not _MISSING and not isinstance(v, (list, dict))


class _Pattern:
    """One compiled pattern of a rule, with what the joins need to find its candidates by hash."""

    __slots__ = ("join", "kind", "links", "name", "static_id")

    def __init__(self, name: str, kind: str | None, static_id: int, join: Cond | None):
        self.name = name
        self.kind = kind
        self.static_id = static_id  # index into the backend's shared static tests
        self.join = join
        # (own attribute, other pattern, its attribute): the candidate's attribute must equal the other
        # pattern's, whichever of the two comes first. Tried in order; the first whose other pattern is
        # already bound turns a scan of the alpha memory into a hash lookup.
        self.links: list[tuple[str, str, str]] = []


class PythonBackend:
    name = "python"

    def __init__(self, ruleset: Mapping[str, Any], action: Action):
        self._action = action
        self._rules: list[tuple[str, list[_Pattern]]] = []
        # Identical static tests (same kind, same thresholds) are shared between rules and evaluated once
        # per fact, as a Rete alpha network shares its nodes.
        self._statics: list[Cond] = []
        static_ids: dict[str, int] = {}
        # Patterns by kind, and, where a pattern tests an attribute against a constant, by that value too
        # (a hash lookup instead of testing every pattern of the kind against every fact).
        self._by_kind: dict[str | None, list[tuple[int, int]]] = defaultdict(list)
        self._by_value: dict[tuple[str | None, str], dict[Any, list[tuple[int, int]]]] = {}
        for rname in sorted(ruleset):
            if rname.startswith(KEEP_PREFIX):
                continue  # storage for durable-rules; never fires
            pats: list[_Pattern] = []
            conds = [next(iter(p.items())) for p in ruleset[rname]["all"]]
            for i, (pname, cond) in enumerate(conds):
                text, static, join = _split(cond)
                if text not in static_ids:
                    static_ids[text] = len(self._statics)
                    self._statics.append(static)
                pat = _Pattern(pname, kind_of(cond), static_ids[text], join)
                pats.append(pat)
                slot = (len(self._rules), i)
                key = _constant_eq(cond)
                if key is None:
                    self._by_kind[pat.kind].append(slot)
                else:
                    self._by_value.setdefault((pat.kind, key[0]), {}).setdefault(key[1], []).append(slot)
            for pname, cond in conds:
                for own, ref, attr in _eq_joins(cond):
                    byname = {p.name: p for p in pats}
                    if ref in byname:
                        byname[pname].links.append((own, ref, attr))
                        byname[ref].links.append((attr, pname, own))
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
                if not _hashable(v):
                    continue
                out = out + self._by_value[(k, attr)].get(v, [])
        return sorted(out)

    def run(self, facts: list[Fact]) -> None:
        """Assert facts and run every rule to quiescence."""
        # Facts that passed each pattern's static test (an alpha memory per pattern): joins then only test
        # the conditions that refer to other patterns, instead of every condition against every fact.
        slots: dict[tuple[int, int], list[Fact]] = defaultdict(list)
        # The same memories hashed by each attribute the pattern is joined on with `==`.
        hashed: dict[tuple[int, int, str], dict[Any, list[Fact]]] = defaultdict(lambda: defaultdict(list))
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
            new: list[Fact] = []
            passed: list[tuple[int, int]] = []
            tested: dict[int, bool] = {}
            for ri, pi in self._slots_for(fact):
                rname, pats = self._rules[ri]
                sid = pats[pi].static_id
                ok = tested.get(sid)
                if ok is None:
                    ok = tested[sid] = self._statics[sid](fact, {})
                if not ok:
                    continue
                passed.append((ri, pi))
                # Semi-naive evaluation: each combination fires when its last fact arrives.
                for bindings in self._combos(ri, pats, pi, fact, slots, hashed):
                    new += self._action(rname, bindings)
            for ri, pi in passed:
                slots[(ri, pi)].append(fact)
                for own, _ref, _attr in self._rules[ri][1][pi].links:
                    v = fact.get(own, _MISSING)
                    if _hashable(v):
                        hashed[(ri, pi, own)][v].append(fact)
            queue += new

    def _combos(
        self,
        ri: int,
        pats: list[_Pattern],
        fixed: int,
        fact: Fact,
        slots: Mapping[tuple[int, int], list[Fact]],
        hashed: Mapping[tuple[int, int, str], Mapping[Any, list[Fact]]],
    ) -> Iterator[Bindings]:
        fixed_name = pats[fixed].name

        def pool_for(i: int, b: Bindings) -> Any:
            for own, ref, attr in pats[i].links:
                other = fact if ref == fixed_name else b.get(ref)
                if other is None:
                    continue
                v = other.get(attr, _MISSING)
                if not _hashable(v):
                    return ()  # an equality join on a missing or composite value never matches
                memo = hashed.get((ri, i, own))
                return memo.get(v, ()) if memo is not None else ()
            return slots.get((ri, i), ())

        def rec(i: int, b: Bindings, used: tuple[int, ...]) -> Iterator[Bindings]:
            if i == len(pats):
                yield dict(b)
                return
            pat = pats[i]
            if i == fixed:
                if pat.join is None or pat.join(fact, b):
                    b[pat.name] = fact
                    yield from rec(i + 1, b, (*used, id(fact)))
                    del b[pat.name]
                return
            for cand in pool_for(i, b):
                if id(cand) in used:
                    continue
                if pat.join is None or pat.join(cand, b):
                    b[pat.name] = cand
                    yield from rec(i + 1, b, (*used, id(cand)))
                    del b[pat.name]

        yield from rec(0, {}, ())
