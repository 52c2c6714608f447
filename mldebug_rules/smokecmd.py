"""``smoke plan | run | record`` and ``gate``: from a hypothesis to a cause only on a smoke's proof.

- plan: for the leading hypotheses, the discriminating smoke, what each outcome would mean, and (when the
  run's command line is known) the concrete command with the recipe applied.
- run: runs the argv given after ``--`` (never a string from log text), classifies the outcome with the
  signature packs, maps it through the smoke's declared outcomes, appends the record to the state file.
- record: a smoke the user ran by hand.
- gate: exit 0 only if the claimed hypothesis is smoke-confirmed; otherwise say what is missing.

Only ``RUN_DIR/.mldebug/`` is ever written.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .collectors.smoke_state import STATE_DIR, StateUnusable, append_record, read_records, state_path
from .diagnose import Diagnosis, Request, diagnose, load_kb
from .engine.gate import claim_allowed
from .engine.packs import KnowledgeBase, known_hypotheses
from .engine.rank import Hypothesis
from .errors import UsageError
from .redact import redact
from .smoke_controls import controls_table, parse_control
from .smoke_exec import Execution, classify, failure_signatures, run_command, signature_scanner
from .smoke_recipe import FoundCommand, apply_recipe, find_command, overrides_for_control

MAX_PLANNED = 3  # leading hypotheses shown by `smoke plan`
TOOL = "mldebug-rules"


# --- shared helpers --------------------------------------------------------------------------------
def _run_dir(path: str) -> Path:
    p = Path(path)
    if not p.is_dir():
        raise UsageError(f"{path}: no such run directory")
    return p


def _request(run_dir: Path, args: argparse.Namespace) -> Request:
    return Request(
        run_dirs=[run_dir], rules_dirs=[Path(x) for x in getattr(args, "rules", []) or []], offline=True
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
    if hid not in known_hypotheses(kb):
        raise UsageError(f"{flag} {hid}: unknown hypothesis id (see taxonomy.yaml or `rules list`)")
    return hid


def smokes_for(kb: KnowledgeBase, hid: str, h: Hypothesis | None = None) -> list[str]:
    """The hypothesis' own smoke first, then every other smoke that declares it discriminates it."""
    first = (h.smoke if h else None) or kb.hypothesis_info(hid).get("smoke")
    others = sorted(s for s, spec in kb.smokes.items() if hid in spec.get("discriminates", []) and s != first)
    return ([first] if first and first in kb.smokes else []) + others


def map_outcome(spec: Mapping[str, Any] | None, outcome: str, hid: str) -> tuple[str, str]:
    """A smoke outcome -> confirmed | refuted | inconclusive for ``hid``, by the smoke's declared outcomes."""
    if outcome == "timed_out":
        return "inconclusive", "a timeout decides nothing"
    o = (spec or {}).get("outcomes", {}).get(outcome)
    if not o:
        return "inconclusive", f"the smoke declares nothing for '{outcome}'"
    meaning = str(o.get("meaning", ""))
    if hid in (o.get("confirms") or []):
        return "confirmed", meaning
    if hid in (o.get("refutes") or []):
        return "refuted", meaning
    return "inconclusive", meaning or f"'{outcome}' neither confirms nor refutes {hid}"


def _find(d: Diagnosis, hid: str) -> Hypothesis | None:
    return next((h for h in d.gate.hypotheses if h.id == hid), None)


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
) -> str:
    parts = [TOOL, "smoke", "run", shlex.quote(run_dir), "--hypothesis", hid]
    if not primary:
        parts += ["--smoke", smoke]
    if control:
        parts += ["--control", control]
    parts += ["--timeout", _fmt_timeout(timeout), "--"]
    parts.append(shlex.join(argv) if argv else "COMMAND [ARG...]")
    return redact(" ".join(parts))


def smoke_record_cmd(run_dir: str, hid: str) -> str:
    outcomes = "confirmed|refuted|inconclusive"
    return f"{TOOL} smoke record {shlex.quote(run_dir)} --hypothesis {hid} --outcome {outcomes}"


