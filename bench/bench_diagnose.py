"""End-to-end: `mldebug-rules diagnose --offline --log BIG --format json` against grep, in the same run.

grep gets `-c -F -f PATTERNS` with the failure literals of bench_logscan.py (a comparable list of failure
signatures), its output captured through a pipe (GNU grep stops at its first match when its output is
/dev/null); diagnose runs every signature of every installed pack, the progress patterns, the metric lines,
the scrollback and the rules. Each contender runs `--repeat` times, interleaved. Printed: the median wall
time of each, the wall ratio, the CPU ratio (user+sys of the child and its children, from wait4), diagnose's
peak RSS, the logs probe's read counters (bytes and passes per file: one pass per log) and whether every
planted failure line is in the report at its exact line.

    python bench/bench_diagnose.py                      # dense mix (default), 1 GiB log, 3 runs each
    python bench/bench_diagnose.py --mix sparse
    python bench/bench_diagnose.py --size-mb 128 --repeat 1
    python bench/bench_diagnose.py --size-mb 10240 --repeat 1 --no-grep   # memory on a 10 GiB log
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_logscan import FAILURE_LITERALS, MIXES, PLANTED, generate_log, warm_page_cache


def _run(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, float, float, bytes, int]:
    """(wall s, user+sys CPU s, peak RSS MiB, stdout, exit code) of one child, its output through a pipe."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, env=env)
    assert proc.stdout is not None
    out = proc.stdout.read()
    # wait4: the rusage of exactly this child, with its own waited-for children (scan workers) in it.
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    return (
        wall,
        usage.ru_utime + usage.ru_stime,
        usage.ru_maxrss / 1024.0,
        out,
        os.waitstatus_to_exitcode(status),
    )


def run_grep(patterns: Path, log: Path) -> tuple[float, float, int]:
    wall, cpu, _, out, rc = _run(
        ["grep", "-c", "-F", "-f", str(patterns), str(log)], env=dict(os.environ, LC_ALL="C")
    )
    if rc not in (0, 1):
        raise SystemExit(f"grep failed with exit code {rc}")
    return wall, cpu, int(out.strip() or 0)


# pip compiles bytecode when it installs a package; with PYTHONDONTWRITEBYTECODE set (as in some sandboxes) an
# editable install would compile every module from source on every run (~0.2 s of CPU), which no user pays.
_DIAGNOSE_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def run_diagnose(log: Path) -> tuple[float, float, float, dict]:
    argv = [sys.executable, "-m", "mldebug_rules.cli", "diagnose", "--offline", "--log", str(log)]
    wall, cpu, rss, out, rc = _run([*argv, "--format", "json"], env=_DIAGNOSE_ENV)
    if rc != 0:
        raise SystemExit(f"diagnose failed with exit code {rc}")
    return wall, cpu, rss, json.loads(out)


def signature_lines(work: Path) -> set[int]:
    """Which planted lines any signature matches at all (index into PLANTED): diagnose on a log of just them."""
    small = work / "planted-only.log"
    small.write_text("".join(f"step {k} | loss 1.0\n{text}\n" for k, (_, text) in enumerate(PLANTED)))
    rep = run_diagnose(small)[3]
    return {
        (n - 2) // 2
        for n in (_line_of(e.get("source")) for e in rep.get("signatures", []))
        if n and n % 2 == 0
    }


