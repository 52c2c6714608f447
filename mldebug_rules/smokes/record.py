"""``smoke record``: a check the user ran by hand, kept as ``recorded`` (the gate counts it only when trusted)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from ..diagnose import load_kb
from ..errors import UsageError
from ..redact import redact
from .common import check_hypothesis, check_state_writable, request_for, run_dir_path, smokes_for
from .state import append_record, state_path


def record_smoke(args: argparse.Namespace) -> dict[str, Any]:
    """Append a hand-recorded result (kept as `recorded`) to the state file; the record as written."""
    run_dir = run_dir_path(args.run_dir)
    if not args.outcome:
        raise UsageError("smoke record: --outcome confirmed|refuted|inconclusive is required")
    note = (args.note or "").strip()
    if not note:
        raise UsageError("smoke record: --note TEXT is required (what was run by hand, and what it showed)")
    kb = load_kb(request_for(run_dir, args))
    hid = check_hypothesis(kb, args.hypothesis)
    check_state_writable(run_dir)
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