# --- plan -----------------------------------------------------------------------------------------
def _plan_smoke(
    kb: KnowledgeBase,
    run_dir: str,
    hid: str,
    sid: str,
    primary: bool,
    found: FoundCommand | None,
    timeout: float,
) -> dict[str, Any]:
    spec = kb.smokes[sid]
    recipe = dict(spec.get("recipe") or {})
    entry: dict[str, Any] = {
        "id": sid,
        "description": spec["description"],
        "discriminates": list(spec["discriminates"]),
        "outcomes": {
            name: {k: o[k] for k in ("confirms", "refutes", "meaning") if o.get(k)}
            for name, o in sorted(spec["outcomes"].items())
        },
        "recipe": recipe,
    }
    if found is not None:
        ap = apply_recipe(found.argv, recipe)
        entry["command"] = smoke_run_cmd(run_dir, hid, sid, primary, timeout, ap.argv)
        entry["framework"] = ap.framework
        entry["changes"] = ap.changes
        entry["needs_code_change"] = ap.unapplied
        entry["notes"] = ap.notes
    else:
        entry["command"] = smoke_run_cmd(run_dir, hid, sid, primary, timeout, None)
    return entry


def _control_values(spec: Mapping[str, Any]) -> list[str]:
    """The values a control can take, the suggested one first."""
    values = [str(v) for v in (spec.get("values") or {}) if v != "*"]
    first = str(spec.get("example") or (values[0] if values else "VALUE"))
    return [first, *(v for v in values if v != first)]


def _plan_controls(
    run_dir: str, hid: str, sid: str, recipe: Mapping[str, Any], found: FoundCommand | None, timeout: float
) -> list[dict[str, Any]]:
    """One control per axis. With a known command, the value suggested is one that really changes it from
    the smoke's own command (the baseline): a control that changes nothing compares nothing."""
    out = []
    table = controls_table()["controls"]
    base = apply_recipe(found.argv, recipe) if found is not None else None
    for name, spec in table.items():
        values = _control_values(spec)
        entry: dict[str, Any] = {"control": f"{name}={values[0]}", "axis": spec["axis"]}
        argv: list[str] | None = None
        if found is not None and base is not None:
            fallback: dict[str, Any] | None = None
            for value in values:
                ctl = overrides_for_control(name, value, table)
                merged = {
                    "env": {**(recipe.get("env") or {}), **ctl["env"]},
                    "overrides": {**(recipe.get("overrides") or {}), **ctl["overrides"]},
                    "args": list(recipe.get("args") or []),
                }
                ap = apply_recipe(found.argv, merged)
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


def plan(args: argparse.Namespace) -> int:
    run_dir = _run_dir(args.run_dir)
    d = diagnose(_request(run_dir, args))
    kb = d.kb
    if args.hypothesis:
        targets = [_check_hypothesis(kb, args.hypothesis)]
    else:
        targets = [h.id for h in d.gate.hypotheses if h.status == "hypothesis" and h.failure][:MAX_PLANNED]
        if not targets and d.gate.verdict != "cause":
            targets = _alternatives_of_refuted(d)[:MAX_PLANNED]
    found = find_command(run_dir, args.cmd)
    timeout = float(args.timeout)
    out: dict[str, Any] = {
        "run_dir": args.run_dir,
        "verdict": d.gate.verdict,
        "cause": d.gate.cause,
        "refuted": [h.id for h in d.gate.hypotheses if h.status == "refuted"],
        "command_source": found.source if found else None,
        "command": redact(shlex.join(found.argv)) if found else None,
        "hypotheses": [],
    }
    if found is not None and found.review:
        # Shown for a human to read, never built into a ready `smoke run -- ...` line.
        out["review_first"] = f"the command in {found.source} {found.review}; read it before running anything"
        found = None
    for i, hid in enumerate(targets):
        h = _find(d, hid)
        sids = smokes_for(kb, hid, h)
        item: dict[str, Any] = {
            "id": hid,
            "status": h.status if h else "not raised",
            "alternative_of": [
                x.id for x in d.gate.hypotheses if x.status == "refuted" and hid in x.alternatives
            ],
            "score": h.score if h else 0.0,
            "evidence": [f.source for f in (h.evidence if h else [])][:5],
            "smokes": [
                _plan_smoke(kb, args.run_dir, hid, s, j == 0, found, timeout) for j, s in enumerate(sids)
            ],
            "record": smoke_record_cmd(args.run_dir, hid),
        }
        if not sids and kb.taxonomy.get(hid, {}).get("smoke"):
            item["suggested"] = str(kb.taxonomy[hid]["smoke"])
        if i == 0 and sids:
            item["controls"] = _plan_controls(
                args.run_dir, hid, sids[0], kb.smokes[sids[0]].get("recipe") or {}, found, timeout
            )
        out["hypotheses"].append(item)
    if getattr(args, "format", "text") == "json":
        sys.stdout.write(json.dumps(out, indent=2, ensure_ascii=False) + "\n")
    else:
        sys.stdout.write(_plan_text(out))
    return 0


