"""Replay bundles written by ``mldebug-rules collect``: their facts go through the same validation as a live
probe's, so a bundle from a colleague's machine, a fixture and a live run are diagnosed the same way.

A bundle is untrusted input. A file that is not a bundle, or a fact that does not fit its kind, is reported
in the probe's status (``error``) and skipped; it never stops the diagnosis. Facts of kinds this version
does not know (a newer writer) are skipped and counted. Only probe facts replay: rules re-derive their own
conclusions, and smoke results come from the run directory's own records, never from a bundle.

>>> from mldebug_rules.engine.facts import FactRegistry
>>> reg = FactRegistry.load()
>>> doc = {"schema": SCHEMA, "host": "node17", "facts": [
...   {"kind": "kernel.xid", "attrs": {"code": 79}, "source": "dmesg:12", "file": "dmesg", "line": 12},
...   {"kind": "no.such.kind", "attrs": {}, "origin": "probe", "source": "probe:x"},
...   {"kind": "smoke.result", "attrs": {"hypothesis": "x", "outcome": "confirmed"}, "origin": "smoke"}]}
>>> res = load_facts(doc, reg, prefix_host=True)
>>> [(f.kind, f.source, f.host) for f in res.facts], res.skipped
([('kernel.xid', 'node17:dmesg:12', 'node17')], {'unknown kind': 1, 'not a probe fact': 1})
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..engine.facts import Fact, FactError, FactRegistry
from ..engine.safeio import Unreadable, read_capped
from .base import Context, ProbeOutput, ProbeUnavailable

SCHEMA = "mldebug-rules/bundle/v1"
MAX_BUNDLE_BYTES = 256 * 2**20
MAX_FACTS = 500_000
MAX_TEXT = 4000


class BundleError(ValueError):
    """Not a readable bundle of a schema this version knows."""


@dataclass
class Loaded:
    facts: list[Fact] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)
    host: str = ""
    probes: list[dict[str, Any]] = field(default_factory=list)


def read_bundle(path: Path) -> dict[str, Any]:
    try:
        data = read_capped(path, MAX_BUNDLE_BYTES)
    except Unreadable as e:
        raise BundleError(e.reason) from None
    except OSError as e:
        raise BundleError(f"unreadable: {e.strerror or e}") from None
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        if isinstance(e, BundleError):
            raise
        raise BundleError(f"not a JSON bundle: {type(e).__name__}: {str(e)[:200]}") from None
    if not isinstance(doc, dict):
        raise BundleError("not a JSON object")
    schema = doc.get("schema")
    if schema != SCHEMA:
        raise BundleError(f"schema {schema!r} is not {SCHEMA!r}")
    if not isinstance(doc.get("facts"), list):
        raise BundleError("`facts` is missing or not a list")
    if "checksum" in doc and doc["checksum"] != bundle_checksum(doc):
        raise BundleError("checksum mismatch: the bundle is truncated or was edited")
    return doc


def bundle_checksum(doc: Mapping[str, Any]) -> str:
    """sha256 of the bundle without its ``checksum`` key, in canonical JSON (sorted keys, no spaces).

    >>> bundle_checksum({"schema": SCHEMA, "facts": []}) == bundle_checksum({"facts": [], "schema": SCHEMA})
    True
    """
    body = {k: v for k, v in doc.items() if k != "checksum"}
    canon = json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return "sha256:" + hashlib.sha256(canon.encode("utf-8")).hexdigest()


def _count(skipped: dict[str, int], why: str) -> None:
    skipped[why] = skipped.get(why, 0) + 1


def load_facts(doc: Mapping[str, Any], registry: FactRegistry, prefix_host: bool = False) -> Loaded:
    """Facts of a parsed bundle, validated. With ``prefix_host`` (several bundles, several nodes) their
    sources read ``host:file:line`` so that evidence from two nodes cannot be confused."""
    host = str(doc.get("host") or "")
    out = Loaded(host=host, probes=[p for p in doc.get("probes", []) if isinstance(p, dict)])
    for raw in doc["facts"][:MAX_FACTS]:
        if not isinstance(raw, dict) or not isinstance(raw.get("attrs", {}), dict):
            _count(out.skipped, "malformed")
            continue
        kind = raw.get("kind")
        if kind not in registry.kinds:
            _count(out.skipped, "unknown kind")
            continue
        if raw.get("origin", "probe") != "probe" or "probe" not in registry.origins(kind):
            _count(out.skipped, "not a probe fact")
            continue
        file = str(raw.get("file") or "")
        source = str(raw.get("source") or "")
        probe = source[len("probe:") :] if source.startswith("probe:") else source
        fact_host = str(raw.get("host") or host)
        if prefix_host and fact_host:
            file = f"{fact_host}:{file}" if file else ""
            probe = f"{fact_host}/{probe}"
        rank = raw.get("rank")
        ts = raw.get("ts")
        try:
            out.facts.append(
                registry.make(
                    kind,
                    raw.get("attrs", {}),
                    file=file,
                    line=int(raw.get("line") or 0),
                    probe=probe or kind,
                    text=str(raw.get("text") or "")[:MAX_TEXT],
                    ts=float(ts) if isinstance(ts, (int, float)) and not isinstance(ts, bool) else None,
                    rank=rank if isinstance(rank, int) and not isinstance(rank, bool) else None,
                    host=fact_host,
                    extra=raw.get("extra") if isinstance(raw.get("extra"), dict) else None,
                )
            )
        except (FactError, TypeError, ValueError):
            _count(out.skipped, "invalid")
    if len(doc["facts"]) > MAX_FACTS:
        out.skipped["over the limit"] = len(doc["facts"]) - MAX_FACTS
    return out


def bundle_paths(ctx: Context) -> list[tuple[Path, str]]:
    out = [(p, str(p)) for p in ctx.bundles]
    for root in ctx.run_dirs:
        files = ctx.files_of(root)
        out += [(p, files.rel(p)) for p in files.files("bundle")]
    seen: set[str] = set()
    unique = []
    for p, shown in out:
        key = os.path.realpath(p)
        if key not in seen:
            seen.add(key)
            unique.append((p, shown))
    return unique


def probe_bundles(ctx: Context) -> ProbeOutput:
    paths = bundle_paths(ctx)
    if not paths:
        raise ProbeUnavailable("no bundles")
    out = ProbeOutput("bundle")
    problems: list[str] = []
    notes: list[str] = []
    for path, shown in paths:
        try:
            doc = read_bundle(path)
        except BundleError as e:
            problems.append(f"{shown}: {e}")
            continue
        loaded = load_facts(doc, ctx.registry, prefix_host=len(paths) > 1)
        if "checksum" not in doc:
            notes.append(f"{shown}: no checksum (an older writer): whether it is whole cannot be told")
        out.facts += loaded.facts
        recorded = ", ".join(
            f"{p.get('name')} {p.get('status')}" for p in loaded.probes if p.get("status") != "ok"
        )
        note = f"{shown} from {loaded.host or 'unknown host'}: {len(loaded.facts)} fact(s)"
        if recorded:
            note += f" (recorded probes not ok: {recorded})"
        if loaded.skipped:
            note += " (skipped: " + ", ".join(f"{n} {why}" for why, n in sorted(loaded.skipped.items())) + ")"
            if loaded.skipped.get("invalid") or loaded.skipped.get("malformed"):
                problems.append(f"{shown}: facts that do not fit their kind were skipped")
        notes.append(note)
    out.detail = "; ".join(problems + notes)
    if problems:
        out.status = "error"
    return out
