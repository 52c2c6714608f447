"""Real hung processes for the stacks probe's tests: ``python tests/hang_scenarios.py NAME RUN_DIR``.

Each scenario writes a start-up line and one progress line to ``RUN_DIR/train.log``, then prints ``ready`` on
standard output and gets stuck the way real training does (or, for ``healthy``, keeps training slowly). The
tests start it in its own process group and kill that group when they are done.

- ``busy``: the main thread spins in a loop that never exits.
- ``deadlock``: two threads take two locks in opposite orders; the main thread joins them.
- ``fifo``: the main thread reads a FIFO that nobody writes (``RUN_DIR/feed.fifo``; the test holds the
  writing end open, so the read blocks instead of the open).
- ``healthy``: a slow trainer that computes and prints a step line twice a second (the control).
- ``data_stall`` (needs torch): a DataLoader whose worker blocks reading a FIFO; the main thread waits on
  the loader's queue.
- ``gloo`` (needs torch): two ranks (gloo, loopback); rank 0 enters all_reduce, rank 1 never does (it sits in
  an evaluation loop that waits forever).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path


def _log(run: Path, text: str) -> None:
    with open(run / "train.log", "a", encoding="utf-8") as f:
        f.write(text + "\n")


def _ready(run: Path) -> None:
    _log(run, "step 1/1000 loss 2.3026 lr 0.001")
    print("ready", flush=True)


def busy(run: Path) -> None:
    _ready(run)
    x = 0

    def wait_for_flag() -> None:
        nonlocal x
        while x != -1:  # a retry loop whose condition never changes
            x = (x * 31 + 7) % 1000003

    wait_for_flag()


def deadlock(run: Path) -> None:
    a, b = threading.Lock(), threading.Lock()
    go = threading.Barrier(2)

    def save_checkpoint() -> None:
        with a:
            go.wait()
            with b:
                pass

    def log_metrics() -> None:
        with b:
            go.wait()
            with a:
                pass

    t1 = threading.Thread(target=save_checkpoint, name="checkpointer")
    t2 = threading.Thread(target=log_metrics, name="metrics-logger")
    t1.start()
    t2.start()
    _ready(run)
    t1.join()


def fifo(run: Path) -> None:
    path = run / "feed.fifo"
    with open(path, "rb") as f:  # the test opened the writing end first: this open returns at once
        _ready(run)
        f.read(1)


def healthy(run: Path) -> None:
    _ready(run)
    step = 1
    while True:
        t0 = time.time()
        acc = 0.0
        while time.time() - t0 < 0.4:
            acc += sum(i * i for i in range(2000))
        step += 1
        _log(run, f"step {step}/1000 loss {2.3 / step**0.1:.4f} lr 0.001")
        time.sleep(0.1)


def data_stall(run: Path) -> None:
    import torch
    from torch.utils.data import DataLoader, Dataset

    class Shards(Dataset):
        def __len__(self) -> int:
            return 1000

        def __getitem__(self, i: int) -> torch.Tensor:
            with open(run / "feed.fifo", "rb") as f:  # a remote shard that never arrives
                f.read(1)
            return torch.zeros(4)

    loader = DataLoader(Shards(), batch_size=2, num_workers=2)
    _ready(run)
    for _batch in loader:
        pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def gloo(run: Path) -> None:
    """torchrun (its elastic agent) starts the two ranks, as a real job would."""
    argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "2"]
    argv += [
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(_free_port()),
        __file__,
        "gloo_rank",
        str(run),
    ]
    subprocess.run(argv, check=False)


def gloo_rank(run: Path) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method="env://")
    rank = dist.get_rank()
    if rank == 0:
        _ready(run)
        t = torch.ones(4)
        dist.all_reduce(t)  # rank 1 never joins
    else:

        def evaluate() -> None:
            done = threading.Event()
            done.wait()  # waits for an evaluation result that never comes

        evaluate()


SCENARIOS = {
    "busy": busy,
    "deadlock": deadlock,
    "fifo": fifo,
    "healthy": healthy,
    "data_stall": data_stall,
    "gloo": gloo,
    "gloo_rank": gloo_rank,
}

if __name__ == "__main__":
    run_dir = Path(sys.argv[2])
    _log(run_dir, f"[2026-12-03 10:00:00] starting {sys.argv[1]} scenario, pid {os.getpid()}")
    SCENARIOS[sys.argv[1]](run_dir)
