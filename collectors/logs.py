"""Log probes: training/scheduler logs through the packs' signatures, kernel logs through the kernel parser.

One streaming pass per file (``logscan``) yields signature hits with exact line numbers, the last progress line
and the scrollback. Hits become ``log.signature`` facts; a signature that fires a million times contributes its
first and last few hits (and its count), which is all a rule needs.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..engine.facts import Fact, FactError
from ..engine.packs import KnowledgeBase
from ..redact import clip
from . import kernel_log, lineinfo, tracebacks
from .base import Context, ProbeOutput, ProbeUnavailable
from .logscan import MATCH_TIMEOUT_S, Hit, Pattern, Scanner, ScanResult, scan_paths
from .metrics_parse import MetricSampler
from .rundir import RunFiles

HITS_KEPT = 20  # per signature per file, at each end
TAIL_LINES = 200
SCROLLBACK_SHOWN = 40
_KERNEL_PREFILTER = (
    r"Out of memory|oom-kill|oom_reaper|Xid|nfs: server|[Ss]tale|LustreError|blocked for more than"
    r"|segfault at|mce:|EDAC|Machine check|NVRM|Killed process|\[Hardware Error\]"
)
_TRACEBACK = "Traceback (most recent call last)"
_FIELD_CAST = {"int": int, "float": float, "str": str}
# Per-iteration wall time as trainers print it (Megatron, HF/Lightning-style loggers, custom loops): the last
# one per file becomes a ``log.step_time`` fact, compared across ranks to find stragglers.
_STEP_TIME = (
    r"(?:elapsed time per iteration \(ms\)|step[_ ]time|iter(?:ation)?[_ ]time|time[/_]step|batch[_ ]time)"
    r"(?P<unit_pre>_ms|_s)?['\"]?\s*[:=]\s*(?P<value>\d+(?:\.\d+)?)\s*(?P<unit>ms|s)?"
)
CONTEXT_CUT = 500  # bytes: a context line this long may have been cut by the scanner (logscan._CONTEXT_BYTES)
REGIONS_KEPT = 200  # traceback regions per file whose lines the scanner keeps (the tail is read anyway)
STEP_SERIES_KEPT = 64  # step-time points per rank kept from a file's tail
# The last line of a Python traceback (the exception raised), with an optional rank prefix. Kept per rank,
# so that the report cites each rank's own exception, not only the launcher's "exitcode: 1" about it.
_EXCEPTION = (
    r"^(?:\[(?:[Rr]ank ?)?\d+\]:\s*|\[default\d+\]:\s*)?(?:[A-Za-z_]\w*\.)*"
    r"[A-Z]\w*(?:Error|Exception|Interrupt|Exit|Failure)(?::.*)?$"
)
_EXCEPTION_RE = re.compile(_EXCEPTION)
EXCEPTIONS_KEPT = 16  # per file, at each end


@dataclass
class LogSource:
    path: Path
    display: str  # path shown in citations: relative to its run directory, or as given
    stream: str  # train, scheduler, kernel


def gather_sources(ctx: Context) -> list[LogSource]:
    out: list[LogSource] = []
    for root in ctx.run_dirs:
        files: RunFiles = ctx.files_of(root)
        prefix = "" if len(ctx.run_dirs) == 1 else root.name.rstrip("/") + "/"
        for role, stream in (("train", "train"), ("scheduler", "scheduler"), ("kernel", "kernel")):
            for p in files.files(role):
                out.append(LogSource(p, prefix + files.rel(p), stream))
    out += [LogSource(p, str(p), "train") for p in ctx.logs]
    out += [LogSource(p, str(p), "kernel") for p in ctx.kernel_logs]
    return out


@dataclass
class _FileView:
    """What every fact of one scanned file is made from."""

    ctx: Context
    src: LogSource
    res: ScanResult
    rank: int | None
    host: str
    clock: lineinfo.FileClock


class _HitKind:
    """What a pattern's hits mean: each kind of scanner pattern turns its hits in a file into facts."""

    def facts(self, fv: _FileView, idx: int, hits: list[Hit]) -> list[Fact]:
        return []


