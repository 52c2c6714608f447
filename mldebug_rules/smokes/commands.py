"""``smoke plan | run | record`` and ``gate``: from a hypothesis to a cause only on a smoke pair's proof.

- plan: for the leading hypotheses, the discriminating smoke, what each outcome would mean, and (when the
  run's command line is known) both halves of the pair: the baseline (the unchanged command under the smoke's
  conditions) and the change (the recipe applied); which half is still missing.
- run: runs the argv given after ``--`` (never a string from log text), classifies it (passed needs exit 0,
  training progress in its own output and none of the failure's signatures) and appends the record to the
  state file; ``--baseline`` marks the unchanged half of the pair.
- record: a check the user ran by hand, kept as ``recorded`` (the gate counts it only when trusted).
- gate: exit 0 only if the claimed hypothesis is smoke-confirmed; otherwise say what is missing.

Whether a pair confirms or refutes is decided in ``engine/gate.py`` alone; this module only renders it.
Only ``RUN_DIR/.mldebug/`` is ever written.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..diagnose import Diagnosis, Request, diagnose, load_kb
from ..engine.gate import GateResult, Pair, apply_smokes, claim_allowed, map_outcome
from ..engine.packs import KnowledgeBase, known_hypotheses
from ..engine.rank import Hypothesis, rank
from ..errors import UsageError
from ..redact import redact
from .controls import controls_table, parse_control
from .execute import Execution, classify, failure_signatures, run_command, signature_scanner
from .outcomes import outcome_lines, outcome_table, pair_lines
from .recipe import (
    FoundCommand,
    apply_recipe,
    conditions_of,
    find_command,
    overrides_for_control,
    resolve_onset,
    split_command,
)
from .state import (
    STATE_DIR,
    StateUnusable,
    append_record,
    read_records,
    record_facts,
    state_path,
)

MAX_PLANNED = 3  # leading hypotheses shown by `smoke plan`
TOOL = "mldebug-rules"
PLAN_SCHEMA = "mldebug-rules/smoke-plan/v1"


# --- shared helpers --------------------------------------------------------------------------------
def _run_dir(path: str) -> Path:
    p = Path(path)
    if not p.is_dir():
        raise UsageError(f"{path}: no such run directory")
    return p


def _request(run_dir: Path, args: argparse.Namespace, trust_recorded: bool = False) -> Request:
    return Request(
        run_dirs=[run_dir],
        rules_dirs=[Path(x) for x in getattr(args, "rules", []) or []],
        offline=True,
        options={"trust_recorded": trust_recorded},
    )


def _check_state_writable(run_dir: Path) -> None:
    """Fail early, with one line, when RUN_DIR/.mldebug cannot be written (a read-only run directory)."""
    d = run_dir / STATE_DIR
    created = False
    try:
        if not d.exists():
            d.mkdir()
            created = True
        fd, probe = tempfile.mkstemp(prefix=".write-check-", dir=d)
        os.close(fd)
        os.unlink(probe)
        if created:  # leave the run directory as it was: the state is written only with a result
            d.rmdir()
    except OSError as e:
        raise UsageError(
            f"{d}: cannot write the smoke state there ({e.strerror or e}); nothing was run or recorded. "
            "Copy the run directory somewhere writable and point the command at the copy"
        ) from None


def _check_hypothesis(kb: KnowledgeBase, hid: str | None, flag: str = "--hypothesis") -> str:
    if not hid:
        raise UsageError(f"{flag} ID is required")
    known = known_hypotheses(kb)
    if hid not in known:
        import difflib

        close = difflib.get_close_matches(hid.lower(), sorted(known), n=3, cutoff=0.6)
        close += sorted(k for k in known if hid.lower() in k.lower() and k not in close)[:3]
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise UsageError(
            f"{flag} {hid}: unknown hypothesis id ({hint}`mldebug-rules rules list --ids` lists them all)"
        )
    return hid


def smokes_for(kb: KnowledgeBase, hid: str, h: Hypothesis | None = None) -> list[str]:
    """The hypothesis' own smoke first, then every other smoke that declares it discriminates it."""
    first = (h.smoke if h else None) or kb.hypothesis_info(hid).get("smoke")
    others = sorted(s for s, spec in kb.smokes.items() if hid in spec.get("discriminates", []) and s != first)
    return ([first] if first and first in kb.smokes else []) + others


