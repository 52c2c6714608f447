"""PyTorch NCCL Flight Recorder dumps: which rank never joined the collective the others were waiting in.

With ``TORCH_NCCL_TRACE_BUFFER_SIZE`` set, each rank's watchdog writes a dump to
``TORCH_NCCL_DEBUG_INFO_TEMP_FILE`` + rank (default ``/tmp/nccl_trace_rank_<N>``) when a collective times out.
A dump is a pickle (or JSON) of plain containers. Pickles can run code on load, so these are read with a
restricted unpickler that refuses every global: only dict, list, tuple, str, bytes, int, float, bool and None
can come out of it.

Per process group, each rank's last collective sequence id is compared with its peers': the ranks behind the
furthest one never joined the collective the others were stuck in. A rank whose dump is missing, corrupt or
refused is evidence too (a crashed rank writes no dump).
"""

from __future__ import annotations

import io
import json
import os
import pickle
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..engine.facts import Fact, FactError, FactRegistry
from ..engine.safeio import Unreadable, read_capped
from .base import Context, ProbeOutput, ProbeUnavailable

MAX_DUMP_BYTES = 256 * 1024 * 1024
MAX_RANK = 1 << 20  # a rank number past this is corrupt (no job has a million ranks): not compared
MAX_GROUP_MEMBERS = 1 << 16  # ranks listed per process group in one dump
MAX_MISSING_FACTS = 256  # "rank N wrote no dump" facts; the rest are counted in the last one's text
MAX_DEPTH = 4
_NAME = re.compile(
    r"(?:nccl_trace_rank_|fr_trace_rank_|flight_recorder[_-]?(?:rank)?[_-]?)(\d{1,9})(?:\.(?:pkl|pickle|json))?$"
)
_RANKS_IN = re.compile(r"\d{1,9}")


class RefusedPickle(pickle.UnpicklingError):
    """The pickle asked for a global (a class or function): never loaded."""


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise RefusedPickle(f"refused global {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise RefusedPickle("refused persistent id")


def safe_loads(data: bytes) -> Any:
    """Unpickle plain data only.

    >>> safe_loads(pickle.dumps({"entries": [(1, 2.5, "x", None, True)]}))
    {'entries': [(1, 2.5, 'x', None, True)]}
    >>> import os as _os
    >>> class Evil:
    ...     def __reduce__(self):
    ...         return (_os.system, ("echo pwned",))
    >>> try:
    ...     safe_loads(pickle.dumps(Evil()))
    ... except RefusedPickle as e:
    ...     print(e)
    refused global posix.system
    """
    return _PlainUnpickler(io.BytesIO(data)).load()


@dataclass
class Dump:
    rank: int
    file: str
    status: str  # ok, corrupt, refused, empty
    detail: str = ""
    version: str = ""
    # group key -> (last collective seq id, profiling name of that entry, state)
    last: dict[str, tuple[int, str, str]] = field(default_factory=dict)
    group_ranks: dict[str, list[int]] = field(default_factory=dict)
    entries: int = 0


def find_dumps(roots: Iterable[Path], extra: Iterable[Path] = ()) -> list[tuple[int, Path]]:
    out: dict[str, tuple[int, Path]] = {}
    for p in extra:
        m = _NAME.search(p.name)
        out[str(p)] = (int(m.group(1)) if m else -1, p)
    for root in roots:
        base = str(root).rstrip("/").count("/")
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in sorted(dirnames) if d not in (".git", ".mldebug")]
            if dirpath.count("/") - base >= MAX_DEPTH:
                dirnames[:] = []
            for name in filenames:
                m = _NAME.search(name)
                if m:
                    p = Path(dirpath) / name
                    out[str(p)] = (int(m.group(1)), p)
    return sorted(out.values(), key=lambda t: (t[0], str(t[1])))


def _group_key(entry: Mapping[str, Any]) -> str:
    pg = entry.get("process_group")
    if isinstance(pg, (list, tuple)) and pg:
        return str(pg[0])
    if pg is not None:
        return str(pg)
    return str(entry.get("pg_id", "0"))


