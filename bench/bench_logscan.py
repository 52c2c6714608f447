#!/usr/bin/env python3
"""Benchmark the streaming log scanner against ``grep -c -F -f PATTERNS``.

Generates a realistic training log (per-step progress lines, NCCL INFO chatter, Python warnings and a
handful of real failure lines planted at known line numbers), writes ~60 literal failure strings to a
patterns file, then times, in the same run:

* ``LC_ALL=C grep -c -F -f patterns.txt train.log`` (median of --repeat runs),
* ``Scanner.scan_path`` with the hyperscan engine (if importable) and the pure-Python engine, each in a
  fresh subprocess so that its peak RSS can be read from the kernel's rusage for that child.

Each scanner run must hit every planted failure line at its exact line number, and must agree with grep on
the number of matching lines.  See bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# ~60 literal failure strings of the kind mldebug-rules signatures look for.  None of them occurs in the
# generated benign chatter, so grep's count equals the number of planted lines.
FAILURE_LITERALS: list[str] = [
    "CUDA out of memory",
    "torch.cuda.OutOfMemoryError",
    "RuntimeError: CUDA error",
    "device-side assert triggered",
    "NCCL WARN",
    "ncclInternalError",
    "ncclSystemError",
    "ncclUnhandledCudaError",
    "ncclRemoteError",
    "Watchdog caught collective operation timeout",
    "ProcessGroupNCCL's watchdog got stuck",
    "Segmentation fault",
    "core dumped",
    "Bus error",
    "Killed process",
    "oom-kill",
    "ChildFailedError",
    "torch.distributed.elastic.multiprocessing.errors",
    "Traceback (most recent call last)",
    "loss is nan",
    "Loss is NaN",
    "nan loss detected",
    "grad norm is inf",
    "Gradient overflow",
    "FloatingPointError",
    "an illegal memory access was encountered",
    "CUBLAS_STATUS_EXECUTION_FAILED",
    "CUBLAS_STATUS_ALLOC_FAILED",
    "CUDNN_STATUS_INTERNAL_ERROR",
    "cuDNN error",
    "unhandled system error",
    "Connection reset by peer",
    "Connection refused",
    "Broken pipe",
    "No space left on device",
    "Too many open files",
    "exited unexpectedly",
    "Expected all tensors to be on the same device",
    "size mismatch for",
    "Error(s) in loading state_dict",
    "Missing key(s) in state_dict",
    "Unexpected key(s) in state_dict",
    "CUDA driver version is insufficient",
    "no kernel image is available for execution",
    "uncorrectable ECC error",
    "received signal SIGKILL",
    "received signal SIGTERM",
    "exitcode  : -9",
    "DistStoreError",
    "RendezvousTimeoutError",
    "Socket Timeout",
    "ModuleNotFoundError",
    "MemoryError",
    "BrokenPipeError",
    "PermissionError",
    "Found inf or nan",
    "NaN or Inf found in input tensor",
    "Function 'MulBackward0' returned nan values",
    "Input type (torch.cuda.FloatTensor) and weight type",
    "CUDA error: an illegal instruction was encountered",
]

# (failure literal, line text) pairs planted at spread-out positions; the last one ends the file.
PLANTED: list[tuple[str, str]] = [
    ("Traceback (most recent call last)", "Traceback (most recent call last):"),
    (
        "NCCL WARN",
        "node03:4411:4502 [5] NCCL WARN NET/IB : Got completion from peer 10.0.0.7<50213> with error 12",
    ),
    ("grad norm is inf", "[rank3]: WARNING grad norm is inf at step 8123, skipping update"),
    (
        "CUDA out of memory",
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 3; 79 GiB total)",
    ),
    (
        "Watchdog caught collective operation timeout",
        "[E ProcessGroupNCCL.cpp:475] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=88213)",
    ),
    (
        "No space left on device",
        "OSError: [Errno 28] No space left on device: '/ckpt/step_90000/model.safetensors'",
    ),
    (
        "Error(s) in loading state_dict",
        "RuntimeError: Error(s) in loading state_dict for GPT: size mismatch for wte.weight",
    ),
    ("RuntimeError: CUDA error", "RuntimeError: CUDA error: an illegal memory access was encountered"),
    (
        "device-side assert triggered",
        "../aten/src/ATen/native/cuda/Indexing.cu:1141: block: [0,0,0] device-side assert triggered",
    ),
    ("nan loss detected", "WARNING: nan loss detected at step 120044, loss scale 65536.0"),
    (
        "Function 'MulBackward0' returned nan values",
        "RuntimeError: Function 'MulBackward0' returned nan values in its 0th output.",
    ),
    ("Segmentation fault", "Segmentation fault (core dumped)"),
]


def _progress_line(step: int, total: int, rng: random.Random) -> str:
    loss = 2.0 + rng.random()
    return (
        f"2024-05-01 12:{step // 60 % 60:02d}:{step % 60:02d},{step % 1000:03d} | INFO | trainer.py:412 | "
        f"step {step}/{total} | loss {loss:.4f} | lr 1.00e-04 | grad_norm {rng.random() * 2:.3f} | "
        f"{11000 + step % 3000} tok/s\n"
    )


_NCCL_POOL = [
    f"node{n:02d}:{4400 + r}:{4500 + r} [{r}] NCCL INFO Channel {c:02d}/32 :    0   1   2   3   4   5   6\n"
    for n in range(4)
    for r in range(8)
    for c in range(4)
] + [
    f"node{n:02d}:{4400 + r}:{4500 + r} [{r}] NCCL INFO comm 0x7f3a{r}c000000 rank {r} nRanks 32 "
    f"nNodes 4 localRanks 8 localRank {r} MNNVL 0 - Init COMPLETE\n"
    for n in range(4)
    for r in range(8)
]

_WARNINGS = [
    "/opt/conda/lib/python3.11/site-packages/torch/utils/data/dataloader.py:557: UserWarning: "
    "This DataLoader will create 16 worker processes in total. "
    "Our suggested max number of worker in current system is 12.\n",
    "/opt/conda/lib/python3.11/site-packages/torch/nn/modules/module.py:1511: FutureWarning: "
    "`torch.cuda.amp.autocast(args...)` is deprecated. Please use `torch.amp.autocast('cuda', args...)`.\n",
    "[W reducer.cpp:1360] Warning: find_unused_parameters=True was specified in DDP constructor, but did not "
    "find any unused parameters in the forward pass.\n",
]


def _megatron_line(step: int, total: int, rng: random.Random) -> str:
    return (
        f" [2024-05-01 12:{step // 60 % 60:02d}:{step % 60:02d}] iteration {step:>8d}/{total:>8d} | "
        f"consumed samples: {step * 512:>12d} | elapsed time per iteration (ms): {500 + rng.random() * 30:.1f} | "
        f"learning rate: 3.000E-04 | global batch size:   512 | lm loss: {2.0 + rng.random():.6E} | "
        f"loss scale: 65536.0 | grad norm: {rng.random() * 2:.3f} | number of skipped iterations:   0 | "
        "number of nan iterations:   0 |\n"
    )


def _hf_line(step: int, total: int, rng: random.Random) -> str:
    return (
        f"{{'loss': {2.0 + rng.random():.4f}, 'grad_norm': {rng.random() * 2:.4f}, "
        f"'learning_rate': {4.9e-05 * (1 - step / total):.4e}, 'epoch': {step / 5000:.2f}}}\n"
    )


# The dense mix: nearly every line is a progress line, in the three spellings trainers print most (a plain
# step line, a Megatron iteration line, an HF Trainer dict), with NCCL INFO chatter every few steps.
_DENSE_FORMATS = (_progress_line, _megatron_line, _hf_line)
MIXES = ("dense", "sparse")


def generate_log(path: Path, size_mb: int, seed: int = 1234, mix: str = "sparse") -> dict[int, int]:
    """Write ~size_mb MiB of log to `path`; return {planted line number: pattern index}.

    mix "sparse": one progress line per step, three NCCL INFO lines every 4th step, a warning now and then.
    mix "dense": a progress line per step (plain, Megatron and HF formats in turn), one NCCL INFO line every
    8th step, a warning now and then: about 9 lines in 10 are metric lines."""
    if mix not in MIXES:
        raise ValueError(f"mix must be one of {MIXES}")
    rng = random.Random(seed)
    target = size_mb * 1024 * 1024
    marks = [target * (k + 1) // (len(PLANTED) + 1) for k in range(len(PLANTED) - 1)]
    planted: dict[int, int] = {}
    total_steps = max(1, target // 160)
    written = 0
    line_no = 0
    step = 0
    block: list[str] = []
    block_bytes = 0
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        mark_i = 0
        while written + block_bytes < target:
            step += 1
            if mix == "dense":
                lines = [_DENSE_FORMATS[step % 3](step, total_steps, rng)]
                if step % 8 == 0:
                    lines.append(_NCCL_POOL[rng.randrange(len(_NCCL_POOL))])
            else:
                lines = [_progress_line(step, total_steps, rng)]
                if step % 4 == 0:
                    base = rng.randrange(len(_NCCL_POOL))
                    lines.extend(_NCCL_POOL[(base + i) % len(_NCCL_POOL)] for i in range(3))
            if step % 997 == 0:
                lines.append(_WARNINGS[step % len(_WARNINGS)])
            for text in lines:
                line_no += 1
                block.append(text)
                block_bytes += len(text)
            if mark_i < len(marks) and written + block_bytes >= marks[mark_i]:
                lit, text = PLANTED[mark_i]
                line_no += 1
                planted[line_no] = FAILURE_LITERALS.index(lit)
                block.append(text + "\n")
                block_bytes += len(text) + 1
                mark_i += 1
            if block_bytes >= 4 << 20:
                fh.write("".join(block))
                written += block_bytes
                block, block_bytes = [], 0
        lit, text = PLANTED[-1]
        line_no += 1
        planted[line_no] = FAILURE_LITERALS.index(lit)
        block.append(text + "\n")
        fh.write("".join(block))
        # Flush dirty pages now: otherwise their writeback competes with the first timed runs.
        fh.flush()
        os.fsync(fh.fileno())
    return planted


def warm_page_cache(path: Path) -> float:
    """Read the file once so every contender starts from the page cache; return the seconds taken."""
    t0 = time.perf_counter()
    with open(path, "rb", buffering=0) as fh:
        while fh.read(1 << 20):
            pass
    return time.perf_counter() - t0


_CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
try:
    from mldebug_rules.collectors.logscan import Pattern, Scanner
except ImportError:  # not installed: import the source tree directly
    from collectors.logscan import Pattern, Scanner
import re
lits = [line.rstrip("\n") for line in open(sys.argv[3], encoding="utf-8") if line.strip()]
pats = [Pattern(id=f"p{i}", regex=re.escape(lit)) for i, lit in enumerate(lits)]
scanner = Scanner(pats, engine=sys.argv[2])
t0 = time.perf_counter()
res = scanner.scan_path(sys.argv[4])
wall = time.perf_counter() - t0
print(json.dumps({
    "wall": wall, "engine": res.engine, "total_lines": res.total_lines,
    "hits": [[h.line_no, h.pattern] for h in res.hits], "issues": res.issues,
}))
"""


