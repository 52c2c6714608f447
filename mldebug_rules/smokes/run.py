"""``smoke run``: runs the argv given after ``--`` (never a string from log text), classifies it (passed needs exit
0, training progress in its own output and none of the failure's signatures), appends the record to the state
file and says what the gate now makes of the pair; ``--baseline`` marks the unchanged half.
"""

from __future__ import annotations

import argparse
import math
import os
import shlex
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..diagnose import diagnose
from ..engine.gate import GateResult, Pair, map_outcome
from ..engine.packs import KnowledgeBase
from ..engine.rank import Hypothesis
from ..errors import UsageError
from ..redact import redact
from .common import (
    check_hypothesis,
    check_state_writable,
    find_hypothesis,
    program_of,
    reevaluate,
    request_for,
    run_dir_path,
    smokes_for,
)
from .controls import parse_control
from .execute import Execution, classify, failure_signatures, run_command, signature_scanner
from .state import STATE_DIR, append_record, read_records


def _original_signatures(kb: KnowledgeBase, g: GateResult, hid: str) -> list[str]:
    """What 'the same failure again' means: the signatures the diagnosis cited for this hypothesis; for an
    alternative of a refuted hypothesis, the ones cited for that hypothesis (the run's failure is the same);
    else the signatures the packs associate with it."""

    def cited(hs: Sequence[Hypothesis]) -> list[str]:
        return sorted(
            {str(f.attrs["signature"]) for h in hs for f in h.evidence if f.kind == "log.signature"}
        )

    h = find_hypothesis(g, hid)
    refuted = [x for x in g.hypotheses if x.status == "refuted" and hid in x.alternatives]
    return (
        cited([h] if h else [])
        or cited(refuted)
        or sorted(s.id for s in kb.signatures if hid in s.hypotheses)
    )


def _save_output(run_dir: Path, ex: Execution, stamp: str) -> str:
    d = run_dir / STATE_DIR
    d.mkdir(exist_ok=True)
    name = f"smoke-{stamp}-{os.getpid()}.out"
    tmp = d / f".{name}.tmp"
    tmp.write_bytes(ex.output())
    os.replace(tmp, d / name)  # readers never see a half-written capture
    return f"{STATE_DIR}/{name}"


def training_progress(path: Path) -> int:
    """Training records (step or loss lines) the metrics reader finds in a smoke's captured output."""
    from ..collectors.metrics_parse import LineReader

    ss = LineReader().read(path, path.name)
    found = max((s.total for k, s in ss.series.items() if not k.startswith("val_")), default=0)
    if found:
        return found
    # A one-step smoke prints one step line, and the generic reader only makes a series of a name it has
    # seen twice: count the lines that carry a step counter and a named number directly.
    from ..collectors.metrics_generic import parse_generic

    text = path.read_bytes()[-(4 << 20) :].decode("utf-8", "replace")
    return sum(1 for line in text.splitlines() if all(parse_generic(line[:2000])))


def run_smoke(
    args: argparse.Namespace, execute: Any = run_command
) -> tuple[dict[str, Any], GateResult, Mapping[str, Any] | None]:
    """Run one half of a pair (args.argv, never a string from a log), append its record to the state file
    and re-evaluate the gate: the record as written, the gate now, and the smoke's spec. ``execute`` is
    ``run_command`` or a caller's wrapper around it (the MCP server reports progress while it runs)."""
    run_dir = run_dir_path(args.run_dir)
    argv = list(args.argv or [])
    if not argv:
        raise UsageError("smoke run: give the command after --, e.g. -- python train.py --max_steps 1")
    if not math.isfinite(args.timeout) or args.timeout <= 0:  # nan compares false with everything
        raise UsageError(f"--timeout {args.timeout}: must be a finite number of seconds > 0")
    check_state_writable(run_dir)  # before anything runs: a result that cannot be kept is not worth running
    control = parse_control(args.control)
    if control and args.baseline:
        raise UsageError("smoke run: --baseline is the unchanged command; a --control changes one variable")
    d = diagnose(request_for(run_dir, args))
    kb = d.kb
    hid = check_hypothesis(kb, args.hypothesis)
    h = find_hypothesis(d.gate, hid)
    sids = smokes_for(kb, hid, h)
    if args.smoke and args.smoke not in kb.smokes:
        raise UsageError(f"--smoke {args.smoke}: unknown smoke id")
    sid = args.smoke or (sids[0] if sids else "")
    original = _original_signatures(kb, d.gate, hid)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    before = read_records(run_dir)
    ex = execute(argv, float(args.timeout), signature_scanner(kb))
    if ex.error:
        raise UsageError(f"smoke run: cannot start the command: {ex.error}")
    output_file = _save_output(run_dir, ex, stamp)
    progress = training_progress(run_dir / output_file)
    outcome, why = classify(ex, original, failure_signatures(kb), progress > 0)
    role = "control" if control else "baseline" if args.baseline else "change"
    record: dict[str, Any] = {
        "kind": "run",
        "role": role,
        "hypothesis": hid,
        "smoke": sid,
        # The gate decides from pairs (engine/gate.py), never from this field: a run alone decides nothing.
        "outcome": "inconclusive",
        "classification": outcome,
        "why": why,
        "command": redact(shlex.join(argv)),
        "program": redact(program_of(argv)),  # `-c` code is the script, secrets and all
        "exit_code": ex.exit_code,
        "duration_s": ex.duration_s,
        "timeout_s": float(args.timeout),
        "signatures": ex.signatures,
        "original_signatures": original,
        "progress_records": progress,
        "output_bytes": ex.total_bytes,
        "output_tail": ex.tail_text(),
        "output_file": output_file,
        "control": control,
        "time": stamp,
    }
    if control:
        from .controls import find_baseline

        base = find_baseline(before, {**record, "seq": len(before) + 1})
        record["baseline_seq"] = base.get("seq") if base else None
        # The same argv as the baseline: the variable was changed outside the command (a config file, the
        # environment the tool runs in) or not at all; the pair is kept, and says so.
        record["same_command_as_baseline"] = bool(base and base.get("command") == record["command"])
    rec = append_record(run_dir, record)
    return rec, reevaluate(d, run_dir), d.kb.smokes.get(sid)


