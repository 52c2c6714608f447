"""``rules lint``: what the loader cannot see by itself. These are the engine's checks, on the knowledge base
alone; the face adds the one that runs the log scanner (``mldebug_rules/pack_lint.py``: every signature
against its own ``match`` and ``no_match`` example lines).

- a signature whose regex does not compile, or that matches another signature's examples (a warning:
  overlaps are sometimes intended);
- patterns prone to catastrophic backtracking or too slow on a 1 MB line;
- rules that can never fire: a signature no pack defines, or a fact only rules derive (``derived``,
  ``hypothesis``, ``ruled_out``) that no rule derives with those values;
- hypotheses raised without a catalogue entry (alternatives, smoke, remediation);
- signatures no rule reads (a warning);
- too many distinct equality constants on one field (durable-rules hangs at 512);
- too many non-equality tests or joins behind the same tests (durable-rules fails at 64, error 303).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import regex

try:  # the regex parser is private API; the static check falls back to the dynamic one without it
    from re import _parser as _sre_parse  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - Python 3.10
    import sre_parse as _sre_parse  # type: ignore[no-redef]

from .compile import alpha_fanout, compile_kb, distinct_constants
from .packs import KnowledgeBase, ProgressPattern, Rule, Signature

SLOW_LINE_BYTES = 1 << 20
SLOW_SECONDS = 0.5
MAX_CONSTANTS = 400
# durable-rules pushes every list test under an alpha node on a 64-deep stack (error 303 beyond it).
MAX_FANOUT = 48
# Lines every signature is timed on (a test may empty it to keep a run short).
ADVERSARIAL_LINES = (
    "a" * SLOW_LINE_BYTES,
    " " * SLOW_LINE_BYTES,
    "x=" * (SLOW_LINE_BYTES // 2),
    "é" * (SLOW_LINE_BYTES // 2),
)


@dataclass(frozen=True)
class Problem:
    where: str
    severity: str  # error | warning
    message: str

    def format(self) -> str:
        return f"{self.where}: {self.severity}: {self.message}"


def _regex_problems(kb: KnowledgeBase, only: set[str] | None) -> list[Problem]:
    out: list[Problem] = []
    compiled: dict[str, regex.Pattern[str]] = {}
    for sig in kb.signatures + kb.progress:  # type: ignore[operator]
        if only and sig.pack not in only:
            continue
        flags = regex.IGNORECASE if sig.ignore_case else 0
        try:
            compiled[sig.id] = regex.compile(sig.regex, flags)
        except regex.error as e:
            out.append(Problem(sig.where, "error", f"signature {sig.id}: regex does not compile: {e}"))
            continue
        out += _prefilter_problems(sig, flags)
        for adv in ADVERSARIAL_LINES:
            t0 = time.perf_counter()
            try:
                compiled[sig.id].search(adv, timeout=SLOW_SECONDS * 4)
            except TimeoutError:
                out.append(
                    Problem(
                        sig.where, "error", f"signature {sig.id}: catastrophic backtracking on a 1 MB line"
                    )
                )
                break
            if time.perf_counter() - t0 > SLOW_SECONDS:
                out.append(
                    Problem(
                        sig.where,
                        "warning",
                        f"signature {sig.id}: slow on a 1 MB line ({time.perf_counter() - t0:.2f} s)",
                    )
                )
                break
    sigs = {s.id: s for s in kb.signatures}
    for sig in kb.signatures:
        if (only and sig.pack not in only) or sig.id not in compiled:
            continue
        for other in kb.signatures:
            if other.id == sig.id or set(sig.streams).isdisjoint(other.streams):
                continue
            for ex in other.examples_match:
                if compiled[sig.id].search(ex):
                    out.append(
                        Problem(
                            sig.where,
                            "warning",
                            f"signature {sig.id}: also matches an example of {other.id} ({sigs[other.id].where})",
                        )
                    )
                    break
    return out


def _prefilter_problems(sig: Signature | ProgressPattern, flags: int) -> list[Problem]:
    """A prefilter must match every line its regex matches: a line it misses is never confirmed, so never
    found. The examples are the evidence lint has; each ``match`` example the prefilter misses is an error."""
    pre = getattr(sig, "prefilter", None)
    if not pre:
        return []
    try:
        compiled = regex.compile(pre, flags)
    except regex.error as e:
        return [Problem(sig.where, "error", f"signature {sig.id}: prefilter does not compile: {e}")]
    return [
        Problem(
            sig.where,
            "error",
            f"signature {sig.id}: its prefilter misses the example {ex!r}, so the scanner would never find it",
        )
        for ex in sig.examples_match
        if not compiled.search(ex)
    ]


def _signature_names(pat: Mapping[str, Any]) -> list[str]:
    cond = pat["match"].get("signature")
    if isinstance(cond, str):
        return [cond]
    if isinstance(cond, dict):
        return list(cond.get("in", [])) + ([cond["eq"]] if "eq" in cond else [])
    return []


_REPEATS = {_sre_parse.MAX_REPEAT, _sre_parse.MIN_REPEAT}
_SUBPATTERN = _sre_parse.SUBPATTERN
_BRANCH = _sre_parse.BRANCH
_PROBE_CHARS = "ab0 \t.-_:/=,x\u00e9"
ATTACK_REPEAT = 5000  # length of the derived attack lines ("bbbb...b!"): exponential patterns die far sooner


def _unbounded(av: Any) -> bool:
    return av[1] == _sre_parse.MAXREPEAT or av[1] > 64


def _unwrap(items: Any) -> list[tuple[Any, Any]]:
    """A sequence with single plain groups unwrapped: ``((b+))`` reads as ``b+``."""
    items = list(items)
    while len(items) == 1 and items[0][0] == _SUBPATTERN:
        items = list(items[0][1][-1])
    return items


def nested_quantifier(pattern: str, ignore_case: bool = False) -> str | None:
    """Why `pattern` can backtrack exponentially, or None. Static: reads the parse tree.

    Flagged: an unbounded repeat whose body holds another unbounded repeat with nothing else required
    between them (``(b+)+``, ``(\\w+\\s*)*``: the outer loop can split a run of characters in exponentially
    many ways). A required separator (``(\\w+\\.)+``) makes the split unique, so it passes. Other shapes
    (overlapping alternatives) are left to the derived attack lines, run under a timeout.

    >>> nested_quantifier("(b+)+$")
    'nested quantifier: an unbounded repeat directly inside another'
    >>> nested_quantifier(r"(?:\\w+\\.)+\\w+") is None
    True
    """
    try:
        parsed = _sre_parse.parse(pattern, regex.IGNORECASE if ignore_case else 0)
    except Exception:  # not ours to report: the compile check says why it does not compile
        return None
    return _walk(parsed)


def _walk(items: Any) -> str | None:
    for op, av in items:
        if op in _REPEATS:
            body = _unwrap(av[2])
            if _unbounded(av):
                inner = [it for it in body if _holds_unbounded(it)]
                rest = [it for it in body if not _holds_unbounded(it)]
                rest_min = _sre_parse.SubPattern(_sre_parse.State(), rest).getwidth()[0] if rest else 0
                if inner and rest_min == 0:
                    return "nested quantifier: an unbounded repeat directly inside another"
            why = _walk(av[2])
        elif op == _SUBPATTERN:
            why = _walk(av[-1])
        elif op == _BRANCH:
            why = next((w for alt in av[1] if (w := _walk(alt))), None)
        else:
            why = None
        if why:
            return why
    return None


def _holds_unbounded(item: tuple[Any, Any]) -> bool:
    op, av = item
    if op in _REPEATS:
        return _unbounded(av)
    if op == _SUBPATTERN:
        return any(_holds_unbounded(it) for it in av[-1])
    if op == _BRANCH:
        return any(_holds_unbounded(it) for alt in av[1] for it in alt)
    return False


def _attack_lines(pattern: str) -> list[str]:
    """Lines built from the pattern's own characters (``bbb...b!`` for ``(b+)+$``): a run of one character
    the pattern repeats, then one it does not expect, is what sends a backtracking matcher exponential."""
    chars = {c for c in pattern if c.isalnum() or c in " _-.:/=,"} | set(_PROBE_CHARS)
    return [c * ATTACK_REPEAT + "!" for c in sorted(chars)][:64]


def backtracking_problems(kb: KnowledgeBase, only: set[str] | None = None) -> list[Problem]:
    """Catastrophic backtracking: nested quantifiers (static), then derived attack lines under a timeout.
    ``only`` limits the check to those packs' signatures (None: every pack)."""
    out: list[Problem] = []
    for sig in kb.signatures + kb.progress:  # type: ignore[operator]
        if only and sig.pack not in only:
            continue
        why = nested_quantifier(sig.regex, sig.ignore_case)
        if why:
            out.append(Problem(sig.where, "error", f"signature {sig.id}: {why} (catastrophic backtracking)"))
            continue
        try:
            pat = regex.compile(sig.regex, regex.IGNORECASE if sig.ignore_case else 0)
        except regex.error:
            continue  # reported by the compile check
        for line in _attack_lines(sig.regex):
            try:
                pat.search(line, timeout=SLOW_SECONDS)
            except TimeoutError:
                out.append(
                    Problem(
                        sig.where,
                        "error",
                        f"signature {sig.id}: catastrophic backtracking on a line of {len(line) - 1} "
                        f"{line[0]!r} characters and a '!'",
                    )
                )
                break
    return out