def parse_dump(rank: int, path: Path, shown: str) -> Dump:
    try:  # a regular file of at most MAX_DUMP_BYTES, whatever st_size says (/dev/zero says 0)
        data = read_capped(path, MAX_DUMP_BYTES)
    except Unreadable as e:
        return Dump(rank, shown, "corrupt", f"unreadable: {e.reason}")
    except OSError as e:
        return Dump(rank, shown, "corrupt", f"unreadable: {e.strerror or e}")
    if not data.strip():
        return Dump(rank, shown, "empty", "zero bytes")
    try:
        doc = json.loads(data) if data.lstrip()[:1] in (b"{", b"[") else safe_loads(data)
    except RefusedPickle as e:
        return Dump(rank, shown, "refused", str(e))
    except Exception as e:
        return Dump(rank, shown, "corrupt", f"{type(e).__name__}: {str(e)[:200]}")
    if not isinstance(doc, dict):
        return Dump(rank, shown, "corrupt", f"top level is {type(doc).__name__}, not a dict")
    d = Dump(rank, shown, "ok", version=str(doc.get("version", "")))
    entries = doc.get("entries") or []
    if not isinstance(entries, list):
        entries = []
    d.entries = len(entries)
    for e in entries:
        if not isinstance(e, dict) or e.get("is_p2p"):
            continue
        seq = e.get("collective_seq_id")
        if not isinstance(seq, int) or isinstance(seq, bool):
            continue
        key = _group_key(e)
        if key not in d.last or seq > d.last[key][0]:
            d.last[key] = (seq, str(e.get("profiling_name", "")), str(e.get("state", "")))
    # pg_status (newer dumps) says how far each group got even when the ring buffer wrapped.
    status = doc.get("pg_status")
    if isinstance(status, dict):
        for key, st in status.items():
            if isinstance(st, dict):
                seq = st.get("last_enqueued_collective")
                if (
                    isinstance(seq, int)
                    and not isinstance(seq, bool)
                    and seq > d.last.get(str(key), (-1, "", ""))[0]
                ):
                    d.last[str(key)] = (seq, d.last.get(str(key), (0, "", ""))[1], "enqueued")
    config = doc.get("pg_config")
    if isinstance(config, dict):
        for key, cfg in config.items():
            ranks = cfg.get("ranks") if isinstance(cfg, dict) else None
            if isinstance(ranks, str):
                found = _RANKS_IN.findall(ranks[: MAX_GROUP_MEMBERS * 8])
                d.group_ranks[str(key)] = [int(x) for x in found[:MAX_GROUP_MEMBERS]]
            elif isinstance(ranks, list):
                d.group_ranks[str(key)] = [int(x) for x in ranks[:MAX_GROUP_MEMBERS] if isinstance(x, int)]
    if rank < 0 and isinstance(doc.get("rank"), int):
        d.rank = int(doc["rank"])
    return d


def dump_facts(dumps: list[Dump], registry: FactRegistry) -> list[Fact]:
    """One ``flight.dump`` per file; its per-group progress rides in ``extra`` so that the comparison across
    ranks can run centrally, over the dumps of every node's bundle (see ``cross_rank``)."""
    facts: list[Fact] = []
    for d in dumps:
        extra = {"last": {g: list(v) for g, v in sorted(d.last.items())}, "group_ranks": d.group_ranks}
        attrs = {"status": d.status, "entries": d.entries, "groups": len(d.last), "version": d.version}
        attrs["detail"] = d.detail
        text = f"flight recorder dump: {d.status} {d.detail}".strip()
        rank = d.rank if d.rank >= 0 else None
        facts += [
            f
            for f in [_make(registry, "flight.dump", attrs, file=d.file, rank=rank, text=text, extra=extra)]
            if f
        ]
    return facts


def _from_fact(f: Fact) -> Dump:
    d = Dump(f.rank if f.rank is not None else -1, f.source, str(f.attrs.get("status", "ok")))
    last = f.extra.get("last") if isinstance(f.extra.get("last"), dict) else {}
    for g, v in last.items():
        if isinstance(v, list) and len(v) == 3 and isinstance(v[0], int):
            d.last[str(g)] = (int(v[0]), str(v[1]), str(v[2]))
    ranks = f.extra.get("group_ranks") if isinstance(f.extra.get("group_ranks"), dict) else {}
    d.group_ranks = {
        str(g): [int(x) for x in r[:MAX_GROUP_MEMBERS] if isinstance(x, int)]
        for g, r in ranks.items()
        if isinstance(r, list)
    }
    return d


def cross_rank(facts: Iterable[Fact], registry: FactRegistry) -> list[Fact]:
    """Missing dumps and lagging ranks, from every ``flight.dump`` fact (any node, any bundle)."""
    dumps: dict[int, Dump] = {}
    for f in facts:
        if f.kind == "flight.dump" and f.rank is not None and f.attrs.get("status") != "missing":
            dumps.setdefault(f.rank, _from_fact(f))
    return analyse(list(dumps.values()), registry, emit_dumps=False)


