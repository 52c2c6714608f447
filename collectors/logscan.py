"""Streaming multi-pattern log scanner.

One pass over each file, in bounded chunks, reporting which lines match which signature patterns.

Design (why it looks the way it does):

* Files are read in chunks (default 1 MiB) and cut into *segments* of whole lines: the partial last line of a
  chunk is carried into the next one, so line numbers stay exact across chunk boundaries.  A line longer
  than 1 MiB is never held whole: only its first 1 MiB is kept (and matched), the rest is skipped while
  looking for the next newline, and an issue is recorded.
* Matching is byte-oriented on UTF-8 input: patterns are compiled as *bytes* patterns from their UTF-8
  encoding, so a non-ASCII literal such as ``已杀死`` matches its UTF-8 bytes and invalid UTF-8 in the log
  cannot break anything.  Text is decoded (``errors="replace"``) only for reported lines.
* Semantics are per line: a pattern hits line L iff ``re.search(pattern, L)`` finds a match, where L is the
  line without its terminator (LF or CR LF) and capped at 1 MiB.  ``^``/``$``/``\\A``/``\\Z`` therefore
  mean line start/end.  Both engines only produce *candidate* lines cheaply over a whole segment and then
  confirm each candidate on that line alone (Python ``re`` syntax, run by the ``regex`` module so that every
  call has a timeout: a catastrophically backtracking pattern is given up, see MATCH_TIMEOUT_S);
  confirmation is also what yields the named groups.  Candidates are always a superset of the true hits, so the engines agree with the per-line
  reference by construction.
* Hyperscan engine: every pattern P is compiled as ``(?:P)[^\\n]*$`` in multi-line mode.  Hyperscan reports
  each distinct match end once per pattern, and with that suffix every match on a line ends at the line
  end, so there is at most one callback per (line, pattern) -- the Python callback is the expensive part,
  so this matters for chatty patterns such as progress lines.
* keep="last" patterns (progress lines, one per step) would cost a callback per line: each has a hyperscan
  database of its own with HS_FLAG_SINGLEMATCH, which reports its first line in a segment and stops; the
  file's last hit is looked for, when the file ends, in the last segment that had a confirmed one.
* One pass per file: a Sampler (the metrics probe's metric-line reader) is shown the stretches it asks for
  while they are in memory, so no other reader opens the file. A big plain file is cut at line starts into
  one byte range per CPU, scanned by threads side by side (hyperscan releases the GIL) and joined in order.
* Pure-Python engine: for each pattern, a literal that every match must contain is extracted from the parse
  tree; ``bytes.find`` (a fast C search) over the segment then yields the candidate lines.  Patterns
  without such a literal run ``re.search`` over the segment in multi-line mode, one candidate line per
  match, resuming at the next line.
"""

from __future__ import annotations

import collections
import functools
import io
import json
import math
import os
import re
import sys
import threading
import time
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, BinaryIO, Protocol

import regex as _regex

from ..engine.regex_text import class_end
from ..engine.safeio import Unreadable, open_regular

try:  # the fast engine is optional: everything works without it, just slower
    import hyperscan as _hs
except ImportError:  # pragma: no cover - depends on the environment
    _hs = None

try:  # .zst support is optional
    import zstandard as _zstd
except ImportError:  # pragma: no cover - depends on the environment
    _zstd = None

try:  # the regex parser is private API; it is only used to find a literal prefilter, so failure is harmless
    from re import _parser as _sre_parse  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - Python 3.10
    import sre_parse as _sre_parse  # type: ignore[no-redef]

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "LINE_MATCH_CAP",
    "TEXT_CHARS",
    "Hit",
    "Pattern",
    "PatternTimeout",
    "ScanResult",
    "Scanner",
    "hyperscan_available",
    "scan_paths",
    "tail_anchored",
]

LINE_MATCH_CAP = 1 << 20  # a line is matched on its first 1 MiB only (memory bound for newline-less data)
TEXT_CHARS = 4096  # Hit.text / tail text cap, in characters
_TEXT_BYTES = 4 * TEXT_CHARS  # a UTF-8 char is at most 4 bytes: decoding this many bytes yields >= 4096 chars
# 1 MiB: measured faster than 4-16 MiB (the chunk stays in CPU cache across read, count and match passes,
# and big buffers cost page faults on every allocation), while per-chunk Python overhead is still negligible.
DEFAULT_CHUNK_SIZE = 1 << 20
BINARY_PROBE = 64 << 10  # binary detection looks at the first 64 KiB of (decompressed) content
PROGRESS_MIN_BYTES = 64 << 20  # only scans larger than this get a progress bar (and only on a TTY)
INLINE_MAX_BYTES = 16 << 20  # ...and scans files totalling less than this in-process, one after the other
LAST_WINDOW = 16 << 10  # keep="last" patterns are first looked for in a segment's last 16 KiB
_COMPRESSED_READ = 256 << 10  # compressed bytes fed per decompress call
_ZSTD_FEED = 64 << 10  # zstd's decompressobj has no output cap: small inputs keep each output small
_CONTEXT_BYTES = (
    512  # each context line kept after an `after` pattern's hit is capped at this (frames are short)
)
_MAX_LONG_LINE_ISSUES = 20  # beyond this, over-long lines are summarised in one issue
SPLIT_MIN_BYTES = 64 << 20  # a plain file this big is scanned in byte ranges, one thread per CPU
_CONTEXT_READ = 1 << 20  # read past a range's end for traceback regions open there, at most
_TAIL_HOLD_BYTES = 8 << 20  # segments held for the tail at most (beyond, the oldest is cut into the tail)
_NUMPY_MIN = 64 << 10  # below this, bytes.count beats numpy's per-call overhead
# One regex call (a line's confirmation, or the pure-Python engine's search over a segment) may take this long
# before its pattern is given up for the rest of the scan: catastrophic backtracking must not hang a diagnosis.
MATCH_TIMEOUT_S = 2.0
_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


@dataclass(frozen=True)
class Pattern:
    id: str  # signature id
    regex: str  # Python re syntax, no lookaround/backrefs (hyperscan-compatible); may contain (?P<name>...)
    ignore_case: bool = False
    keep: str = "all"  # "all": every hit (up to max_hits) | "last": only the last hit (progress lines)
    max_hits: int = 1000  # per file; beyond it hits are only counted
    after: int = 0  # lines kept after each kept hit (Hit.after): a traceback's region, read in the same pass
    # A looser regex that every line `regex` matches also matches, for hyperscan to look for instead of `regex`
    # (which then only confirms the candidates): for regexes whose rare part comes after a common one.
    prefilter: str | None = None


@dataclass(frozen=True)
class Hit:
    pattern: int  # index into the scanner's pattern list
    line_no: int  # 1-based physical line number in the (decompressed) file
    text: str  # the line, UTF-8 decoded with errors="replace", no terminator, capped at 4096 chars
    groups: dict[str, str]  # named groups from the Python `re` confirmation (None groups omitted)
    after: tuple[str, ...] = ()  # the lines following it, for patterns with `after` (each capped)


@dataclass
class ScanResult:
    path: str
    hits: list[Hit] = field(default_factory=list)  # sorted by (line_no, pattern)
    counts: dict[int, int] = field(default_factory=dict)  # pattern index -> total hits incl. beyond max_hits
    total_lines: int = 0
    tail: list[tuple[int, str]] = field(default_factory=list)  # last `tail_lines` lines (line_no, text)
    bytes_read: int = 0  # compressed bytes read from disk
    binary: bool = False  # content looks binary (NUL bytes / mostly undecodable in the first 64 KiB)
    truncated: bool = False  # e.g. compressed stream ended early (data kept up to there)
    issues: list[str] = field(default_factory=list)  # one-liners about what could not be read
    engine: str = ""  # "hyperscan <version>" or "python-re"
    timed_out: list[int] = field(default_factory=list)  # patterns given up here (MATCH_TIMEOUT_S exceeded)
    # keep="last" patterns: their confirmed hits among the last `tail_lines` lines (a step-time series).
    recent: list[Hit] = field(default_factory=list)
    sampled: Any = None  # what the scan's Sampler made of the stretches it was shown (see Sampler)
    passes: int = 0  # reads of the file's bytes: 1 (ranges scanned in parallel are one pass between them)
    ranges: int = 0  # byte ranges the pass was split into (threads), 1 when not split


class SampleBuilder(Protocol):
    """Receives one file's sampled matches in file order (see Sampler)."""

    def add(self, base: int, matched: Any) -> None: ...  # base: the file's lines before the segment

    def finish(self, total_lines: int) -> Any: ...


class Sampler(Protocol):
    """A reader shown some stretches of each file during the scan's one pass, so that nothing reads the file a
    second time (the metrics probe's metric lines: collectors/metrics_parse.py). `ranges` picks the stretches by
    byte offset (None: all of it); `match` runs on each segment of whole lines that overlaps one (with the
    segment's offset and the ranges, to read only the lines in them), in the thread that scans it; `builder(...).add` then gets the matches in file order, and `finish` gives the file's
    ScanResult.sampled. Samplers travel to worker processes by pickling."""

    def ranges(self, size: int, compressed: bool) -> list[tuple[int, int]] | None: ...

    def match(self, seg: bytes, offset: int, ranges: list[tuple[int, int]] | None) -> Any: ...

    def builder(self, path: str, size: int, compressed: bool) -> SampleBuilder: ...


class PatternTimeout(Exception):
    """A pattern's regex call ran past MATCH_TIMEOUT_S (catastrophic backtracking on this input)."""

    def __init__(self, index: int) -> None:
        super().__init__(index)
        self.index = index


_np: Any = None  # numpy, imported lazily (it costs ~0.1 s to import) the first time a big segment shows up
_np_tried = False


def _count_newlines(buf: bytes, start: int = 0, end: int | None = None) -> int:
    """Newlines in buf[start:end].  Counting lines is a full pass over the data, and bytes.count is a scalar
    loop; numpy's vectorised compare is ~2.5x faster, so it is used when importable (optional)."""
    global _np, _np_tried
    stop = len(buf) if end is None else end
    if stop - start >= _NUMPY_MIN:
        if not _np_tried:
            _np_tried = True
            try:
                import numpy

                _np = numpy
            except ImportError:  # pragma: no cover - depends on the environment
                _np = None
        if _np is not None:
            view = _np.frombuffer(buf, dtype=_np.uint8, count=stop - start, offset=start)
            return int(_np.count_nonzero(view == 10))
    return buf.count(b"\n", start, stop)


_malloc_tuned = False


def _keep_freed_memory() -> None:
    """Ask glibc to keep freed memory instead of returning it to the kernel at once (mallopt, once per process).

    A scan allocates and frees a few 1 MiB buffers per chunk; by default glibc trims the heap (or unmaps) after
    each, and every new buffer then page-faults its 256 pages in again: measured, a third of a big scan's CPU
    time was this kernel work (1.1 s of system time per GiB, 0.26 s with the heap kept). The heap kept is
    bounded by the threshold below; elsewhere than glibc this does nothing."""
    global _malloc_tuned
    if _malloc_tuned or not sys.platform.startswith("linux"):
        return
    _malloc_tuned = True
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return
    m_trim_threshold, m_mmap_threshold = -1, -3
    mallopt(m_mmap_threshold, 32 << 20)  # 1-2 MiB buffers from the heap, not mmap/munmap each time
    mallopt(m_trim_threshold, 64 << 20)  # and up to 64 MiB of free heap kept for the next ones


