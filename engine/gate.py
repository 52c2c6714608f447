"""The evidence gate: only smoke results move a hypothesis to ``confirmed`` or ``refuted``, and this module is
the one place that decides it, and the verdict with it (the report and the smoke commands only render what it
decided).

Rules cannot reach this: ``smoke.result`` facts may only have origin ``smoke`` (the fact registry refuses any
other), and the status is decided here in Python from those facts alone, by the pair protocol:

- a *baseline* (``smoke run --baseline``) runs the unchanged command and counts only if it ``reproduced`` the
  original failure;
- a *change* (``smoke run`` without ``--baseline``) pairs with the latest earlier reproduced baseline of the
  same hypothesis that runs the same program and script; its argv must differ from that baseline's;
- the pair's outcome (the change ``passed`` or ``reproduced``) goes through the smoke's declared outcomes:
  ``confirmed`` or ``refuted`` for the hypotheses the smoke says it decides;
- a result typed by hand (``smoke record``) counts only when the caller trusts recorded results;
- only a hypothesis the evidence raised (score above 0), or an alternative of a refuted one, can be decided.

The verdict: ``cause`` when the top hypothesis is smoke-confirmed; ``no_failure`` when no failure hypothesis is
left and none was refuted, and only over input that was read (``Coverage``); else ``uncertain``.
"""

from __future__ import annotations

import difflib
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .facts import Fact
from .packs import KnowledgeBase
from .rank import Hypothesis, sort_hypotheses

VERDICTS = ("cause", "uncertain", "no_failure")
DECISIVE = ("passed", "reproduced")  # the change classifications a pair can decide on


@dataclass(frozen=True)
class SmokeRun:
    """One record of the state file, as the gate reads it from its ``smoke.result`` fact."""

    seq: int
    hypothesis: str
    smoke: str
    role: str  # baseline | change | control | record | legacy (a record written before pairs existed)
    outcome: str  # as written: for a record, what the user typed; for a run, what the gate said then
    classification: (
        str  # passed | reproduced | failed_differently | no_progress | timed_out ("" for a record)
    )
    reason: str
    command: str
    program: str  # launcher/interpreter and script, as `smoke run` read them from the argv
    note: str
    source: str
    fact: Fact | None = None


@dataclass
class Pair:
    """A baseline and the change run against it; either half may still be missing."""

    hypothesis: str
    smoke: str
    baseline: SmokeRun | None
    change: SmokeRun | None
    outcome: str  # confirmed | refuted | inconclusive | incomplete
    why: str
    diff: list[str] = field(default_factory=list)  # the argv edits from the baseline to the change
    effects: dict[str, str] = field(default_factory=dict)  # hypothesis -> confirmed | refuted

    @property
    def missing(self) -> str:
        if self.baseline is None or self.baseline.classification != "reproduced":
            return "baseline"
        return "change" if self.change is None or self.outcome == "inconclusive" else ""

    def to_dict(self) -> dict[str, Any]:
        def half(r: SmokeRun | None) -> dict[str, Any] | None:
            if r is None:
                return None
            return {
                "seq": r.seq,
                "command": r.command,
                "classification": r.classification,
                "reason": r.reason,
                "source": r.source,
            }

        return {
            "hypothesis": self.hypothesis,
            "smoke": self.smoke,
            "baseline": half(self.baseline),
            "change": half(self.change),
            "argv_diff": list(self.diff),
            "outcome": self.outcome,
            "why": self.why,
            "missing": self.missing or None,
            "decides": dict(self.effects),
        }


@dataclass(frozen=True)
class Coverage:
    """What the probes could read, as the verdict needs it. "No failure" is a claim about what was read: the
    gate never makes it when nothing was read, when input was passed over, or next to failure evidence that no
    hypothesis explains. The default claims full coverage (a caller that read everything it was given)."""

    evidence_seen: bool = True  # something was actually read: a log, a kernel log, a GPU snapshot...
    blocked: bool = False  # a named input held nothing to read
    skipped: bool = False  # input passed over: run-directory limits, unreadable files
    unexplained: tuple[Fact, ...] = ()  # failure evidence (a traceback, a final exception) no rule explains


