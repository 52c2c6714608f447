"""Reports in the seed's five parts: probes, hypotheses, the smoke to run, the verdict, the next action.

JSON follows CONTRACT.md (``mldebug-rules/report/v1``); text and markdown say the same in prose. Every claim
quotes its evidence as ``file:line`` (or the probe's name). Output is deterministic for the same inputs.
"""

from __future__ import annotations

import json
from typing import Any

from .collectors.ranks import report_section as ranks_section
from .diagnose import Diagnosis
from .engine.facts import Fact
from .engine.rank import Hypothesis
from .redact import clip, redact_obj
from .smokes.outcomes import outcome_lines, outcome_table, pair_lines

SCHEMA = "mldebug-rules/report/v1"
MAX_EVIDENCE = 8
_HIDDEN_KINDS = ("probe.status",)


def _evidence_text(f: Fact) -> str:
    if f.text:
        return clip(f.text.strip(), 500)
    parts = [f"{k}={v}" for k, v in sorted(f.attrs.items()) if v not in ("", -1, -1.0, None)]
    return f"{f.kind}: " + ", ".join(parts)


def _evidence(f: Fact, first_rank: int | None = None) -> dict[str, Any]:
    e: dict[str, Any] = {"fact": f.kind, "source": f.source, "text": _evidence_text(f)}
    if f.rank is not None:
        e["rank"] = f.rank
    if f.host:
        e["host"] = f.host
    if f.kind == "log.signature":
        e["signature"] = f.attrs.get("signature")
        e["role"] = f.attrs.get("role")
        if (
            first_rank is not None
            and f.attrs.get("role") == "cascade"
            and f.rank is not None
            and f.rank != first_rank
        ):
            e["cascade_of_rank"] = first_rank  # another rank's consequence of the first failure
    return e


def smoke_block(d: Diagnosis, smoke_id: str | None) -> dict[str, Any] | None:
    if not smoke_id:
        return None
    spec = d.kb.smokes.get(smoke_id)
    if spec is None:
        return {"id": smoke_id, "description": smoke_id, "discriminates": []}
    block: dict[str, Any] = {
        "id": smoke_id,
        "description": spec["description"],
        "discriminates": list(spec["discriminates"]),
        "outcomes": outcome_table(spec),
    }
    if spec.get("recipe"):
        block["recipe"] = spec["recipe"]
    return block


def _first_rank(d: Diagnosis) -> int | None:
    first = next((f for f in d.facts if f.kind == "rank.first_failure"), None)
    return first.rank if first is not None and first.attrs.get("role") == "root" else None


def _hypothesis(d: Diagnosis, h: Hypothesis, first_rank: int | None = None) -> dict[str, Any]:
    info = d.kb.hypothesis_info(h.id)
    evidence = []
    for f in h.evidence[:MAX_EVIDENCE]:
        e = _evidence(f, first_rank)
        if not any(x["source"] == e["source"] and x["text"] == e["text"] for x in evidence):
            evidence.append(e)  # one line cited by two facts (a signature and the timeline) shows once
    for f in h.smoke_results:
        e = _evidence(f)
        if f.attrs.get("role") == "record":
            e["recorded"] = True  # typed in by hand, counted because the caller trusted recorded results
        evidence.append(e)
    out: dict[str, Any] = {
        "id": h.id,
        "score": h.score,
        "status": h.status,
        "title": info.get("title") or h.summary,
        "claim": info.get("claim", ""),
        "role": h.role,
        "evidence": evidence,
        "alternatives": list(h.alternatives),
        "smoke": smoke_block(d, h.smoke),
        "rules": list(h.rules),
    }
    if len(h.evidence) > MAX_EVIDENCE:
        out["evidence_omitted"] = len(h.evidence) - MAX_EVIDENCE
    if h.explained_by:
        out["explained_by"] = list(h.explained_by)
    recorded = [r for r in d.gate.recorded if r.hypothesis == h.id]
    if recorded:
        out["recorded"] = [_recorded(r, d.gate.trust_recorded) for r in recorded]
    if info.get("remediation"):
        out["remediation"] = dict(info["remediation"])
    if info.get("runbook"):
        out["runbook"] = info["runbook"]
    if not h.failure:
        out["failure"] = False
    return out