def run_scanner_child(engine: str, patterns_file: Path, log: Path) -> tuple[dict, float]:
    """Run one scan in a fresh interpreter; return (its JSON report, its peak RSS in MiB)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(REPO), engine, str(patterns_file), str(log)],
        stdout=subprocess.PIPE,
    )
    assert proc.stdout is not None
    out = proc.stdout.read()
    # wait4 gives the rusage of exactly this child (RUSAGE_CHILDREN would be the max over all children).
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"scanner child ({engine}) failed with exit code {proc.returncode}")
    return json.loads(out), usage.ru_maxrss / 1024.0  # ru_maxrss is in KiB on Linux


def time_grep(patterns_file: Path, log: Path) -> tuple[float, int]:
    env = dict(os.environ, LC_ALL="C")
    t0 = time.perf_counter()
    out = subprocess.run(
        ["grep", "-c", "-F", "-f", str(patterns_file), str(log)], env=env, capture_output=True, check=False
    )
    wall = time.perf_counter() - t0
    if out.returncode not in (0, 1):
        raise SystemExit(f"grep failed: {out.stderr.decode(errors='replace')}")
    return wall, int(out.stdout.strip() or 0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=1024, help="generated log size in MiB (default 1024)")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per contender; the median is reported")
    ap.add_argument(
        "--python-repeat", type=int, default=1, help="timed runs of the (slow) pure-Python engine (default 1)"
    )
    ap.add_argument("--engines", default="hyperscan,python", help="comma list of: hyperscan, python")
    ap.add_argument("--workdir", help="directory for the generated files (default: a fresh temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the generated files")
    args = ap.parse_args(argv)

    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="bench_logscan_"))
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / "train.log"
    patterns_file = workdir / "patterns.txt"
    failed = False
    try:
        t0 = time.perf_counter()
        planted = generate_log(log, args.size_mb)
        patterns_file.write_text("".join(lit + "\n" for lit in FAILURE_LITERALS), encoding="utf-8")
        size = log.stat().st_size
        print(
            f"generated {size / 2**20:.0f} MiB log with {len(planted)} planted failure lines "
            f"in {time.perf_counter() - t0:.1f}s ({workdir})"
        )
        print(f"{len(FAILURE_LITERALS)} literal patterns; machine: {os.cpu_count()} CPUs")
        print(f"warm-up read (page cache): {warm_page_cache(log):.2f}s")

        grep_times = []
        grep_count = 0
        for _ in range(args.repeat):
            wall, grep_count = time_grep(patterns_file, log)
            grep_times.append(wall)
        grep_med = statistics.median(grep_times)
        print(
            f"grep -c -F -f (LC_ALL=C): median {grep_med:.3f}s of {args.repeat} "
            f"({size / 2**20 / grep_med:.0f} MiB/s), count={grep_count}"
        )
        if grep_count != len(planted):
            print(f"  NOTE: grep counted {grep_count} lines, {len(planted)} were planted")

        for engine in [e.strip() for e in args.engines.split(",") if e.strip()]:
            repeat = args.python_repeat if engine == "python" else args.repeat
            times, rss = [], []
            report: dict = {}
            for _ in range(repeat):
                report, peak = run_scanner_child(engine, patterns_file, log)
                times.append(report["wall"])
                rss.append(peak)
            if engine == "hyperscan" and not report["engine"].startswith("hyperscan"):
                print(f"scanner[{engine}]: hyperscan not importable, got {report['engine']}; skipped")
                continue
            med = statistics.median(times)
            got = {}
            for line_no, pat in report["hits"]:
                got.setdefault(line_no, set()).add(pat)
            missing = [ln for ln, pat in planted.items() if pat not in got.get(ln, set())]
            ok = not missing and len(got) == grep_count and report["total_lines"] > 0
            failed |= not ok
            print(
                f"scanner[{report['engine']}]: median {med:.3f}s of {repeat} "
                f"({size / 2**20 / med:.0f} MiB/s), {med / grep_med:.2f}x grep's time, "
                f"peak RSS {max(rss):.0f} MiB, matching lines={len(got)}, "
                f"total_lines={report['total_lines']}, planted hits {'OK' if not missing else 'MISSING'}"
            )
            if missing:
                print(f"  missing planted lines: {missing}")
            if report["issues"]:
                print(f"  issues: {report['issues']}")
        all_children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0
        print(f"max RSS over all children (getrusage RUSAGE_CHILDREN): {all_children:.0f} MiB")
    finally:
        if not args.keep and not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
