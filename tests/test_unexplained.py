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


def test_bare_exception_line_is_uncertain_and_named(diagnose_files: Callable[..., dict[str, Any]]) -> None:
    rep = diagnose_files(
        {"train.log": "step 10 loss 2.1\nstep 20 loss 1.9\nacme.io.ShardError: shard 7 refused\n"}
    )
    assert rep["verdict"] == "uncertain"
    exc = rep["exception"]
    assert exc["surfaced"]["type"] == "acme.io.ShardError" and exc["surfaced"]["source"] == "train.log:3"
    assert exc["smoke"]["id"] == "one_batch_no_workers"
    assert "acme.io.ShardError" in rep["next_action"] and "num_workers=0" in rep["next_action"]


WORKER_UNKNOWN = """step 3 loss 2.0
Traceback (most recent call last):
  File "/home/u/proj/train.py", line 88, in <module>
    for batch in loader:
  File "/opt/conda/lib/python3.10/site-packages/torch/_utils.py", line 644, in reraise
    raise exception
RuntimeError: Caught FrobError in DataLoader worker process 1.
Original Traceback (most recent call last):
  File "/opt/conda/lib/python3.10/site-packages/torch/utils/data/_utils/worker.py", line 308, in _worker_loop
    data = fetcher.fetch(index)
  File "/home/u/proj/data.py", line 41, in __getitem__
    return frob(self.items[i])
  File "/opt/conda/lib/python3.10/site-packages/frobnik/core.py", line 12, in frob
    raise FrobError("no frob")
frobnik.FrobError: no frob
"""


def test_unknown_exception_names_root_package_and_user_frame(
    diagnose_files: Callable[..., dict[str, Any]],
) -> None:
    rep = diagnose_files({"train.log": WORKER_UNKNOWN})
    assert rep["verdict"] == "uncertain"
    exc = rep["exception"]
    assert exc["surfaced"]["type"] == "RuntimeError" and exc["root"]["type"] == "frobnik.FrobError"
    assert exc["root"]["origin"] == "worker 1"
    assert exc["raised_in"].startswith("frobnik (frobnik/core.py, frob)")
    assert exc["user_frame"] == "/home/u/proj/data.py:41 in __getitem__"
    assert "frobnik.FrobError" in rep["next_action"]


def test_a_logged_exception_long_before_a_clean_end_is_not_a_failure(
    diagnose_files: Callable[..., dict[str, Any]],
) -> None:
    steps = "".join(f"step {i} loss {2.0 / (1 + i / 50):.4f}\n" for i in range(2, 400))
    rep = diagnose_files({"train.log": "step 1 loss 2.0\nacme.Warn: retrying\n" + steps})
    assert rep["verdict"] == "no_failure" and "exception" not in rep
