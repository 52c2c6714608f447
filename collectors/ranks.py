"""Across ranks: which rank failed first, which failures are cascades, which ranks straggle or stopped first.

Runs after the probes, over their facts (it reads nothing itself). Every fact already carries the rank and
host it came from (log prefixes, file names, Slurm task ids, bundle host fields). The timeline takes
each rank's first failure, orders them by timestamp and names the culprit:

- the earliest *root* failure (OOM, crash, Xid...) wins over cascades (watchdog timeouts, connection resets,
  ChildFailedError), however the clocks disagree: a root within ``skew_s`` of an earlier cascade still wins,
  and a root with no timestamp still wins over timestamped cascades;
- with no root anywhere, a rank that logged nothing while the others timed out is the suspect (it was killed
  or hung), else the earliest cascade.

Derived facts: ``rank.first_failure``, ``rank.straggler`` (outliers of each rank's median recent step time),
``rank.stalled`` (ranks whose progress stopped first).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..engine.facts import Fact, FactError, FactRegistry
from ..redact import clip
from .flightrec import cross_rank
from .numeric import median

SKEW_S = 30.0  # clocks of different nodes may disagree by this much
_FAILURE_ROLES = ("root", "cascade")
_HOST_ROOT_KINDS = ("kernel.xid", "kernel.oom_kill", "kernel.mce", "kernel.nvrm")
MAX_LISTED = 64


@dataclass(frozen=True)
class Event:
    rank: int  # -1 for a host-level event (kernel log)
    host: str
    ts: float | None
    role: str
    signature: str
    source: str
    text: str
    order: tuple[str, int]  # (file, line): the order within a file when there is no timestamp

    def as_dict(self, first_ts: float | None = None) -> dict[str, Any]:
        d: dict[str, Any] = {
            "rank": self.rank,
            "host": self.host,
            "role": self.role,
            "signature": self.signature,
        }
        d["source"] = self.source
        d["ts"] = self.ts
        if first_ts is not None and self.ts is not None:
            d["after_first_s"] = round(self.ts - first_ts, 3)
        d["text"] = self.text[:300]
        return d


@dataclass
class Timeline:
    ranks: list[int]
    hosts: list[str]
    first: Event | None = None
    silent: list[int] = field(default_factory=list)  # ranks with no failure while others failed
    cascades: list[Event] = field(default_factory=list)  # other ranks' first failures, all cascades
    others: list[Event] = field(default_factory=list)  # other ranks' first failures that are roots
    events: list[Event] = field(default_factory=list)  # every rank's first failure, ordered
    notes: list[str] = field(default_factory=list)


def _event(f: Fact) -> Event | None:
    if f.kind == "log.signature":
        role = str(f.attrs.get("role", "root"))
        if role not in _FAILURE_ROLES or (f.rank is None and not f.host):
            return None
        sig = str(f.attrs.get("signature", ""))
    elif f.kind in _HOST_ROOT_KINDS and f.host:
        if f.kind == "kernel.xid" and f.attrs.get("sympathetic"):
            return None
        role, sig = "root", f.kind + (f":{f.attrs.get('code')}" if f.kind == "kernel.xid" else "")
    else:
        return None
    ts = f.ts if f.ts is not None and f.ts >= 0 else None
    return Event(
        f.rank if f.rank is not None else -1,
        f.host or "",
        ts,
        role,
        sig,
        f.source,
        f.text or "",
        (f.file or "", f.line or 0),
    )


def _key(e: Event) -> tuple[Any, ...]:
    return (e.ts is None, e.ts or 0.0, e.order, e.rank)


def build_timeline(facts: Sequence[Fact], skew_s: float = SKEW_S) -> Timeline | None:
    """The cross-rank timeline, or None when fewer than two ranks (or hosts) were seen."""
    ranks = sorted(
        {
            f.rank
            for f in facts
            if f.rank is not None and f.rank >= 0 and f.kind.startswith(("log.", "flight."))
        }
    )
    hosts = sorted({f.host for f in facts if f.host})
    if len(ranks) < 2 and len(hosts) < 2:
        return None
    firsts: dict[tuple[int, str], Event] = {}
    first_root: dict[tuple[int, str], Event] = {}
    for f in facts:
        e = _event(f)
        if e is None:
            continue
        k = (e.rank, e.host if e.rank < 0 else "")
        if k not in firsts or _key(e) < _key(firsts[k]):
            firsts[k] = e
        if e.role == "root" and (k not in first_root or _key(e) < _key(first_root[k])):
            first_root[k] = e
    tl = Timeline(ranks=ranks, hosts=hosts, events=sorted(firsts.values(), key=_key))
    roots = sorted(first_root.values(), key=_key)
    if roots:
        timed = [e for e in roots if e.ts is not None]
        first = timed[0] if timed else roots[0]
        if first.rank < 0:  # a host event: prefer a rank on that host that failed with a root within skew
            same = [e for e in roots if e.rank >= 0 and e.host == first.host]
            tl.notes.append(f"host {first.host} logged {first.signature} first")
            first = (
                same[0]
                if same and (same[0].ts is None or first.ts is None or same[0].ts - first.ts <= 600)
                else first
            )
        tl.first = first
        earlier = [
            e
            for e in tl.events
            if e.role == "cascade" and e.ts is not None and first.ts is not None and e.ts < first.ts - skew_s
        ]
        if earlier:
            tl.notes.append(
                f"{len(earlier)} cascade(s) are timestamped more than {skew_s:.0f}s before "
                f"rank {first.rank}'s failure: "
                "clock skew between nodes, or they have another cause"
            )
    else:
        failed = {e.rank for e in tl.events if e.rank >= 0}
        tl.silent = [r for r in ranks if r not in failed] if failed else []
        if tl.silent and len(tl.silent) < len(ranks):
            r = tl.silent[0]
            host = next((f.host for f in facts if f.rank == r and f.host), "")
            src = next((f.source for f in facts if f.rank == r and f.kind == "log.file"), f"rank {r}")
            tl.first = Event(
                r,
                host,
                None,
                "silent",
                "",
                src,
                f"rank {r} logged no error while {len(failed)} other rank(s) timed out",
                (src, 0),
            )
        elif tl.events:
            tl.first = tl.events[0]
    first = tl.first
    if first is not None:
        for e in tl.events:
            if (e.rank == first.rank and e.host == first.host) or (first.rank >= 0 and e.rank == first.rank):
                continue
            (tl.cascades if e.role == "cascade" else tl.others).append(e)
    return tl


def _make(reg: FactRegistry, kind: str, attrs: dict[str, Any], **kw: Any) -> list[Fact]:
    try:
        return [reg.make(kind, attrs, **kw)]
    except FactError:
        return []


def first_failure_facts(tl: Timeline, reg: FactRegistry) -> list[Fact]:
    e = tl.first
    if e is None:
        return []
    nxt = [o.ts for o in tl.events if o is not e and o.ts is not None and o.rank != e.rank]
    lead = round(min(nxt) - e.ts, 3) if nxt and e.ts is not None else -1.0
    file, line = e.order
    return _make(
        reg,
        "rank.first_failure",
        {
            "signature": e.signature,
            "role": "cascade" if e.role == "cascade" else "root",
            "ranks": len(tl.ranks),
            "cascades": len(tl.cascades),
            "lead_s": lead,
            "silent": e.role == "silent",
        },
        file=file,
        line=line,
        text=clip(e.text, 2000),
        ts=e.ts,
        rank=e.rank if e.rank >= 0 else None,
        host=e.host,
    )


STEP_WINDOW = 20  # the most recent step-time points per rank that its statistic is taken over
MIN_STEP_POINTS = 3  # a rank is called a straggler only on this many of its own points


def _step_series(f: Fact) -> list[tuple[int, float]]:
    """A ``log.step_time`` fact's (line, seconds) points: its tail series, else its one (last) value."""
    raw = f.extra.get("series") if isinstance(f.extra, dict) else None
    pts = [
        (int(p[0]), float(p[1]))
        for p in (raw if isinstance(raw, list) else [])
        if isinstance(p, (list, tuple)) and len(p) == 2 and isinstance(p[1], (int, float)) and p[1] > 0
    ]
    return pts or [(f.line or 0, float(f.attrs["seconds"]))]