@dataclass
class GateResult:
    hypotheses: list[Hypothesis]
    verdict: str
    cause: str | None
    pairs: list[Pair] = field(default_factory=list)
    recorded: list[SmokeRun] = field(default_factory=list)  # hand-recorded results
    trust_recorded: bool = False
    leads: list[str] = field(default_factory=list)  # what to smoke next, best first
    not_decided: dict[str, str] = field(default_factory=dict)  # hypothesis -> why a result did not count
    coverage: Coverage = field(default_factory=Coverage)
    # The unexplained failure evidence that kept the verdict from "no_failure" (empty otherwise).
    unexplained: list[Fact] = field(default_factory=list)


def smoke_runs(facts: Sequence[Fact]) -> list[SmokeRun]:
    out = []
    for f in facts:
        if f.kind != "smoke.result" or f.origin != "smoke":
            continue
        a = f.attrs
        out.append(
            SmokeRun(
                seq=int(a.get("seq", 0)),
                hypothesis=str(a["hypothesis"]),
                smoke=str(a.get("smoke", "")),
                role=str(a.get("role", "") or "legacy"),
                outcome=str(a["outcome"]),
                classification=str(a.get("classification", "")),
                reason=str(a.get("reason", "")),
                command=str(f.extra.get("command", "")),
                program=str(a.get("program", "")),
                note=str(f.extra.get("note", "")),
                source=f.source,
                fact=f,
            )
        )
    return sorted(out, key=lambda r: (r.seq, r.hypothesis))


def argv_diff(before: str, after: str) -> list[str]:
    """The token edits that turn one command line into the other ("--bs 32 -> 1", "+ --fp16", "- --amp")."""
    try:
        a, b = shlex.split(before), shlex.split(after)
    except ValueError:
        a, b = before.split(), after.split()
    out = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if op == "replace":
            ctx = f"{a[i1 - 1]} " if i1 > 0 and a[i1 - 1].startswith("-") and i2 - i1 == 1 else ""
            out.append(f"{ctx}{shlex.join(a[i1:i2])} -> {shlex.join(b[j1:j2])}")
        elif op == "delete":
            out.append(f"- {shlex.join(a[i1:i2])}")
        elif op == "insert":
            out.append(f"+ {shlex.join(b[j1:j2])}")
    return out


def pair_runs(runs: Sequence[SmokeRun]) -> list[Pair]:
    """Every change with the baseline it pairs with (or why none), and every baseline still waiting for its
    change, in the order they were run."""
    pairs: list[Pair] = []
    used: set[int] = set()
    for ch in runs:
        if ch.role != "change":
            continue
        earlier = [
            b for b in runs if b.role == "baseline" and b.hypothesis == ch.hypothesis and b.seq < ch.seq
        ]
        good = [b for b in earlier if b.classification == "reproduced"]
        same_prog = [b for b in good if b.program and b.program == ch.program]
        base = same_prog[-1] if same_prog else (good[-1] if good else (earlier[-1] if earlier else None))
        p = Pair(ch.hypothesis, ch.smoke, base, ch, "inconclusive", "")
        if base is not None:
            used.add(base.seq)
            p.diff = argv_diff(base.command, ch.command)
        if base is None:
            p.why = (
                "no baseline: run the unchanged command with `smoke run --baseline` first, then the change"
            )
        elif base.classification != "reproduced":
            p.why = (
                f"baseline #{base.seq} did not reproduce the original failure ({base.classification}): it does "
                "not count; a baseline must fail the way the run did"
            )
        elif not same_prog:
            p.why = (
                f"the change runs `{ch.program or '?'}`, baseline #{base.seq} runs `{base.program or '?'}`: "
                "a change must run the same program and script as its baseline"
            )
        elif not p.diff:
            p.why = f"the same command as baseline #{base.seq}: nothing was changed"
        elif ch.classification not in DECISIVE:
            p.why = f"the change was {ch.classification or 'not classified'}" + (
                f" ({ch.reason})" if ch.reason else ""
            )
        else:
            p.outcome = ch.classification  # passed | reproduced, mapped through the smoke below
            p.why = f"baseline #{base.seq} reproduced; the change {ch.classification}"
        pairs.append(p)
    for b in runs:
        if b.role == "baseline" and b.seq not in used:
            why = (
                "baseline reproduced: the change is missing"
                if b.classification == "reproduced"
                else f"baseline did not reproduce the original failure ({b.classification}): rerun it"
            )
            pairs.append(Pair(b.hypothesis, b.smoke, b, None, "incomplete", why))
    return sorted(pairs, key=lambda p: (p.change or p.baseline).seq if (p.change or p.baseline) else 0)