def _find(g: GateResult, hid: str) -> Hypothesis | None:
    return next((h for h in g.hypotheses if h.id == hid), None)


def _fmt_timeout(t: float) -> str:
    return str(int(t)) if float(t).is_integer() else str(t)


def smoke_run_cmd(
    run_dir: str,
    hid: str,
    smoke: str,
    primary: bool,
    timeout: float,
    argv: list[str] | None,
    control: str | None = None,
    baseline: bool = False,
) -> str:
    parts = [TOOL, "smoke", "run", shlex.quote(run_dir), "--hypothesis", hid]
    if baseline:
        parts.append("--baseline")
    if not primary:
        parts += ["--smoke", smoke]
    if control:
        parts += ["--control", control]
    parts += ["--timeout", _fmt_timeout(timeout), "--"]
    parts.append(shlex.join(argv) if argv else "COMMAND [ARG...]")
    return redact(" ".join(parts))


def smoke_record_cmd(run_dir: str, hid: str) -> str:
    outcomes = "confirmed|refuted|inconclusive"
    return f'{TOOL} smoke record {shlex.quote(run_dir)} --hypothesis {hid} --outcome {outcomes} --note "..."'


_INTERPRETER_VERSION = re.compile(r"[0-9.]+$")


def program_of(argv: Sequence[str]) -> str:
    """What a command runs: its launcher or interpreter and its script (or module, or `-c` code), without
    the options between them and without environment assignments; a pair must run the same one in both
    halves."""
    sp = split_command(list(argv))
    tokens = sp.head + sp.args
    if not tokens:
        return ""
    prog = _INTERPRETER_VERSION.sub("", os.path.basename(tokens[0])) or os.path.basename(tokens[0])
    script = sp.head[sp.script_at] if sp.script_at > 0 else ""
    if script.endswith(".py"):
        return f"{prog} {os.path.normpath(script)}"
    if sp.script_at > 0 and sp.head[sp.script_at - 1] == "-m":
        return f"{prog} -m {script}"
    if "-c" in tokens[1:-1]:  # `python -c CODE [ARG...]`: the code is the script
        return f"{prog} -c {tokens[tokens.index('-c', 1) + 1]}"
    # Not Python: the program and the first file it is given (`bash run.sh --bs 1`), if any.
    first = next((t for t in tokens[1:] if not t.startswith("-") and ("." in t or "/" in t)), "")
    return f"{prog} {os.path.normpath(first)}" if first else prog


def _onset_inputs(d: Diagnosis) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    onsets = [
        (str(f.attrs.get("trend")), int(f.attrs.get("step", -1))) for f in d.facts if f.kind == "metric.trend"
    ]
    ckpts = [
        (f.file, int(f.attrs.get("step", -1)))
        for f in d.facts
        if f.kind == "checkpoint.file" and f.attrs.get("valid", True) and f.file
    ]
    return onsets, ckpts


def concrete_recipe(d: Diagnosis, run_dir: str, spec: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The smoke's recipe for this run (its onset resolved against the run's metrics and checkpoints)."""
    onsets, ckpts = _onset_inputs(d)
    return resolve_onset(dict(spec.get("recipe") or {}), run_dir, onsets, ckpts)


def reevaluate(d: Diagnosis, run_dir: Path, trust_recorded: bool = False) -> GateResult:
    """The gate again over the same rule results with the state file as it is now (after an append): no
    probe runs again, and the decision is still the gate's own."""
    facts = [f for f in d.facts if f.kind != "smoke.result"] + record_facts(d.kb.registry, run_dir)
    hyps = rank(d.kb, d.engine.firings, d.engine.facts)
    return apply_smokes(d.kb, hyps, facts, trust_recorded, coverage=d.gate.coverage)


def _pairs_of(g: GateResult, hid: str) -> list[Pair]:
    return [p for p in g.pairs if p.hypothesis == hid or hid in p.effects]