def _kept(hits: list[Hit]) -> list[Hit]:
    """The first and last HITS_KEPT hits: a signature that fires a million times is read at its ends."""
    return hits if len(hits) <= 2 * HITS_KEPT else hits[:HITS_KEPT] + hits[-HITS_KEPT:]


def _line_fact(fv: _FileView, kind: str, attrs: dict[str, Any], h: Hit, ts: float | None) -> Fact | None:
    try:
        return fv.ctx.registry.make(
            kind,
            attrs,
            file=fv.src.display,
            line=h.line_no,
            text=clip(h.text, 2000),
            ts=ts,
            rank=lineinfo.rank_of_line(h.text, fv.rank),
            host=lineinfo.host_of_line(h.text) or fv.host,
        )
    except FactError:
        return None


def _line_time(fv: _FileView, h: Hit) -> float | None:
    return fv.clock.time(h.line_no, h.text) if fv.src.stream != "kernel" else kernel_log.line_time(h.text)


@dataclass
class _SignatureHits(_HitKind):
    """A pack signature: ``log.signature`` facts, with the fields its named groups give."""

    sig: Any

    def facts(self, fv: _FileView, idx: int, hits: list[Hit]) -> list[Fact]:
        sig, res, out = self.sig, fv.res, []
        for h in _kept(hits):
            attrs: dict[str, Any] = {
                "signature": sig.id,
                "pack": sig.pack,
                "role": sig.role,
                "stream": fv.src.stream,
                "from_end": max(0, res.total_lines - h.line_no),
                "count": res.counts.get(idx, len(hits)),
            }
            for name, ftype in sig.fields.items():
                raw = h.groups.get(name)
                if raw is None:
                    continue
                with contextlib.suppress(ValueError):
                    attrs[name] = _FIELD_CAST[ftype](raw.replace(",", "") if ftype != "str" else raw)
            f = _line_fact(fv, "log.signature", attrs, h, _line_time(fv, h))
            if f is not None:
                out.append(f)
        return out


@dataclass
class _ProgressHits(_HitKind):
    """A pack's progress pattern (keep="last"): one ``log.progress`` fact for the file's last progress line."""

    prog: Any

    def facts(self, fv: _FileView, idx: int, hits: list[Hit]) -> list[Fact]:
        out = []
        for h in _kept(hits):
            ts = _line_time(fv, h)
            attrs: dict[str, Any] = {
                "count": fv.res.counts.get(idx, 1),
                "from_end": max(0, fv.res.total_lines - h.line_no),
            }
            step, epoch = h.groups.get("step"), h.groups.get("epoch")
            if step is not None and step.isdigit():
                attrs["step"] = int(step)
            if epoch is not None:
                with contextlib.suppress(ValueError):
                    attrs["epoch"] = float(epoch)
            if ts is not None and not fv.ctx.offline:
                attrs["age_s"] = round(max(0.0, fv.ctx.now - ts), 1)
            f = _line_fact(fv, "log.progress", attrs, h, ts)
            if f is not None:
                out.append(f)
        return out


class _StepTimeHits(_HitKind):
    """Per-iteration wall time: ``log.step_time`` facts, per rank (_step_time_facts)."""

    def facts(self, fv: _FileView, idx: int, hits: list[Hit]) -> list[Fact]:
        recent = [h for h in fv.res.recent if h.pattern == idx]
        return _step_time_facts(fv.ctx, fv.src, hits[-1], recent, fv.res, fv.rank, fv.host, fv.clock)


class _KernelHits(_HitKind):
    """The kernel log prefilter: its lines go through the kernel-log parser."""

    def facts(self, fv: _FileView, idx: int, hits: list[Hit]) -> list[Fact]:
        return _kernel_facts(fv.ctx, fv.src, hits)


class _TracebackRegion(_HitKind):
    """A traceback's start with the lines after it: read by the exception parser (exception_facts)."""


