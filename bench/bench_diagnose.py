"""End-to-end: `mldebug-rules diagnose --offline --log BIG --format json` against grep, in the same run.

grep gets `-c -F -f PATTERNS` with the failure literals of bench_logscan.py (a comparable list of failure
signatures); diagnose runs every signature of every installed pack, the progress patterns, the scrollback and
the rules. Prints the median wall time of each, the ratio, and diagnose's peak RSS (wait4 on the child).

    python bench/bench_diagnose.py                  # 1 GiB log, 3 runs each
    python bench/bench_diagnose.py --size-mb 128 --repeat 1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_logscan import FAILURE_LITERALS, generate_log, time_grep, warm_page_cache


def run_diagnose(log: Path) -> tuple[float, float, dict]:
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mldebug_rules.cli",
            "diagnose",
            "--offline",
            "--log",
            str(log),
            "--format",
            "json",
        ],
        stdout=subprocess.PIPE,
    )
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit("diagnose failed")
    return wall, usage.ru_maxrss / 1024.0, json.loads(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workdir")
    a = ap.parse_args(argv)
    work = Path(a.workdir or tempfile.mkdtemp(prefix="mldebug-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    log = work / "train.log"
    t0 = time.perf_counter()
    planted = generate_log(log, a.size_mb)
    print(
        f"generated {a.size_mb} MiB log, {len(planted)} planted failure lines, in {time.perf_counter() - t0:.1f}s"
    )
    pats = work / "patterns.txt"
    pats.write_text("\n".join(FAILURE_LITERALS) + "\n", encoding="utf-8")
    warm_page_cache(log)
    grep_t = [time_grep(pats, log)[0] for _ in range(a.repeat)]
    runs = [run_diagnose(log) for _ in range(a.repeat)]
    diag_t = [r[0] for r in runs]
    rss = max(r[1] for r in runs)
    rep = runs[-1][2]
    g, d = statistics.median(grep_t), statistics.median(diag_t)
    cited = {
        int(e["source"].rsplit(":", 1)[1])
        for h in rep["hypotheses"]
        for e in h.get("evidence", [])
        if ":" in str(e.get("source", "")) and str(e["source"]).rsplit(":", 1)[1].isdigit()
    }
    print(f"grep -c -F -f ({len(FAILURE_LITERALS)} literals): median {g:.2f}s of {a.repeat}")
    print(
        f"diagnose --offline --log --format json: median {d:.2f}s of {a.repeat}, {d / g:.2f}x grep's time, "
        f"peak RSS {rss:.0f} MiB, scanner: {rep['engine']['scanner']}, rules: {rep['engine']['rules']}"
    )
    reported = {
        int(e["source"].rsplit(":", 1)[1])
        for e in rep.get("signatures", [])
        if str(e.get("source", "")).rsplit(":", 1)[-1].isdigit()
    }
    print(
        f"hypotheses: {[h['id'] for h in rep['hypotheses']][:6]}; planted failure lines at their exact line "
        f"in the report's signatures: {len(reported & set(planted))}/{len(planted)}, cited by a hypothesis: "
        f"{len(cited & set(planted))}/{len(planted)}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
