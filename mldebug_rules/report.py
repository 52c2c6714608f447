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
        "outcomes": {
            name: {k: v for k, v in o.items() if k in ("confirms", "refutes", "meaning") and v}
            for name, o in sorted(spec["outcomes"].items())
        },
    }
    if spec.get("recipe"):
        block["recipe"] = spec["recipe"]
    return block


def _first_rank(d: Diagnosis) -> int | None:
    first = next((f for f in d.facts if f.kind == "rank.first_failure"), None)
    return first.rank if first is not None and first.attrs.get("role") == "root" else None


def _hypothesis(d: Diagnosis, h: Hypothesis, first_rank: int | None = None) -> dict[str, Any]:
    info = d.kb.hypothesis_info(h.id)
    evidence = [_evidence(f, first_rank) for f in h.evidence[:MAX_EVIDENCE]]
    evidence += [_evidence(f) for f in h.smoke_results]
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
    if info.get("remediation"):
        out["remediation"] = dict(info["remediation"])
    if info.get("runbook"):
        out["runbook"] = info["runbook"]
    if not h.failure:
        out["failure"] = False
    return out


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
    live = [h for h in hyps if h.status == "hypothesis" and h.failure]
    if live:
        top = live[0]
        smoke = d.kb.smokes.get(top.smoke or "")
        what = smoke["description"].rstrip(".") if smoke else (top.smoke or "a discriminating smoke")
        return (
            f"Do not claim a cause yet. Run the smoke for {top.id}: {what}; then record it with "
            f"`mldebug-rules smoke record RUN_DIR --hypothesis {top.id} --outcome confirmed|refuted`."
        )
    refuted = [h for h in hyps if h.status == "refuted" and h.failure]
    if refuted:  # smokes ruled out everything the rules raised: the refuted ones' alternatives come next
        ids = ", ".join(h.id for h in refuted)
        alts = [a for h in refuted for a in h.alternatives if a not in {x.id for x in hyps}]
        nxt = f" Their alternatives come next ({', '.join(dict.fromkeys(alts))}): " if alts else " "
        return (
            f"Smokes refuted {ids}; no live hypothesis is left.{nxt}"
            "`mldebug-rules smoke plan RUN_DIR` lists the smokes that settle them."
        )
    if d.unexplained:
        f = d.unexplained[0]  # a log.tail fact whose scrollback holds a traceback
        where = f.file or f.probe or f.kind
        return (
            f"A failure that no rule explains yet (a Python traceback ends the log, {where}): read its last exception in the scrollback "
            "below; rerun the failing step alone (one process, CUDA_LAUNCH_BLOCKING=1) to localise it, and "
            "add a rule for it (`mldebug-rules rules new`)."
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
        "engine": {"rules": d.engine.backend, "scanner": d.scanner, "ruleset": d.compiled.name},
        "scrollback": _scrollback(d),
        "signatures": _signature_hits(d),
    }
    ranks = ranks_section(d.facts)  # many ranks/nodes: the first failing rank, and the cascades it caused
    if ranks:
        report["ranks"] = ranks
    warnings = list(d.kb.warnings) + list(getattr(d, "warnings", []))
    if warnings:
        report["warnings"] = warnings
    from .smoke_controls import report_section  # controls: smoke reruns paired with their baselines

    controls = report_section(d.request.run_dirs)
    if controls:
        report["controls"] = controls
    return redact_obj(report)


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
    cascades = ranks.get("cascades", [])
    if cascades:
        shown = ", ".join(
            str(c["rank"]) + (f" (+{c['after_first_s']:.0f}s)" if c.get("after_first_s") is not None else "")
            for c in cascades[:16]
        )
        out.append(
            f"{bullet}cascades (consequences, not causes) on rank(s): {shown}{' ...' if len(cascades) > 16 else ''}"
        )
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
    lines.append("")
    lines.append(f"{h1}1. What the probes found")
    for p in report["probes"]:
        lines.append(
            f"{bullet}{p['name']}: {p['status']} ({p['facts']} facts){' - ' + p['detail'] if p['detail'] else ''}"
        )
    for w in report.get("warnings", []):
        lines.append(f"{bullet}warning: {w}")
    lines.append("")
    lines += _rank_lines(report.get("ranks"), bullet, code)
    lines.append(f"{h1}2. Hypotheses (ranked; a hypothesis is not a cause until a smoke confirms it)")
    if not report["hypotheses"]:
        lines.append(f"{bullet}none: no rule matched the evidence")
    for i, h in enumerate(report["hypotheses"], 1):
        tag = {"confirmed": "CONFIRMED", "refuted": "refuted", "hypothesis": "hypothesis"}[h["status"]]
        lines.append(f"{bullet}{i}. [{tag}] {code}{h['id']}{code} score {h['score']:.2f}: {h['title']}")
        if h.get("explained_by"):
            lines.append(f"{bullet}   consequence of: {', '.join(h['explained_by'])}")
        for e in h["evidence"]:
            lines.append(f"{bullet}   seen: {code}{e['source']}{code}: {e['text'][:200]}")
        if h.get("alternatives"):
            lines.append(f"{bullet}   alternatives not ruled out: {', '.join(h['alternatives'])}")
        if h.get("remediation") and i <= 3:
            rem = h["remediation"]
            lines.append(f"{bullet}   why it matters / do now: {rem.get('immediate', '')}")
            lines.append(f"{bullet}   investigate: {rem.get('investigate', '')}")
            lines.append(f"{bullet}   false positive if: {rem.get('false_positive', '')}")
    lines.append("")
    lines.append(f"{h1}3. Smoke to run next")
    top = next((h for h in report["hypotheses"] if h["status"] == "hypothesis" and h.get("smoke")), None)
    if top:
        s = top["smoke"]
        lines.append(f"{bullet}{code}{s['id']}{code}: {s['description']}")
        for name, o in s.get("outcomes", {}).items():
            bits = []
            if o.get("confirms"):
                bits.append("confirms " + ", ".join(o["confirms"]))
            if o.get("refutes"):
                bits.append("refutes " + ", ".join(o["refutes"]))
            lines.append(
                f"{bullet}   if {name}: {'; '.join(bits) or 'inconclusive'}{' - ' + o['meaning'] if o.get('meaning') else ''}"
            )
    else:
        lines.append(f"{bullet}none needed" if verdict != "uncertain" else f"{bullet}no smoke proposed")
    lines.append("")
    if report.get("plot"):  # set by `diagnose --plot`
        lines.append(
            f"![training curves]({report['plot']})" if markdown else f"curves plotted: {report['plot']}"
        )
        lines.append("")
    from .smoke_controls import text_lines as _control_lines

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
