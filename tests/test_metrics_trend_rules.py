"""The trend rules on whole logs written for these tests: a loss stuck at its start or at ln(classes) is
loss_not_decreasing, memory growing over most of a run before its OOM is gpu_memory_leak first, and the
healthy counterparts of each give no failure."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any

import pytest

_OOM = (
    "Traceback (most recent call last):\n"
    '  File "train.py", line 88, in <module>\n'
    "    loss.backward()\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has a total capacity of "
    "39.38 GiB of which 1.02 GiB is free.\n"
)


def _ids(rep: dict[str, Any]) -> list[str]:
    return [h["id"] for h in rep["hypotheses"]]


@pytest.mark.parametrize("k", [2, 10, 100, 1000])
def test_a_loss_at_ln_classes_is_not_decreasing(
    k: int, diagnose_files: Callable[..., dict[str, Any]]
) -> None:
    rng = random.Random(k)
    log = "".join(
        f"step {s} | loss {math.log(k) + rng.uniform(-0.004, 0.004):.4f} | lr 1.0e-03\n"
        for s in range(10, 1010, 10)
    )
    assert _ids(diagnose_files({"train.log": log}))[0] == "loss_not_decreasing"


def test_a_noisy_loss_stuck_at_its_initial_value_is_not_decreasing(
    diagnose_files: Callable[..., dict[str, Any]],
) -> None:
    """Not at any ln(k), noisy (a 20% spread), never better than where it began."""
    rng = random.Random(7)
    stuck = "".join(
        f"iter: {s}  total_loss: {3.7 * rng.uniform(0.9, 1.1):.4f}\n" for s in range(20, 2020, 20)
    )
    assert _ids(diagnose_files({"train.log": stuck}))[0] == "loss_not_decreasing"
    learning = "".join(
        f"iter: {s}  total_loss: {3.7 * math.exp(-s / 1500) * rng.uniform(0.9, 1.1):.4f}\n"
        for s in range(20, 2020, 20)
    )
    assert diagnose_files({"train.log": learning})["verdict"] == "no_failure"


@pytest.mark.parametrize("shape", ["step_over_step", "noisy", "plateaus"])
def test_memory_grown_over_most_of_the_run_before_an_oom_is_a_leak_first(
    shape: str, diagnose_files: Callable[..., dict[str, Any]]
) -> None:
    rng = random.Random(3)

    def mem(i: int) -> float:
        base = 12000.0 + 8.0 * i
        if shape == "noisy":
            return base + rng.uniform(-400, 400)
        if shape == "plateaus":
            return 12000.0 + 600.0 * (i // 150)
        return base

    log = "".join(
        f"step {i} | loss {2.0 - i / 5000:.4f} | mem_allocated {mem(i):.0f}MB\n" for i in range(10, 3000, 10)
    )
    ids = _ids(diagnose_files({"train.log": log + _OOM}))
    assert ids[0] == "gpu_memory_leak" and "gpu_oom" in ids, ids
    flat = "".join(
        f"step {i} | loss {2.0 - i / 5000:.4f} | mem_allocated {12000 + (2000 if i > 30 else 0) + rng.uniform(-50, 50):.0f}MB\n"
        for i in range(10, 3000, 10)
    )
    rep = diagnose_files({"train.log": flat + _OOM})
    # a flat curve is no leak evidence (memory.yaml's oom_late_in_training_steps may still read the step count)
    leak = [h for h in rep["hypotheses"] if h["id"] == "gpu_memory_leak"]
    assert not [e for h in leak for e in h["evidence"] if e["fact"] == "metric.trend"], leak
    assert "gpu_oom" in _ids(rep)
