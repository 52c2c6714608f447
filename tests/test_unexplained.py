"""A traceback no rule explains is never reported as "no failure": the verdict stays uncertain and the next
action points at the exception, so an agent cannot read silence from the rules as health."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

UNKNOWN = """step 10 loss 2.1
Traceback (most recent call last):
  File "train.py", line 40, in <module>
    main()
  File "train.py", line 31, in main
    frobnicate(batch)
acme.internal.FrobnicationError: the frobnicator refused batch 12
"""


def test_unknown_traceback_is_uncertain(diagnose_files: Callable[..., dict[str, Any]]) -> None:
    rep = diagnose_files({"train.log": UNKNOWN})
    assert rep["verdict"] == "uncertain"
    assert rep["hypotheses"] == [] or all(h["status"] != "confirmed" for h in rep["hypotheses"])
    assert "no rule explains" in rep["next_action"] and "train.log" in rep["next_action"]


def test_healthy_log_without_traceback_is_no_failure(diagnose_files: Callable[..., dict[str, Any]]) -> None:
    rep = diagnose_files({"train.log": "step 10 loss 2.1\nstep 20 loss 1.9\n"})
    assert rep["verdict"] == "no_failure"
