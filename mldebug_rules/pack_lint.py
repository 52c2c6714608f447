"""``rules lint`` as the command line runs it: the engine's own checks (``engine/lint.py``) plus the one that
needs the log scanner, which the engine may not import:

- every signature matches its own example lines and none of its ``no_match`` lines, through the same scanner
  ``diagnose`` uses, in both of its engines (hyperscan where it is installed, and Python ``regex``).
"""

from __future__ import annotations

import regex

from .collectors.logscan import Pattern, Scanner
from .engine.lint import Problem, lint_kb, sort_problems
from .engine.packs import KnowledgeBase, ProgressPattern, Signature

SCANNER_ENGINES = ("auto", "python")


def example_problems(kb: KnowledgeBase, only: set[str] | None = None) -> list[Problem]:
    """Each signature (and progress pattern) run over its own ``examples``: a ``match`` line it misses or a
    ``no_match`` line it hits is an error, named with the scanner engine that disagreed."""
    out: list[Problem] = []
    for sig in [*kb.signatures, *kb.progress]:
        if only and sig.pack not in only:
            continue
        try:
            regex.compile(sig.regex, regex.IGNORECASE if sig.ignore_case else 0)
        except regex.error:
            continue  # the engine's lint says why it does not compile
        for engine in SCANNER_ENGINES:
            out += _examples_through(sig, engine)
    return out


def _examples_through(sig: Signature | ProgressPattern, engine: str) -> list[Problem]:
    try:
        prefilter = sig.prefilter if isinstance(sig, Signature) else None
        scanner = Scanner([Pattern(sig.id, sig.regex, sig.ignore_case, prefilter=prefilter)], engine=engine)
    except ValueError as e:
        return [Problem(sig.where, "error", f"signature {sig.id}: {e} ({engine} engine)")]
    matches, no_matches = list(sig.examples_match), list(sig.examples_no_match)
    text = "\n".join(matches + no_matches) + "\n"
    hit_lines = {h.line_no for h in scanner.scan_bytes(text.encode("utf-8")).hits}
    out = [
        Problem(
            sig.where, "error", f"signature {sig.id}: does not match its example {ex!r} ({scanner.engine})"
        )
        for i, ex in enumerate(matches, 1)
        if i not in hit_lines
    ]
    out += [
        Problem(
            sig.where, "error", f"signature {sig.id}: matches its no_match example {ex!r} ({scanner.engine})"
        )
        for i, ex in enumerate(no_matches, len(matches) + 1)
        if i in hit_lines
    ]
    return out


def lint(kb: KnowledgeBase, only_packs: set[str] | None = None) -> list[Problem]:
    """Every problem ``rules lint`` reports, errors first (see ``engine/lint.py`` for the engine's checks)."""
    return sort_problems(lint_kb(kb, only_packs) + example_problems(kb, only_packs))