def _alternatives_of_refuted(d: Diagnosis) -> list[str]:
    """When smokes refuted every live hypothesis, their declared alternatives are what to smoke next."""
    decided = {h.id for h in d.gate.hypotheses if h.status != "hypothesis"}
    out: list[str] = []
    for h in d.gate.hypotheses:
        if h.status == "refuted":
            out += [a for a in h.alternatives if a not in decided and a not in out and d.kb.is_failure(a)]
    return out


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
        if h["alternative_of"] and h["status"] == "not raised":
            cited = f"; an alternative of the refuted {', '.join(h['alternative_of'])}"
        lines.append(f"{h['id']} [{h['status']}] score {h['score']:.2f}{cited}")
        if not h["smokes"]:
            hint = f": {h['suggested']}" if h.get("suggested") else ""
            lines.append(f"  no smoke declared in the packs; run your own check and record it{hint}")
        for s in h["smokes"]:
            lines.append(f"  smoke {s['id']}: {s['description']}")
            for name, o in s["outcomes"].items():
                bits = [f"confirms {', '.join(o['confirms'])}"] if o.get("confirms") else []
                bits += [f"refutes {', '.join(o['refutes'])}"] if o.get("refutes") else []
                if name == "timed_out":
                    bits = ["decides nothing"]
                meaning = f" - {o['meaning']}" if o.get("meaning") not in (None, "", "inconclusive") else ""
                lines.append(f"    if {name}: {'; '.join(bits) or 'inconclusive'}{meaning}")
            if s.get("changes"):
                lines.append(f"    recipe applied ({s['framework']}): {'; '.join(s['changes'])}")
            if s.get("needs_code_change"):
                todo = ", ".join(f"{k}={v}" for k, v in s["needs_code_change"].items())
                lines.append(f"    also set by hand (no flag for it in this command): {todo}")
            for n in s.get("notes", []):
                lines.append(f"    note: {n}")
            if s["recipe"].get("note"):
                lines.append(f"    note: {s['recipe']['note']}")
            lines.append(f"    run:    {s['command']}")
        lines.append(f"  record a smoke run by hand: {h['record']}")
        if h.get("controls"):
            lines.append(
                "  controls (if the smoke is ambiguous: change one variable, compare with its baseline):"
            )
            for c in h["controls"]:
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
def _original_signatures(kb: KnowledgeBase, h: Hypothesis | None, hid: str) -> list[str]:
    """What 'the same failure again' means: the signatures the diagnosis cited for this hypothesis, else
    the signatures the packs associate with it."""
    cited = sorted(
        {str(f.attrs["signature"]) for f in (h.evidence if h else []) if f.kind == "log.signature"}
    )
    return cited or sorted(s.id for s in kb.signatures if hid in s.hypotheses)


def _save_output(run_dir: Path, ex: Execution, stamp: str) -> str:
    d = run_dir / STATE_DIR
    d.mkdir(exist_ok=True)
    name = f"smoke-{stamp}-{os.getpid()}.out"
    tmp = d / f".{name}.tmp"
    tmp.write_bytes(ex.output())
    os.replace(tmp, d / name)  # readers never see a half-written capture
    return f"{STATE_DIR}/{name}"


