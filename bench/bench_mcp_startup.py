"""Start-up of the MCP server: from spawning `mldebug-rules mcp` to its answer to `initialize`, and to its
answer to `tools/list` (target: under 1 s), against `python -c pass` and against importing the SDK alone, in
the same run. Needs the `[agent]` extra.

    python bench/bench_mcp_startup.py [--repeat 10]

It talks JSON-RPC over the pipes itself (one JSON object per line, as the stdio transport does), so the
client's own start-up is not counted.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "bench", "version": "0"},
    },
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}


def _send(proc: subprocess.Popen[bytes], msg: dict[str, object]) -> None:
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(msg).encode() + b"\n")
    proc.stdin.flush()


def _reply(proc: subprocess.Popen[bytes], want_id: int) -> dict[str, object]:
    assert proc.stdout is not None
    while True:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError("the server exited before answering")
        msg = json.loads(line)
        if msg.get("id") == want_id:
            return msg


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def server_start(cmd: list[str], env: dict[str, str], root: str) -> tuple[float, float, int, float]:
    """Seconds to the initialize answer, seconds to the tools/list answer, the number of tools, and the CPU
    seconds the server used in all (start, two answers, exit)."""
    c0 = _cpu()
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [*cmd, "mcp", "--root", root],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=root,
    )
    try:
        _send(proc, INIT)
        _reply(proc, 1)
        t_init = time.perf_counter() - t0
        _send(proc, INITIALIZED)
        _send(proc, LIST)
        tools = _reply(proc, 2)["result"]["tools"]  # type: ignore[index]
        t_list = time.perf_counter() - t0
    finally:
        assert proc.stdin is not None
        proc.stdin.close()  # end of input: the server exits
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return t_init, t_list, len(tools), _cpu() - c0


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall-clock and CPU seconds."""
    c0 = _cpu()
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, cwd=tempfile.gettempdir(), check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0, _cpu() - c0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=10)
    a = ap.parse_args(argv)
    env = dict(os.environ, MLDEBUG_CACHE_DIR=tempfile.mkdtemp(prefix="mldebug-bench-cache-"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # a user's install has its bytecode compiled
    py = sys.executable
    script = Path(py).parent / "mldebug-rules"
    cli = [str(script)] if script.exists() else [py, "-m", "mldebug_rules.cli"]
    root = tempfile.mkdtemp(prefix="mldebug-bench-root-")
    server_start(cli, env, root)  # the first start compiles what pip did not
    inits: list[float] = []
    lists: list[float] = []
    rows: dict[str, tuple[list[float], list[float]]] = {
        "python -c pass": ([], []),
        "import mcp.server.mcpserver": ([], []),
        "mcp: start + 2 answers + exit": ([], []),
    }
    n_tools = 0
    for _ in range(a.repeat):  # interleaved, so a burst of load hits every command alike
        t_init, t_list, n_tools, cpu = server_start(cli, env, root)
        inits.append(t_init)
        lists.append(t_list)
        rows["mcp: start + 2 answers + exit"][1].append(cpu)
        for name, cmd in (
            ("python -c pass", [py, "-c", "pass"]),
            ("import mcp.server.mcpserver", [py, "-c", "import mcp.server.mcpserver"]),
        ):
            wall, cpu = timed(cmd, env)
            rows[name][0].append(wall)
            rows[name][1].append(cpu)
    rows["mcp: start + 2 answers + exit"][0].extend(lists)
    ref = statistics.median(rows["python -c pass"][0])
    # Wall-clock time is what a client waits; on a shared machine CPU time is the steadier figure.
    print(f"{'':34} {'wall':>12} {'cpu':>9}")
    for name, (walls, cpus) in rows.items():
        m = statistics.median(walls)
        print(
            f"{name:34} {m * 1000:7.0f} ms  {statistics.median(cpus) * 1000:6.0f} ms  ({m / ref:4.1f}x python -c pass)"
        )
    for name, ts in (
        ("mcp: initialize answered", inits),
        (f"mcp: tools/list answered ({n_tools} tools)", lists),
    ):
        m = statistics.median(ts)
        print(
            f"{name:34} {m * 1000:7.0f} ms median of {a.repeat}" + ("  [OK]" if m < 1.0 else "  [OVER 1 s]")
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