def hyperscan_available() -> bool:
    """True when the hyperscan module is importable (engine "auto" then uses it)."""
    return _hs is not None


# --------------------------------------------------------------------------------------------------------
# Pattern preparation


_LEADING_FLAGS = re.compile(r"\(\?([aiLmsux]+)\)")


def _split_leading_flags(regex: str) -> tuple[str, str]:
    """Split global inline flags such as ``(?i)`` off the front of a regex: ``("is", rest)``."""
    flags = ""
    pos = 0
    while True:
        m = _LEADING_FLAGS.match(regex, pos)
        if m is None:
            return flags, regex[pos:]
        flags += m.group(1)
        pos = m.end()


def _line_anchored(regex: str) -> str:
    """Rewrite constructs whose meaning differs between "one line" and "a multi-line segment".

    Candidate search runs over a whole segment in multi-line mode, where ``\\A``/``\\Z`` would mean segment
    start/end; per line they mean line start/end, i.e. ``^``/``$``.  Python's ``{,n}`` is also spelled
    ``{0,n}`` because PCRE (hyperscan) reads ``{,n}`` as literal text.  Character classes are copied as-is.
    """
    out: list[str] = []
    i, n = 0, len(regex)
    in_class = False
    while i < n:
        c = regex[i]
        if c == "\\" and i + 1 < n:
            nxt = regex[i + 1]
            if not in_class and nxt == "A":
                out.append("^")
            elif not in_class and nxt == "Z":
                out.append("$")
            else:
                out.append(regex[i : i + 2])
            i += 2
            continue
        if in_class:
            if c == "]":
                in_class = False
            out.append(c)
            i += 1
            continue
        if c == "[":
            in_class = True
            out.append(c)
            i += 1
            if i < n and regex[i] == "^":
                out.append("^")
                i += 1
            if i < n and regex[i] == "]":  # a ']' first in a class is a literal
                out.append("]")
                i += 1
            continue
        if c == "{":
            m = re.compile(r"\{,(\d+)\}").match(regex, i)
            if m:
                out.append("{0," + m.group(1) + "}")
                i = m.end()
                continue
        out.append(c)
        i += 1
    return "".join(out)


def _required_literal(compiled: re.Pattern[bytes]) -> tuple[bytes, bool] | None:
    """A byte string that every match of `compiled` contains, and whether to look for it case-folded.

    Only the top-level concatenation (and plain groups in it) is considered: each element there is
    matched exactly once, so a run of consecutive literal bytes is required.  The longest run wins.
    Returns None when nothing useful is found, or when the private parser API misbehaves.
    """
    try:
        parsed = _sre_parse.parse(compiled.pattern, compiled.flags)
        icase = bool(parsed.state.flags & re.IGNORECASE)
        literal_op = _sre_parse.LITERAL
        subpattern_op = _sre_parse.SUBPATTERN
        runs: list[bytes] = []
        cur = bytearray()

        def walk(items: Any) -> None:
            nonlocal cur
            for op, av in items:
                if op == literal_op:
                    cur.append(av)
                elif op == subpattern_op and not av[1] and not av[2]:  # (group, add_flags, del_flags, p)
                    walk(av[3])
                else:
                    runs.append(bytes(cur))
                    cur = bytearray()

        walk(parsed)
        runs.append(bytes(cur))
        best = max(runs, key=len)
        if not best or b"\n" in best:
            return None
        return (best.lower() if icase else best), icase
    except Exception:  # private API: having no prefilter is always a correct fallback
        return None


@dataclass
class _Compiled:
    # The original regex, run on one line: decides hits and yields groups. Compiled with the `regex` module,
    # whose calls take a timeout (Python's `re` cannot be interrupted, not even by a probe deadline).
    confirm: Any
    keep_last: bool
    max_hits: int
    # The python engine's segment-wide search: the multi-line form and a required literal as a prefilter.
    # Built only for the patterns that engine looks for (see _with_search): with hyperscan that is few.
    candidate: Any = None
    index: int = -1
    after: int = 0  # lines kept after each kept hit (a traceback's region)

    def search(self, data: bytes, pos: int = 0) -> Any:
        try:
            return self.confirm.search(data, pos, timeout=MATCH_TIMEOUT_S)
        except TimeoutError:
            raise PatternTimeout(self.index) from None

    def search_candidate(self, data: bytes, pos: int) -> Any:
        try:
            return self.candidate.search(data, pos, timeout=MATCH_TIMEOUT_S)
        except TimeoutError:
            raise PatternTimeout(self.index) from None

    literal: bytes | None = None
    literal_icase: bool = False
    after: int = 0


def _with_search(comp: _Compiled, p: Pattern) -> _Compiled:
    flags = re.IGNORECASE if p.ignore_case else 0
    comp.candidate = _regex.compile(_line_anchored(p.regex).encode("utf-8"), flags | re.MULTILINE)
    lit = _required_literal(re.compile(p.regex.encode("utf-8"), flags))
    comp.literal, comp.literal_icase = (lit[0], lit[1]) if lit else (None, False)
    return comp


def _compile_python(index: int, p: Pattern) -> _Compiled:
    if p.keep not in ("all", "last"):
        raise ValueError(f"pattern {p.id}: keep must be 'all' or 'last', not {p.keep!r}")
    if p.max_hits < 0:
        raise ValueError(f"pattern {p.id}: max_hits must be >= 0")
    flags = re.IGNORECASE if p.ignore_case else 0
    try:
        re.compile(p.regex.encode("utf-8"), flags)  # Python `re` syntax is the contract: validate with it
        confirm = _regex.compile(p.regex.encode("utf-8"), flags)
    except (re.error, _regex.error, UnicodeEncodeError, OverflowError, RecursionError) as e:
        raise ValueError(f"pattern {p.id}: {e}") from None
    # An empty-matching pattern would hit every line (and hyperscan refuses most of them): treat as a bug.
    if confirm.search(b"") is not None:
        raise ValueError(f"pattern {p.id}: matches the empty string")
    return _Compiled(
        confirm=confirm, keep_last=p.keep == "last", max_hits=p.max_hits, index=index, after=max(0, p.after)
    )


def _has_end_anchor(regex: str) -> bool:
    """Whether `regex` (already through _line_anchored) contains ``$`` or ``\\z`` outside a class."""
    i, n = 0, len(regex)
    in_class = False
    while i < n:
        c = regex[i]
        if c == "\\":
            if not in_class and regex[i + 1 : i + 2] in ("z", "Z"):
                return True
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            i += 1
            if regex[i : i + 1] == "^":
                i += 1
            if regex[i : i + 1] == "]":
                i += 1
            continue
        elif c == "$":
            return True
        i += 1
    return False


def _relax_end_anchors(regex: str) -> str | None:
    """`regex` (already through _line_anchored) without its ``$`` anchors, or None when that is unsafe.

    Dropping a zero-width assertion only widens what matches, so the result finds a superset of the lines
    the pattern matches. None when a ``$`` is quantified, or the loosened pattern would match an empty line
    (every line would then be a candidate) or no longer compiles."""
    out: list[str] = []
    i, n = 0, len(regex)
    in_class = False
    while i < n:
        c = regex[i]
        if c == "\\":
            out.append(regex[i : i + 2])
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            j = i + 1
            if regex[j : j + 1] == "^":
                j += 1
            if regex[j : j + 1] == "]":
                j += 1
            out.append(regex[i:j])
            i = j
            continue
        elif c == "$":
            if regex[i + 1 : i + 2] in ("?", "*", "+", "{"):
                return None
            i += 1
            continue
        out.append(c)
        i += 1
    loose = "".join(out)
    try:
        if re.compile(loose.encode("utf-8")).search(b"") is not None:
            return None
    except (re.error, OverflowError, RecursionError):
        return None
    return loose


def _atoms(branch: str) -> list[tuple[int, int]] | None:
    """(start, end) of each atom of one alternative of a regex, a quantifier counted in its atom; None when a
    construct is not understood here (the caller then keeps the plain loosening)."""
    out: list[tuple[int, int]] = []
    i, n = 0, len(branch)
    while i < n:
        start = i
        c = branch[i]
        if c == "\\":
            i += 2
        elif c == "[":
            i = class_end(branch, i)
        elif c == "(":
            depth = 0
            while i < n:
                ch = branch[i]
                if ch == "\\":
                    i += 2
                    continue
                if ch == "[":
                    i = class_end(branch, i)
                    continue
                depth += ch == "("
                depth -= ch == ")"
                i += 1
                if depth == 0:
                    break
        elif c in "*+?{":
            return None  # a quantifier with nothing before it
        else:
            i += 1
        if i > n:
            return None
        # Quantifiers (and their lazy/possessive marks) belong to the atom before them.
        while i < n and branch[i] in "*+?{":
            if branch[i] == "{":
                close = branch.find("}", i)
                if close < 0:
                    return None
                i = close + 1
            else:
                i += 1
        out.append((start, i))
    return out


def _top_alternatives(regex: str) -> list[str] | None:
    """The alternatives of `regex` at its top level."""
    atoms = _atoms(regex)
    if atoms is None:
        return None
    out, start = [], 0
    for a, b in atoms:
        if regex[a:b] == "|":
            out.append(regex[start:a])
            start = b
    out.append(regex[start:])
    return out


def _has_other_group(regex: str) -> bool:
    """Whether `regex` has a group other than ``(...)``, ``(?:...)`` and ``(?P<name>...)`` (outside classes)."""
    i, n = 0, len(regex)
    while i < n:
        c = regex[i]
        if c == "\\":
            i += 2
            continue
        if c == "[":
            i = class_end(regex, i)
            continue
        if (c == "(" and regex[i + 1 : i + 2] == "?" and regex[i + 2 : i + 3] not in (":", "P")) or (
            c == "(" and regex[i + 1 : i + 4] == "?P="
        ):
            return True
        i += 1
    return False


_GROUP_OPEN = re.compile(r"\((?:\?:|\?P<\w+>|\?<\w+>|\?[imsx]+:)?")


def tail_anchored(regex: str) -> str | None:
    """`regex` (already through _line_anchored) with the wrapper's "rest of the line" put where each alternative
    ends: ``$`` at the end of an alternative becomes the newline itself, any other ending gets ``[^\n]*\n``.

    So ``epoch 0(?:[^0-9./]|$)`` becomes ``epoch 0(?:[^0-9./][^\n]*\n|\n)``, which hyperscan matches as
    precisely as the regex, where dropping the ``$`` (_relax_end_anchors) would make every ``epoch 0.5`` line a
    candidate, each costing a Python confirmation. Every match still ends at the newline of its line, except
    when a class or ``\\s`` before a final ``$`` swallows the newline: then it ends on a later line too, a
    candidate the confirmation rejects. None when a ``$`` is anywhere but at an alternative's end."""
    if _has_other_group(regex):
        return None  # look-arounds, conditionals, scoped flags: the loader refuses most; never rewrite them
    alternatives = _top_alternatives(regex)
    if alternatives is None:
        return None
    out: list[str] = []
    for alt in alternatives:
        atoms = _atoms(alt)
        if atoms is None:
            return None
        if not atoms:
            return None  # an empty alternative: the whole pattern could match an empty line
        a, b = atoms[-1]
        head, last = alt[:a], alt[a:b]
        if _has_end_anchor(head):
            return None
        if last == "$":
            out.append(head + r"\n")
            continue
        if last.startswith("(") and last.endswith(")") and _has_end_anchor(last):
            opener = _GROUP_OPEN.match(last)
            assert opener is not None  # every group starts with "("
            inner = tail_anchored(last[opener.end() : -1])
            if inner is None:
                return None
            out.append(head + opener.group(0) + inner + ")")
            continue
        if _has_end_anchor(last):
            return None  # a quantified group with a $ inside, and the like
        out.append(alt + r"[^\n]*\n")
    return "|".join(out)


