"""Start-up: `mldebug-rules --version` and `diagnose --offline` on a small run directory, against `python -c pass`
measured in the same run (target: under 300 ms each).

The first diagnosis after installing or editing a pack fills the on-disk cache (mldebug_rules/cache.py); it is
timed separately as "cold". The rest are "warm", which is what a user sees from then on.

    python bench/bench_startup.py [--repeat 15] [--run-dir fixtures/host_oom_worker]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def timed(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    # From a neutral directory: in the repository root, `-m mldebug_rules...` would find the source folder
    # before a regular (non-editable) install.
    subprocess.run(
        cmd,
        env=env,
        cwd=tempfile.gettempdir(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=True,
    )
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--run-dir", default=str(REPO / "fixtures" / "host_oom_worker"))
    a = ap.parse_args(argv)
    env = dict(os.environ, MLDEBUG_CACHE_DIR=tempfile.mkdtemp(prefix="mldebug-bench-cache-"))
    if env.pop("PYTHONDONTWRITEBYTECODE", None):
        # pip compiles bytecode when it installs a package; without it every run compiles every module
        # from source again, which is not what a user's start-up costs.
        print("note: PYTHONDONTWRITEBYTECODE was set; unset for the measured commands")
    py = sys.executable
    script = Path(py).parent / "mldebug-rules"  # the console script, as a user runs it
    cli = [str(script)] if script.exists() else [py, "-m", "mldebug_rules.cli"]
    diag = [*cli, "diagnose", "--offline", str(Path(a.run_dir).resolve()), "--format", "json"]
    cold = timed(diag, env)
    rows = {
        "python -c pass": [py, "-c", "pass"],
        "mldebug-rules --version": [*cli, "--version"],
        "diagnose --offline (warm)": diag,
    }
    times: dict[str, list[float]] = {k: [] for k in rows}
    for _ in range(a.repeat):  # interleaved, so a burst of load hits every command alike
        for name, cmd in rows.items():
            times[name].append(timed(cmd, env))
    ref = statistics.median(times["python -c pass"])
    print(f"diagnose --offline (cold cache): {cold * 1000:.0f} ms")
    for name, ts in times.items():
        m = statistics.median(ts)
        target = "" if name.startswith("python") else ("  [OK]" if m < 0.3 else "  [OVER 300 ms]")
        print(f"{name:28} median {m * 1000:5.0f} ms of {a.repeat}  ({m / ref:4.1f}x python -c pass){target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