def straggler_facts(
    facts: Sequence[Fact], reg: FactRegistry, min_ranks: int = 4, ratio: float = 1.3
) -> list[Fact]:
    """Ranks whose typical recent step time is an outlier across ranks.

    Per rank, the median of its last ``STEP_WINDOW`` step-time points (so one slow final step does not make a
    straggler, and a rank that is slow on every step does); across ranks, a rank is an outlier at ``ratio`` x
    the median of the ranks' medians and 5 MADs above it, on at least ``MIN_STEP_POINTS`` points of its own.
    """
    per_rank: dict[int, tuple[Fact, list[tuple[int, float]]]] = {}
    for f in facts:
        if f.kind != "log.step_time" or f.rank is None or f.rank < 0 or f.attrs.get("seconds", -1) <= 0:
            continue
        pts = _step_series(f)
        old = per_rank.get(f.rank)
        if old is None or len(pts) > len(old[1]):  # the same rank in two files: the longer series
            per_rank[f.rank] = (f, pts)
    if len(per_rank) < min_ranks:
        return []
    typical = {r: median(v for _, v in pts[-STEP_WINDOW:]) for r, (_, pts) in per_rank.items()}
    med = median(typical.values())
    mad = median(abs(v - med) for v in typical.values()) or med * 0.01
    out: list[Fact] = []
    for r, (f, pts) in sorted(per_rank.items()):
        v = typical[r]
        window = pts[-STEP_WINDOW:]
        if med > 0 and len(window) >= MIN_STEP_POINTS and v >= ratio * med and v - med >= 5 * mad:
            first_line, last_line = window[0][0], window[-1][0]
            out += _make(
                reg,
                "rank.straggler",
                {
                    "seconds": round(v, 6),
                    "median_s": round(med, 6),
                    "ratio": round(v / med, 3),
                    "ranks": len(per_rank),
                },
                file=f.file or "",
                line=f.line or 0,
                text=(
                    f"rank {r}: median step time {v:.3f}s over its last {len(window)} steps "
                    f"(lines {first_line}-{last_line}) vs {med:.3f}s, the median of {len(per_rank)} ranks"
                ),
                ts=f.ts,
                rank=r,
                host=f.host or "",
                extra={
                    "statistic": "median",
                    "points": len(window),
                    "window_lines": [first_line, last_line],
                    "series": [[n, x] for n, x in window],
                    "last_s": pts[-1][1],
                },
            )
    return out[:MAX_LISTED]