def _next_smoke(d: Diagnosis) -> dict[str, Any] | None:
    """The smoke that settles the lead (the gate's first lead), if one is declared."""
    if not d.gate.leads:
        return None
    lead = d.gate.leads[0]
    sid = next((h.smoke for h in d.gate.hypotheses if h.id == lead), None)
    return smoke_block(d, sid or d.kb.hypothesis_info(lead).get("smoke"))


def _recorded(r: Any, trusted: bool) -> dict[str, Any]:
    """A result typed in with `smoke record`: shown, marked, and counted only when trusted."""
    return {
        "outcome": r.outcome,
        "note": r.note,
        "source": r.source,
        "counted": trusted and r.outcome != "inconclusive",
    }


def _smokes_section(d: Diagnosis) -> dict[str, Any] | None:
    g = d.gate
    if not g.pairs and not g.recorded:
        return None
    return {
        "pairs": [p.to_dict() for p in g.pairs],
        "recorded": [{"hypothesis": r.hypothesis, **_recorded(r, g.trust_recorded)} for r in g.recorded],
        "not_decided": dict(sorted(g.not_decided.items())),
    }


def next_action(d: Diagnosis) -> str:
    g = d.gate
    hyps = g.hypotheses
    if g.verdict == "cause" and g.cause:
        rem = d.kb.hypothesis_info(g.cause).get("remediation", {})
        return f"Cause confirmed by smoke: {g.cause}. {rem.get('immediate', '')}".strip()
    if g.verdict == "no_failure":
        done = [h for h in hyps if not h.failure]
        if done:
            return f"No failure found: {d.kb.hypothesis_info(done[0].id).get('title', done[0].id)}. Nothing to fix."
        return "No failure evidence in what was read. If the run still misbehaves, probe it live (without --offline)."
    refuted = [h for h in hyps if h.status == "refuted" and h.failure]
    if g.leads:
        lead = g.leads[0]
        sid = next((h.smoke for h in hyps if h.id == lead), None) or d.kb.hypothesis_info(lead).get("smoke")
        smoke = d.kb.smokes.get(sid or "")
        what = smoke["description"].rstrip(".") if smoke else (sid or "a discriminating smoke")
        why = ""
        if refuted:
            alt_of = [h.id for h in refuted if lead in h.alternatives]
            why = f"Smokes refuted {', '.join(h.id for h in refuted)}; " + (
                f"the lead is now {lead}, an alternative of {', '.join(alt_of)}. "
                if alt_of
                else f"the lead is now {lead}. "
            )
        return (
            f"{why}Do not claim a cause yet. Settle {lead} with a smoke pair ({what}): first "
            f"`mldebug-rules smoke run RUN_DIR --hypothesis {lead} --baseline -- COMMAND` (the unchanged "
            "command; it must reproduce the failure), then the one-variable change without --baseline. "
            "`mldebug-rules smoke plan RUN_DIR` prints both commands."
        )
    if refuted:  # smokes ruled out everything, and nothing is left to smoke
        ids = ", ".join(h.id for h in refuted)
        return f"Smokes refuted {ids}; no live hypothesis or untested alternative is left."
    if d.unexplained and d.unexplained[0].kind == "exception":
        ex = exception_section(d)
        assert ex is not None
        sur, root = ex["surfaced"], ex["root"]
        what = clip(f"{sur['type']}: {sur['message']}".rstrip(": "), 200)
        text = f"A failure that no rule explains yet: {what} ({sur['source']})"
        if root["source"] != sur["source"]:
            text += f"; its root is {root['type']}: {clip(root['message'], 160)} ({root['source']})"
        if ex.get("raised_in"):
            text += f", raised in {ex['raised_in']}"
        if ex.get("user_frame"):
            text += f"; the nearest user code is {ex['user_frame']}"
        smoke = ex.get("smoke")
        if smoke:
            text += (
                f". To split data from code, run the smoke {smoke['id']}: {smoke['description']} Then add a rule for "
                "it (`mldebug-rules rules new`)."
            )
        return text
    if d.unexplained and d.unexplained[0].kind == "log.signature":  # a line a pack declares a failure
        f = d.unexplained[0]
        where = f"{f.file}:{f.line}" if f.file and f.line else (f.file or f.source)
        return (
            f"A failure that no rule explains yet: {clip(f.text or f.attrs.get('signature', ''), 200)} ({where}). "
            "Its cause is earlier in this log or in another process's log (the failing rank's, the kernel log): "
            "read the scrollback below, rerun the failing step alone (one process, CUDA_LAUNCH_BLOCKING=1) to "
            "localise it, and add a rule for it (`mldebug-rules rules new`)."
        )
    if d.unexplained:
        f = d.unexplained[0]  # a log.tail fact whose scrollback holds a traceback
        where = f.file or f.source  # a fact read from no file (a bundle, a live probe) cites its probe
        return (
            f"A failure that no rule explains yet (a Python traceback ends the log, {where}): read its last exception in the scrollback "
            "below; rerun the failing step alone (one process, CUDA_LAUNCH_BLOCKING=1) to localise it, and "
            "add a rule for it (`mldebug-rules rules new`)."
        )
    blocking = [n for n in d.inputs if n.blocking or (n.problem == "nothing_found" and not d.evidence_seen)]
    if blocking:  # named inputs (or whole run directories) that held nothing to read
        shown = "; ".join(n.text for n in blocking[:3]) + (" ..." if len(blocking) > 3 else "")
        return (
            f"Nothing to read in what was named: {shown}. Pass the training log with --log, the kernel log "
            "with --kernel-log, and bundles written by `mldebug-rules collect` with --bundle."
        )
    if not d.evidence_seen:
        return "Nothing readable was found: pass the training log with --log and the kernel log with --kernel-log."
    return (
        "No rule matched the evidence. Read the scrollback below, then probe the live machine "
        "(processes, dmesg, nvidia-smi) by running diagnose without --offline."
    )