def analyse(dumps: list[Dump], registry: FactRegistry, emit_dumps: bool = True) -> list[Fact]:
    """``flight.dump`` per file and per missing rank, ``flight.lagging_rank`` per rank behind its group."""
    facts: list[Fact | None] = []
    # Rank numbers come from file names and dump contents: never trusted to size anything. Sets hold only
    # the ranks named, a rank past MAX_RANK is dropped, and the gaps are walked lazily, up to a cap.
    by_rank = {d.rank: d for d in dumps if 0 <= d.rank <= MAX_RANK}
    named: set[int] = set(by_rank)
    for d in dumps:
        for g, ranks in d.group_ranks.items():
            d.group_ranks[g] = [r for r in ranks[:MAX_GROUP_MEMBERS] if 0 <= r <= MAX_RANK]
            named.update(d.group_ranks[g])
    if emit_dumps:
        facts += dump_facts(dumps, registry)
    if named:  # dumps are written per rank: a gap below the highest rank named is a missing rank
        top = max(named)
        missing = top + 1 - len(by_rank)
        shown = 0
        for r in range(top + 1):
            if shown >= MAX_MISSING_FACTS:
                break
            if r in by_rank:
                continue
            shown += 1
            more = missing - shown if shown == MAX_MISSING_FACTS else 0
            facts.append(
                _make(
                    registry,
                    "flight.dump",
                    {"status": "missing", "detail": "no dump from this rank"},
                    rank=r,
                    text=f"rank {r} wrote no flight recorder dump"
                    + (f" (and {more} more ranks up to {top} did not either)" if more > 0 else ""),
                )
            )
    ok = [d for d in dumps if d.status == "ok" and d.rank >= 0]
    groups = sorted({k for d in ok for k in d.last})
    for g in groups:
        members = set()
        for d in ok:
            members.update(d.group_ranks.get(g, []))
        reached = {d.rank: d.last[g] for d in ok if g in d.last}
        members.update(reached)
        if len(members) < 2 or not reached:
            continue
        max_seq, op, _ = max(reached.values())
        for r in sorted(members):
            dump_status = by_rank[r].status if r in by_rank else "missing"
            if r in reached:
                seq = reached[r][0]
                if seq >= max_seq:
                    continue
            else:
                seq = -1
                if dump_status == "ok":
                    continue  # the group is not in its ring buffer: no evidence either way
            lag = max_seq - seq if seq >= 0 else 0
            text = f"rank {r} never joined {op or 'collective'} #{max_seq} of process group {g}: " + (
                f"its last was #{seq}" if seq >= 0 else f"its dump is {dump_status}"
            )
            facts.append(
                _make(
                    registry,
                    "flight.lagging_rank",
                    {
                        "group": g,
                        "seq": seq,
                        "max_seq": max_seq,
                        "lag": lag,
                        "op": op,
                        "dump": dump_status,
                        "ranks": len(members),
                    },
                    file=by_rank[r].file if r in by_rank else "",
                    rank=r,
                    text=text,
                )
            )
    return [f for f in facts if f is not None]


def _make(registry: FactRegistry, kind: str, attrs: dict[str, Any], **kw: Any) -> Fact | None:
    try:
        return registry.make(kind, attrs, **kw)
    except FactError:
        return None


def probe_flight_recorder(ctx: Context) -> ProbeOutput:
    """Flight Recorder dumps in run directories (``nccl_trace_rank_N``, ``fr_trace_rank_N``)."""
    extra = [Path(p) for p in ctx.options.get("flight_dumps", [])]
    found = find_dumps(ctx.run_dirs, extra)
    if not found:
        raise ProbeUnavailable("no flight recorder dumps")
    dumps = []
    for rank, p in found:
        shown = str(p)
        for root in ctx.run_dirs:
            try:
                shown = str(p.relative_to(root))
                break
            except ValueError:
                continue
        dumps.append(parse_dump(rank, p, shown))
    out = ProbeOutput("flight_recorder")
    out.facts = dump_facts(dumps, ctx.registry)  # compared across ranks after all probes (ranks.rank_facts)
    bad = [d for d in dumps if d.status != "ok"]
    out.detail = f"{len(dumps)} dump(s)" + (f", {len(bad)} unreadable" if bad else "")
    return out