def pair_state(g: GateResult, hid: str) -> dict[str, Any]:
    """Where the hypothesis stands in the pair protocol: its pairs, and which half is still missing."""
    pairs = _pairs_of(g, hid)
    own = [p for p in pairs if p.hypothesis == hid]
    decided = [p for p in pairs if p.effects.get(hid) in ("confirmed", "refuted")]
    if decided:
        missing = None
    elif own:
        missing = own[-1].missing or None
    else:
        missing = "baseline"
    return {"pairs": [p.to_dict() for p in pairs], "missing": missing}


# --- plan ---------------------------------------------------------------------------------------
def _plan_smoke(
    d: Diagnosis,
    run_dir: str,
    hid: str,
    sid: str,
    primary: bool,
    found: FoundCommand | None,
    timeout: float,
) -> dict[str, Any]:
    spec = d.kb.smokes[sid]
    recipe, onset_notes = concrete_recipe(d, run_dir, spec)
    entry: dict[str, Any] = {
        "id": sid,
        "description": spec["description"],
        "discriminates": list(spec["discriminates"]),
        "outcomes": outcome_table(spec),
        "recipe": dict(spec.get("recipe") or {}),
    }
    if found is not None:
        base = apply_recipe(found.argv, conditions_of(recipe))
        ap = apply_recipe(found.argv, recipe)
        entry["baseline_command"] = smoke_run_cmd(
            run_dir, hid, sid, primary, timeout, base.argv, baseline=True
        )
        entry["command"] = smoke_run_cmd(run_dir, hid, sid, primary, timeout, ap.argv)
        entry["argv_diff"] = _argv_diff(base.argv, ap.argv)
        entry["framework"] = ap.framework
        entry["changes"] = ap.changes
        entry["needs_code_change"] = ap.unapplied
        entry["notes"] = onset_notes + ap.notes
    else:
        entry["baseline_command"] = smoke_run_cmd(run_dir, hid, sid, primary, timeout, None, baseline=True)
        entry["command"] = smoke_run_cmd(run_dir, hid, sid, primary, timeout, None)
        entry["notes"] = onset_notes
    return entry


def _argv_diff(before: list[str], after: list[str]) -> list[str]:
    from ..engine.gate import argv_diff

    return argv_diff(redact(shlex.join(before)), redact(shlex.join(after)))


def _control_values(spec: Mapping[str, Any]) -> list[str]:
    """The values a control can take, the suggested one first."""
    values = [str(v) for v in (spec.get("values") or {}) if v != "*"]
    first = str(spec.get("example") or (values[0] if values else "VALUE"))
    return [first, *(v for v in values if v != first)]


def _not_applicable(spec: Mapping[str, Any], hid: str) -> str:
    for cond in spec.get("not_applicable") or []:
        if hid in (cond.get("hypotheses") or []):
            return str(cond.get("reason") or "it cannot change anything for this failure")
    return ""


def _plan_controls(
    run_dir: str, hid: str, sid: str, recipe: Mapping[str, Any], found: FoundCommand | None, timeout: float
) -> list[dict[str, Any]]:
    """One control per axis, each changing one variable from the baseline (the unchanged command under the
    smoke's conditions). With a known command, the value suggested is one that really changes it: a control
    that changes nothing compares nothing. A control that cannot change anything for this failure or this
    run is listed as not applicable, with the reason."""
    out = []
    table = controls_table()["controls"]
    cond = conditions_of(recipe)
    base = apply_recipe(found.argv, cond) if found is not None else None
    for name, spec in table.items():
        values = _control_values(spec)
        entry: dict[str, Any] = {"control": f"{name}={values[0]}", "axis": spec["axis"], "applicable": True}
        why_not = _not_applicable(spec, hid)
        if why_not:
            entry.update(applicable=False, reason=why_not)
            out.append(entry)
            continue
        argv: list[str] | None = None
        if found is not None and base is not None:
            fallback: dict[str, Any] | None = None
            notes: list[str] = []
            for value in values:
                ctl = overrides_for_control(name, value, table)
                merged = {"env": ctl["env"], "overrides": {**cond["overrides"], **ctl["overrides"]}}
                ap = apply_recipe(found.argv, merged)
                notes += [n for n in ap.notes if n not in notes]
                cand = {
                    "control": f"{name}={value}",
                    "argv": ap.argv,
                    "changes": [c for c in ap.changes if c not in base.changes],
                    "needs_code_change": {k: v for k, v in ap.unapplied.items() if k in ctl["overrides"]},
                }
                if ap.argv != base.argv:
                    fallback = cand
                    break
                if fallback is None and cand["needs_code_change"]:
                    fallback = cand
            if notes:  # the control's variable does not exist in this run ("already a single process")
                entry.update(applicable=False, reason=notes[0])
                out.append(entry)
                continue
            if fallback is None:  # no value changes this command line: say so rather than suggest a no-op
                entry["changes"] = []
                entry["needs_code_change"] = {}
                entry["note"] = "no value of this control changes the command line; change it in the config"
            else:
                entry["control"] = fallback["control"]
                entry["changes"] = fallback["changes"]
                entry["needs_code_change"] = fallback["needs_code_change"]
                argv = fallback["argv"]
        entry["command"] = smoke_run_cmd(run_dir, hid, sid, True, timeout, argv, control=entry["control"])
        out.append(entry)
    return out