def _signature_hits(d: Diagnosis) -> list[dict[str, Any]]:
    """Every signature hit the logs probe kept, at its exact line, whether or not a hypothesis cites it:
    what a grep over the failure strings would have shown. `count` is the signature's hits in that file
    (the probe keeps the first and last few of a chatty one)."""
    hits = [f for f in d.facts if f.kind == "log.signature" and f.file]
    hits.sort(key=lambda f: (f.file, f.line or 0, str(f.attrs.get("signature"))))
    return [
        {
            "id": f.attrs.get("signature"),
            "role": f.attrs.get("role"),
            "source": f.source,
            "count": f.attrs.get("count"),
            **({"rank": f.rank} if f.rank is not None and f.rank >= 0 else {}),
        }
        for f in hits
    ]


def build(d: Diagnosis) -> dict[str, Any]:
    offline = d.request.offline
    probes = []
    for o in d.probes:
        probes.append(
            {
                "name": o.name,
                "status": o.status,
                "facts": len([f for f in o.facts if f.kind not in _HIDDEN_KINDS]),
                # Timings would break byte-identical offline reports; they are inputs of nothing.
                "seconds": None if offline else round(o.seconds, 3),
                "detail": o.detail,
            }
        )
    report: dict[str, Any] = {
        "schema": SCHEMA,
        "verdict": d.gate.verdict,
        "cause": d.gate.cause,
        "hypotheses": [_hypothesis(d, h, _first_rank(d)) for h in d.gate.hypotheses],
        "probes": probes,
        "next_action": next_action(d),
        "leads": list(d.gate.leads),
        "next_smoke": _next_smoke(d) if d.gate.verdict != "cause" else None,
        "engine": {"rules": d.engine.backend, "scanner": d.scanner, "ruleset": d.compiled.name},
        "scrollback": _scrollback(d),
        "signatures": _signature_hits(d),
    }
    exc = exception_section(d)
    if exc:
        report["exception"] = exc
    ranks = ranks_section(d.facts)  # many ranks/nodes: the first failing rank, and the cascades it caused
    if ranks:
        report["ranks"] = ranks
    if d.inputs:  # inputs not read (the tool's own outputs) or holding nothing to read
        report["inputs"] = [n.as_dict() for n in d.inputs]
    warnings = list(d.kb.warnings) + list(getattr(d, "warnings", []))
    if warnings:
        report["warnings"] = warnings
    smokes = _smokes_section(d)  # smoke pairs (baseline, change) and results recorded by hand
    if smokes:
        report["smokes"] = smokes
    from .smokes.controls import report_section  # controls: smoke reruns paired with their baselines

    controls = report_section(d.request.run_dirs)
    if controls:
        report["controls"] = controls
    return redact_obj(report)


