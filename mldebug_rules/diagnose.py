"""The diagnosis pipeline: probes -> facts -> rules (forward chaining) -> ranking -> evidence gate."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .collectors.base import Context, ProbeOutput, ProbeSpec, run_probes
from .collectors.ranks import rank_facts
from .collectors.registry import default_probes
from .engine.compile import CompiledRules, compile_kb
from .engine.facts import Fact
from .engine.gate import GateResult, apply_smokes
from .engine.packs import KnowledgeBase, load_packs
from .engine.rank import rank
from .engine.run import EngineResult, run_rules
from .errors import UsageError

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
    unexplained: list[Fact] = field(default_factory=list)
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
    if not (req.run_dirs or req.logs or req.kernel_logs or req.bundles) and req.offline:
        raise UsageError("nothing to diagnose: give a RUN_DIR, --log, --kernel-log or --bundle")


def load_kb(req: Request) -> KnowledgeBase:
    return load_packs(req.rules_dirs, strict=req.strict, params=req.params)


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
    kb = kb or load_kb(req)
    compiled = compile_kb(kb)
    ctx = probe_context(req, kb)
    outputs = run_probes(ctx, list(probes) if probes is not None else default_probes(live=not req.offline))
    facts: list[Fact] = [f for o in outputs for f in o.facts] + list(extra_facts)
    facts += rank_facts(facts, kb.registry)  # across ranks: first failure, stragglers, stalls
    result = run_rules(compiled, kb.registry, facts, req.engine)
    warnings: list[str] = []
    disabled = {k: v for o in outputs for k, v in o.payload.get("disabled_packs", {}).items()}
    if disabled:
        # A pack disabled while scanning (a regex past its time bound) loses its rules for this diagnosis.
        gone = {r.id for r in kb.rules if r.pack in disabled}
        result.firings = [f for f in result.firings if f.rule not in gone]
        warnings += [f"pack disabled: {pack}: {why}" for pack, why in sorted(disabled.items())]
    hyps = rank(kb, result.firings, result.facts)
    gate = apply_smokes(kb, hyps, facts)
    evidence_seen = any(f.kind.startswith(_EVIDENCE_KINDS) for f in facts)
    if gate.verdict == "no_failure" and not evidence_seen:
        gate.verdict = "uncertain"
    unexplained = unexplained_failures(facts) if gate.verdict == "no_failure" else []
    if unexplained:
        # A traceback or a root-role signature that no rule explains is a failure we do not know yet: saying
        # "no failure" there would be a confident wrong answer.
        gate.verdict = "uncertain"
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
        unexplained=unexplained,
        scanner=", ".join(scanners) or "none",
        warnings=warnings,
    )


def unexplained_failures(facts: Sequence[Fact]) -> list[Fact]:
    """Failure evidence that no hypothesis accounts for: a Python traceback in a log's scrollback.

    Signatures are not used here: rules deliberately leave some root signatures unexplained (a loss-scale
    overflow during the start-up search, a stop message), and only the rules know that."""
    out = [f for f in facts if f.kind == "log.tail" and f.attrs.get("traceback")]
    return sorted(out, key=lambda f: (f.file or "", f.line or 0))


def facts_by_key(d: Diagnosis) -> Mapping[str, Fact]:
    return d.engine.facts