def stalled_facts(facts: Sequence[Fact], reg: FactRegistry, skew_s: float = SKEW_S) -> list[Fact]:
    """The ranks that stopped progressing first: the lowest last step, or (same step) the earliest line."""
    per_rank: dict[int, Fact] = {}
    for f in facts:
        if f.kind == "log.progress" and f.rank is not None and f.rank >= 0:
            old = per_rank.get(f.rank)
            if old is None or int(f.attrs.get("step", -1)) > int(old.attrs.get("step", -1)):
                per_rank[f.rank] = f
    if len(per_rank) < 2:
        return []
    errors = any(f.kind == "log.signature" and f.attrs.get("role") in _FAILURE_ROLES for f in facts)
    steps = {r: int(f.attrs.get("step", -1)) for r, f in per_rank.items()}
    max_step = max(steps.values())
    low = min(steps.values())
    chosen: list[int] = []
    lag_s: dict[int, float] = {}
    if low >= 0 and low < max_step:
        chosen = [r for r, s in steps.items() if s == low]
    else:
        times = {r: f.ts for r, f in per_rank.items() if f.ts is not None and f.ts >= 0}
        if len(times) >= 2:
            latest = max(times.values())
            earliest = min(times.values())
            if latest - earliest > skew_s:
                chosen = [r for r, t in times.items() if t - earliest <= skew_s]
                lag_s = {r: round(latest - times[r], 3) for r in chosen}
    if not chosen or len(chosen) == len(per_rank):
        return []
    out: list[Fact] = []
    for r in sorted(chosen)[:MAX_LISTED]:
        f = per_rank[r]
        out += _make(
            reg,
            "rank.stalled",
            {
                "step": steps[r],
                "max_step": max_step,
                "lag_steps": max(0, max_step - steps[r]),
                "lag_s": lag_s.get(r, -1.0),
                "ranks": len(per_rank),
                "errors": errors,
            },
            file=f.file or "",
            line=f.line or 0,
            text=f.text or "",
            ts=f.ts,
            rank=r,
            host=f.host or "",
        )
    return out


_RANK_PREFIX = re.compile(r"^(?:\[(?:[Rr]ank ?)?\d+\]:\s*|\[default\d+\]:\s*)")


def _own_exceptions(facts: Sequence[Fact]) -> dict[int, list[tuple[Fact, int, str]]]:
    """rank -> (log.tail fact, line, text) of each exception line that ends one of that rank's tracebacks,
    as the logs probe kept them (``log.tail`` extra ``exceptions``), in file order."""
    out: dict[int, list[tuple[Fact, int, str]]] = {}
    for f in facts:
        if f.kind != "log.tail" or not isinstance(f.extra, dict):
            continue
        for item in f.extra.get("exceptions") or []:
            if not (isinstance(item, (list, tuple)) and len(item) == 3):
                continue
            line, rank, text = item
            rank = rank if isinstance(rank, int) and not isinstance(rank, bool) else f.rank
            if rank is None or rank < 0 or not isinstance(line, int) or not isinstance(text, str):
                continue
            out.setdefault(rank, []).append((f, line, text))
    return out


def exception_type(text: str) -> str:
    """The exception's type as printed: ``"[rank1]: KeyError: 'x'"`` -> ``KeyError``."""
    return _RANK_PREFIX.sub("", text.strip()).split(":", 1)[0].strip()[:200]