NO_WORKERS_SMOKE = "one_batch_no_workers"  # the smoke that splits data from code for any exception


def _exc_view(f: Fact) -> dict[str, Any]:
    a = f.attrs
    return {
        "type": a["type"],
        "message": a["message"],
        "source": f.source,
        "origin": a["origin"] + (f" {a['worker']}" if a["origin"] == "worker" and a["worker"] >= 0 else ""),
        "package": a["package"],
        **({"errno": a["errno_name"] or a["errno"]} if a["errno_name"] or a["errno"] >= 0 else {}),
    }


def exception_section(d: Diagnosis) -> dict[str, Any] | None:
    """The exception that ends the run (the one closest to the end of its log) and its chain's root: what it
    is, who raised it, the nearest user code, and the smoke that splits data from code."""
    excs = [f for f in d.facts if f.kind == "exception" and f.attrs["position"] in ("surfaced", "only")]
    if not excs:
        return None
    sur = min(excs, key=lambda f: (f.attrs["from_end"], f.file, -f.line))
    chain = [f for f in d.facts if f.kind == "exception" and f.attrs["chain"] == sur.attrs["chain"]]
    root = next((f for f in chain if f.attrs["position"] == "root"), sur)
    out: dict[str, Any] = {"surfaced": _exc_view(sur), "root": _exc_view(root)}
    ra = root.attrs
    if ra["package"]:
        out["raised_in"] = f"{ra['package']} ({ra['module']}, {ra['function']})"
    user = next((f for f in (root, sur) if f.attrs["user_module"]), None)
    if user is not None:
        ua = user.attrs
        out["user_frame"] = f"{ua['user_module']}:{ua['user_lineno']} in {ua['user_function']}"
    smoke = d.kb.smokes.get(NO_WORKERS_SMOKE)
    if smoke:
        out["smoke"] = {"id": NO_WORKERS_SMOKE, "description": " ".join(smoke["description"].split())}
    return out


def _scrollback(d: Diagnosis) -> list[dict[str, Any]]:
    out = []
    for f in d.facts:
        if f.kind == "log.tail":
            out.append({"file": f.file, "lines": f.extra.get("scrollback", [])[-15:]})
    return sorted(out, key=lambda x: x["file"])[:8]