def run(args: argparse.Namespace) -> int:
    rec, g, spec = run_smoke(args)
    _report_run(args.run_dir, rec, g, spec)
    return 0


def _report_run(run_dir: str, rec: Mapping[str, Any], g: GateResult, spec: Mapping[str, Any] | None) -> None:
    code = "timed out" if rec["exit_code"] is None else f"exit {rec['exit_code']}"
    hid = rec["hypothesis"]
    print(
        f"smoke {rec['smoke'] or '(none declared)'} for {hid}, {rec['role']}: {rec['classification']} "
        f"({code}, {rec['duration_s']:.1f}s; {rec['why']})"
    )
    pair = next((p for p in g.pairs if _seq_of(p, rec)), None)
    if find_hypothesis(g, hid) is None and rec["role"] != "control":
        print(
            f"  note: nothing in the evidence raised {hid}: a pair can confirm it only once it is an "
            "alternative of a refuted hypothesis"
        )
    if rec["role"] == "baseline":
        if rec["classification"] == "reproduced":
            print(f"  baseline #{rec['seq']} reproduced the original failure: it counts.")
            print(
                "  next: the change, the same program and script with the one variable the smoke changes "
                f"(`smoke plan {shlex.quote(run_dir)} --hypothesis {hid}` prints it)"
            )
        else:
            print(
                f"  baseline #{rec['seq']} did not reproduce the original failure: it does not count. A baseline "
                "runs the unchanged command under the smoke's conditions and must fail the way the run did "
                "(if the failure came late in the run, resume near it or run more steps)"
            )
    elif rec["role"] == "change" and pair is not None:
        print(f"  {pair.why}")
        if pair.diff:
            print(
                f"  argv difference from baseline #{pair.baseline.seq if pair.baseline else '?'}: "
                f"{'; '.join(pair.diff)}"
            )
        if pair.effects:
            meaning = map_outcome(spec, rec["classification"], hid)[1]
            h = find_hypothesis(g, hid)
            status = h.status if h else "not raised"
            verb = {"confirmed": "CONFIRMED", "refuted": "refuted"}.get(status, status)
            print(f"  -> {hid} {verb}" + (f": {meaning}" if meaning else ""))
            for other, eff in sorted(pair.effects.items()):
                if other != hid:
                    print(f"  -> {other} {eff} (declared by the same outcome)")
            for other in sorted(set(pair.effects) & set(g.not_decided)):
                print(f"  -> not counted for {other}: {g.not_decided[other]}")
        else:
            print(f"  -> {hid}: inconclusive; nothing decided")
    if rec.get("control"):
        base = rec.get("baseline_seq")
        print(
            f"  control {rec['control']['name']}={rec['control']['value']}: "
            + (f"paired with baseline #{base}" if base else "no baseline yet: run the smoke with --baseline")
            + " (a control narrows the mechanism; it decides nothing alone)"
        )
        if rec.get("same_command_as_baseline"):
            print(
                f"  warning: the command is the same as baseline #{base}'s: unless the change was made in a "
                "config file, this control changed nothing",
                file=sys.stderr,
            )
    print(f"  recorded as #{rec['seq']} in {STATE_DIR}/smokes.jsonl; output kept in {rec['output_file']}")


def _seq_of(p: Pair, rec: Mapping[str, Any]) -> bool:
    half = p.change if rec["role"] == "change" else p.baseline
    return half is not None and half.seq == rec["seq"]