# --------------------------------------------------------------------------------------------------------
# Literal prefilter: most signature alternatives contain a literal that a healthy run's lines never do.


_LIT_MIN = 4  # shorter literals make hyperscan's literal matcher slow and match too often
_LIT_SET_MAX = 16  # a class or an alternation multiplies the strings of a run; beyond this the run ends
_FLAG_BITS = {"i": re.IGNORECASE, "s": re.DOTALL, "x": re.VERBOSE, "m": re.MULTILINE}


def _class_bytes(av: Any) -> list[int] | None:
    """The bytes of a small character class without negation or categories (``[Ff]``, ``[-+]``), else None."""
    out: list[int] = []
    for op, v in av:
        if op is _sre_parse.LITERAL:
            out.append(v)
        elif op is _sre_parse.RANGE and v[1] - v[0] < 8:
            out += range(v[0], v[1] + 1)
        else:
            return None
    return out if 0 < len(out) <= 8 else None


def _seq_literals(items: Any, out: list[list[bytes]], score: Any) -> list[bytes] | None:
    """Append to `out` the literal sets of a parsed sequence: sets of byte strings one of which every match of
    the sequence contains (runs of literals, small classes and alternations multiplied out: ``[Ff]ocal`` is
    {Focal, focal}). Returns the exact strings the whole sequence matches when it is such a set, else None."""
    op_lit, op_sub, op_branch = _sre_parse.LITERAL, _sre_parse.SUBPATTERN, _sre_parse.BRANCH
    cur: set[bytes] = {b""}
    complete = True

    def flush() -> None:
        nonlocal cur
        if cur != {b""}:
            out.append(sorted(cur))
        cur = {b""}

    def times(more: Sequence[bytes]) -> None:
        nonlocal cur, complete
        if len(cur) * len(more) > _LIT_SET_MAX:
            flush()
            complete = False
        cur = {x + y for x in cur for y in more}

    for op, av in items:
        if op is op_lit:
            times([bytes([av])])
            continue
        if op is _sre_parse.AT:
            continue  # zero-width (\b, ^): the literal bytes on either side stay adjacent in the text
        full: list[bytes] | None = None
        if op is _sre_parse.IN:
            chars = _class_bytes(av)
            full = None if chars is None else [bytes([c]) for c in chars]
        elif op is op_sub and not av[1] and not av[2]:  # (group, add_flags, del_flags, p); scoped flags: skip
            full = _seq_literals(av[3], out, score)
        elif op is op_branch:
            full = _branch_literals(av[1], out, score)
        elif op in (_sre_parse.MAX_REPEAT, _sre_parse.MIN_REPEAT):
            lo, hi, sub = av
            if lo >= 1:
                inner = _seq_literals(sub, out, score)
                if inner is not None and lo == hi == 1:
                    full = inner
            elif hi == 1:
                inner = _seq_literals(sub, [], score)
                if inner is not None:
                    full = [*inner, b""]  # optional: with it or without
        if full is None:
            flush()
            complete = False
            continue
        times(full)
    result = sorted(cur) if complete else None
    flush()
    return result


def _branch_literals(branches: Any, out: list[list[bytes]], score: Any) -> list[bytes] | None:
    """Appends to `out` one literal set for the alternation (each branch's best set, joined) when every branch
    has one; returns the exact strings the alternation matches when every branch is such a set, else None."""
    fulls: list[bytes] = []
    picked: list[bytes] = []
    exact = True
    ok = True
    for b in branches:
        sets: list[list[bytes]] = []
        full = _seq_literals(b, sets, score)
        if full is None:
            exact = False
        else:
            fulls += full
        sets = [s for s in sets if min(map(len, s)) >= _LIT_MIN]
        if not sets:
            ok = False
        else:
            picked += min(sets, key=score)
    if ok and not exact:
        out.append(sorted(set(picked)))
    return sorted(set(fulls)) if exact and len(set(fulls)) <= _LIT_SET_MAX else None


@functools.cache
def _healthy_corpus() -> tuple[bytes, bytes]:
    from .healthy_lines import LINES

    text = b"\n".join(LINES)
    return text, text.lower()


def _alternative_literals(alt: str, flags: int) -> tuple[list[bytes], bool] | None:
    """The literals of one top-level alternative that no healthy line contains (one of them is in every line
    the alternative matches), and whether to match them caseless; None when it has no such literal."""
    text, lowered = _healthy_corpus()
    try:
        parsed = _sre_parse.parse(alt.encode("utf-8"), flags)
        icase = bool(parsed.state.flags & re.IGNORECASE)
        hay = lowered if icase else text

        def score(s: list[bytes]) -> tuple[int, int]:
            """Fewest healthy-line sightings first (none, to be used at all), then the fewest and longest strings."""
            if any(b"\n" in x or b"\r" in x or (icase and max(x, default=0) > 127) for x in s):
                return (1 << 60, 0)  # unusable: hyperscan folds ASCII only; no literal spans lines
            # then the longest shortest string, a byte shorter per doubling of the strings
            return (
                sum(hay.count(x.lower() if icase else x) for x in s),
                math.log2(len(s)) - min(map(len, s)),
            )

        sets: list[list[bytes]] = []
        _seq_literals(parsed, sets, score)
    except Exception:  # private parser API, or a piece that does not parse alone: no prefilter
        return None
    sets = [s for s in sets if min(map(len, s)) >= _LIT_MIN]
    if not sets:
        return None
    best = min(sets, key=score)
    if score(best)[0]:
        return None
    found = {x.lower() for x in best} if icase else set(best)
    # "Grad overflow" is in every line that "Grad overflow detected" is in: the longer one is redundant
    return sorted(x for x in found if not any(y != x and y in x for y in found)), icase


def _literal_split(p: Pattern) -> tuple[list[tuple[bytes, bool]], str | None] | None:
    """(literals, the regex of the alternatives left to hyperscan's regex database or None) of a keep="all"
    pattern; None when no alternative has a literal the prefilter can use."""
    flag_text, rest = _split_leading_flags(p.regex)
    if "x" in flag_text or _has_other_group(rest) or re.search(r"\\[1-9]", rest):
        return None  # verbose mode, look-arounds, scoped flags, back-references: left as they were
    alts = _top_alternatives(rest)
    if not alts:
        return None
    flags = re.IGNORECASE if p.ignore_case else 0
    for c in flag_text:
        flags |= _FLAG_BITS.get(c, 0)
    lits: list[tuple[bytes, bool]] = []
    left: list[str] = []
    for alt in alts:
        got = _alternative_literals(alt, flags) if alt else None
        if got is None:
            left.append(alt)
        else:
            lits += [(x, got[1]) for x in got[0]]
    if not lits:
        return None
    head = f"(?{flag_text})" if flag_text else ""
    return lits, (head + "|".join(left)) if left else None


def _hyperscan_expression(p: Pattern, line_end: bool = True) -> bytes:
    """``(?:P)[^\\n]*\\n``: the hyperscan form of a pattern without end anchors.

    Every match on a line then ends just after that line's newline, and hyperscan reports each distinct end
    offset once per pattern, so there is at most one callback per (line, pattern): the Python callback is
    the expensive part, so this matters for chatty patterns such as progress lines.  The scanned buffer
    always ends with a newline (one is appended to an unterminated last line).

    Patterns with ``$`` are given to hyperscan without it (_relax_end_anchors): hyperscan 5.4 misses some
    matches of an end anchor right before the buffer's final newline (e.g. ``(?:aa|b)$`` on
    ``"abababababa\\nabab\\n"``), and rejects end anchors inside a wrapper like this one.
    """
    flags, rest = _split_leading_flags(p.regex)
    # Python-only global flags: a (ASCII) and L (locale) are moot for bytes, u is invalid for bytes anyway;
    # m is what we always do.
    flags = "".join(sorted(set(flags) - set("aLum")))
    head = f"(?{flags})" if flags else ""
    # In verbose mode a trailing "# comment" would swallow our ")": a newline ends it (and is ignored).
    close = "\n)" if "x" in flags else ")"
    # Without `line_end`, the regex already ends each alternative at its line's newline (tail_anchored).
    return (head + "(?:" + _line_anchored(rest) + close + (r"[^\n]*\n" if line_end else "")).encode("utf-8")


def _hyperscan_flags(p: Pattern) -> int:
    assert _hs is not None
    flags = _hs.HS_FLAG_MULTILINE
    if p.ignore_case:
        flags |= _hs.HS_FLAG_CASELESS
    return flags


def _hyperscan_version() -> str:
    assert _hs is not None
    return str(getattr(_hs, "__version__", "unknown"))


# --------------------------------------------------------------------------------------------------------
# Per-file state: line assembly, matching, bookkeeping


def _last_confirmed(seg: bytes, ends: list[int], confirm: Any) -> tuple[int, bytes, Any] | None:
    """(line start, line, match) of the last of these line ends whose line `confirm` matches."""
    for end in reversed(ends):
        start = seg.rfind(b"\n", 0, end) + 1
        line = seg[start:end]
        m = confirm(line)
        if m is not None:
            return start, line, m
    return None


