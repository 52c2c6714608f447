#!/usr/bin/env python3
"""Benchmark diagnosis across many ranks: time and peak memory per rank.

Generates ``--ranks`` per-rank logs of ``--mb`` MiB each, grouped 8 ranks per node directory
(``node-000/rank0.log`` ...). Every log is benign progress and NCCL chatter; rank 3 ends in a CUDA OOM and
every other rank in an NCCL watchdog timeout ten minutes later. Then, each in a fresh subprocess whose peak
RSS is read from the kernel (``os.wait4``):

* ``direct``: one ``diagnose --offline`` over the whole job directory;
* ``bundles``: ``collect --offline`` per node directory (what ``srun --ntasks-per-node=1`` runs), then one
  central ``diagnose --bundle ...`` over all the bundles.

Checks that the top hypothesis is ``gpu_oom`` and the report's first failing rank is 3; exits 1 otherwise.

    python bench/ranks_bench.py                      # 64 ranks x 4 MiB
    python bench/ranks_bench.py --ranks 1024 --mb 100 --keep /scratch/ranks   # the issue's scale (100 GiB)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RANKS_PER_NODE = 8


def _block(rank: int, lines: int) -> bytes:
    out = []
    for i in range(lines):
        if i % 4 == 0:
            out.append(
                f"2024-05-01 11:00:00,000 - INFO - [rank{rank}]: step {i} | loss 2.{i % 97:02d} | "
                f"lr 3.0e-4 | elapsed time per iteration (ms): {1000 + rank % 7}.0\n"
            )
        else:
            out.append(
                f"node-{rank // RANKS_PER_NODE:03d}:5121{rank}:5154 [{rank % RANKS_PER_NODE}] NCCL INFO "
                f"Channel {i % 32:02d}/32 : {rank} -> {(rank + 1) % 8} via P2P/IPC/read\n"
            )
    return "".join(out).encode()


def generate(root: Path, ranks: int, mb: float) -> int:
    total = 0
    target = int(mb * 1024 * 1024)
    for r in range(ranks):
        node = root / f"node-{r // RANKS_PER_NODE:03d}"
        node.mkdir(parents=True, exist_ok=True)
        block = _block(r, 4000)
        with open(node / f"rank{r}.log", "wb") as fh:
            written = 0
            while written < target:
                fh.write(block)
                written += len(block)
            if r == 3:
                tail = (
                    "[rank3]: Traceback (most recent call last):\n"
                    "2024-05-01 12:00:00,000 [rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
                    "2.00 GiB. GPU 3 has a total capacity of 79.10 GiB of which 1.20 GiB is free.\n"
                )
            else:  # PyTorch's c10 logging stamp: no year (taken from the file's dated lines)
                tail = (
                    f"[rank{r}]:[E501 12:10:01.417282711 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught "
                    "collective operation timeout: WorkNCCL(SeqNum=8812, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
                    "Timeout(ms)=600000) ran for 600049 milliseconds before timing out.\n"
                )
            fh.write(tail.encode())
            total += written + len(tail)
    return total


def _run(argv: list[str]) -> tuple[float, int, str]:
    """(seconds, peak RSS in KiB, stdout) of one child process, its rusage read with ``os.wait4``."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.monotonic()
        proc = subprocess.Popen(argv, stdout=out, stderr=err, cwd=REPO)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.monotonic() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        text = out.read().decode(errors="replace")
        if proc.returncode != 0:
            sys.stderr.write(err.read().decode(errors="replace")[-2000:])
            raise SystemExit(f"{' '.join(argv[2:4])}: exit {proc.returncode}")
    return seconds, int(usage.ru_maxrss), text


def _check(report: dict, ranks: int) -> list[str]:
    problems = []
    top = report["hypotheses"][0]["id"] if report["hypotheses"] else None
    if top != "gpu_oom":
        problems.append(f"top hypothesis is {top}, not gpu_oom")
    block = report.get("ranks") or {}
    first = block.get("first_failure") or {}
    if first.get("rank") != 3:
        problems.append(f"first failing rank is {first.get('rank')}, not 3")
    cascades = len(block.get("cascades", [])) + block.get("cascades_omitted", 0)
    if cascades != ranks - 1:
        problems.append(f"{cascades} cascades, not {ranks - 1}")
    if any(c.get("after_first_s") != 601.417 for c in block.get("cascades", [])):
        problems.append("cascades are not timed 601.417 s after the OOM")
    return problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--mb", type=float, default=4.0, help="MiB of log per rank")
    ap.add_argument("--modes", default="direct,bundles")
    ap.add_argument(
        "--keep", type=Path, help="generate here and keep (reused when it already holds the logs)"
    )
    args = ap.parse_args()
    cli = [sys.executable, "-m", "mldebug_rules"]
    root = args.keep or Path(tempfile.mkdtemp(prefix="ranks_bench_"))
    try:
        if not (root / "node-000" / "rank0.log").exists():
            t0 = time.monotonic()
            size = generate(root, args.ranks, args.mb)
            print(
                f"generated {args.ranks} ranks x {args.mb} MiB = {size / 2**30:.2f} GiB in {time.monotonic() - t0:.1f}s"
            )
        failed = False
        for mode in args.modes.split(","):
            if mode == "direct":
                secs, rss, out = _run([*cli, "diagnose", str(root), "--offline", "--format", "json"])
                peak = rss
            else:
                bdir = Path(tempfile.mkdtemp(prefix="ranks_bundles_"))
                secs, peak = 0.0, 0
                bundles = []
                for node in sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith("node-")):
                    b = bdir / f"{node.name}.mldebug.json"
                    s, r, _ = _run([*cli, "collect", str(node), "--out", str(b), "--offline"])
                    secs, peak = secs + s, max(peak, r)
                    bundles.append(b)
                collect_s, collect_rss = secs, peak
                argv = [*cli, "diagnose", "--offline", "--format", "json"]
                for b in bundles:
                    argv += ["--bundle", str(b)]
                s, rss, out = _run(argv)
                secs, peak = secs + s, max(peak, rss)
                kib = sum(b.stat().st_size for b in bundles) // 1024
                print(
                    f"  bundles: collect {collect_s:.1f}s total (peak {collect_rss / 1024:.0f} MiB per node), "
                    f"{len(bundles)} bundles = {kib} KiB; central diagnose {s:.1f}s, peak {rss / 1024:.0f} MiB"
                )
                shutil.rmtree(bdir, ignore_errors=True)
            report = json.loads(out)
            problems = _check(report, args.ranks)
            failed |= bool(problems)
            print(
                f"{mode:8s} {args.ranks} ranks: {secs:.2f}s ({secs / args.ranks * 1000:.1f} ms/rank), "
                f"peak RSS {peak / 1024:.0f} MiB ({peak / args.ranks:.0f} KiB/rank)"
                + (f"  FAILED: {'; '.join(problems)}" if problems else "  ok: gpu_oom on rank 3")
            )
        return 1 if failed else 0
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