def plan_data(args: argparse.Namespace) -> dict[str, Any]:
    """The plan as data (schema smoke-plan/v1): what `smoke plan --format json` prints and the MCP tool
    returns."""
    run_dir = _run_dir(args.run_dir)
    d = diagnose(_request(run_dir, args))
    kb, g = d.kb, d.gate
    if args.hypothesis:
        targets = [_check_hypothesis(kb, args.hypothesis)]
    else:
        targets = g.leads[:MAX_PLANNED] if g.verdict != "cause" else []
    found = find_command(run_dir, args.cmd)
    timeout = float(args.timeout)
    refuted = [h.id for h in g.hypotheses if h.status == "refuted"]
    out: dict[str, Any] = {
        "schema": PLAN_SCHEMA,
        "run_dir": args.run_dir,
        "verdict": g.verdict,
        "cause": g.cause,
        "refuted": refuted,
        "leads": list(g.leads),
        "command_source": found.source if found else None,
        "command": redact(shlex.join(found.argv)) if found else None,
        "hypotheses": [],
    }
    if found is not None and found.review:
        # Shown for a human to read, never built into a ready `smoke run -- ...` line.
        out["review_first"] = f"the command in {found.source} {found.review}; read it before running anything"
        found = None
    for i, hid in enumerate(targets):
        h = _find(g, hid)
        sids = smokes_for(kb, hid, h)
        state = pair_state(g, hid)
        item: dict[str, Any] = {
            "id": hid,
            "status": h.status if h else "not raised",
            "alternative_of": [x.id for x in g.hypotheses if x.status == "refuted" and hid in x.alternatives],
            "consequence_of": list(h.explained_by) if h else [],
            "score": h.score if h else 0.0,
            "evidence": [f.source for f in (h.evidence if h else [])][:5],
            "pairs": state["pairs"],
            "missing": state["missing"],
            "smokes": [
                _plan_smoke(d, args.run_dir, hid, s, j == 0, found, timeout) for j, s in enumerate(sids)
            ],
            "record": smoke_record_cmd(args.run_dir, hid),
        }
        if hid in g.not_decided:
            item["not_decided"] = g.not_decided[hid]
        if not sids and kb.taxonomy.get(hid, {}).get("smoke"):
            item["suggested"] = str(kb.taxonomy[hid]["smoke"])
        if i == 0 and sids:
            recipe, _ = concrete_recipe(d, args.run_dir, kb.smokes[sids[0]])
            item["controls"] = _plan_controls(args.run_dir, hid, sids[0], recipe, found, timeout)
        out["hypotheses"].append(item)
    return out


def plan(args: argparse.Namespace) -> int:
    out = plan_data(args)
    if getattr(args, "format", "text") == "json":
        sys.stdout.write(json.dumps(out, indent=2, ensure_ascii=False) + "\n")
    else:
        sys.stdout.write(_plan_text(out))
    return 0