@dataclass
class _ExceptionMarker(_HitKind):
    """A traceback header (opens) or an exception line (closes one of the same rank): the ``exceptions`` list
    of the file's ``log.tail`` fact (_exceptions)."""

    opens: bool


class _Plan:
    """The scanner patterns for one stream, and what the hits of each pattern index mean."""

    def __init__(self, kb: KnowledgeBase, stream: str):
        self.kinds: list[_HitKind] = []
        patterns: list[Pattern] = []

        def add(pattern: Pattern, kind: _HitKind) -> None:
            patterns.append(pattern)
            self.kinds.append(kind)

        for sig in kb.signatures:
            applies = stream in sig.streams or (
                stream != "kernel" and bool({"train", "scheduler"} & set(sig.streams))
            )
            if applies:
                add(
                    Pattern(sig.id, sig.regex, sig.ignore_case, "all", 1000, prefilter=sig.prefilter),
                    _SignatureHits(sig),
                )
        if stream == "kernel":
            add(Pattern("__kernel__", _KERNEL_PREFILTER, False, "all", 20000), _KernelHits())
        else:
            for prog in kb.progress:
                add(Pattern(prog.id, prog.regex, prog.ignore_case, "last", 1), _ProgressHits(prog))
            add(Pattern("__step_time__", _STEP_TIME, True, "last", 1), _StepTimeHits())
            add(
                Pattern("__traceback__", re.escape(_TRACEBACK), False, "all", 500),
                _ExceptionMarker(opens=True),
            )
            add(Pattern("__exception__", _EXCEPTION, False, "all", 500), _ExceptionMarker(opens=False))
            # Traceback regions for the exception parser: the scanner keeps the lines after each start, in the
            # same pass (collectors/tracebacks.py).
            region = Pattern(
                "__traceback_region__",
                tracebacks.REGION_START,
                False,
                "all",
                REGIONS_KEPT,
                after=tracebacks.REGION_LINES,
            )
            add(region, _TracebackRegion())
        # Pack patterns were compiled and checked when the packs loaded (engine/packs.py).
        self.scanner = Scanner(patterns, tail_lines=TAIL_LINES, trusted=True)


def stream_patterns(kb: KnowledgeBase, stream: str) -> tuple[Pattern, ...]:
    """The scanner patterns the logs probe searches a `stream` ("train", "kernel") for, in its order: for
    benchmarks and tools that must see what a diagnosis scans for."""
    return _Plan(kb, stream).scanner.patterns


def _file_facts(ctx: Context, src: LogSource, res: ScanResult, plan: _Plan) -> list[Fact]:
    reg = ctx.registry
    file_rank = lineinfo.rank_of_path(src.display)
    file_host = lineinfo.host_of_path(src.display)
    readable = res.total_lines > 0 or res.bytes_read > 0 or not res.issues
    mtime_age = -1.0
    if not ctx.offline:
        with contextlib.suppress(OSError):
            mtime_age = max(0.0, ctx.now - os.stat(src.path).st_mtime)
    last_blank = bool(res.tail) and not res.tail[-1][1].strip()
    fv = _FileView(ctx, src, res, file_rank, file_host, _clock(src, res))
    facts = [
        reg.make(
            "log.file",
            {
                "stream": src.stream,
                "lines": res.total_lines,
                "bytes": res.bytes_read,
                "binary": res.binary,
                "truncated": res.truncated,
                "readable": readable,
                "last_line_blank": last_blank,
                "mtime_age_s": round(mtime_age, 1),
            },
            file=src.display,
            rank=file_rank,
            host=file_host,
            text="; ".join(res.issues),
        )
    ]
    by_pattern: dict[int, list[Hit]] = {}
    for h in res.hits:
        by_pattern.setdefault(h.pattern, []).append(h)
    if src.stream != "kernel":
        regions = [
            h for i, hs in by_pattern.items() if isinstance(plan.kinds[i], _TracebackRegion) for h in hs
        ]
        facts += exception_facts(ctx, src, res, regions, file_rank, file_host, fv.clock)
    for idx, hits in sorted(by_pattern.items()):
        facts += plan.kinds[idx].facts(fv, idx, hits)
    if res.tail and src.stream != "kernel":
        tail_text = [t for _, t in res.tail]
        facts.append(
            reg.make(
                "log.tail",
                {
                    "stream": src.stream,
                    "total_lines": res.total_lines,
                    "traceback": any(_TRACEBACK in t for t in tail_text),
                },
                file=src.display,
                line=res.tail[-1][0],
                text=clip(res.tail[-1][1], 2000),
                rank=file_rank,
                host=file_host,
                extra={
                    "scrollback": [[n, clip(t, 500)] for n, t in res.tail[-SCROLLBACK_SHOWN:]],
                    **_exceptions(res, plan, file_rank),
                },
            )
        )
    return facts