class _FileScan:
    """Accumulates one file's results from a stream of arbitrary byte chunks."""

    def __init__(
        self,
        scanner: Scanner,
        path: str,
        sample: tuple[list[tuple[int, int]] | None, Any, Any] | None = None,
        offset: int = 0,
    ) -> None:
        self.sc = scanner
        self.res = ScanResult(path=path, engine=scanner.engine, passes=1, ranges=1)
        n = len(scanner.patterns)
        self.counts = [0] * n
        self.hits: list[list[tuple[int, bytes, dict[str, bytes | None]]]] = [[] for _ in range(n)]
        self.last: list[tuple[int, bytes, dict[str, bytes | None]] | None] = [None] * n
        self.lines = 0  # complete lines processed so far
        self.tail: collections.deque[tuple[int, bytes]] = collections.deque(maxlen=max(0, scanner.tail_lines))
        # The tail is cut out of the last segments only when the file ends (or when they grow big): cutting 200
        # lines out of every segment cost more than matching it.
        self.tail_segs: collections.deque[tuple[bytes, int, bool, int]] = collections.deque()
        self.tail_seg_lines = 0
        self.tail_seg_bytes = 0
        # keep="last" patterns: the latest segment with a confirmed hit (bytes, lines before it), and
        # the number of segments they were seen in. Their last hit is looked for there when the file ends.
        self.held: dict[int, tuple[bytes, int]] = {}
        self.seen_in: list[int] = [0] * n
        # Sampling (see Sampler): the byte ranges shown to it, its match function and where matches go.
        self.sample_ranges, self.sample_match, self.sample_sink = sample or (None, None, None)
        self.offset = offset  # byte offset of the next segment in the (decompressed) stream
        self.line_notes: list[tuple[int, str]] = []  # (line, issue with "{line}" in it): numbered when merged
        self.carry: list[bytes] = []  # pieces of the current partial line (always < LINE_MATCH_CAP + 2 bytes)
        self.carry_len = 0
        self.long_head: bytes | None = None  # first LINE_MATCH_CAP bytes of an over-long line being skipped
        self.long_len = 0
        self.long_cr = False  # whether the skipped line's last byte so far is a CR (of a CR LF)
        self.long_lines = 0
        self.probe = bytearray()
        # Context lines after hits of `after` patterns: (pattern, hit index) -> lines, and the ones still open
        # at a segment's end (they take the next segment's first lines).
        self.context: dict[tuple[int, int], list[bytes]] = {}
        self.open_context: list[tuple[list[bytes], int]] = []

    # -- chunk intake ---------------------------------------------------------------------------------

    def feed(self, chunk: bytes) -> None:
        if not chunk:
            return
        if len(self.probe) < BINARY_PROBE:
            self.probe += chunk[: BINARY_PROBE - len(self.probe)]
        if self.long_head is not None:  # inside an over-long line: skip to its newline
            nl = chunk.find(b"\n")
            if nl < 0:
                self.long_len += len(chunk)
                self.long_cr = chunk.endswith(b"\r")
                return
            self.long_len += nl
            if nl:
                self.long_cr = chunk[nl - 1] == 13
            self._finish_long_line()
            chunk = chunk[nl + 1 :]
            if not chunk:
                return
        last = chunk.rfind(b"\n")
        if last < 0:
            self.carry.append(chunk)
            self.carry_len += len(chunk)
            if self.carry_len > LINE_MATCH_CAP + 1:  # > cap even without a CR: an over-long line
                head = b"".join(self.carry)
                self.long_head, self.long_len = head[:LINE_MATCH_CAP], len(head)
                self.long_cr = head.endswith(b"\r")
                self.carry, self.carry_len = [], 0
            return
        if self.carry:
            seg = b"".join([*self.carry, memoryview(chunk)[: last + 1]])  # one copy, not two
        else:
            seg = chunk if last == len(chunk) - 1 else chunk[: last + 1]
        rest = chunk[last + 1 :]
        self.carry, self.carry_len = ([rest], len(rest)) if rest else ([], 0)
        self._lines(seg, final=False)
        if self.carry_len > LINE_MATCH_CAP + 1:
            self.long_head, self.long_len = rest[:LINE_MATCH_CAP], len(rest)
            self.long_cr = rest.endswith(b"\r")
            self.carry, self.carry_len = [], 0

    def finish(self) -> ScanResult:
        self.end()
        return self._result()

    def end(self) -> None:
        """The input is over: its last line, the keep="last" patterns' last hits and the tail."""
        if self.long_head is not None:
            self._finish_long_line()
        elif self.carry:
            self._lines(b"".join(self.carry), final=True)
            self.carry, self.carry_len = [], 0
        self._finish_last()
        self._flush_tail()
        self.held.clear()

    def absorb(self, later: _FileScan) -> None:
        """Append the results of the byte range that follows this one (scanned by another thread)."""
        shift = self.lines
        for idx, later_hits in enumerate(later.hits):
            self.counts[idx] += later.counts[idx]
            if later.last[idx] is not None:
                ln, b, g = later.last[idx]  # type: ignore[misc]
                self.last[idx] = (ln + shift, b, g)
            kept = self.hits[idx]
            room = self.sc._comp(idx).max_hits - len(kept) if later_hits else 0
            for k, (ln, b, g) in enumerate(later_hits[: max(0, room)]):
                ctx = later.context.get((idx, k))
                if ctx is not None:
                    self.context[(idx, len(kept))] = ctx
                kept.append((ln + shift, b, g))
        self.tail.extend((ln + shift, b) for ln, b in later.tail)
        self.line_notes += [(ln + shift, text) for ln, text in later.line_notes]
        self.long_lines += later.long_lines
        self.res.issues += later.res.issues
        self.res.timed_out += [i for i in later.res.timed_out if i not in self.res.timed_out]
        self.res.truncated |= later.res.truncated
        self.res.bytes_read += later.res.bytes_read
        self.res.ranges += later.res.ranges
        self.lines += later.lines

    # -- line handling --------------------------------------------------------------------------------

    def _finish_long_line(self) -> None:
        assert self.long_head is not None
        head, length = self.long_head, self.long_len - self.long_cr  # a CR LF's CR is not content
        self.long_head, self.long_len, self.long_cr = None, 0, False
        self.offset += max(0, length - LINE_MATCH_CAP)  # the skipped part
        self._note_long_line(self.lines + 1, length)
        self._segment(head + b"\n")

    def _note_long_line(self, line_no: int, length: int) -> None:
        self.long_lines += 1
        if self.long_lines <= _MAX_LONG_LINE_ISSUES:
            self.line_notes.append(
                (line_no, f"line {{line}} is {length} bytes; matched on its first 1 MiB only")
            )

    def _lines(self, seg: bytes, final: bool) -> None:
        """Process whole lines (the last one unterminated only at EOF), splitting out over-long lines."""
        n = len(seg)
        window = LINE_MATCH_CAP + 1
        start = p = 0  # start: first byte not yet processed; p: a line start being checked
        while p < n:
            # Any newline in the next `window` bytes means every line up to it is short enough.
            q = seg.rfind(b"\n", p, p + window)
            if q >= 0:
                p = q + 1
                continue
            if p + window > n:  # the rest is one line shorter than the window
                break
            e = seg.find(b"\n", p + window)
            end = n if e < 0 else e
            length = end - p
            if seg[end - 1 : end] == b"\r" and (e >= 0 or final):
                length -= 1  # the CR of CR LF is terminator, not content
            if length > LINE_MATCH_CAP:
                if start < p:
                    self._segment(seg[start:p])
                self._note_long_line(self.lines + 1, length)
                self._segment(seg[p : p + LINE_MATCH_CAP] + b"\n")
                start = end + 1
            p = end + 1
        if start < n:
            self._segment(seg if start == 0 else seg[start:])

    def _segment(self, seg: bytes) -> None:
        """Match a run of whole lines; `seg` ends with a newline unless it holds the file's last line."""
        unterminated = not seg.endswith(b"\n")  # only the file's last line may lack a newline
        start_offset = self.offset
        self.offset += len(seg)
        if self.sample_match is not None and _overlaps(self.sample_ranges, start_offset, self.offset):
            self.sample_sink(self.lines, self.sample_match(seg, start_offset, self.sample_ranges))
        if b"\r" in seg:  # CR LF -> LF once per segment, so neither `$` nor texts ever see the CR
            seg = seg.replace(b"\r\n", b"\n")
            if unterminated and seg.endswith(b"\r"):  # a final line cut inside its CR LF
                seg = seg[:-1]
        sc = self.sc
        compiled = sc._compiled
        npat = len(sc.patterns)
        if self.open_context:
            self._continue_context(seg)
        skip = sc._timed_out
        present: list[
            tuple[int, int]
        ] = []  # keep="last" patterns: (index, line end) of their first candidate
        keys = sc._candidates(seg, lambda idx, seg_line: self._give_up(idx, self.lines + seg_line), present)
        base = self.lines
        counted_to = 0  # newlines in seg[:counted_to] are already counted ...
        newlines = 0  # ... and this is how many there are
        prev_key = -1
        line_start = -1
        line = b""
        for key in keys:
            if key == prev_key:
                continue
            prev_key = key
            end, idx = divmod(key, npat)
            if idx in skip:
                continue
            start = seg.rfind(b"\n", 0, end) + 1
            if start != line_start:
                line_start, line = start, seg[start:end]
            try:
                m = (compiled[idx] or sc._comp(idx)).search(line)
            except PatternTimeout:
                self._give_up(idx, base + newlines + _count_newlines(seg, counted_to, end) + 1)
                continue
            if m is None:
                continue
            if end != counted_to:  # count newlines lazily: one pass over the segment in total
                newlines += _count_newlines(seg, counted_to, end)
                counted_to = end
            kept = self._record(idx, base + newlines + 1, line, m)
            if kept and (compiled[idx] or sc._comp(idx)).after:
                self._start_context(idx, seg, end)
        newlines += _count_newlines(seg, counted_to)
        nlines = newlines + (1 if unterminated else 0)
        for idx, end in present:
            # Only the last hit is kept (progress lines, one per step): a callback per line would cost more than
            # the whole scan, so hyperscan reports a segment's first candidate only; once confirmed, this segment
            # is the one the last hit is looked for in when the file ends (_finish_last).
            if idx in skip:
                continue
            start = seg.rfind(b"\n", 0, end) + 1
            comp = compiled[idx] or sc._comp(idx)
            try:
                m = comp.search(seg[start:end])
                if (
                    m is None
                ):  # a match that ran on across a newline (\s): any line of the segment confirming?
                    ends = sc._last_ends(seg, [idx], whole=True).get(idx, [])
                    m = _last_confirmed(seg, ends, comp.search)
            except PatternTimeout:
                self._give_up(idx, base + 1)
                continue
            if m is not None:
                self.held[idx] = (seg, base)
                self.seen_in[idx] += 1
        self.lines = base + nlines
        self._hold_tail(seg, nlines, unterminated)

    def _give_up(self, idx: int, line_no: int) -> None:
        """Stop using pattern `idx` for the rest of this scanner's work: one call exceeded the bound."""
        self.sc._timed_out.add(idx)
        if idx not in self.res.timed_out:
            self.res.timed_out.append(idx)
            self.res.issues.append(
                f"signature {self.sc.patterns[idx].id}: one match took over {MATCH_TIMEOUT_S:g} s "
                f"near line {line_no} (catastrophic backtracking); not used for the rest of the scan"
            )

    def _record(self, idx: int, line_no: int, line: bytes, m: Any) -> bool:
        self.counts[idx] += 1
        comp = self.sc._comp(idx)
        if comp.keep_last:
            self.last[idx] = (line_no, line[:_TEXT_BYTES], m.groupdict())
        elif len(self.hits[idx]) < comp.max_hits:
            self.hits[idx].append((line_no, line[:_TEXT_BYTES], m.groupdict()))
            return True
        return False

    def _start_context(self, idx: int, seg: bytes, end: int) -> None:
        """Keep the lines after the hit just recorded (its line ends at `end` in `seg`)."""
        lines: list[bytes] = []
        self.context[(idx, len(self.hits[idx]) - 1)] = lines
        want = self.sc._comp(idx).after
        left = self._take_lines(seg, end + 1, lines, want)
        if left:
            self.open_context.append((lines, left))

    def _continue_context(self, seg: bytes) -> None:
        still = []
        for lines, want in self.open_context:
            left = self._take_lines(seg, 0, lines, want)
            if left:
                still.append((lines, left))
        self.open_context = still

    @staticmethod
    def _take_lines(seg: bytes, pos: int, out: list[bytes], want: int) -> int:
        """Append up to `want` lines of `seg` from `pos` to `out`; return how many are still wanted."""
        n = len(seg)
        while want and pos < n:
            nl = seg.find(b"\n", pos)
            stop = n if nl < 0 else nl
            out.append(seg[pos : min(stop, pos + _CONTEXT_BYTES)])
            want -= 1
            pos = stop + 1
        return want

    def _hold_tail(self, seg: bytes, nlines: int, unterminated: bool) -> None:
        """Keep the last segments until the later ones hold `tail_lines` lines (or a few MiB: then cut)."""
        want = self.tail.maxlen or 0
        if not want or not nlines:
            return
        self.tail_segs.append((seg, self.lines, unterminated, nlines))
        self.tail_seg_lines += nlines
        self.tail_seg_bytes += len(seg)
        while len(self.tail_segs) > 1:
            first = self.tail_segs[0]
            if self.tail_seg_lines - first[3] < want and self.tail_seg_bytes <= _TAIL_HOLD_BYTES:
                break
            self.tail_segs.popleft()
            self.tail_seg_lines -= first[3]
            self.tail_seg_bytes -= len(first[0])
            if self.tail_seg_lines < want:  # long lines: cut the oldest into the tail now, bytes stay bounded
                self._cut_tail(*first[:3])

    def _flush_tail(self) -> None:
        while self.tail_segs:
            self._cut_tail(*self.tail_segs.popleft()[:3])
        self.tail_seg_lines = self.tail_seg_bytes = 0

    def _cut_tail(self, seg: bytes, last_line: int, unterminated: bool) -> None:
        """Append the last lines of `seg` (whose last line is number `last_line`) to the tail."""
        first_line = last_line - _count_newlines(seg) - (1 if unterminated else 0) + 1
        want = min(self.tail.maxlen or 0, last_line - first_line + 1)
        if want <= 0:
            return
        items: list[tuple[int, bytes]] = []
        line_no = last_line
        end = len(seg) if unterminated else len(seg) - 1
        for _ in range(want):
            start = seg.rfind(b"\n", 0, end) + 1
            items.append((line_no, seg[start : min(end, start + _TEXT_BYTES)]))
            line_no -= 1
            end = start - 1
        self.tail.extend(reversed(items))

    def _finish_last(self) -> None:
        """The last hit of each keep="last" pattern, in the segment that held it; and its hits in the tail."""
        sc = self.sc
        for idx, (seg, base) in self.held.items():
            if idx in sc._timed_out:
                continue
            comp = sc._comp(idx)
            ends = sc._last_ends(seg, [idx]).get(idx, [])
            try:
                hit = _last_confirmed(seg, ends, comp.search)
                if hit is None:  # hyperscan and Python rarely disagree on a line: then the whole segment
                    ends = sc._last_ends(seg, [idx], whole=True).get(idx, [])
                    hit = _last_confirmed(seg, ends, comp.search)
            except PatternTimeout:
                self._give_up(idx, base + 1)
                continue
            if hit is None:
                continue
            start, line, m = hit
            line_no = base + _count_newlines(seg, 0, start) + 1
            self.last[idx] = (line_no, line[:_TEXT_BYTES], m.groupdict())
            # A lower bound (exact for a log of one segment, about 1 MiB): this segment's matching lines, and one for
            # each earlier segment the pattern was seen in.
            self.counts[idx] = len(ends) + self.seen_in[idx] - 1

    def _recent(self) -> list[Hit]:
        """Confirmed hits of the keep="last" patterns among the tail lines (ScanResult.recent): the tail is held
        in memory anyway, and a few hundred regex calls cost nothing next to the pass."""
        sc = self.sc
        last = [i for i, p in enumerate(sc.patterns) if p.keep == "last" and i not in sc._timed_out]
        out: list[Hit] = []
        for line_no, line in self.tail if last else ():
            for idx in last:
                try:
                    m = sc._comp(idx).search(line)
                except PatternTimeout:
                    continue
                if m is not None:
                    out.append(Hit(idx, line_no, _text(line), _groups(m.groupdict())))
        return out

    # -- result ---------------------------------------------------------------------------------------

    def _result(self) -> ScanResult:
        res = self.res
        res.issues[:0] = [text.format(line=ln) for ln, text in self.line_notes[:_MAX_LONG_LINE_ISSUES]]
        res.recent = self._recent()
        if self.long_lines > _MAX_LONG_LINE_ISSUES:
            res.issues.append(
                f"{self.long_lines - _MAX_LONG_LINE_ISSUES} more lines longer than 1 MiB "
                "(matched on their first 1 MiB only)"
            )
        hits: list[Hit] = []
        for idx in range(len(self.counts)):
            raw = self.hits[idx]
            last = self.last[idx]
            if last is not None:
                raw = [last]
            ctx = self.context
            hits.extend(
                Hit(idx, line_no, _text(b), _groups(g), tuple(_text(x) for x in ctx.get((idx, i), ())))
                for i, (line_no, b, g) in enumerate(raw)
            )
        hits.sort(key=lambda h: (h.line_no, h.pattern))
        res.hits = hits
        res.counts = {i: c for i, c in enumerate(self.counts) if c}
        res.total_lines = self.lines
        res.tail = [(ln, _text(b)) for ln, b in self.tail]
        verdict = _binary_verdict(bytes(self.probe))
        if verdict:
            res.binary = True
            res.issues.append(f"content looks binary ({verdict} in the first 64 KiB); scanned anyway")
        return res