_MISSING = {
    "baseline": "the baseline (the unchanged command, with --baseline; it must reproduce the failure)",
    "change": "the change (the one-variable command, after a reproduced baseline)",
}


def _plan_text(p: Mapping[str, Any]) -> str:
    lines = [f"smoke plan for {p['run_dir']} (verdict now: {p['verdict']})"]
    if p.get("review_first"):
        lines.append(f"  REVIEW FIRST: {p['review_first']}: {p['command']}")
        lines.append('  smoke commands below use COMMAND; pass the real one with --cmd "..." once reviewed')
    elif p["command"]:
        lines.append(f"  run command (from {p['command_source']}): {p['command']}")
    else:
        lines.append(
            '  run command: not found in the logs or bundles; pass it with --cmd "..." for concrete commands'
        )
    if p["refuted"]:
        lines.append(f"  refuted by smokes: {', '.join(p['refuted'])}")
    lines.append(
        "  a cause needs a pair: a baseline that reproduces the failure, then a one-variable change that trains"
    )
    if not p["hypotheses"] and p["cause"]:
        lines.append(
            f"  nothing left to smoke: {p['cause']} is smoke-confirmed; to narrow its mechanism with controls, "
            f"run smoke plan {shlex.quote(p['run_dir'])} --hypothesis {p['cause']}"
        )
    elif not p["hypotheses"]:
        lines.append("  nothing to smoke: no live failure hypothesis")
    for h in p["hypotheses"]:
        lines.append("")
        cited = f"; evidence {', '.join(h['evidence'])}" if h["evidence"] else ""
        if h["alternative_of"]:
            cited += f"; an alternative of the refuted {', '.join(h['alternative_of'])}"
        lines.append(f"{h['id']} [{h['status']}] score {h['score']:.2f}{cited}")
        if h.get("not_decided"):
            lines.append(f"  a smoke result was not counted: {h['not_decided']}")
        for pr in h["pairs"]:
            lines += pair_lines(pr, "  ")
        if h["missing"]:
            lines.append(f"  missing: {_MISSING[h['missing']]}")
        if not h["smokes"]:
            hint = f": {h['suggested']}" if h.get("suggested") else ""
            lines.append(f"  no smoke declared in the packs; run your own pair with smoke run{hint}")
        for s in h["smokes"]:
            lines.append(f"  smoke {s['id']}: {s['description']}")
            lines += outcome_lines(s["outcomes"], "    ")
            if s.get("changes"):
                lines.append(f"    recipe applied ({s['framework']}): {'; '.join(s['changes'])}")
            if s.get("needs_code_change"):
                todo = ", ".join(f"{k}={v}" for k, v in s["needs_code_change"].items())
                lines.append(f"    also set by hand (no flag for it in this command): {todo}")
            for n in s.get("notes", []):
                lines.append(f"    note: {n}")
            if s["recipe"].get("note"):
                lines.append(f"    note: {s['recipe']['note']}")
            lines.append(f"    1. baseline: {s['baseline_command']}")
            lines.append(f"    2. change:   {s['command']}")
            if s.get("argv_diff"):
                lines.append(f"       argv difference: {'; '.join(s['argv_diff'])}")
        lines.append(f"  a check run by hand (counted only by `gate --trust-recorded`): {h['record']}")
        if h.get("controls"):
            lines.append("  controls (one variable changed against the baseline, to narrow the mechanism):")
            for c in h["controls"]:
                if not c["applicable"]:
                    lines.append(f"    {c['control']} ({c['axis']}): not applicable: {c['reason']}")
                    continue
                todo = ", ".join(f"{k}={v}" for k, v in (c.get("needs_code_change") or {}).items())
                lines.append(f"    {c['control']} ({c['axis']}): {c['command']}")
                if c.get("changes"):
                    lines.append(f"      changes only: {'; '.join(c['changes'])}")
                if todo:
                    lines.append(f"      also set by hand: {todo}")
                if c.get("note"):
                    lines.append(f"      note: {c['note']}")
    return "\n".join(lines) + "\n"


