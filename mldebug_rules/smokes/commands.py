"""``smoke plan | run | record`` and ``gate``: from a hypothesis to a cause only on a smoke pair's proof.

Each command has its module (``plan``, ``run``, ``record``, ``claim``, sharing ``common``); this one
dispatches the parsed command line to them. Whether a pair confirms or refutes is decided in
``engine/gate.py`` alone; the commands only render it. Only ``RUN_DIR/.mldebug/`` is ever written
(``state``).
"""

from __future__ import annotations

import argparse

from ..errors import UsageError
from .claim import gate_check
from .plan import plan
from .record import record
from .run import run
from .state import StateUnusable


def main(args: argparse.Namespace) -> int:
    if args.action != "run" and args.argv:
        raise UsageError(f"smoke {args.action}: unexpected arguments: {' '.join(args.argv)}")
    try:
        return {"plan": plan, "run": run, "record": record}[args.action](args)
    except StateUnusable as e:  # a FIFO or device as smokes.jsonl: refused, never waited on
        raise UsageError(f"smoke state unusable: {e}") from None


def gate(args: argparse.Namespace) -> int:
    result = gate_check(args)
    for line in result["lines"]:
        print(line)
    return 0 if result["passed"] else 1