def _rule_problems(kb: KnowledgeBase, only: set[str] | None) -> list[Problem]:
    out: list[Problem] = []
    sig_ids = {s.id for s in kb.signatures}
    used: set[str] = set()
    for rule in kb.rules:
        for pname, pat in rule.spec["when"].items():
            if pat["kind"] != "log.signature":
                continue
            names = _signature_names(pat)
            used.update(names)
            if only and rule.pack not in only:
                continue
            missing = [n for n in names if n not in sig_ids]
            if missing:
                out.append(
                    Problem(
                        rule.where,
                        "error",
                        f"rule {rule.id}: when.{pname} names signatures no pack defines: {missing} (the rule can never fire)",
                    )
                )
            if not names:
                out.append(
                    Problem(
                        rule.where,
                        "warning",
                        f"rule {rule.id}: when.{pname} matches every signature; name the signatures",
                    )
                )
        out += _context_only(kb, rule, only)
        hyp = rule.spec["then"].get("hypothesis")
        if hyp and hyp not in kb.hypotheses and not (only and rule.pack not in only):
            out.append(
                Problem(
                    rule.where,
                    "error",
                    f"rule {rule.id}: hypothesis {hyp} has no catalogue entry (title, alternatives, smoke, remediation)",
                )
            )
    for sig in kb.signatures:
        if only and sig.pack not in only:
            continue
        # A `failure: true` signature is read by the verdict (a visible failure no rule explains), not by rules.
        if sig.id not in used and sig.role != "context" and not sig.failure:
            out.append(Problem(sig.where, "warning", f"signature {sig.id}: no rule reads it"))
    return out