def _text(b: bytes) -> str:
    return b[:_TEXT_BYTES].decode("utf-8", "replace")[:TEXT_CHARS]


def _groups(g: dict[str, bytes | None]) -> dict[str, str]:
    return {k: _text(v) for k, v in g.items() if v is not None}


def _binary_verdict(probe: bytes) -> str | None:
    if not probe:
        return None
    if b"\x00" in probe:
        return "NUL bytes"
    text = probe.decode("utf-8", "replace")
    if text.count("\ufffd") > 0.3 * len(text):
        return "mostly invalid UTF-8"
    return None


# --------------------------------------------------------------------------------------------------------
# Sources: plain / gzip / zstd, all as a stream of decompressed chunks


class _SourceError(Exception):
    """A read problem after some data was delivered: the scan keeps what it has."""


def _plain_chunks(fh: BinaryIO, head: bytes, chunk_size: int) -> Iterator[bytes]:
    if head:
        yield head
    read = fh.read
    while True:
        chunk = read(chunk_size)
        if not chunk:
            return
        yield chunk


def _gzip_chunks(fh: BinaryIO, head: bytes, chunk_size: int, state: dict[str, Any]) -> Iterator[bytes]:
    """Stream-decompress (possibly multi-member) gzip with output capped per call (gzip bombs stay bounded).

    zlib is used directly rather than the gzip module so that a truncated stream still yields everything
    decompressed up to the cut, and trailing garbage is tolerated.
    """
    d = zlib.decompressobj(zlib.MAX_WBITS | 16)
    pending = head
    started = False
    while True:
        if not pending:
            pending = fh.read(_COMPRESSED_READ)
            if not pending:
                break
        if d.eof:  # a member ended: another member, zero padding, or garbage follows
            if not pending.strip(b"\x00"):
                pending = b""
                continue
            if not (pending.startswith(_GZIP_MAGIC) or (len(pending) == 1 and pending == _GZIP_MAGIC[:1])):
                state["trailing_garbage"] = True
                return
            d = zlib.decompressobj(zlib.MAX_WBITS | 16)
            started = False
        try:
            out = d.decompress(pending, chunk_size)
        except zlib.error as e:
            state["corrupt"] = str(e)
            return
        started = True
        pending = d.unused_data if d.eof else d.unconsumed_tail
        if out:
            yield out
    # Input exhausted: drain output zlib may still hold (bounded per call), then check completeness.
    while started and not d.eof:
        try:
            out = d.decompress(b"", chunk_size)
        except zlib.error as e:
            state["corrupt"] = str(e)
            return
        if not out:
            break
        yield out
    if started and not d.eof:
        state["truncated"] = True


def _zstd_chunks(fh: BinaryIO, head: bytes, state: dict[str, Any]) -> Iterator[bytes]:
    assert _zstd is not None
    dctx = _zstd.ZstdDecompressor()
    d = dctx.decompressobj()
    pending = head
    started = False
    while True:
        if not pending:
            pending = fh.read(_COMPRESSED_READ)
            if not pending:
                break
        if d.eof:  # one frame done; the next frame needs a fresh decompression object
            if not pending.strip(b"\x00"):
                pending = b""
                continue
            d = dctx.decompressobj()
            started = False
        piece, pending = pending[:_ZSTD_FEED], pending[_ZSTD_FEED:]
        try:
            out = d.decompress(piece)
        except _zstd.ZstdError as e:
            state["corrupt"] = str(e)
            return
        started = True
        if d.eof:
            pending = d.unused_data + pending
        if out:
            yield out
    if started and not d.eof:
        state["truncated"] = True


# --------------------------------------------------------------------------------------------------------
# Scanner


_HS_DATABASES: dict[str, Any] = {}


@functools.cache
def _cpu_tag() -> str:
    """The CPU's feature flags: a serialized database is only valid on the platform it was built for, and a
    home directory (so the cache) is often shared by a cluster's different nodes."""
    machine = os.uname().machine if hasattr(os, "uname") else sys.platform
    try:
        with open("/proc/cpuinfo", "rb") as f:
            head = f.read(16384)
        for line in head.splitlines():
            if line.startswith((b"flags", b"Features")):
                return machine + ":" + line.split(b":", 1)[-1].strip().decode("ascii", "replace")
    except OSError:
        pass
    return machine


def _hs_database(exprs: list[bytes], ids: list[int], flags: list[int], literal: bool = False) -> Any:
    """A block-mode database for these expressions (`literal`: plain byte strings, hyperscan's literal API):
    from this process, the on-disk cache, or compiled.

    Compiling the packs' signatures takes hyperscan most of a second, every run; a serialized database
    loads in microseconds. Keyed by the hyperscan version and the exact expressions, ids and flags."""
    assert _hs is not None
    from .. import cache

    key = cache.digest(
        [
            "hs",
            _hyperscan_version(),
            _cpu_tag(),
            repr(ids),
            repr(flags),
            *(["literal"] if literal else []),
            *exprs,
        ]
    )  # each part length-prefixed
    db = _HS_DATABASES.get(key)
    if db is not None:
        return db
    blob = cache.get("hyperscan", key)
    if blob is not None:
        try:
            db = _hs.loadb(blob, _hs.HS_MODE_BLOCK)
        except Exception:
            db = None  # written by another build of the library: compile afresh
    if db is None:
        db = _hs.Database(mode=_hs.HS_MODE_BLOCK)
        db.compile(expressions=exprs, ids=ids, elements=len(ids), flags=flags, literal=literal)
        try:
            cache.put("hyperscan", key, _hs.dumpb(db))
        except Exception:
            pass  # the cache is an optimisation only
    _HS_DATABASES[key] = db
    return db