def _line_of(source: object) -> int | None:
    tail = str(source or "").rsplit(":", 1)[-1]
    return int(tail) if tail.isdigit() else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mix", choices=MIXES, default="dense", help="log content (default: dense)")
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workdir", help="keep the generated log here (reused when it is already there)")
    ap.add_argument("--no-grep", action="store_true", help="diagnose only (e.g. the 10 GiB memory check)")
    ap.add_argument(
        "--literals",
        type=int,
        default=len(FAILURE_LITERALS),
        help=f"grep gets the first N failure literals (default all {len(FAILURE_LITERALS)}; fewer make grep faster)",
    )
    a = ap.parse_args(argv)
    work = Path(a.workdir or tempfile.mkdtemp(prefix="mldebug-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    log = work / f"train-{a.mix}-{a.size_mb}.log"
    planted_file = log.with_suffix(".planted.json")
    try:
        if log.exists() and planted_file.exists():
            planted = {int(k): v for k, v in json.loads(planted_file.read_text()).items()}
        else:
            t0 = time.perf_counter()
            planted = generate_log(log, a.size_mb, mix=a.mix)
            planted_file.write_text(json.dumps(planted))
            print(f"generated {a.size_mb} MiB {a.mix} log in {time.perf_counter() - t0:.1f}s")
        pats = work / "patterns.txt"
        literals = FAILURE_LITERALS[: max(1, a.literals)]
        pats.write_text("\n".join(literals) + "\n", encoding="utf-8")
        print(
            f"{a.mix} mix, {log.stat().st_size / 2**20:.0f} MiB, {len(planted)} planted failure lines; "
            f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f} at start"
        )
        if "PYTHONDONTWRITEBYTECODE" in os.environ:
            print(
                "note: PYTHONDONTWRITEBYTECODE was set; unset for diagnose (a user's install has its bytecode)"
            )
        # planted: {line: literal index}, in PLANTED's order; expected: the lines a signature matches in a log of
        # only them. Untimed: the first start compiles the bytecode and fills the hyperscan database cache, as a user's
        # first diagnosis does once.
        expected = {sorted(planted)[k] for k in signature_lines(work)}
        warm_page_cache(log)
        grep_runs: list[tuple[float, float, int]] = []
        runs: list[tuple[float, float, float, dict]] = []
        for _ in range(a.repeat):  # interleaved: a load change hits both contenders alike
            if not a.no_grep:
                grep_runs.append(run_grep(pats, log))
            runs.append(run_diagnose(log))
        d_wall = statistics.median(r[0] for r in runs)
        d_cpu = statistics.median(r[1] for r in runs)
        rss = max(r[2] for r in runs)
        rep = runs[-1][3]
        if grep_runs:
            g_wall = statistics.median(r[0] for r in grep_runs)
            g_cpu = statistics.median(r[1] for r in grep_runs)
            print(
                f"grep -c -F -f ({len(literals)} literals, output to a pipe): median {g_wall:.2f}s wall, "
                f"{g_cpu:.2f}s CPU of {a.repeat}; count={grep_runs[-1][2]}"
            )
        print(
            f"diagnose --offline --log --format json: median {d_wall:.2f}s wall, {d_cpu:.2f}s CPU of {a.repeat}; "
            f"peak RSS {rss:.0f} MiB; scanner: {rep['engine']['scanner']}, rules: {rep['engine']['rules']}"
        )
        if grep_runs:
            print(f"ratios: wall {d_wall / g_wall:.2f}x grep's, CPU {d_cpu / g_cpu:.2f}x grep's")
        probes = {p["name"]: p for p in rep.get("probes", [])}
        for name in ("logs", "metrics"):
            p = probes.get(name, {})
            print(f"probe {name}: {p.get('status')}; {p.get('detail', '')[:300]}")
        reported = {_line_of(e.get("source")) for e in rep.get("signatures", [])}
        cited = {_line_of(e.get("source")) for h in rep["hypotheses"] for e in h.get("evidence", [])}
        found = reported & set(planted)
        print(
            f"hypotheses: {[h['id'] for h in rep['hypotheses']][:6]}; planted failure lines at their exact line "
            f"in the report's signatures: {len(found)}/{len(planted)} ({len(expected)} match a signature at "
            f"all; {'all of them' if found == expected else f'missing {sorted(expected - found)}'}), cited by a "
            f"hypothesis: {len(cited & set(planted))}/{len(planted)}"
        )
        print(f"load average {os.getloadavg()[0]:.2f} at the end")
        return 0 if found == expected else 1
    finally:
        if not a.workdir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
