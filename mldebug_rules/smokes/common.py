"""What the smoke commands share: the run directory and request, the hypothesis and its smokes, the
``smoke run`` and ``smoke record`` command lines they suggest, what a command runs (``program_of``), and where a
hypothesis stands in the pair protocol (``pair_state``, after re-evaluating the gate).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..diagnose import Diagnosis, Request
from ..engine.gate import GateResult, Pair, apply_smokes
from ..engine.packs import KnowledgeBase, known_hypotheses
from ..engine.rank import Hypothesis, rank
from ..errors import UsageError
from ..redact import redact
from .recipe import resolve_onset, split_command
from .state import STATE_DIR, record_facts

TOOL = "mldebug-rules"


def run_dir_path(path: str) -> Path:
    p = Path(path)
    if not p.is_dir():
        raise UsageError(f"{path}: no such run directory")
    return p


def request_for(run_dir: Path, args: argparse.Namespace, trust_recorded: bool = False) -> Request:
    return Request(
        run_dirs=[run_dir],
        rules_dirs=[Path(x) for x in getattr(args, "rules", []) or []],
        offline=True,
        options={"trust_recorded": trust_recorded},
    )


def check_state_writable(run_dir: Path) -> None:
    """Fail early, with one line, when RUN_DIR/.mldebug cannot be written (a read-only run directory).

    Two smoke commands may check the same run directory at once: one may create the state directory
    while the other checks, or remove its empty one while the other writes its probe file. Neither is
    an error, so the check retries once the race has moved on.
    """
    d = run_dir / STATE_DIR
    for attempt in range(5):
        created = False
        try:
            try:
                d.mkdir()
                created = True
            except FileExistsError:
                pass
            fd, probe = tempfile.mkstemp(prefix=".write-check-", dir=d)
            os.close(fd)
            os.unlink(probe)
        except FileNotFoundError:
            if attempt < 4:  # the other command removed its empty state directory between our steps
                continue
            raise UsageError(
                f"{d}: the smoke state directory keeps disappearing; nothing was run or recorded"
            ) from None
        except OSError as e:
            raise UsageError(
                f"{d}: cannot write the smoke state there ({e.strerror or e}); nothing was run or recorded. "
                "Copy the run directory somewhere writable and point the command at the copy"
            ) from None
        if created:  # leave the run directory as it was: the state is written only with a result
            try:
                d.rmdir()
            except OSError:  # another smoke command is using it now; it is theirs to keep
                pass
        return


def check_hypothesis(kb: KnowledgeBase, hid: str | None, flag: str = "--hypothesis") -> str:
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


def find_hypothesis(g: GateResult, hid: str) -> Hypothesis | None:
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


MISSING_HALF = {
    "baseline": "the baseline (the unchanged command, with --baseline; it must reproduce the failure)",
    "change": "the change (the one-variable command, after a reproduced baseline)",
}