def _hyperscan_plan(
    patterns: Sequence[Pattern],
) -> tuple[list[int], list[int], dict[int, bytes], set[int], list[tuple[bytes, int, bool]]]:
    """(indices for hyperscan's regex database, indices for the Python path, hyperscan expressions, loosened
    indices, literal prefilter entries (literal, index, caseless)).

    A keep="all" pattern's top-level alternatives that contain a literal no healthy line has (healthy_lines.py)
    are looked for by that literal alone, in a pure-literal database: hyperscan's regex database scanned a
    dense log at about half grep's speed, most of it spent on alternatives that start with a common word; the
    literal database scans it several times faster and reports nothing on healthy lines. Each candidate line
    is confirmed with the pattern's regex, as every candidate is. The other alternatives stay in the regex
    database (expression `exprs[i]` then covers only them; a pattern all of whose alternatives have a literal
    is in neither index list).

    Pure in the patterns and this module's code, and a few dozen milliseconds of string work and regex
    compiles for the packs' signatures, so it goes through the on-disk cache like the databases."""
    from .. import cache

    key = cache.digest(
        ["plan", _module_digest(), *(f"{p.ignore_case}:{p.keep}:{p.regex}:{p.prefilter}" for p in patterns)]
    )
    blob = cache.get("hyperscan-plan", key)
    if blob is not None:
        try:
            doc = json.loads(blob)
            exprs = {int(i): e.encode("latin-1") for i, e in doc["exprs"].items()}
            lits = [(x.encode("latin-1"), int(i), bool(c)) for x, i, c in doc["lits"]]
            return list(doc["hs"]), list(doc["py"]), exprs, set(doc["relaxed"]), lits
        except (ValueError, KeyError, TypeError, AttributeError):
            pass
    hs_idx: list[int] = []
    py_idx: list[int] = []
    exprs = {}
    relaxed: set[int] = set()
    literals: list[tuple[bytes, int, bool]] = []
    for i, p in enumerate(patterns):
        if p.prefilter:
            # Hyperscan looks for the prefilter; the Python confirmation every candidate gets applies the regex.
            # A common prefix, an unbounded gap and the rare part (``loss \d+.*loss nan``) cost hyperscan ~15x a
            # plain literal on every line that has the prefix, while the rare part alone is cheap.
            p = replace(p, regex=p.prefilter, prefilter=None)
            relaxed.add(i)
        split = _literal_split(p) if p.keep == "all" else None
        if split is not None:
            literals += [(x, i, icase) for x, icase in split[0]]
            if split[1] is None:
                continue
            p = replace(p, regex=split[1])
            relaxed.add(i)
        anchored = _line_anchored(p.regex)
        if not _has_end_anchor(anchored):
            exprs[i] = _hyperscan_expression(p)
            hs_idx.append(i)
            continue
        # Hyperscan gets no end anchor (see _hyperscan_expression). Where each ``$`` ends an alternative, the
        # newline itself stands for it (tail_anchored), which keeps the candidates as few as the regex's hits.
        # Otherwise it is dropped: a superset of the lines, which the Python confirmation, which every candidate
        # gets, narrows. Searching such patterns with Python over every segment cost ~100x.
        # Leading flags (``(?i)``) are set apart first: tail_anchored refuses groups other than plain ones.
        flag_text, body = _split_leading_flags(anchored)
        tail = tail_anchored(body) if "x" not in flag_text else None
        if tail is not None:
            tail = f"(?{flag_text}){tail}" if flag_text else tail
            exprs[i] = _hyperscan_expression(replace(p, regex=tail), line_end=False)
            hs_idx.append(i)
            relaxed.add(i)
            continue
        loose = _relax_end_anchors(anchored)
        if loose is None:
            py_idx.append(i)
            continue
        exprs[i] = _hyperscan_expression(replace(p, regex=loose))
        hs_idx.append(i)
        relaxed.add(i)
    doc = {
        "hs": hs_idx,
        "py": py_idx,
        "exprs": {str(i): e.decode("latin-1") for i, e in exprs.items()},
        "relaxed": sorted(relaxed),
        "lits": [[x.decode("latin-1"), i, c] for x, i, c in literals],
    }
    cache.put("hyperscan-plan", key, json.dumps(doc).encode())
    return hs_idx, py_idx, exprs, relaxed, literals


@functools.cache
def _module_digest() -> str:
    """This module's own bytes and the healthy lines': a plan computed by other code must not be reused."""
    import hashlib

    h = hashlib.sha256()
    try:
        for name in (__file__, os.path.join(os.path.dirname(__file__), "healthy_lines.py")):
            with open(name, "rb") as f:
                h.update(f.read())
    except OSError:
        return "unknown"
    return h.hexdigest()