def _exceptions(res: ScanResult, plan: _Plan, file_rank: int | None) -> dict[str, Any]:
    """``{"exceptions": [[line, rank, text], ...]}``: the exception lines that end a traceback of the same
    rank (the scanner's hits, and the tail), the first and last few of each file; {} when there are none."""
    markers = {i: k.opens for i, k in enumerate(plan.kinds) if isinstance(k, _ExceptionMarker)}
    lines: dict[int, tuple[bool, str]] = {}  # line -> (opens a traceback, text)
    for h in res.hits:
        if h.pattern in markers:
            lines[h.line_no] = (markers[h.pattern], h.text)
    for no, text in res.tail:
        if _TRACEBACK in text:
            lines[no] = (True, text)
        elif _EXCEPTION_RE.search(text):
            lines[no] = (False, text)
    open_tb: set[int | None] = set()
    out: list[list[Any]] = []
    for no in sorted(lines):
        opens, text = lines[no]
        rank = lineinfo.rank_of_line(text, file_rank)
        if opens:
            open_tb.add(rank)
        elif rank in open_tb:
            open_tb.discard(rank)
            out.append([no, rank, text[:500]])
    if len(out) > 2 * EXCEPTIONS_KEPT:
        out = out[:EXCEPTIONS_KEPT] + out[-EXCEPTIONS_KEPT:]
    return {"exceptions": out} if out else {}


EXCEPTION_FACTS_KEPT = (
    50  # exception facts per file: the last ones (a log printing one traceback per step keeps its latest)
)
BARE_FROM_END = 50  # a bare exception line counts as a failure only this close to the end of its file


def _runs(lines: dict[int, str]) -> list[list[tuple[int, str]]]:
    """Contiguous runs of numbered lines."""
    out: list[list[tuple[int, str]]] = []
    prev = -2
    for no in sorted(lines):
        if no != prev + 1:
            out.append([])
        out[-1].append((no, lines[no]))
        prev = no
    return out