# --- run ------------------------------------------------------------------------------------------
def _original_signatures(kb: KnowledgeBase, g: GateResult, hid: str) -> list[str]:
    """What 'the same failure again' means: the signatures the diagnosis cited for this hypothesis; for an
    alternative of a refuted hypothesis, the ones cited for that hypothesis (the run's failure is the same);
    else the signatures the packs associate with it."""

    def cited(hs: Sequence[Hypothesis]) -> list[str]:
        return sorted(
            {str(f.attrs["signature"]) for h in hs for f in h.evidence if f.kind == "log.signature"}
        )

    h = _find(g, hid)
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
    run_dir = _run_dir(args.run_dir)
    argv = list(args.argv or [])
    if not argv:
        raise UsageError("smoke run: give the command after --, e.g. -- python train.py --max_steps 1")
    if not math.isfinite(args.timeout) or args.timeout <= 0:  # nan compares false with everything
        raise UsageError(f"--timeout {args.timeout}: must be a finite number of seconds > 0")
    _check_state_writable(run_dir)  # before anything runs: a result that cannot be kept is not worth running
    control = parse_control(args.control)
    if control and args.baseline:
        raise UsageError("smoke run: --baseline is the unchanged command; a --control changes one variable")
    d = diagnose(_request(run_dir, args))
    kb = d.kb
    hid = _check_hypothesis(kb, args.hypothesis)
    h = _find(d.gate, hid)
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
    if _find(g, hid) is None and rec["role"] != "control":
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
            h = _find(g, hid)
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


# --- record ---------------------------------------------------------------------------------------
def record_smoke(args: argparse.Namespace) -> dict[str, Any]:
    """Append a hand-recorded result (kept as `recorded`) to the state file; the record as written."""
    run_dir = _run_dir(args.run_dir)
    if not args.outcome:
        raise UsageError("smoke record: --outcome confirmed|refuted|inconclusive is required")
    note = (args.note or "").strip()
    if not note:
        raise UsageError("smoke record: --note TEXT is required (what was run by hand, and what it showed)")
    kb = load_kb(_request(run_dir, args))
    hid = _check_hypothesis(kb, args.hypothesis)
    _check_state_writable(run_dir)
    if args.smoke and args.smoke not in kb.smokes:
        raise UsageError(f"--smoke {args.smoke}: unknown smoke id")
    sid = args.smoke or (smokes_for(kb, hid) or [""])[0]
    rec = append_record(
        run_dir,
        {
            "kind": "record",
            "recorded": True,
            "hypothesis": hid,
            "smoke": sid,
            "outcome": args.outcome,
            "note": redact(note),
            "control": None,
            "time": time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()),
        },
    )
    return rec


def record(args: argparse.Namespace) -> int:
    rec = record_smoke(args)
    print(
        f"recorded #{rec['seq']} (by hand): {rec['hypothesis']} {args.outcome}"
        + (f" ({rec['smoke']})" if rec["smoke"] else "")
        + f" in {state_path(Path(args.run_dir))}"
    )
    print(
        "  a result typed in by hand is kept as `recorded`: `gate` counts it only with --trust-recorded; "
        "a smoke pair (`smoke run --baseline`, then the change) counts by itself"
    )
    return 0


def main(args: argparse.Namespace) -> int:
    if args.action != "run" and args.argv:
        raise UsageError(f"smoke {args.action}: unexpected arguments: {' '.join(args.argv)}")
    try:
        return {"plan": plan, "run": run, "record": record}[args.action](args)
    except StateUnusable as e:  # a FIFO or device as smokes.jsonl: refused, never waited on
        raise UsageError(f"smoke state unusable: {e}") from None


# --- gate -----------------------------------------------------------------------------------------
def _last_decisive(h: Hypothesis) -> Any:
    """The smoke result that set the status (the change of the deciding pair, or a trusted record)."""
    return next((f for f in reversed(h.smoke_results) if f.attrs.get("role") in ("change", "record")), None)


