"""No built-in signature matches (more than once in 2,000 lines) the lines a long healthy run repeats (progress lines of the common formats, NCCL
INFO chatter, the usual warnings). The scanner confirms every signature hit in Python, so a signature that matches
a progress line costs a Python call per line of a long log: one such wording (a loss-scale field on every Megatron
line read as "fp16 is on") once made a 1 GiB diagnosis ten times slower. The lines are the speed benchmark's own
(bench/bench_logscan.py), so the test and the benchmark cannot drift apart."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import regex
from mldebug_rules.engine.packs import KnowledgeBase

BENCH = Path(__file__).resolve().parents[1] / "bench" / "bench_logscan.py"
# Signatures meant to match progress lines, each used by a rule that needs the step it carries. Keep this short:
# each costs a Python call per matching line.
PROGRESS_SIGNATURES = {"tqdm_bar_progress"}
MAX_HIT_SHARE = 2000  # any other signature may match at most one line in this many of a healthy run


def _bench():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("bench_logscan", BENCH)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_logscan", mod)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("mix", ["dense", "sparse"])
def test_no_signature_matches_a_healthy_runs_repeated_lines(
    kb: KnowledgeBase, tmp_path: Path, mix: str
) -> None:
    bench = _bench()
    log = tmp_path / "train.log"
    planted = bench.generate_log(log, 1, mix=mix)
    lines = [ln for i, ln in enumerate(log.read_text().splitlines(), 1) if i not in planted]
    assert len(lines) > 5000
    # A warning a run prints now and then (a DataLoader's worker-count advice, once per epoch) costs nothing
    # that shows; a line the run repeats every few steps costs a Python call per step.
    most = len(lines) // MAX_HIT_SHARE
    hits: dict[str, tuple[int, str]] = {}
    for sig in kb.signatures:
        if sig.id in PROGRESS_SIGNATURES:
            continue
        r = regex.compile(sig.regex, regex.IGNORECASE if sig.ignore_case else 0)
        matched = [ln for ln in lines if r.search(ln)]
        if len(matched) > most:
            hits[sig.id] = (len(matched), matched[0])
    assert not hits, (
        f"signatures matching lines a healthy run repeats (more than {most} of {len(lines)}): {hits}"
    )
