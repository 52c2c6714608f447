"""Start-up of the MCP server: from spawning `mldebug-rules mcp` to its answer to `initialize`, and to its
answer to `tools/list` (target: under 1 s), against `python -c pass` and against importing the SDK alone, in
the same run. Needs the `[agent]` extra.

    python bench/bench_mcp_startup.py [--repeat 10]

It talks JSON-RPC over the pipes itself (one JSON object per line, as the stdio transport does), so the
client's own start-up is not counted. Two openings, each with an empty cache and with a warm one:
- the `initialize` handshake (protocol 2025-06-18), then `tools/list`: what most clients send;
- `server/discover`, then `tools/list` with the per-request envelope (2026-07-28): what the SDK's own client
  sends.
An empty cache (a new `MLDEBUG_CACHE_DIR` for each start) is a client's first session after an install or
an upgrade; a warm one is every later session. The server's front answers both from the server's
declarations, without waiting for the SDK (see mldebug_rules/mcp_front.py); the SDK import row shows what a
session would wait for otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
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
ENVELOPE = {
    "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }
}
DISCOVER = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": ENVELOPE}
MODERN_LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": ENVELOPE}
HANDSHAKE = [INIT, INITIALIZED, LIST]
DISCOVERY = [DISCOVER, MODERN_LIST]


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


def server_start(
    cmd: list[str], env: dict[str, str], root: str, opening: list[dict[str, object]] = HANDSHAKE
) -> tuple[float, float, int, float]:
    """Seconds to the first answer (id 1), seconds to the tools/list answer (id 2), the number of tools, and
    the CPU seconds the server used in all (start, two answers, exit)."""
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
        first, *rest = opening
        _send(proc, first)
        _reply(proc, 1)
        t_init = time.perf_counter() - t0
        for msg in rest:
            _send(proc, msg)
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
    load = os.getloadavg()
    env = dict(os.environ, MLDEBUG_CACHE_DIR=tempfile.mkdtemp(prefix="mldebug-bench-cache-"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # a user's install has its bytecode compiled
    env.pop("MLDEBUG_CACHE", None)
    py = sys.executable
    script = Path(py).parent / "mldebug-rules"
    cli = [str(script)] if script.exists() else [py, "-m", "mldebug_rules.cli"]
    root = tempfile.mkdtemp(prefix="mldebug-bench-root-")
    # The first starts compile what pip did not, and warm the cache.
    server_start(cli, env, root, HANDSHAKE)
    server_start(cli, env, root, DISCOVERY)
    openings = {  # name: (messages, a new empty cache for each start)
        "mcp: initialize, empty cache": (HANDSHAKE, True),
        "mcp: initialize, warm cache": (HANDSHAKE, False),
        "mcp: server/discover, empty cache": (DISCOVERY, True),
        "mcp: server/discover, warm cache": (DISCOVERY, False),
    }
    answers: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in openings}
    rows: dict[str, tuple[list[float], list[float]]] = {
        "python -c pass": ([], []),
        "import mcp.server.mcpserver": ([], []),
        "mcp: start + 2 answers + exit": ([], []),
    }
    n_tools = 0
    for _ in range(a.repeat):  # interleaved, so a burst of load hits every command alike
        for name, (opening, empty) in openings.items():
            e = dict(env, MLDEBUG_CACHE_DIR=tempfile.mkdtemp(prefix="mldebug-bench-empty-")) if empty else env
            try:
                t_first, t_list, n_tools, cpu = server_start(cli, e, root, opening)
            finally:
                if empty:
                    shutil.rmtree(e["MLDEBUG_CACHE_DIR"], ignore_errors=True)
            answers[name][0].append(t_first)
            answers[name][1].append(t_list)
            if name == "mcp: initialize, empty cache":
                rows["mcp: start + 2 answers + exit"][0].append(t_list)
                rows["mcp: start + 2 answers + exit"][1].append(cpu)
        for name, cmd in (
            ("python -c pass", [py, "-c", "pass"]),
            ("import mcp.server.mcpserver", [py, "-c", "import mcp.server.mcpserver"]),
        ):
            wall, cpu = timed(cmd, env)
            rows[name][0].append(wall)
            rows[name][1].append(cpu)
    ref = statistics.median(rows["python -c pass"][0])
    # Wall-clock time is what a client waits; on a shared machine CPU time is the steadier figure.
    print(f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, after: {os.getloadavg()[0]:.2f}")
    print(f"{'':36} {'wall':>12} {'cpu':>9}")
    for name, (walls, cpus) in rows.items():
        m = statistics.median(walls)
        print(
            f"{name:36} {m * 1000:7.0f} ms  {statistics.median(cpus) * 1000:6.0f} ms  ({m / ref:4.1f}x python -c pass)"
        )
    for name, (firsts, lists) in answers.items():
        for what, ts in (("answered", firsts), (f"+ tools/list ({n_tools} tools)", lists)):
            m = statistics.median(ts)
            verdict = "  [OK]" if m < 1.0 else "  [OVER 1 s]"
            print(
                f"{name + ' ' + what:56} {m * 1000:7.0f} ms median of {a.repeat} "
                f"({min(ts) * 1000:.0f}-{max(ts) * 1000:.0f}){verdict}"
            )
    shutil.rmtree(env["MLDEBUG_CACHE_DIR"], ignore_errors=True)
    shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
