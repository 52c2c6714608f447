"""The diagnosis pipeline: probes -> facts -> rules (forward chaining) -> ranking -> evidence gate."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .collectors.base import Context, ProbeOutput, ProbeSpec, run_probes
from .collectors.ranks import rank_facts
from .collectors.registry import default_probes
from .engine.compile import CompiledRules, compile_kb
from .engine.facts import Fact
from .engine.gate import Coverage, GateResult, apply_smokes
from .engine.packs import KnowledgeBase, load_packs
from .engine.rank import rank
from .engine.run import EngineResult, run_rules
from .engine.safeio import Unreadable, open_regular
from .errors import UsageError

FACTS_KEPT_PER_KIND = 4000  # the engine sees at most this many facts of one kind (first and last half)
MAX_ENGINE_FACTS = 40000  # and at most this many in all (durable-rules refused a batch from about 66,000)
MAX_SKIP_NOTES = 20  # skipped inputs named one by one in the warnings; the rest are counted

# Fact kinds that count as "something was actually read" for the verdict.
_EVIDENCE_KINDS = (
    "log.file",
    "kernel.",
    "gpu.state",
    "process",
    "checkpoint.file",
    "metric.trend",
    "disk.usage",
)


@dataclass
class Request:
    run_dirs: list[Path] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)
    kernel_logs: list[Path] = field(default_factory=list)
    bundles: list[Path] = field(default_factory=list)
    rules_dirs: list[Path] = field(default_factory=list)
    offline: bool = False
    params: dict[str, Any] = field(default_factory=dict)
    engine: str | None = None
    strict: bool = False
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class Diagnosis:
    request: Request
    kb: KnowledgeBase
    compiled: CompiledRules
    probes: list[ProbeOutput]
    facts: list[Fact]
    engine: EngineResult
    gate: GateResult
    evidence_seen: bool
    scanner: str
    unexplained: list[Fact] = field(default_factory=list)  # the gate's: what kept "no_failure" from it
    inputs: list[Any] = field(default_factory=list)  # inputs.InputNote: what was not read, and why
    warnings: list[str] = field(default_factory=list)  # raised during this diagnosis (the kb has its own)


def check_inputs(req: Request) -> None:
    """Bad usage is one clear line: a path that is missing or of the wrong type."""
    for p in req.run_dirs:
        if not p.exists():
            raise UsageError(f"{p}: no such run directory")
        if not p.is_dir():
            raise UsageError(f"{p}: not a directory (pass a log file with --log)")
        if not os.access(p, os.R_OK | os.X_OK):
            raise UsageError(f"{p}: permission denied")
    for flag, paths in (("--log", req.logs), ("--kernel-log", req.kernel_logs), ("--bundle", req.bundles)):
        for p in paths:
            if not p.exists():
                raise UsageError(f"{flag} {p}: no such file")
            if p.is_dir():
                raise UsageError(f"{flag} {p}: is a directory")
            try:  # a named input that cannot be read is bad usage, not "no failure found"
                open_regular(p).close()
            except Unreadable as e:
                raise UsageError(f"{flag} {p}: {e.reason}") from None
    if not (req.run_dirs or req.logs or req.kernel_logs or req.bundles) and req.offline:
        raise UsageError("nothing to diagnose: give a RUN_DIR, --log, --kernel-log or --bundle")


def check_engine(engine: str | None) -> None:
    """`--engine durable` where durable-rules cannot load (Python 3.13, no wheel) is bad usage, not an
    internal error: say which engine can run."""
    want = (engine or os.environ.get("MLDEBUG_ENGINE") or "auto").lower()
    if want not in ("durable", "durable-rules"):
        return
    from .engine import backend_durable

    ok, why = backend_durable.available()
    if not ok:
        origin = "--engine durable" if engine else f"MLDEBUG_ENGINE={want}"
        raise UsageError(
            f"{origin}: durable-rules cannot be used with this Python ({why.splitlines()[0][:160]}); "
            "use --engine python or --engine auto"
        )


def load_kb(req: Request) -> KnowledgeBase:
    """The packs for this request. A third-party pack that was disabled is one warning line on stderr here
    (and in every report format); under ``strict`` it raised instead."""
    from . import cache

    kb = load_packs(req.rules_dirs, strict=req.strict, params=req.params, cache=cache)
    for w in kb.warnings:
        print(f"mldebug-rules: warning: {w}", file=sys.stderr)
    return kb


def probe_context(req: Request, kb: KnowledgeBase, *, with_bundles: bool = True) -> Context:
    """What the probes read for this request (`collect` leaves bundles out: a bundle never nests another)."""
    return Context(
        registry=kb.registry,
        run_dirs=list(req.run_dirs),
        logs=list(req.logs),
        kernel_logs=list(req.kernel_logs),
        bundles=list(req.bundles) if with_bundles else [],
        offline=req.offline,
        kb=kb,
        options=dict(req.options),
    )


def diagnose(
    req: Request,
    kb: KnowledgeBase | None = None,
    probes: Sequence[ProbeSpec] | None = None,
    extra_facts: Sequence[Fact] = (),
) -> Diagnosis:
    check_inputs(req)
    check_engine(req.engine)
    from . import inputs

    kb = kb or load_kb(req)
    compiled = compile_kb(kb)
    named_logs, named_kernel, notes = inputs.examine(req.logs, req.kernel_logs, req.bundles)
    ctx = probe_context(req, kb)
    ctx.logs, ctx.kernel_logs = named_logs, named_kernel  # what holds nothing to read is not scanned
    notes += inputs.run_dir_notes(req.run_dirs, ctx.run_files)
    blank = inputs.blank_sources(req.run_dirs, ctx.run_files, req.logs)
    outputs = run_probes(ctx, list(probes) if probes is not None else default_probes(live=not req.offline))
    facts: list[Fact] = [f for o in outputs for f in o.facts] + list(extra_facts)
    facts += rank_facts(facts, kb.registry)  # across ranks: first failure, stragglers, stalls
    engine_facts, dropped = bound_facts(facts)
    result = run_rules(compiled, kb.registry, engine_facts, req.engine)
    warnings: list[str] = [
        f"{n} {kind} facts beyond the first and last of their kind were counted, not reasoned over"
        for kind, n in sorted(dropped.items())
    ]
    disabled = {k: v for o in outputs for k, v in o.payload.get("disabled_packs", {}).items()}
    if disabled:
        # A pack disabled while scanning (a regex past its time bound) loses its rules for this diagnosis.
        gone = {r.id for r in kb.rules if r.pack in disabled}
        result.firings = [f for f in result.firings if f.rule not in gone]
        warnings += [f"pack disabled: {pack}: {why}" for pack, why in sorted(disabled.items())]
    hyps = rank(kb, result.firings, result.facts)
    evidence_seen = any(
        f.kind.startswith(_EVIDENCE_KINDS) and not (f.kind == "log.file" and f.file in blank) for f in facts
    )
    skipped = skipped_inputs(ctx, facts)
    if skipped:
        warnings += [f"input not read: {s}" for s in skipped[:MAX_SKIP_NOTES]]
        if len(skipped) > MAX_SKIP_NOTES:
            warnings.append(f"input not read: {len(skipped) - MAX_SKIP_NOTES} more")
    # What was read, for the verdict; the gate alone decides it.
    coverage = Coverage(
        evidence_seen=evidence_seen,
        blocked=any(n.blocking for n in notes),
        skipped=bool(skipped),
        unexplained=tuple(unexplained_failures(facts, frozenset(s.id for s in kb.signatures if s.failure))),
    )
    trust = bool(req.options.get("trust_recorded"))
    gate = apply_smokes(kb, hyps, facts, trust_recorded=trust, coverage=coverage)
    scanners = sorted({s for o in outputs for s in o.payload.get("scanner", [])})
    return Diagnosis(
        request=req,
        kb=kb,
        compiled=compiled,
        probes=outputs,
        facts=facts,
        engine=result,
        gate=gate,
        evidence_seen=evidence_seen,
        unexplained=gate.unexplained,
        inputs=notes,
        scanner=", ".join(scanners) or "none",
        warnings=warnings,
    )


EXCEPTION_NEAR_END = 200  # lines: an exception this close to the end of its log is the run's failure


def skipped_inputs(ctx: Context, facts: Sequence[Fact]) -> list[str]:
    """Input the probes passed over: run-directory limits (depth, file count, unlistable folders) and log files
    that could not be read (FIFOs, devices, permissions). Each one is shown, and rules out "no failure"."""
    out: list[str] = []
    for root, files in sorted(ctx.run_files.items()):
        out += [f"{root}: {issue}" for issue in getattr(files, "issues", [])]
    out += [
        f"{f.file}: {f.text or 'unreadable'}"
        for f in facts
        if f.kind == "log.file" and not f.attrs.get("readable", True)
    ]
    return out


def bound_facts(facts: Sequence[Fact], per_kind: int | None = None) -> tuple[list[Fact], dict[str, int]]:
    """The facts the engine gets: per kind, the first and last FACTS_KEPT_PER_KIND / 2 (in input order), and
    how many of each kind were left out. A bundle or a log with 80,000 facts otherwise exhausts durable-rules
    (it refused the batch from about 66,000); the ends of each kind are where failures show.

    >>> from mldebug_rules.engine.facts import FactRegistry
    >>> reg = FactRegistry.load()
    >>> fs = [reg.make("probe.status", {"probe": f"p{i}", "status": "ok", "detail": ""}) for i in range(5)]
    >>> kept, dropped = bound_facts(fs, per_kind=2)
    >>> [f.attrs["probe"] for f in kept], dropped
    (['p0', 'p4'], {'probe.status': 3})
    """
    n = FACTS_KEPT_PER_KIND if per_kind is None else per_kind
    kept, dropped = _bound(facts, n)
    while len(kept) > MAX_ENGINE_FACTS and n > 2:  # many crowded kinds: tighten every kind alike
        n //= 2
        kept, dropped = _bound(facts, n)
    return kept, dropped


def _bound(facts: Sequence[Fact], per_kind: int) -> tuple[list[Fact], dict[str, int]]:
    by_kind: dict[str, list[int]] = {}
    for i, f in enumerate(facts):
        by_kind.setdefault(f.kind, []).append(i)
    head = per_kind - per_kind // 2
    tail = per_kind // 2
    drop: set[int] = set()
    dropped: dict[str, int] = {}
    for kind, idx in by_kind.items():
        if len(idx) > per_kind:
            middle = idx[head : len(idx) - tail]
            drop.update(middle)
            dropped[kind] = len(middle)
    return [f for i, f in enumerate(facts) if i not in drop], dropped


def unexplained_failures(
    facts: Sequence[Fact], failure_signatures: frozenset[str] = frozenset()
) -> list[Fact]:
    """Failure evidence that no hypothesis accounts for: a Python traceback in a log's scrollback, a final
    exception, or a line near the end that a pack declares a failure (``failure: true``: a launcher's
    non-zero exit status, a job runner's error line).

    Other signatures are not used here: rules deliberately leave some root signatures unexplained (a loss-scale
    overflow during the start-up search, a stop message), and only the rules know that."""
    tails = [f for f in facts if f.kind == "log.tail" and f.attrs.get("traceback")]

    def near_end(f: Fact) -> bool:
        return 0 <= f.attrs.get("from_end", -1) < EXCEPTION_NEAR_END

    def closest_first(fs: list[Fact]) -> list[Fact]:
        return sorted(fs, key=lambda f: (f.attrs.get("from_end", 0), f.file or "", -(f.line or 0)))

    # An exception near the end of a log (a traceback in the scrollback, or a bare final exception line)
    # is a visible failure too: the one closest to the end comes first, so the report can name it.
    excs = closest_first(
        [
            f
            for f in facts
            if f.kind == "exception" and f.attrs.get("position") in ("surfaced", "only") and near_end(f)
        ]
    )
    # A declared failure line (a launcher's exit status) names no exception, so it comes after the tracebacks.
    marks = closest_first(
        [
            f
            for f in facts
            if f.kind == "log.signature" and f.attrs.get("signature") in failure_signatures and near_end(f)
        ]
    )
    return excs + sorted(tails, key=lambda f: (f.file or "", f.line or 0)) + marks


def facts_by_key(d: Diagnosis) -> Mapping[str, Fact]:
    return d.engine.facts