def gate_check(args: argparse.Namespace) -> dict[str, Any]:
    """The gate's decision as data: passed, the hypothesis' status, the missing half of its pair (None when
    a pair decided it), its pairs, and the explanation `gate` prints (its first line is the verdict)."""
    run_dir = _run_dir(args.run_dir)
    trust = bool(getattr(args, "trust_recorded", False))
    d = diagnose(_request(run_dir, args, trust_recorded=trust))
    g = d.gate
    claim = _check_hypothesis(d.kb, args.claim, "--claim")
    allowed, h = claim_allowed(g, claim)
    lines: list[str] = []
    state = pair_state(g, claim)
    out: dict[str, Any] = {
        "claim": claim,
        "passed": bool(allowed and h is not None),
        "status": h.status if h else "not raised",
        "missing": None if allowed else state["missing"],
        "pairs": state["pairs"],
        "lines": lines,
    }
    if allowed and h is not None:
        last = _last_decisive(h)
        how = (
            "a hand-recorded result (trusted)"
            if last is not None and last.attrs.get("role") == "record"
            else ("a smoke pair")
        )
        via = f" by {how}, {last.source}" if last is not None else ""
        lines.append(f"gate: PASS: {claim} is smoke-confirmed{via}")
        out["reason"] = f"{claim} is smoke-confirmed{via}"
        return out
    lines.append(f"gate: FAIL: {claim} is not smoke-confirmed; do not claim it as the cause yet")
    if claim in g.not_decided:
        lines.append(f"  a smoke result for it was not counted: {g.not_decided[claim]}")
    if h is None:
        lines.append(f"  missing: nothing in {args.run_dir} raised {claim}, and no smoke pair confirmed it")
    elif h.status == "refuted":
        last = _last_decisive(h)
        lines.append(
            f"  refuted by a smoke ({last.source if last is not None else 'state file'}); look elsewhere"
        )
    else:
        cites = ", ".join(f.source for f in h.evidence[:3]) or "none"
        lines.append(f"  status: hypothesis (score {h.score:.2f}; evidence {cites})")
    hand = [r for r in g.recorded if r.hypothesis == claim and r.outcome == "confirmed"]
    if hand and not trust:
        lines.append(
            f"  recorded by hand as confirmed ({', '.join(r.source for r in hand)}), which the gate counts only "
            "with --trust-recorded"
        )
    for pr in state["pairs"]:
        lines.extend(pair_lines(pr, "  "))
    if state["missing"] and (h is None or h.status == "hypothesis"):
        lines.append(f"  missing: {_MISSING[state['missing']]}")
    confirmed = [x.id for x in g.hypotheses if x.status == "confirmed" and x.id != claim]
    if confirmed:
        lines.append(f"  smoke-confirmed instead: {', '.join(confirmed)}")
    sids = smokes_for(d.kb, claim, h)
    if sids:
        spec = d.kb.smokes[sids[0]]
        found = find_command(run_dir, None)
        if found is not None and found.review:  # never suggest running what needs a human's review
            found = None
        recipe, _ = concrete_recipe(d, args.run_dir, spec)
        base = apply_recipe(found.argv, conditions_of(recipe)).argv if found else None
        change = apply_recipe(found.argv, recipe).argv if found else None
        lines.append(f"  settle it with smoke {sids[0]}: {spec['description']}")
        lines.append(
            f"    1. baseline: {smoke_run_cmd(args.run_dir, claim, sids[0], True, 600.0, base, baseline=True)}"
        )
        lines.append(f"    2. change:   {smoke_run_cmd(args.run_dir, claim, sids[0], True, 600.0, change)}")
    else:
        hint = d.kb.taxonomy.get(claim, {}).get("smoke")
        lines.append(
            f"  no smoke is declared for it in the packs; suggested check: {hint or 'a discriminating check'}"
        )
        lines.append(
            f"    run it as a pair: smoke run {shlex.quote(args.run_dir)} --hypothesis {claim} --baseline -- "
            "COMMAND, then the changed command"
        )
    lines.append(
        f"    a check run by hand (counted only with --trust-recorded): {smoke_record_cmd(args.run_dir, claim)}"
    )
    # The first line after the verdict says why: not counted, not raised, refuted, or still a hypothesis.
    out["reason"] = lines[1].strip()
    return out


def gate(args: argparse.Namespace) -> int:
    result = gate_check(args)
    for line in result["lines"]:
        print(line)
    return 0 if result["passed"] else 1