def exception_facts(
    ctx: Context,
    src: LogSource,
    res: ScanResult,
    regions: Sequence[Hit],
    file_rank: int | None,
    file_host: str,
    clock: lineinfo.FileClock,
) -> list[Fact]:
    """``exception`` and ``exception.frame`` facts from the file's traceback regions and its tail."""
    lines: dict[int, str] = {}
    for h in regions:
        lines[h.line_no] = h.text
        for k, t in enumerate(h.after, 1):
            lines.setdefault(h.line_no + k, _whole_words(t))
    for no, t in res.tail:
        lines[no] = t
    excs: list[tracebacks.ParsedException] = []
    used: set[int] = set()
    if regions or any(tracebacks.HEADER in t for _, t in res.tail):
        for run in _runs(lines):
            if not any(tracebacks.HEADER in t for _, t in run):
                continue
            found = tracebacks.parse_lines(run)
            for e in found:
                e.chain = e.chain * 1_000_000 + run[0][0]  # unique across runs
            excs += found
    for e in excs:
        used.update(range(e.line, max(e.line, e.last_line) + 1))
    near_end = [(n, t) for n, t in res.tail if res.total_lines - n < BARE_FROM_END]
    excs += tracebacks.bare_exceptions(near_end, used)
    excs.sort(key=lambda e: e.line)
    excs = excs[-EXCEPTION_FACTS_KEPT:]
    chains: dict[int, list[tracebacks.ParsedException]] = {}
    for e in excs:
        chains.setdefault(e.chain, []).append(e)
    facts: list[Fact] = []
    seen_frames: set[tuple[object, ...]] = set()
    reg = ctx.registry
    for members in chains.values():
        ordered = tracebacks.order_chain(members)
        root, top = ordered[0], ordered[-1]
        chain_id = f"{src.display}:{min(e.line for e in members)}"
        for e in members:
            inner, user = e.innermost, e.user_frame
            rinner = root.innermost
            rank = e.rank if e.rank is not None else lineinfo.rank_of_line(e.text, file_rank)
            attrs: dict[str, Any] = {
                "type": e.qual_type,
                "bare_type": e.bare_type,
                "family": e.family,
                "message": e.message,
                "errno": e.errno,
                "errno_name": e.errno_name,
                "strerror": e.strerror,
                "origin": e.origin,
                "worker": e.worker,
                "position": e.position,
                "link": e.link,
                "chain": chain_id,
                "chain_length": len(members),
                "root_type": root.bare_type,
                "root_family": root.family,
                "root_errno_name": root.errno_name,
                "root_package": rinner.package if rinner else "",
                "surfaced_type": top.bare_type,
                "package": inner.package if inner else "",
                "function": _short_function(inner.function) if inner else "",
                "module": inner.module if inner else "",
                "user_module": user.module if user else "",
                "user_function": _short_function(user.function) if user else "",
                "user_lineno": user.lineno if user else -1,
                "frames": len(e.frames),
                "packages": ",".join(dict.fromkeys(f.package for f in e.frames)),
                "in_traceback": e.in_traceback,
                "from_end": max(0, res.total_lines - e.line),
            }
            text = lines.get(e.line) or (e.text.splitlines()[0] if e.text else "")
            try:
                facts.append(
                    reg.make(
                        "exception",
                        attrs,
                        file=src.display,
                        line=e.line,
                        text=clip(text, 2000),
                        ts=clock.time(e.line, text),
                        rank=rank,
                        host=lineinfo.host_of_line(text) or file_host,
                    )
                )
            except FactError:
                continue
            shape = (e.qual_type, e.message, tuple((f.module, f.function, f.lineno) for f in e.frames))
            if shape in seen_frames:
                continue
            seen_frames.add(shape)
            for k, f in enumerate(reversed(e.frames)):
                stem = f.module.rsplit("/", 1)[-1]
                stem = stem[:-3] if stem.endswith(".py") else stem
                fattrs = {
                    "chain": chain_id,
                    "bare_type": e.bare_type,
                    "family": e.family,
                    "position": e.position,
                    "index": k,
                    "package": f.package,
                    "module": f.module,
                    "stem": stem,
                    "function": _short_function(f.function),
                    "lineno": f.lineno,
                    "user": f.package == "user",
                }
                with contextlib.suppress(FactError):
                    facts.append(
                        reg.make(
                            "exception.frame",
                            fattrs,
                            file=src.display,
                            line=f.log_line,
                            rank=rank,
                            text=clip(lines.get(f.log_line) or f.text, 2000),
                        )
                    )
    return facts


def _whole_words(text: str) -> str:
    """A context line the scanner cut at its byte cap loses its last, partial word: a secret cut there would no
    longer look like one to the redactor (see redact.clip)."""
    if len(text.encode("utf-8", "replace")) < CONTEXT_CUT:
        return text
    return text[: max(0, text.rfind(" "))] + " …"


def _short_function(name: str) -> str:
    """IPython prints qualified names (Module._call_impl); CPython before 3.11 the bare one: keep the bare one."""
    return name.rsplit(".", 1)[-1].strip()