class Scanner:
    """Compiled set of patterns; scan files or byte strings with it.

    engine: "auto" (hyperscan when importable, else pure Python), "python", or "hyperscan" (required).
    chunk_size: bytes read per step (tests use tiny values to force chunk boundaries everywhere).
    progress: allow the TTY progress bar (files > PROGRESS_MIN_BYTES, stderr a TTY); scan_paths' workers disable it.
    """

    def __init__(
        self,
        patterns: Sequence[Pattern],
        tail_lines: int = 200,
        engine: str = "auto",
        *,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        progress: bool = True,
        trusted: bool = False,
    ) -> None:
        if engine not in ("auto", "python", "hyperscan"):
            raise ValueError(f"engine must be 'auto', 'python' or 'hyperscan', not {engine!r}")
        if chunk_size < 1:
            raise ValueError("chunk_size must be >= 1")
        if engine == "hyperscan" and _hs is None:
            raise ValueError("engine 'hyperscan' requested but the hyperscan module is not importable")
        self.patterns: tuple[Pattern, ...] = tuple(patterns)
        self.tail_lines = tail_lines
        self.chunk_size = chunk_size
        self.progress = progress
        self._requested_engine = engine
        self.trusted = trusted
        self._db: Any = None
        self._py_idx: list[int] = list(range(len(self.patterns)))  # patterns found via the Python path
        self._tls = threading.local()
        # Python `re` compiles are needed by both engines (confirmation and groups), so both validate; with
        # `trusted` patterns (the pack loader already compiled and checked them) the ones hyperscan looks for
        # are compiled on their first candidate instead, which is most of a small scan's start-up.
        use_hs = _hs is not None and engine != "python"
        self._compiled: list[_Compiled | None] = [
            None if trusted and use_hs else _compile_python(i, p) for i, p in enumerate(self.patterns)
        ]
        self._relaxed: set[int] = set()
        self._timed_out: set[int] = set()  # patterns given up after a regex call exceeded MATCH_TIMEOUT_S
        self._last_idx: list[int] = []  # keep="last" patterns searched from each segment's end
        self._hs_forms: dict[int, tuple[bytes, int]] = {}  # hyperscan expression and flags per pattern
        self._subset_dbs: dict[tuple[int, ...], Any] = {}
        self._lit_db: Any = None  # the literal prefilter (see _hyperscan_plan)
        self.fallbacks: list[str] = []  # patterns hyperscan refused, left to the Python path (and why)
        if use_hs:
            self._db, self._py_idx = self._compile_hyperscan()
            self.engine = f"hyperscan {_hyperscan_version()}"
        else:
            self.engine = "python-re"

        try:
            for i in self._py_idx:
                _with_search(self._comp(i), self.patterns[i])
        except (re.error, _regex.error, OverflowError, RecursionError) as e:
            raise ValueError(f"pattern {self.patterns[i].id}: {e}") from None

    def _comp(self, idx: int) -> _Compiled:
        comp = self._compiled[idx]
        if comp is None:  # trusted pattern, first candidate: compiling twice in two threads is harmless
            comp = self._compiled[idx] = _compile_python(idx, self.patterns[idx])
        return comp

    # Scanners travel to worker processes by their constructor arguments (hyperscan databases don't pickle).
    def __getstate__(self) -> dict[str, Any]:
        return {
            "patterns": self.patterns,
            "tail_lines": self.tail_lines,
            "engine": self._requested_engine,
            "chunk_size": self.chunk_size,
            "progress": self.progress,
            "trusted": self.trusted,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]
            state["patterns"],
            state["tail_lines"],
            state["engine"],
            chunk_size=state["chunk_size"],
            progress=state["progress"],
            trusted=state.get("trusted", False),
        )

    # -- engines --------------------------------------------------------------------------------------

    def _compile_hyperscan(self) -> tuple[Any, list[int]]:
        """Database for the patterns hyperscan can take, and the indices left to the Python path.

        The literal prefilter (_hyperscan_plan) goes into the same database as the regexes, as escaped
        expressions with ids offset by the number of patterns: one pass over the data instead of two. On a dense
        1 GiB log the two passes cost 0.11 + 0.08 s per 128 MiB, the one 0.13 s (hyperscan's literal matcher
        serves both). Only when that database does not compile is the literal API's own database used."""
        assert _hs is not None
        hs_idx, py_idx, exprs, relaxed, literals = _hyperscan_plan(self.patterns)
        self._relaxed = relaxed
        flags = {i: _hyperscan_flags(self.patterns[i]) for i in hs_idx}
        npat = len(self.patterns)
        lit_part = (
            [re.escape(x) for x, _, _ in literals],
            [npat + i for _, i, _ in literals],
            [_hs.HS_FLAG_CASELESS if c else 0 for _, _, c in literals],
        )

        def separate_literals() -> list[int]:
            """The literal API's database for the prefilter; the Python path's indices it adds if that fails."""
            nonlocal hs_idx
            if not literals:
                return py_idx
            try:
                self._lit_db = _hs_database(
                    [x for x, _, _ in literals],
                    [i for _, i, _ in literals],
                    [_hs.HS_FLAG_CASELESS if c else 0 for _, _, c in literals],
                    literal=True,
                )
                return py_idx
            except _hs.error as e:  # never seen; the Python path then looks for these patterns
                self.fallbacks.append(f"hyperscan could not compile the literal prefilter: {e}")
                lit_only = {i for _, i, _ in literals} - set(hs_idx) - set(py_idx)
                out = sorted(set(py_idx) | lit_only | {i for _, i, _ in literals if i in relaxed})
                hs_idx = [i for i in hs_idx if i not in out]
                return out

        def build(idx: list[int], with_literals: bool = False) -> Any:
            ex, ids, fl = [exprs[i] for i in idx], list(idx), [flags[i] for i in idx]
            if with_literals:
                ex, ids, fl = ex + lit_part[0], ids + lit_part[1], fl + lit_part[2]
            return _hs_database(ex, ids, fl)

        # keep="last" patterns that hyperscan matches exactly (not loosened) get a database each, searched
        # from each segment's end (_last_ends): a progress line on every line would otherwise cost a callback
        # and a confirmation per line, for the one hit kept.
        solo = [i for i in hs_idx if self.patterns[i].keep == "last" and i not in relaxed]
        self._hs_forms = {i: (exprs[i], flags[i]) for i in hs_idx}
        main = [i for i in hs_idx if i not in set(solo)]
        if literals:
            try:
                if solo:
                    build(solo)
                db = build(main, with_literals=True)
                self._last_idx = solo
                return db, py_idx
            except _hs.error:
                pass  # the literal API's database, and the regexes as below
        py_idx = separate_literals()
        if not hs_idx:
            return None, py_idx
        if solo:
            main = [i for i in hs_idx if i not in set(solo)]
            try:
                build(solo)
                db = build(main) if main else None
                self._last_idx = solo
                return db, py_idx
            except _hs.error:
                pass  # one database for all, and the error path below names any culprit
        try:
            return build(hs_idx), py_idx
        except _hs.error:
            pass
        # Compile one by one to find the culprit (only on this error path, so the cost doesn't matter).
        keep: list[int] = []
        for i in hs_idx:
            try:
                build([i])
                keep.append(i)
            except _hs.error as e:
                if "can never match" in str(e):  # e.g. a\bb: no line can match it, so drop it
                    continue
                # Whatever hyperscan refuses (a loosened form, a construct it lacks, a size limit), the Python
                # path matches: one pattern hyperscan cannot take never turns the scanner off for the others.
                py_idx.append(i)
                self.fallbacks.append(f"pattern {self.patterns[i].id}: hyperscan: {e}")
        py_idx.sort()
        if not keep:
            return None, py_idx
        try:
            return build(keep), py_idx
        except _hs.error as e:  # each compiles alone but not together: the Python path takes them all
            self.fallbacks.append(f"hyperscan could not compile the pattern set: {e}")
            return None, sorted(py_idx + keep)

    def _candidates(
        self, seg: bytes, give_up: Any = None, present: list[tuple[int, int]] | None = None
    ) -> list[int]:
        """Sorted keys ``line_end * npat + index`` of candidate (line, pattern) pairs in `seg`.

        line_end is the offset of the newline ending the line (len(seg) for an unterminated last line).
        Duplicates are possible; the caller confirms every candidate. The keep="last" patterns that hyperscan
        matches exactly are not among them: `present` gets (index, line end) of the first line each matches.
        """
        keys = self._candidates_py(seg, self._py_idx, give_up) if self._py_idx else []
        if self._db is not None or self._last_idx or self._lit_db is not None:
            keys.extend(self._candidates_hs(seg, present))
        keys.sort()
        return keys

    def _candidates_hs(self, seg: bytes, present: list[tuple[int, int]] | None = None) -> list[int]:
        assert _hs is not None
        keys: list[int] = []
        append = keys.append
        npat = len(self.patterns)

        # The expressions end by consuming a newline, so the last line needs one.
        data = seg if seg.endswith(b"\n") else seg + b"\n"
        find = data.find

        def on_match(idx: int, _from: int, to: int, _flags: int, _ctx: object) -> None:
            # kept minimal: it runs once per candidate (line, pattern)
            if idx < npat:
                append((to - 1) * npat + idx)
            else:  # a literal of the prefilter: the line's end (literals hold no newline)
                append(find(b"\n", to) * npat + idx - npat)

        if self._db is not None:
            self._scan_db(self._db, data, on_match)
            # Hyperscan 5.4 can miss a match that ends exactly at the buffer's end (measured: ``a\n`` beside
            # ``^a[^\n]*\n`` on ``b\xe5\xb7\xb2\nbaaaaaa\n``), so the last line is scanned once more with a
            # blank line after it; a candidate found twice is confirmed once (the keys are deduplicated).
            last = data.rfind(b"\n", 0, len(data) - 1) + 1
            tail = data[last:]
            tail_end = len(tail)

            def on_tail(idx: int, _from: int, to: int, _flags: int, _ctx: object) -> None:
                if idx >= npat:
                    pass  # a literal: the scan of the whole segment found it, wherever it ends
                elif to <= tail_end:  # not the padding's own line
                    append((last + to - 1) * npat + idx)

            self._scan_db(self._db, tail + b"\n", on_tail)
        if self._lit_db is not None:

            def on_literal(idx: int, _from: int, to: int, _flags: int, _ctx: object) -> None:
                append(find(b"\n", to) * npat + idx)  # the line's end (literals hold no newline)

            self._scan_db(self._lit_db, data, on_literal)
        if present is not None and self._last_idx:
            # keep="last" patterns (progress lines, one per step): a callback per line would cost more than the
            # whole scan, so each has a database of its own with HS_FLAG_SINGLEMATCH, which reports its first line
            # in the segment and stops there (one database for all of them scans several times slower when some
            # never match). The file's last hit is then looked for in the last segment that had one.
            seen = present.append

            def on_first(idx: int, _from: int, to: int, _flags: int, _ctx: object) -> None:
                seen((idx, to - 1))

            for idx in self._last_idx:
                if idx not in self._timed_out:
                    self._scan_with([idx], data, on_first, 0, single=True)
        return keys

    def _last_ends(
        self, seg: bytes, only: list[int] | None = None, whole: bool = False
    ) -> dict[int, list[int]]:
        """Line ends (as in _candidates), ascending, of the keep="last" patterns' matches near the end of
        `seg`: in its last LAST_WINDOW bytes, and, for the patterns not there, in the rest of it (or in all
        of it, with `whole`)."""
        assert _hs is not None
        data = seg if seg.endswith(b"\n") else seg + b"\n"
        n = len(data)
        split = data.rfind(b"\n", 0, n - LAST_WINDOW) + 1 if n > LAST_WINDOW and not whole else 0
        ends: dict[int, list[int]] = {}
        pats = only if only is not None else self._last_idx

        def on_match(idx: int, _from: int, to: int, _flags: int, base: object) -> None:
            ends.setdefault(idx, []).append(to - 1 + base)  # type: ignore[operator]

        self._scan_with(pats, data[split:], on_match, split)
        if split:
            missing = [i for i in pats if i not in ends]
            if missing:
                self._scan_with(missing, data[:split], on_match, 0)
        return ends

    def _scan_with(
        self, idx: list[int], data: bytes, on_match: Any, context: int, single: bool = False
    ) -> None:
        """Scan `data` with a database of just the patterns `idx` (built once, then cached); `single`: each pattern
        reports its first match only (HS_FLAG_SINGLEMATCH)."""
        assert _hs is not None
        key = (*idx, -1) if single else tuple(idx)
        db = self._subset_dbs.get(key)
        if db is None:
            forms = [self._hs_forms[i] for i in idx]
            extra = _hs.HS_FLAG_SINGLEMATCH if single else 0
            db = self._subset_dbs[key] = _hs_database(
                [f[0] for f in forms], idx, [f[1] | extra for f in forms]
            )
        self._scan_db(db, data, on_match, context)

    def _scan_db(self, db: Any, data: bytes, on_match: Any, context: object = None) -> None:
        """Scan `data` with `db`, with this thread's scratch space for it (scratch space may not be shared
        between concurrent scans)."""
        assert _hs is not None
        scratches = getattr(self._tls, "scratches", None)
        if scratches is None:
            scratches = self._tls.scratches = {}
        scratch = scratches.get(id(db))
        if scratch is None:
            scratch = scratches[id(db)] = _hs.Scratch(db)
        db.scan(data, match_event_handler=on_match, scratch=scratch, context=context)

    def _candidates_py(self, seg: bytes, indices: list[int], give_up: Any = None) -> list[int]:
        """Candidates with bytes.find (required literal) or re over the whole segment, per pattern."""
        keys: list[int] = []
        append = keys.append
        npat = len(self.patterns)
        n = len(seg)
        find = seg.find
        lowered: bytes | None = None
        for idx in indices:
            if idx in self._timed_out:
                continue
            comp = self._comp(idx)
            lit = comp.literal
            if lit is not None:
                hay = seg
                if comp.literal_icase:
                    if lowered is None:
                        lowered = seg.lower()  # ASCII-only, like re.IGNORECASE on bytes
                    hay = lowered
                hfind = hay.find
                i = hfind(lit)
                while i >= 0:
                    end = find(b"\n", i)
                    if end < 0:
                        end = n
                    append(end * npat + idx)
                    i = hfind(lit, end + 1)
                continue
            assert comp.candidate is not None  # built in __init__ for every pattern of this path
            search = comp.search_candidate
            pos = 0
            while pos <= n:
                try:
                    m = search(seg, pos)
                except PatternTimeout:
                    if give_up is not None:
                        give_up(idx, 1 + seg.count(b"\n", 0, pos))
                    self._timed_out.add(idx)
                    break
                if m is None:
                    break
                # The line where the match starts is a candidate even if the match ran on across a newline
                # (confirmation on the line alone decides); any later line is found by resuming after it.
                end = find(b"\n", m.start())
                if end < 0:
                    end = n
                append(end * npat + idx)
                pos = end + 1
        return keys

    # -- scanning -------------------------------------------------------------------------------------

    def scan_bytes(self, data: bytes, path: str = "<bytes>", sampler: Sampler | None = None) -> ScanResult:
        """Scan an in-memory log (plain, gzip or zstd content, recognised by magic bytes)."""
        return self._scan_stream(io.BytesIO(bytes(data)), path, len(data), sampler)

    def scan_path(
        self, path: str | os.PathLike[str], sampler: Sampler | None = None, threads: int | None = None
    ) -> ScanResult:
        """Scan one file; never raises for unreadable, odd or binary files: see ScanResult.issues.

        A plain file of SPLIT_MIN_BYTES or more is cut into `threads` byte ranges at line starts (default: one per
        available CPU), scanned side by side: hyperscan releases the GIL, so both CPUs of a small machine work
        on one big log. It is still one pass: each byte is read once, and the ranges' results are joined."""
        spath = os.fspath(path)
        try:  # regular files only: a FIFO would block the open, a device never end
            fh = open_regular(spath)
        except Unreadable as e:
            return self._failed(spath, e.reason)
        try:
            size = os.fstat(fh.fileno()).st_size
            if size >= PROGRESS_MIN_BYTES:
                _keep_freed_memory()
            if threads is None:
                threads = _available_cpus()
            # Only hyperscan lets the threads work side by side: the pure-Python engine holds the GIL.
            if threads > 1 and size >= SPLIT_MIN_BYTES and self.engine != "python-re":
                try:
                    head = os.pread(fh.fileno(), 4, 0)
                except OSError:
                    head = b""
                if head and not head.startswith((_GZIP_MAGIC, _ZSTD_MAGIC)):
                    res = self._scan_split(fh, spath, size, sampler, threads)
                    if res is not None:
                        return res
            return self._scan_stream(fh, spath, size, sampler)
        finally:
            fh.close()

    def _failed(self, path: str, issue: str) -> ScanResult:
        return ScanResult(path=path, issues=[issue], engine=self.engine)

    def _scan_split(
        self, fh: BinaryIO, path: str, size: int, sampler: Sampler | None, parts: int
    ) -> ScanResult | None:
        """Scan byte ranges of a plain file in `parts` threads; None when it cannot be cut at line starts."""
        fd = fh.fileno()
        bounds = [0]
        for k in range(1, parts):
            b = _line_start_after(fd, k * size // parts, size)
            if b is not None and bounds[-1] < b < size:
                bounds.append(b)
        bounds.append(size)
        n = len(bounds) - 1
        if n < 2:
            return None
        builder = sampler.builder(path, size, False) if sampler is not None else None
        buffered: list[list[tuple[int, Any]]] = [[] for _ in range(n)]
        scans: list[_FileScan] = []
        for k in range(n):
            sample = None
            if sampler is not None and builder is not None:
                # The first range feeds the sampler as it goes; the others keep their matches for it, in order.
                sink = builder.add if k == 0 else (lambda base, m, buf=buffered[k]: buf.append((base, m)))
                sample = (sampler.ranges(size, False), sampler.match, sink)
            scans.append(_FileScan(self, path, sample, offset=bounds[k]))

        done = [0] * n  # bytes read per range, for the progress bar (shown by the first range's thread)
        progress = (
            _Progress(path, size)
            if self.progress and size > PROGRESS_MIN_BYTES and _stderr_is_tty()
            else None
        )

        def work(k: int) -> None:
            scan, pos, end = scans[k], bounds[k], bounds[k + 1]
            try:
                while pos < end:
                    chunk = os.pread(fd, min(self.chunk_size, end - pos), pos)
                    if not chunk:
                        break
                    scan.feed(chunk)
                    pos += len(chunk)
                    done[k] = pos - bounds[k]
                    if k == 0 and progress is not None:
                        progress.update(sum(done))
                if pos < end:
                    scan.res.truncated = True
                    scan.line_notes.append((scan.lines, "file shrank while read, after line {line}"))
                if scan.open_context:  # a traceback region that runs on into the next range
                    _extend_context(scan, fd, end, size)
            except OSError as e:  # e.g. EIO mid-file: keep what was read
                scan.res.truncated = True
                scan.line_notes.append((scan.lines, f"read error after line {{line}}: {e.strerror or e}"))
            except MemoryError:
                scan.res.truncated = True
                scan.line_notes.append((scan.lines, "read error after line {line}: out of memory"))
            scan.res.bytes_read = pos - bounds[k]
            scan.end()

        import concurrent.futures  # here: a small diagnosis never splits a file

        with concurrent.futures.ThreadPoolExecutor(max_workers=n - 1) as pool:
            futures = [pool.submit(work, k) for k in range(1, n)]
            try:
                work(0)
                for fut in futures:
                    fut.result()
            finally:
                if progress is not None:
                    progress.close()
        first = scans[0]
        for k in range(1, n):
            if builder is not None:
                for base, m in buffered[k]:
                    builder.add(first.lines + base, m)
                buffered[k].clear()
            first.absorb(scans[k])
        res = first._result()
        if builder is not None:
            res.sampled = builder.finish(first.lines)
        return res

    def _scan_stream(self, fh: BinaryIO, path: str, size: int, sampler: Sampler | None = None) -> ScanResult:
        state: dict[str, Any] = {}
        try:
            head = fh.read(4)
        except OSError as e:
            scan = _FileScan(self, path)
            scan.res.issues.append(f"read error: {e.strerror or e}")
            return scan.finish()
        compressed = head.startswith((_GZIP_MAGIC, _ZSTD_MAGIC))
        builder = sampler.builder(path, size, compressed) if sampler is not None else None
        sample = None
        if sampler is not None and builder is not None:
            sample = (sampler.ranges(size, compressed), sampler.match, builder.add)
        scan = _FileScan(self, path, sample)
        res = scan.res
        kind = "plain"
        if head.startswith(_GZIP_MAGIC):
            kind = "gzip"
            chunks = _gzip_chunks(fh, head, self.chunk_size, state)
        elif head.startswith(_ZSTD_MAGIC):
            kind = "zstd"
            if _zstd is None:
                res.bytes_read = len(head)
                res.issues.append("zstd-compressed, but the zstandard module is not installed; not scanned")
                return res
            chunks = _zstd_chunks(fh, head, state)
        else:
            chunks = _plain_chunks(fh, head, self.chunk_size)
        show = self.progress and size > PROGRESS_MIN_BYTES and _stderr_is_tty()
        progress = _Progress(path, size) if show else None
        try:
            for chunk in chunks:
                scan.feed(chunk)
                if progress is not None:
                    progress.update(_tell(fh))
        except OSError as e:  # e.g. EIO mid-file: keep what was read
            state["read_error"] = e.strerror or str(e)
        except MemoryError:
            state["read_error"] = "out of memory"
        finally:
            if progress is not None:
                progress.close()
        res.bytes_read = _tell(fh)
        scan.finish()
        if builder is not None:
            res.sampled = builder.finish(scan.lines)
        lines = scan.lines
        if "truncated" in state:
            res.truncated = True
            res.issues.append(f"{kind} stream truncated after line {lines}")
        if "corrupt" in state:
            res.truncated = True
            res.issues.append(f"{kind} data corrupt after line {lines}: {state['corrupt']}")
        if "read_error" in state:
            res.truncated = True
            res.issues.append(f"read error after line {lines}: {state['read_error']}")
        if "trailing_garbage" in state:
            res.issues.append("trailing garbage after the gzip data ignored")
        return res


def _overlaps(ranges: list[tuple[int, int]] | None, start: int, end: int) -> bool:
    """Whether [start, end) meets one of the byte ranges (None: everything does)."""
    if ranges is None:
        return True
    return any(a < end and start < b for a, b in ranges)


def _line_start_after(fd: int, pos: int, size: int) -> int | None:
    """The offset just after the first newline at or after `pos` (within 4 MiB), or None."""
    stop = min(size, pos + (4 << 20))
    while pos < stop:
        piece = os.pread(fd, min(64 << 10, stop - pos), pos)
        if not piece:
            return None
        nl = piece.find(b"\n")
        if nl >= 0:
            return pos + nl + 1
        pos += len(piece)
    return None


def _extend_context(scan: _FileScan, fd: int, pos: int, size: int) -> None:
    """Feed the lines after a range's end to the traceback regions still open there (bounded read)."""
    data = os.pread(fd, min(_CONTEXT_READ, size - pos), pos)
    cut = data.rfind(b"\n")
    if cut < 0:
        return
    seg = data[: cut + 1].replace(b"\r\n", b"\n")
    scan._continue_context(seg)
    scan.open_context = []


def _tell(fh: BinaryIO) -> int:
    try:
        return fh.tell()
    except (OSError, ValueError):
        return 0


def _stderr_is_tty() -> bool:
    try:
        return sys.stderr is not None and sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


class _Progress:
    """A progress bar on stderr (rich; a plain self-overwriting line without it), refreshed at most twice a
    second and erased when done. Only ever built when stderr is a TTY."""

    def __init__(self, path: str, size: int) -> None:
        self.path = os.path.basename(path)
        self.size = size
        self.next = 0.0
        self.shown = False
        self.bar: Any = None
        try:
            from rich.console import Console
            from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

            self.bar = Progress(
                TextColumn("reading {task.description}"),
                BarColumn(),
                DownloadColumn(binary_units=True),
                TimeRemainingColumn(),
                console=Console(file=sys.stderr, force_terminal=True),
                transient=True,
                auto_refresh=False,  # no refresh thread: update() refreshes, twice a second at most
                redirect_stdout=False,  # the scan runs beside other probes: never touch sys.stdout
                redirect_stderr=False,
            )
            self.task = self.bar.add_task(self.path, total=size)
        except ImportError:
            self.bar = None

    def update(self, pos: int) -> None:
        now = time.monotonic()
        if now < self.next:
            return
        self.next = now + 0.5
        if self.bar is not None:
            if not self.shown:
                self.bar.start()
            self.bar.update(self.task, completed=pos, refresh=True)
        else:
            pct = 100.0 * pos / self.size if self.size else 0.0
            sys.stderr.write(f"\rlogscan {self.path}: {pct:5.1f}% ({pos >> 20}/{self.size >> 20} MiB)")
            sys.stderr.flush()
        self.shown = True

    def close(self) -> None:
        if not self.shown:
            return
        if self.bar is not None:
            self.bar.stop()
        else:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()


# --------------------------------------------------------------------------------------------------------
# Many files


_worker_scanner: Scanner | None = None


def _worker_init(state: dict[str, Any]) -> None:
    global _worker_scanner
    scanner = Scanner.__new__(Scanner)
    scanner.__setstate__(state)
    _worker_scanner = scanner


def _worker_scan(path: str, sampler: Sampler | None = None) -> ScanResult:
    assert _worker_scanner is not None
    return _worker_scanner.scan_path(path, sampler, threads=1)


def _worker_context() -> Any:
    """How worker processes start: from a fork server where the platform has one.

    The diagnosis runs its probes on threads, so a plain fork() here copies a process whose other threads
    may hold a lock (the import lock, a logging handler's, a C library's); the child would wait on it
    forever, and a diagnosis must never hang. The fork server is a fresh single-threaded process that has
    already imported this module, so each worker still starts in milliseconds."""
    import multiprocessing

    if "forkserver" not in multiprocessing.get_all_start_methods():
        return None  # Windows: spawn, the default there
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([__name__])
    return ctx


def _available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _size_or_zero(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def scan_paths(
    scanner: Scanner, paths: Sequence[str], jobs: int | None = None, sampler: Sampler | None = None
) -> list[ScanResult]:
    """Scan many files in parallel worker processes (one per core by default); results in input order.

    Processes rather than threads because confirmation, bookkeeping and the pure-Python engine hold the
    GIL.  Largest files are started first so one big log doesn't end up alone at the end.  If worker
    processes cannot be used (sandbox, daemonic parent), threads are used instead.  A single file is scanned
    here: a big one in byte ranges on threads (Scanner.scan_path), with no process to start or results to pickle.
    """
    spaths = [os.fspath(p) for p in paths]
    if not spaths:
        return []
    cpus = _available_cpus()
    workers = max(1, min(jobs or cpus, len(spaths)))
    sizes = [_size_or_zero(p) for p in spaths]
    total = sum(sizes)
    # Worker processes cost tens of milliseconds to start: small inputs are scanned right here.
    if workers == 1 or (jobs is None and total < INLINE_MAX_BYTES):
        threads = None if jobs is None else 1
        return [scanner.scan_path(p, sampler, threads) for p in spaths]
    import concurrent.futures  # here: a small diagnosis scans in-process and never needs it (nor logging)
    import concurrent.futures.process

    order = sorted(range(len(spaths)), key=lambda i: -sizes[i])
    results: list[ScanResult | None] = [None] * len(spaths)
    try:
        with concurrent.futures.ProcessPoolExecutor(
            max_workers=workers,
            mp_context=_worker_context(),
            initializer=_worker_init,
            # several workers must not fight over one TTY line; a single one keeps its progress display
            initargs=(dict(scanner.__getstate__(), progress=scanner.progress and workers == 1),),
        ) as pool:
            futures = {pool.submit(_worker_scan, spaths[i], sampler): i for i in order}
            # Several workers: one bar here over all the bytes, advanced as each file completes.
            bar = (
                _Progress(f"{len(spaths)} files", total)
                if scanner.progress and workers > 1 and total > PROGRESS_MIN_BYTES and _stderr_is_tty()
                else None
            )
            done = 0
            for fut in concurrent.futures.as_completed(futures):
                results[futures[fut]] = fut.result()
                done += sizes[futures[fut]]
                if bar is not None:
                    bar.update(done)
            if bar is not None:
                bar.close()
    except (OSError, AssertionError, concurrent.futures.process.BrokenProcessPool):
        # AssertionError: multiprocessing refuses children of daemonic processes.
        with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as tpool:
            futures2 = {tpool.submit(scanner.scan_path, spaths[i], sampler, 1): i for i in order}
            for fut in concurrent.futures.as_completed(futures2):
                results[futures2[fut]] = fut.result()
    return [r for r in results if r is not None]