def _rank_lines(ranks: dict[str, Any] | None, bullet: str, code: str) -> list[str]:
    if not ranks:
        return []
    out = [
        f"{bullet}ranks: {ranks['count']} seen"
        + (f" on {len(ranks['hosts'])} host(s)" if ranks.get("hosts") else "")
    ]
    first = ranks.get("first_failure")
    if first:
        where = f"rank {first['rank']}" if first["rank"] >= 0 else "host"
        where += f" on {first['host']}" if first.get("host") else ""
        out.append(
            f"{bullet}first failure: {where} ({first['role']}): {code}{first['source']}{code}: {first['text'][:160]}"
        )
        if first.get("exception"):  # the rank's own exception, not only the launcher's line about it
            x = first["exception"]
            out.append(
                f"{bullet}  raised by rank {first['rank']}: {code}{x['source']}{code}: {x['text'][:300]}"
            )
    cascades = ranks.get("cascades", [])
    if cascades:
        shown = ", ".join(
            str(c["rank"]) + (f" (+{c['after_first_s']:.0f}s)" if c.get("after_first_s") is not None else "")
            for c in cascades[:16]
        )
        out.append(
            f"{bullet}cascades (consequences, not causes) on rank(s): {shown}{' ...' if len(cascades) > 16 else ''}"
        )
    for c in [c for c in cascades if c.get("exception")][:8]:
        x = c["exception"]
        out.append(f"{bullet}  raised by rank {c['rank']}: {code}{x['source']}{code}: {x['text'][:300]}")
    for key, label in (("silent", "ranks that logged no error"),):
        if ranks.get(key):
            out.append(f"{bullet}{label}: {', '.join(map(str, ranks[key][:32]))}")
    for s in ranks.get("stragglers", [])[:8]:
        out.append(
            f"{bullet}straggler: rank {s['rank']} at {s['ratio']}x the median step time ({s['source']})"
        )
    for s in ranks.get("stalled_first", [])[:8]:
        out.append(
            f"{bullet}stopped progressing first: rank {s['rank']} at step {s['step']} (others reached {s['max_step']})"
        )
    for s in ranks.get("never_joined", [])[:8]:
        out.append(
            f"{bullet}never joined: rank {s['rank']} in group {s['group']} (#{s['seq']} of #{s['max_seq']}; dump {s['dump']})"
        )
    for n in ranks.get("notes", []):
        out.append(f"{bullet}note: {n}")
    return [*out, ""]


def _pair_section(smokes: dict[str, Any] | None, h1: str, bullet: str) -> list[str]:
    if not smokes or not smokes.get("pairs"):
        return []
    lines = [f"{h1}Smoke pairs (a baseline that reproduces, then a one-variable change)"]
    for p in smokes["pairs"]:
        lines += pair_lines(p, "  " if bullet == "- " else bullet, first=bullet)
    return [*lines, ""]


def to_json(report: dict[str, Any]) -> str:
    return json.dumps(report, indent=2, sort_keys=False, ensure_ascii=False) + "\n"