def _clock(src: LogSource, res: ScanResult) -> lineinfo.FileClock:
    """Timestamps for this file's lines: a year-less glog stamp (the NCCL watchdog's "[E1201 10:05:33...]") takes
    its year from the file's dated lines (hits and tail), else from its mtime (reading the file's own metadata
    is not probing the machine)."""
    mtime: float | None = None
    with contextlib.suppress(OSError):
        mtime = os.stat(src.path).st_mtime
    return lineinfo.FileClock(lambda: [*((h.line_no, h.text) for h in res.hits), *res.tail], mtime)


def _step_seconds(h_groups: dict[str, str], text: str) -> float | None:
    try:
        value = float(h_groups.get("value", ""))
    except ValueError:
        return None
    unit = h_groups.get("unit") or (h_groups.get("unit_pre") or "").lstrip("_")
    if unit == "ms" or (not unit and "(ms)" in text[:200]):
        value /= 1000.0
    return value


def _step_time_facts(
    ctx: Context,
    src: LogSource,
    h: Hit,
    recent: Sequence[Hit],
    res: ScanResult,
    file_rank: int | None,
    file_host: str,
    clock: lineinfo.FileClock,
) -> list[Fact]:
    """One ``log.step_time`` per rank the file speaks for: ``seconds`` is its last step time, ``extra.series``
    the (line, seconds) points in the file's tail (up to ``STEP_SERIES_KEPT``; the scanner's ``recent`` hits, from
    the same pass), so that stragglers are judged on a robust statistic of recent steps rather than on one step
    (collectors/ranks.py)."""
    last = _step_seconds(h.groups, h.text)
    if last is None:
        return []
    series: dict[int | None, list[tuple[int, float]]] = {}
    lasts: dict[int | None, tuple[int, str, float]] = {}
    rank = lineinfo.rank_of_line(h.text, file_rank)
    lasts[rank] = (h.line_no, h.text, last)
    for r_hit in recent:
        no, text = r_hit.line_no, r_hit.text
        v = _step_seconds(r_hit.groups, text)
        if v is None:
            continue
        r = lineinfo.rank_of_line(text, file_rank)
        series.setdefault(r, []).append((no, v))
        if r not in lasts or no > lasts[r][0]:
            lasts[r] = (no, text, v)
    out: list[Fact] = []
    for r, (no, text, value) in lasts.items():
        points = sorted({*series.get(r, []), (no, value)})[-STEP_SERIES_KEPT:]
        try:
            out.append(
                ctx.registry.make(
                    "log.step_time",
                    {"seconds": round(value, 6), "from_end": max(0, res.total_lines - no)},
                    file=src.display,
                    line=no,
                    text=clip(text, 2000),
                    ts=clock.time(no, text),
                    rank=r,
                    host=lineinfo.host_of_line(text) or file_host,
                    extra={"series": [[n, round(v, 6)] for n, v in points]},
                )
            )
        except FactError:
            continue
    return out


def _kernel_facts(ctx: Context, src: LogSource, hits: Sequence[Hit]) -> list[Fact]:
    facts: list[Fact] = []
    host = lineinfo.host_of_path(src.display)
    for no, kind, attrs, ts, text in kernel_log.parse_lines((h.line_no, h.text) for h in hits):
        try:
            facts.append(
                ctx.registry.make(
                    kind, attrs, file=src.display, line=no, text=clip(text, 2000), ts=ts, host=host
                )
            )
        except FactError:
            continue
    return facts


def _note_timeout(ctx: Context, plan: _Plan, idx: int, where: str, disabled: dict[str, str]) -> None:
    """A signature whose regex hit the scanner's time bound disables its third-party pack (the contract for
    any broken pack); a built-in signature loses only itself, since the built-in packs always stay on."""
    kind = plan.kinds[idx]
    if not isinstance(kind, _SignatureHits):
        return
    obj = kind.sig
    why = f"signature {obj.id} exceeded the {MATCH_TIMEOUT_S:g} s match bound on {where} (catastrophic backtracking)"
    builtin = {p.name for p in ctx.kb.packs if p.origin == "builtin"}
    key = f"sig:{obj.id}" if obj.pack in builtin else obj.pack
    disabled.setdefault(key, why)