def run(args: argparse.Namespace) -> int:
    run_dir = _run_dir(args.run_dir)
    argv = list(args.argv or [])
    if not argv:
        raise UsageError("smoke run: give the command after --, e.g. -- python train.py --max_steps 1")
    if not math.isfinite(args.timeout) or args.timeout <= 0:  # nan compares false with everything
        raise UsageError(f"--timeout {args.timeout}: must be a finite number of seconds > 0")
    _check_state_writable(run_dir)  # before anything runs: a result that cannot be kept is not worth running
    control = parse_control(args.control)
    d = diagnose(_request(run_dir, args))
    kb = d.kb
    hid = _check_hypothesis(kb, args.hypothesis)
    h = _find(d, hid)
    sids = smokes_for(kb, hid, h)
    if args.smoke and args.smoke not in kb.smokes:
        raise UsageError(f"--smoke {args.smoke}: unknown smoke id")
    sid = args.smoke or (sids[0] if sids else "")
    spec = kb.smokes.get(sid)
    original = _original_signatures(kb, h, hid)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    before = read_records(run_dir)
    ex = run_command(argv, float(args.timeout), signature_scanner(kb))
    if ex.error:
        raise UsageError(f"smoke run: cannot start the command: {ex.error}")
    outcome, why = classify(ex, original, failure_signatures(kb))
    if control:
        status, meaning = (
            "inconclusive",
            "a control narrows the mechanism against its baseline; it decides nothing alone",
        )
    else:
        status, meaning = map_outcome(spec, outcome, hid)
    record: dict[str, Any] = {
        "kind": "run",
        "hypothesis": hid,
        "smoke": sid,
        "outcome": status,
        "classification": outcome,
        "why": why,
        "meaning": meaning,
        "command": redact(shlex.join(argv)),
        "exit_code": ex.exit_code,
        "duration_s": ex.duration_s,
        "timeout_s": float(args.timeout),
        "signatures": ex.signatures,
        "original_signatures": original,
        "output_bytes": ex.total_bytes,
        "output_tail": ex.tail_text(),
        "output_file": _save_output(run_dir, ex, stamp),
        "control": control,
        "time": stamp,
    }
    if control:
        from .smoke_controls import find_baseline

        base = find_baseline(before, {**record, "seq": len(before) + 1})
        record["baseline_seq"] = base.get("seq") if base else None
        # The same argv as the baseline: the variable was changed outside the command (a config file, the
        # environment the tool runs in) or not at all; the pair is kept, and says so.
        record["same_command_as_baseline"] = bool(base and base.get("command") == record["command"])
    rec = append_record(run_dir, record)
    derived = [] if control else _derived_records(run_dir, spec, sid, outcome, hid, rec)
    _report_run(rec, derived, spec)
    return 0