def declared_effects(spec: Mapping[str, Any] | None, hid: str, classification: str) -> dict[str, str]:
    """What a decisive classification means, by the smoke's declared outcomes. A hypothesis with no declared
    smoke gets the protocol's default: a change that passed confirms it, one that reproduced refutes it."""
    if spec is None:
        return {hid: "confirmed" if classification == "passed" else "refuted"}
    o = (spec.get("outcomes") or {}).get(classification) or {}
    out = {h: "confirmed" for h in o.get("confirms") or []}
    out.update({h: "refuted" for h in o.get("refutes") or []})
    return out


def map_outcome(spec: Mapping[str, Any] | None, classification: str, hid: str) -> tuple[str, str]:
    """A decisive classification -> confirmed | refuted | inconclusive for ``hid``, with the smoke's meaning."""
    if classification not in DECISIVE:
        return "inconclusive", f"a change that was {classification} decides nothing"
    status = declared_effects(spec, hid, classification).get(hid, "inconclusive")
    o = ((spec or {}).get("outcomes") or {}).get(classification) or {}
    meaning = str(o.get("meaning", "")) or (
        f"'{classification}' neither confirms nor refutes {hid}" if status == "inconclusive" else ""
    )
    return status, meaning


def apply_smokes(
    kb: KnowledgeBase,
    hyps: list[Hypothesis],
    facts: Sequence[Fact],
    trust_recorded: bool = False,
    coverage: Coverage | None = None,
) -> GateResult:
    """Each hypothesis' status from the smoke results among ``facts``, then the verdict (see ``decide``)."""
    runs = smoke_runs(facts)
    pairs = pair_runs(runs)
    # (seq, hypothesis, outcome, the fact that carries it) in the order the results were obtained
    decisions: list[tuple[int, str, str, list[Fact]]] = []
    for p in pairs:
        if p.change is None or p.outcome not in DECISIVE:
            continue
        p.effects = declared_effects(kb.smokes.get(p.smoke), p.hypothesis, p.outcome)
        p.outcome = p.effects.get(p.hypothesis, "inconclusive")
        if p.outcome == "inconclusive":
            p.why += f"; smoke {p.smoke} declares nothing for {p.hypothesis} on that outcome"
        fs = [r.fact for r in (p.baseline, p.change) if r is not None and r.fact is not None]
        for hid, status in sorted(p.effects.items()):
            decisions.append((p.change.seq, hid, status, fs))
    recorded = [r for r in runs if r.role == "record"]
    if trust_recorded:
        decisions += [
            (r.seq, r.hypothesis, r.outcome, [r.fact] if r.fact else [])
            for r in recorded
            if r.outcome != "inconclusive"
        ]
    decisions.sort(key=lambda d: (d[0], d[1]))

    by_id = {h.id: h for h in hyps}
    last: dict[str, tuple[str, list[Fact]]] = {}
    for _seq, hid, status, fs in decisions:
        so_far = last.get(hid, ("", []))[1]
        last[hid] = (status, [*so_far, *(f for f in fs if f not in so_far)])
    not_decided: dict[str, str] = {}
    # Raised hypotheses first; then, until nothing changes, alternatives of refuted ones (a refuted
    # alternative opens its own alternatives in turn).
    pending = dict(last)
    while True:
        refuted = {h.id for h in by_id.values() if h.status == "refuted"}
        opened = {a for r in refuted for a in by_id[r].alternatives}
        progressed = False
        for hid, (status, fs) in list(pending.items()):
            h = by_id.get(hid)
            if h is not None and h.score > 0:
                pass
            elif hid in opened:
                if h is None:
                    info = kb.hypothesis_info(hid)
                    h = Hypothesis(
                        id=hid,
                        score=0.0,
                        role="root",
                        failure=kb.is_failure(hid),
                        rules=[],
                        evidence=[],
                        alternatives=list(info.get("alternatives", [])),
                        smoke=info.get("smoke"),
                        summary=info.get("title") or info.get("claim", hid),
                    )
                    by_id[hid] = h
                    hyps.append(h)
            else:
                continue
            h.status = status
            h.smoke_results = fs
            del pending[hid]
            progressed = True
        if not progressed:
            break
    for hid in pending:
        not_decided[hid] = (
            "nothing in the evidence raised it (score 0), and it is not an alternative of a refuted hypothesis"
        )
    ordered = sort_hypotheses(hyps)
    leads = lead_hypotheses(kb, ordered)
    res = GateResult(ordered, "uncertain", None, pairs, recorded, trust_recorded, leads, not_decided)
    res.coverage = coverage or Coverage()
    res.verdict, res.cause, res.unexplained = decide(ordered, res.coverage)
    return res