def dropped_sigs(disabled: dict[str, str]) -> set[str]:
    return {k[4:] for k in disabled if k.startswith("sig:")}


def stream_pass(ctx: Context, stream: str) -> tuple[_Plan, list[LogSource], list[ScanResult]]:
    """The one scanner pass over a stream's logs, made once per diagnosis by whichever probe asks first: the
    logs probe reads its signatures, progress lines and scrollback; the metrics probe its metric lines, which
    the pass samples on the way (MetricSampler) instead of reading the train logs a second time."""

    def scan() -> tuple[_Plan, list[LogSource], list[ScanResult]]:
        group = [s for s in gather_sources(ctx) if s.stream == stream]
        plan = _Plan(ctx.kb, stream)
        sampler = None
        if stream == "train":
            params = dict(getattr(ctx.kb, "params", {}) or {})
            sampler = MetricSampler(int(params.get("completed_tail_lines", 40)))
        return plan, group, scan_paths(plan.scanner, [str(s.path) for s in group], sampler=sampler)

    return ctx.once(f"logs.pass.{stream}", scan)


def probe_logs(ctx: Context) -> ProbeOutput:
    """Training, scheduler and kernel logs found in run directories or named with --log/--kernel-log."""
    sources = gather_sources(ctx)
    if not sources:
        raise ProbeUnavailable("no log files found")
    out = ProbeOutput("logs")
    engines: set[str] = set()
    issues: list[str] = []
    disabled: dict[str, str] = {}  # pack (or "sig:<id>" for a built-in signature) -> why
    read = passes = ranges = 0
    t0 = time.monotonic()
    for stream in ("train", "scheduler", "kernel"):
        if not any(s.stream == stream for s in sources):
            continue
        plan, group, results = stream_pass(ctx, stream)
        for src, res in zip(group, results, strict=False):
            engines.add(res.engine)
            read += res.bytes_read
            passes = max(passes, res.passes)
            ranges = max(ranges, res.ranges)
            issues += [f"{src.display}: {i}" for i in res.issues]
            try:
                out.facts += _file_facts(ctx, src, res, plan)
            except Exception as e:  # one file's odd content must not cost the other files their facts
                issues.append(f"{src.display}: facts not made: {type(e).__name__}: {str(e)[:200]}")
            for idx in res.timed_out:
                _note_timeout(ctx, plan, idx, src.display, disabled)
    if disabled:
        # Facts already made from a disabled pack's signatures (in files scanned before the timeout) go too.
        gone = {sig.id for sig in ctx.kb.signatures if sig.pack in disabled} | dropped_sigs(disabled)
        out.facts = [
            f for f in out.facts if not (f.kind == "log.signature" and f.attrs.get("signature") in gone)
        ]
        out.payload["disabled_packs"] = {k: v for k, v in disabled.items() if not k.startswith("sig:")}
    out.payload["scanner"] = sorted(engines)
    out.payload["files"] = len(sources)
    out.payload["scan_seconds"] = time.monotonic() - t0
    out.payload["bytes_read"] = read
    # One pass per file feeds its signatures, progress lines, scrollback and (train logs) metric lines.
    reading = f"{read / (1 << 20):.0f} MiB read, {passes} pass per file" if read >= 1 << 20 else ""
    if reading and ranges > 1:
        reading += f" ({ranges} ranges in parallel)"
    out.detail = f"{len(sources)} file(s)" + (f", {reading}" if reading else "")
    out.detail += f"; {'; '.join(issues[:5])}" if issues else ""
    if issues and all(
        f.kind == "log.file" and not f.attrs["readable"] for f in out.facts if f.kind == "log.file"
    ):
        out.status = "error"
    return out
