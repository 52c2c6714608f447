"""The ``smoke_state`` probe: the smoke results recorded in ``RUN_DIR/.mldebug/smokes.jsonl``, as
``smoke.result`` facts. It only reads the file; the smoke commands (``mldebug_rules/smokes/``) own it and are
the only code that writes it."""

from __future__ import annotations

from ..smokes.state import record_facts
from .base import Context, ProbeOutput, ProbeUnavailable


def probe_smoke_state(ctx: Context) -> ProbeOutput:
    out = ProbeOutput("smoke_state")
    for root in ctx.run_dirs:
        out.facts += record_facts(ctx.registry, root)
    if not out.facts:
        raise ProbeUnavailable("no smoke results recorded")
    out.detail = f"{len(out.facts)} smoke result(s)"
    return out
