#!/usr/bin/env python3
"""Which signatures the log scan spends its time on, against grep in the same run.

Every signature is searched over every byte of every log, so one costly regex slows every diagnosis. This
bench builds the scanner exactly as the logs probe does (every installed pack, plus `--rules` dirs), scans a
sample of the dense benchmark log (bench_logscan.py's progress lines: what a healthy run prints all day), and
prints, as CPU time:

* the whole scan (hyperscan and the Python confirmation of its candidates), and grep -c -F -f with the
  benchmark's failure literals over the same sample, its output through a pipe, and their ratio;
* per signature, what it costs: alone (its scan minus a one-literal scan), or with --leave-one-out what the
  whole scan saves without it (slower: one database build per signature, but the true share, as hyperscan
  shares work between patterns);
* the signatures that hit lines of the sample (each hit is a Python confirmation; a healthy log should have
  next to none).

    python bench/bench_signatures.py                   # 32 MiB dense sample, each signature alone
    python bench/bench_signatures.py --leave-one-out --top 15
    python bench/bench_signatures.py --rules my-pack/ --mix sparse

What makes a signature costly, and its remedies, are in docs/rule-format.md (`prefilter`).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_logscan import FAILURE_LITERALS, MIXES, generate_log


def _cpu(fn: object, repeat: int) -> float:
    """Least process CPU seconds of `repeat` calls (least: the machine's other load only adds)."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        fn()  # type: ignore[operator]
        best = min(best, time.process_time() - t0)
    return best


def _grep_cpu(patterns: Path, log: Path, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        proc = subprocess.Popen(
            ["grep", "-c", "-F", "-f", str(patterns), str(log)],
            stdout=subprocess.PIPE,
            env=dict(os.environ, LC_ALL="C"),
        )
        assert proc.stdout is not None
        proc.stdout.read()
        _, _, usage = os.wait4(proc.pid, 0)
        best = min(best, usage.ru_utime + usage.ru_stime)
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mix", choices=MIXES, default="dense")
    ap.add_argument("--size-mb", type=int, default=32)
    ap.add_argument("--log", help="scan this log instead of a generated sample")
    ap.add_argument("--rules", action="append", default=[], help="an extra pack directory (repeatable)")
    ap.add_argument("--top", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--leave-one-out", action="store_true", help="each signature's share of the whole scan")
    a = ap.parse_args(argv)

    # The database builds below must not fill the user's cache with one entry per subset.
    os.environ.setdefault("MLDEBUG_CACHE_DIR", tempfile.mkdtemp(prefix="mldebug-bench-cache-"))
    from mldebug_rules.collectors.logs import stream_patterns
    from mldebug_rules.collectors.logscan import Pattern, Scanner
    from mldebug_rules.engine.packs import load_packs

    work = Path(tempfile.mkdtemp(prefix="mldebug-bench-sig-"))
    log = Path(a.log) if a.log else work / f"{a.mix}-{a.size_mb}.log"
    if not a.log:
        generate_log(log, a.size_mb, mix=a.mix)
    data = log.read_bytes()
    patterns_file = work / "patterns.txt"
    patterns_file.write_text("\n".join(FAILURE_LITERALS[:25]) + "\n", encoding="utf-8")

    kb = load_packs(a.rules, strict=False)
    pats = list(stream_patterns(kb, "train"))
    sig_ids = {s.id for s in kb.signatures}

    def cost(subset: list[Pattern]) -> float:
        scanner = Scanner(subset, tail_lines=0, progress=False, trusted=True)
        scanner.scan_bytes(data[: 1 << 20])  # scratch space and lazy compiles, outside the timing
        return _cpu(lambda: scanner.scan_bytes(data), a.repeat)

    mib = len(data) / 2**20
    full_scanner = Scanner(pats, tail_lines=0, progress=False, trusted=True)
    res = full_scanner.scan_bytes(data)
    full = cost(pats)
    grep = _grep_cpu(patterns_file, log, a.repeat)
    print(
        f"{mib:.0f} MiB {a.mix if not a.log else log.name} sample, {len(pats)} patterns ({len(sig_ids)} "
        f"signatures), scanner {full_scanner.engine}; load average {os.getloadavg()[0]:.2f}"
    )
    print(f"whole scan: {full:.3f} s CPU ({full / mib * 1024:.2f} s per GiB)")
    print(
        f"grep -c -F -f (25 literals, output to a pipe): {grep:.3f} s CPU; scan/grep ratio {full / grep:.2f}x"
    )

    rows: list[tuple[float, str]] = []
    if a.leave_one_out:
        for i, p in enumerate(pats):
            if p.id in sig_ids:
                rows.append((full - cost(pats[:i] + pats[i + 1 :]), p.id))
        what = "saved without it"
    else:
        floor = cost([Pattern("__floor__", "zq-no-such-literal-qz")])
        rows = [(cost([p]) - floor, p.id) for p in pats if p.id in sig_ids]
        what = "alone, above a one-literal scan (hyperscan shares work between patterns, so these overlap)"
    rows.sort(reverse=True)
    print(f"\ntop {a.top} signatures by CPU {what}; as a share of the whole scan:")
    for c, sid in rows[: a.top]:
        print(f"  {c * 1000:8.1f} ms  {100 * c / full:5.1f}%  {sid}")

    hits = sorted(((n, pats[i].id) for i, n in res.counts.items() if pats[i].id in sig_ids), reverse=True)
    print(f"\nsignatures hitting lines of the sample (each hit is a Python confirmation): {len(hits)}")
    for n, sid in hits[: a.top]:
        print(f"  {n:8d}  {sid}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