def exception_facts(tl: Timeline, facts: Sequence[Fact], reg: FactRegistry) -> list[Fact]:
    """``rank.exception``: for each rank on the timeline that failed, the exception it raised itself (the
    last line of its own last traceback), so that the report cites the root rank's ``KeyError`` and not only
    the launcher's "exitcode: 1" about it."""
    own = _own_exceptions(facts)
    out: list[Fact] = []
    seen: set[int] = set()
    events = [e for e in [tl.first, *tl.cascades, *tl.others] if e is not None and e.rank >= 0]
    for e in events[:MAX_LISTED]:
        if e.rank in seen or e.rank not in own:
            continue
        seen.add(e.rank)
        same_host = [x for x in own[e.rank] if not e.host or not x[0].host or x[0].host == e.host]
        if not same_host:
            continue
        f, line, text = same_host[-1]
        out += _make(
            reg,
            "rank.exception",
            # `first`: the first failing rank's exception, where no root signature already names its failure
            # (with one, the root signature's own hypothesis carries the diagnosis).
            {"type": exception_type(text), "first": e is tl.first and e.role != "root"},
            file=f.file or "",
            line=line,
            text=text[:2000],
            rank=e.rank,
            host=f.host or e.host,
        )
    return out


def rank_facts(facts: Sequence[Fact], reg: FactRegistry) -> list[Fact]:
    """Every cross-rank fact derived from the probes' facts."""
    out: list[Fact] = cross_rank(facts, reg)  # Flight Recorder: missing dumps, ranks that never joined
    facts = [*facts, *out]
    tl = build_timeline(facts)
    if tl is not None:
        out += first_failure_facts(tl, reg)
        out += exception_facts(tl, facts, reg)
    out += straggler_facts(facts, reg)
    out += stalled_facts(facts, reg)
    return out


def report_section(facts: Sequence[Fact]) -> dict[str, Any] | None:
    """The report's ``ranks`` block: the first failing rank and host, the cascades, stragglers, stalls."""
    tl = build_timeline(facts)
    if tl is None:
        return None
    first = tl.first
    first_ts = first.ts if first else None
    section: dict[str, Any] = {"count": len(tl.ranks), "hosts": tl.hosts[:MAX_LISTED]}
    raised = {f.rank: f for f in facts if f.kind == "rank.exception"}

    def with_exception(d: dict[str, Any]) -> dict[str, Any]:
        x = raised.get(d["rank"])
        if x is not None:  # the rank's own exception, beside the line that put it on the timeline
            d["exception"] = {"source": x.source, "type": x.attrs["type"], "text": (x.text or "")[:300]}
        return d

    section["first_failure"] = with_exception(first.as_dict()) if first else None
    section["cascades"] = [with_exception(e.as_dict(first_ts)) for e in tl.cascades[:MAX_LISTED]]
    if len(tl.cascades) > MAX_LISTED:
        section["cascades_omitted"] = len(tl.cascades) - MAX_LISTED
    if tl.others:
        section["other_failures"] = [with_exception(e.as_dict(first_ts)) for e in tl.others[:MAX_LISTED]]
    if tl.silent:
        section["silent"] = tl.silent[:MAX_LISTED]
    strag = [f for f in facts if f.kind == "rank.straggler"]
    if strag:
        section["stragglers"] = [
            {
                "rank": f.rank,
                "host": f.host,
                "ratio": f.attrs["ratio"],
                "median_step_s": f.attrs["seconds"],
                "ranks_median_s": f.attrs["median_s"],
                "points": f.extra.get("points", 1),
                "window_lines": f.extra.get("window_lines", []),
                "source": f.source,
            }
            for f in strag
        ]
    stalled = [f for f in facts if f.kind == "rank.stalled"]
    if stalled:
        section["stalled_first"] = [
            {
                "rank": f.rank,
                "host": f.host,
                "step": f.attrs["step"],
                "max_step": f.attrs["max_step"],
                "source": f.source,
            }
            for f in stalled
        ]
    lag = [f for f in facts if f.kind == "flight.lagging_rank"]
    if lag:
        section["never_joined"] = [
            {
                "rank": f.rank,
                "group": f.attrs["group"],
                "seq": f.attrs["seq"],
                "max_seq": f.attrs["max_seq"],
                "dump": f.attrs["dump"],
            }
            for f in lag[:MAX_LISTED]
        ]
    if tl.notes:
        section["notes"] = tl.notes
    return section


def cascade_sources(facts: Sequence[Fact]) -> dict[str, int]:
    """source -> the first failing rank, for evidence lines that are other ranks' cascades."""
    tl = build_timeline(facts)
    if tl is None or tl.first is None:
        return {}
    return {e.source: tl.first.rank for e in tl.cascades}
