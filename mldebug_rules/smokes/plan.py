"""``smoke plan``: for the leading hypotheses, the discriminating smoke, what each outcome would mean, and (when the
run's command line is known) both halves of the pair: the baseline (the unchanged command under the smoke's
conditions) and the change (the recipe applied); which half is still missing; controls to narrow it.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Mapping
from typing import Any

from ..diagnose import Diagnosis, diagnose
from ..redact import redact
from .common import (
    MISSING_HALF,
    check_hypothesis,
    concrete_recipe,
    find_hypothesis,
    pair_state,
    request_for,
    run_dir_path,
    smoke_record_cmd,
    smoke_run_cmd,
    smokes_for,
)
from .controls import controls_table
from .outcomes import outcome_lines, outcome_table, pair_lines
from .recipe import FoundCommand, apply_recipe, conditions_of, find_command, overrides_for_control

MAX_PLANNED = 3  # leading hypotheses shown by `smoke plan`
PLAN_SCHEMA = "mldebug-rules/smoke-plan/v1"


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
    run_dir = run_dir_path(args.run_dir)
    d = diagnose(request_for(run_dir, args))
    kb, g = d.kb, d.gate
    if args.hypothesis:
        targets = [check_hypothesis(kb, args.hypothesis)]
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
        h = find_hypothesis(g, hid)
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
        sys.stdout.write(plan_text(out))
    return 0


def plan_text(p: Mapping[str, Any]) -> str:
    """The plan (as ``plan_data`` returns it) as ``smoke plan`` prints it."""
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
            lines.append(f"  missing: {MISSING_HALF[h['missing']]}")
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