def _context_only(kb: KnowledgeBase, rule: Rule, only: set[str] | None) -> list[Problem]:
    """Context signatures may anchor a rule (a team's start-up line that refines a built-in diagnosis next
    to that diagnosis' own signature). A rule that rests on nothing else raises its hypothesis from
    background lines in a log with no failure in it: allowed, but worth a second look."""
    if only and rule.pack not in only:
        return []
    roles: set[str] = set()
    for pat in rule.spec["when"].values():
        if pat["kind"] != "log.signature":
            return []
        names = _signature_names(pat)
        roles |= {s.role for s in kb.signatures if s.id in names}
        if not names:
            return []
    if roles != {"context"} or not rule.spec["then"].get("hypothesis"):
        return []
    return [
        Problem(
            rule.where,
            "warning",
            f"rule {rule.id}: rests only on context signatures, so it fires on logs with no failure in them"
            " (add a pattern for the failure it refines, e.g. the built-in signature)",
        )
    ]


def _literals(cond: Any) -> list[Any] | None:
    """The constant values an equality condition allows, or None when it is not one (a range, a join, a
    parameter): only literal equalities can prove that nothing derives what a pattern waits for."""
    if isinstance(cond, dict):
        if "in" in cond and isinstance(cond["in"], list):
            vals = list(cond["in"])
        elif set(cond) == {"eq"}:
            vals = [cond["eq"]]
        else:
            return None
    else:
        vals = [cond]
    if any(isinstance(v, (dict, list)) or (isinstance(v, str) and v.startswith("$")) for v in vals):
        return None
    return vals


