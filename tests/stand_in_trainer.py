"""A stand-in for a training script, for the smoke-pair tests: no torch, no GPU, the same output shapes.

It prints one ``step N | loss X`` line per step (the generic step lines the metrics reader recognises) and
fails the way a real trainer does:
- a batch larger than --fits (default 1) runs out of accelerator memory on the first step (a CUDA OOM
  traceback on stderr, exit 1);
- --nan-at N makes the loss NaN from step N on (the trainer then stops: "Loss is NaN, stopping training");
  with --lr 0 the loss never moves, so it stays finite;
- --disk-full fails saving its first checkpoint (ENOSPC);
- --no-train exits 0 before the training loop (a script that never trains proves nothing).
"""

from __future__ import annotations

import argparse
import math
import sys

OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {need:.2f} GiB. GPU 0 has a total capacity "
    "of 79.15 GiB of which 0.35 GiB is free. Including non-PyTorch memory, this process has 78.80 GiB memory "
    "in use. Of the allocated memory 76.10 GiB is allocated by PyTorch, and 1.20 GiB is reserved by PyTorch "
    "but unallocated."
)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--max-steps", type=int, default=3)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--num_workers", type=int, default=0)
    p.add_argument("--fits", type=int, default=1, help="the largest batch that fits in memory")
    p.add_argument("--nan-at", type=int, default=0)
    p.add_argument("--resume", default="")
    p.add_argument("--disk-full", action="store_true")
    p.add_argument("--no-train", action="store_true")
    a = p.parse_args()
    print(f"config: batch_size={a.batch_size} max_steps={a.max_steps} lr={a.lr}", flush=True)
    if a.no_train:
        print("nothing to do", flush=True)
        return 0
    start = 1
    if a.resume:
        start = int("".join(c for c in a.resume if c.isdigit()) or 0) + 1
        print(f"resumed from {a.resume}", flush=True)
    loss = 2.5
    for step in range(start, a.max_steps + 1):
        if a.batch_size > a.fits:
            print("Traceback (most recent call last):", file=sys.stderr)
            print('  File "stand_in_trainer.py", line 50, in main', file=sys.stderr)
            print(OOM.format(need=0.5 * a.batch_size), file=sys.stderr, flush=True)
            return 1
        loss = math.nan if a.nan_at and step >= a.nan_at and a.lr > 0 else loss * (1 - min(a.lr, 0.5) * 0.1)
        print(f"step {step} | loss {loss:.4f} | lr {a.lr}", flush=True)
        if a.disk_full:
            print("OSError: [Errno 28] No space left on device: 'checkpoints/step_1.pt'", file=sys.stderr)
            return 1
        if math.isnan(loss):
            print("ValueError: Loss is NaN, stopping training", file=sys.stderr, flush=True)
            return 1
    print("Training completed.", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