# --- text and markdown -------------------------------------------------------------------------------------
def to_text(report: dict[str, Any], markdown: bool = False) -> str:
    h1 = "## " if markdown else ""
    bullet = "- " if markdown else "  "
    code = "`" if markdown else ""
    lines: list[str] = []
    verdict = report["verdict"]
    title = {
        "cause": f"CAUSE (smoke-confirmed): {report['cause']}",
        "uncertain": "UNCERTAIN: hypotheses only, no cause proven yet",
        "no_failure": "NO FAILURE found",
    }[verdict]
    lines.append(("# " if markdown else "") + f"mldebug-rules diagnosis: {title}")
    # Warnings (a disabled pack, input not read, facts counted but not reasoned over) head the report.
    lines += [f"{'> ' if markdown else ''}warning: {w}" for w in report.get("warnings", [])]
    lines.append("")
    lines.append(f"{h1}1. What the probes found")
    for p in report["probes"]:
        lines.append(
            f"{bullet}{p['name']}: {p['status']} ({p['facts']} facts){' - ' + p['detail'] if p['detail'] else ''}"
        )
    for n in report.get("inputs", []):
        lines.append(f"{bullet}input: {n['text']}")
    lines.append("")
    lines += _rank_lines(report.get("ranks"), bullet, code)
    exc = report.get("exception")
    if exc and verdict != "no_failure":
        sur, root = exc["surfaced"], exc["root"]
        lines.append(
            f"{bullet}exception: {code}{sur['source']}{code}: {sur['type']}: {clip(sur['message'], 160)}"
        )
        if root["source"] != sur["source"]:
            lines.append(
                f"{bullet}   root: {code}{root['source']}{code}: {root['type']}: {clip(root['message'], 160)}"
            )
        if exc.get("raised_in"):
            lines.append(f"{bullet}   raised in: {exc['raised_in']}")
        if exc.get("user_frame"):
            lines.append(f"{bullet}   nearest user code: {exc['user_frame']}")
        lines.append("")
    lines.append(f"{h1}2. Hypotheses (ranked; a hypothesis is not a cause until a smoke confirms it)")
    if not report["hypotheses"]:
        lines.append(f"{bullet}none: no rule matched the evidence")
    for i, h in enumerate(report["hypotheses"], 1):
        tag = {"confirmed": "CONFIRMED", "refuted": "refuted", "hypothesis": "hypothesis"}[h["status"]]
        lines.append(f"{bullet}{i}. [{tag}] {code}{h['id']}{code} score {h['score']:.2f}: {h['title']}")
        if h.get("explained_by"):
            lines.append(f"{bullet}   consequence of: {', '.join(h['explained_by'])}")
        for e in h["evidence"]:
            # Whole: the terminal renderer wraps it, and `--no-wrap` keeps it on one line (report.py caps it).
            lines.append(f"{bullet}   seen: {code}{e['source']}{code}: {e['text']}")
        for r in h.get("recorded", []):
            counted = (
                "counted (trusted)"
                if r["counted"]
                else "not counted: gate counts it only with --trust-recorded"
            )
            lines.append(
                f"{bullet}   recorded by hand: {r['outcome']} ({code}{r['source']}{code}, {counted}): {r['note'][:200]}"
            )
        if h.get("alternatives"):
            lines.append(f"{bullet}   alternatives not ruled out: {', '.join(h['alternatives'])}")
        if h.get("remediation") and i <= 3:
            rem = h["remediation"]
            lines.append(f"{bullet}   why it matters / do now: {rem.get('immediate', '')}")
            lines.append(f"{bullet}   investigate: {rem.get('investigate', '')}")
            lines.append(f"{bullet}   false positive if: {rem.get('false_positive', '')}")
    lines.append("")
    lines.append(f"{h1}3. Smoke to run next")
    s = report.get("next_smoke")
    if s:
        lines.append(
            f"{bullet}for {code}{report['leads'][0]}{code}: {code}{s['id']}{code}: {s['description']}"
        )
        lines.append(
            f"{bullet}   as a pair: the unchanged command with --baseline (it must reproduce the failure), "
            "then the one-variable change"
        )
        lines += outcome_lines(s.get("outcomes", {}), f"{bullet}   ")
    else:
        lines.append(f"{bullet}none needed" if verdict != "uncertain" else f"{bullet}no smoke proposed")
    lines.append("")
    if report.get("plot"):  # set by `diagnose --plot`
        lines.append(
            f"![training curves]({report['plot']})" if markdown else f"curves plotted: {report['plot']}"
        )
        lines.append("")
    lines += _pair_section(report.get("smokes"), h1, bullet)
    from .smokes.controls import text_lines as _control_lines

    lines += _control_lines(report.get("controls"), markdown)
    lines.append(f"{h1}4. Verdict: {verdict}" + (f" ({report['cause']})" if report["cause"] else ""))
    lines.append("")
    lines.append(f"{h1}5. Next action")
    lines.append(f"{bullet}{report['next_action']}")
    if report.get("scrollback") and verdict != "no_failure":
        lines.append("")
        lines.append(f"{h1}Scrollback (last lines)")
        for sb in report["scrollback"][:3]:
            lines.append(f"{bullet}{sb['file']}:")
            if markdown:
                lines.append("```")
            for no, text in sb["lines"][-8:]:
                lines.append(f"    {no:>7}  {text[:160]}")
            if markdown:
                lines.append("```")
    lines.append("")
    eng = report["engine"]
    lines.append(f"engine: {eng['rules']}; scanner: {eng['scanner']}")
    return "\n".join(lines) + "\n"