def _derivable(kb: KnowledgeBase) -> dict[str, list[Mapping[str, Any]]]:
    """Per fact kind only rules can emit, the attributes of every fact some rule derives (hypothesis facts
    included: a rule that raises ``h`` asserts ``{kind: hypothesis, hyp: h}``)."""
    out: dict[str, list[Mapping[str, Any]]] = {}
    for rule in kb.rules:
        if rule.disabled:
            continue
        then = rule.spec["then"]
        if then.get("hypothesis"):
            out.setdefault("hypothesis", []).append({"hyp": then["hypothesis"], "rule": rule.id})
        for d in then.get("derive") or []:
            out.setdefault(d["kind"], []).append(dict(d.get("attrs") or {}))
    return out


def _could_match(match: Mapping[str, Any], attrs: Mapping[str, Any]) -> bool:
    for attr, cond in match.items():
        allowed = _literals(cond)
        value = attrs.get(attr)
        if allowed is None or value is None or (isinstance(value, str) and value.startswith("$")):
            continue  # not a literal on one side: it may match
        if isinstance(value, dict):
            continue  # a parameter
        if value not in allowed:
            return False
    return True


def _derived_problems(kb: KnowledgeBase, only: set[str] | None) -> list[Problem]:
    """A pattern on a kind that only rules emit (no probe, no smoke) waits for a rule to derive it: when no
    rule derives that kind with values the pattern accepts, the rule can never fire."""
    derivable = _derivable(kb)
    out: list[Problem] = []
    for rule in kb.rules:
        if rule.disabled or (only and rule.pack not in only):
            continue
        for pname, pat in rule.spec["when"].items():
            kind = pat["kind"]
            if kb.registry.origins(kind) != ["derived"]:
                continue
            match = pat.get("match") or {}
            if any(_could_match(match, attrs) for attrs in derivable.get(kind, [])):
                continue
            wanted = ", ".join(f"{a}={c}" for a, c in sorted(match.items())) or "any"
            out.append(
                Problem(
                    rule.where,
                    "error",
                    f"rule {rule.id}: when.{pname} waits for a {kind} fact ({wanted}) that no rule derives"
                    " (the rule can never fire)",
                )
            )
    return out


def sort_problems(problems: list[Problem]) -> list[Problem]:
    """Errors first, then by place and message: the order every lint report uses."""
    return sorted(problems, key=lambda p: (p.severity != "error", p.where, p.message))


def lint_kb(kb: KnowledgeBase, only_packs: set[str] | None = None) -> list[Problem]:
    """The engine's checks over a loaded knowledge base (``only_packs``: report only those packs' problems),
    sorted. ``rules lint`` adds the signature examples run through the log scanner (mldebug_rules/pack_lint.py)."""
    problems = _regex_problems(kb, only_packs) + _rule_problems(kb, only_packs)
    problems += _derived_problems(kb, only_packs)
    problems += backtracking_problems(kb, only_packs)
    compiled = compile_kb(kb)
    for node, n in alpha_fanout(compiled).items():
        if n > MAX_FANOUT:
            problems.append(
                Problem(
                    "ruleset",
                    "error",
                    f"{n} range tests, `in` lists or joins hang behind {node} (limit {MAX_FANOUT}; durable-rules"
                    " fails at 64 with error 303); test a constant (e.g. `signature:`) in those patterns first",
                )
            )
    for field, n in distinct_constants(compiled).items():
        if n > MAX_CONSTANTS:
            problems.append(
                Problem(
                    "ruleset",
                    "error",
                    f"field {field!r} has {n} distinct constants (limit {MAX_CONSTANTS}); move the lookup into a collector",
                )
            )
    return sort_problems(problems)