def decide(ordered: Sequence[Hypothesis], coverage: Coverage) -> tuple[str, str | None, list[Fact]]:
    """The verdict, the cause (with ``cause`` only) and the unexplained evidence that held back a "no_failure".

    - ``cause``: the top hypothesis is smoke-confirmed;
    - ``no_failure``: no failure hypothesis is left and none was refuted, something was read, nothing named
      was empty, nothing was passed over, and no failure evidence stands unexplained;
    - ``uncertain``: everything else.
    """
    if ordered and ordered[0].status == "confirmed":
        return "cause", ordered[0].id, []
    live_failures = [h for h in ordered if h.failure and h.status != "refuted"]
    refuted_any = [h for h in ordered if h.status == "refuted"]
    if live_failures or refuted_any:
        return "uncertain", None, []
    if not coverage.evidence_seen or coverage.blocked or coverage.skipped:
        return "uncertain", None, []  # what was not read may hold the failure: never a confident "no"
    if coverage.unexplained:
        # A traceback or a final exception that no rule explains is a failure we do not know yet: "no failure"
        # there would be a confident wrong answer.
        return "uncertain", None, list(coverage.unexplained)
    return "no_failure", None, []


def lead_hypotheses(kb: KnowledgeBase, ordered: Sequence[Hypothesis]) -> list[str]:
    """What to smoke next, best first. After a refutation: the refuted hypotheses' alternatives (those the
    evidence raised first), then the other evidence-backed hypotheses; one listed only as a consequence of a
    refuted hypothesis is not a lead (its cause was ruled out, not explained)."""
    refuted = [h for h in ordered if h.status == "refuted"]
    refuted_ids = {h.id for h in refuted}
    decided = {h.id for h in ordered if h.status != "hypothesis"}
    live = {h.id: h for h in ordered if h.status == "hypothesis" and h.failure}
    alts: list[str] = []
    for r in refuted:
        for a in r.alternatives:
            if a not in decided and a not in alts and kb.is_failure(a):
                alts.append(a)
    raised_alts = [a for a in alts if a in live]
    raised_alts.sort(key=lambda a: (-live[a].score, a))
    out = raised_alts + [a for a in alts if a not in live]
    for h in live.values():
        if h.id in out:
            continue
        if refuted_ids and h.explained_by and set(h.explained_by) <= refuted_ids:
            continue
        out.append(h.id)
    return out


def claim_allowed(result: GateResult, claim: str) -> tuple[bool, Hypothesis | None]:
    for h in result.hypotheses:
        if h.id == claim:
            return h.status == "confirmed", h
    return False, None