def _derived_records(
    run_dir: Path, spec: Mapping[str, Any] | None, sid: str, outcome: str, hid: str, rec: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """The same outcome also confirms or refutes the other hypotheses the smoke declares it decides."""
    if outcome == "timed_out" or not spec:
        return []
    o = spec.get("outcomes", {}).get(outcome) or {}
    out = []
    for status, key in (("confirmed", "confirms"), ("refuted", "refutes")):
        for other in o.get(key) or []:
            if other == hid:
                continue
            out.append(
                append_record(
                    run_dir,
                    {
                        "kind": "run",
                        "hypothesis": other,
                        "smoke": sid,
                        "outcome": status,
                        "classification": outcome,
                        "meaning": str(o.get("meaning", "")),
                        "derived_from": rec["seq"],
                        "command": rec["command"],
                        "control": None,
                        "time": rec["time"],
                    },
                )
            )
    return out


def _report_run(
    rec: Mapping[str, Any], derived: list[dict[str, Any]], spec: Mapping[str, Any] | None
) -> None:
    code = "timed out" if rec["exit_code"] is None else f"exit {rec['exit_code']}"
    print(
        f"smoke {rec['smoke'] or '(none declared)'} for {rec['hypothesis']}: {rec['classification']} "
        f"({code}, {rec['duration_s']:.1f}s; {rec['why']})"
    )
    verb = {"confirmed": "CONFIRMED", "refuted": "refuted", "inconclusive": "inconclusive"}[rec["outcome"]]
    print(f"  -> {rec['hypothesis']} {verb}" + (f": {rec['meaning']}" if rec.get("meaning") else ""))
    for r in derived:
        print(f"  -> {r['hypothesis']} {r['outcome']} (declared by the same outcome)")
    if rec.get("control"):
        base = rec.get("baseline_seq")
        print(
            f"  control {rec['control']['name']}={rec['control']['value']}: "
            + (
                f"paired with baseline #{base}"
                if base
                else "no baseline yet: run the smoke without --control"
            )
        )
        if rec.get("same_command_as_baseline"):
            print(
                f"  warning: the command is the same as baseline #{base}'s: unless the change was made in a "
                "config file, this control changed nothing",
                file=sys.stderr,
            )
    print(f"  recorded as #{rec['seq']} in {STATE_DIR}/smokes.jsonl; output kept in {rec['output_file']}")


# --- record ---------------------------------------------------------------------------------------
def record(args: argparse.Namespace) -> int:
    run_dir = _run_dir(args.run_dir)
    if not args.outcome:
        raise UsageError("smoke record: --outcome confirmed|refuted|inconclusive is required")
    kb = load_kb(_request(run_dir, args))
    hid = _check_hypothesis(kb, args.hypothesis)
    _check_state_writable(run_dir)
    if args.smoke and args.smoke not in kb.smokes:
        raise UsageError(f"--smoke {args.smoke}: unknown smoke id")
    if args.control:
        # A control is compared with its baseline by how each run ended (passed, reproduced...), which only
        # `smoke run` observes; an outcome typed by hand cannot be paired, and a control confirms nothing.
        raise UsageError(
            "smoke record: --control is for `smoke run ... --control NAME=VALUE -- COMMAND`, which classifies "
            "the run and pairs it with its baseline"
        )
    sid = args.smoke or (smokes_for(kb, hid) or [""])[0]
    rec = append_record(
        run_dir,
        {
            "kind": "record",
            "hypothesis": hid,
            "smoke": sid,
            "outcome": args.outcome,
            "note": redact(args.note or ""),
            "control": None,
            "time": time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()),
        },
    )
    print(
        f"recorded #{rec['seq']}: {hid} {args.outcome}"
        + (f" ({sid})" if sid else "")
        + f" in {state_path(Path(args.run_dir))}"
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
def _last_decisive(h: Hypothesis, outcome: str) -> Any:
    """The smoke result that set the status (inconclusive ones never do)."""
    return next((f for f in reversed(h.smoke_results) if f.attrs.get("outcome") == outcome), None)


def gate(args: argparse.Namespace) -> int:
    run_dir = _run_dir(args.run_dir)
    d = diagnose(_request(run_dir, args))
    claim = _check_hypothesis(d.kb, args.claim, "--claim")
    allowed, h = claim_allowed(d.gate, claim)
    if allowed and h is not None:
        last = _last_decisive(h, "confirmed")
        via = f" by smoke {last.attrs.get('smoke') or '(by hand)'}, {last.source}" if last else ""
        print(f"gate: PASS: {claim} is smoke-confirmed{via}")
        return 0
    print(f"gate: FAIL: {claim} is not smoke-confirmed; do not claim it as the cause yet")
    if h is None:
        print(f"  missing: nothing in {args.run_dir} raised {claim}, and no smoke confirmed it")
    elif h.status == "refuted":
        last = _last_decisive(h, "refuted")
        print(f"  refuted by a smoke ({last.source if last else 'state file'}); look elsewhere")
    else:
        cites = ", ".join(f.source for f in h.evidence[:3]) or "none"
        print(f"  status: hypothesis (score {h.score:.2f}; evidence {cites})")
        print("  missing: a smoke result that confirms it (rules alone never confirm a cause)")
    confirmed = [x.id for x in d.gate.hypotheses if x.status == "confirmed" and x.id != claim]
    if confirmed:
        print(f"  smoke-confirmed instead: {', '.join(confirmed)}")
    sids = smokes_for(d.kb, claim, h)
    if sids:
        spec = d.kb.smokes[sids[0]]
        found = find_command(run_dir, None)
        if found is not None and found.review:  # never suggest running what needs a human's review
            found = None
        argv = apply_recipe(found.argv, spec.get("recipe") or {}).argv if found else None
        print(f"  settle it with smoke {sids[0]}: {spec['description']}")
        print(f"    {smoke_run_cmd(args.run_dir, claim, sids[0], True, 600.0, argv)}")
    else:
        hint = d.kb.taxonomy.get(claim, {}).get("smoke")
        print(
            f"  no smoke is declared for it in the packs; suggested check: {hint or 'a discriminating check'}"
        )
    print(f"    or, after running it by hand: {smoke_record_cmd(args.run_dir, claim)}")
    return 1
