"""Issue 21: the MCP server, driven by the SDK's own client.

- over stdio (`mldebug-rules mcp` as a subprocess): diagnose a fixture copy -> plan -> baseline -> change ->
  gate, the report resource, and the Stop hook on a Claude Code transcript before and after the pair, with
  the opening of this first session answered by the server's front before the SDK is imported
  (test_mcp_front.py tests the front, test_mcp_declared.py its answers against the SDK's);
- in process (the SDK's in-memory transport): every refusal (no --allow-run, outside the roots, through a
  symlink or `..`, an argv that is not a list, a bad timeout, an unknown id), progress notifications and the
  timeout of a long smoke, secrets redacted, and no command from a log ever run;
(test_mcp_optional.py: without the SDK, `mcp` says how to install the extra, and the core never imports it.)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
TRAINER = str(Path(__file__).with_name("stand_in_trainer.py"))
HOOK = REPO / "examples" / "hooks" / "claim-gate.sh"
BIG = [sys.executable, TRAINER, "--batch-size", "32", "--max-steps", "1"]
SMALL = [sys.executable, TRAINER, "--batch-size", "1", "--max-steps", "1"]
SECRET = "hf_" + "Zq8" * 10  # a token shape the redactor knows, written here so no real one is needed


def _oom_run(root: Path) -> Path:
    """A run that died of a CUDA OOM at batch size 32 (the stand-in trainer's own output)."""
    d = root / "run"
    d.mkdir(parents=True)
    out = subprocess.run(
        [sys.executable, TRAINER, "--batch-size", "32", "--max-steps", "100"], capture_output=True, text=True
    )
    assert out.returncode == 1
    (d / "train.log").write_text(
        f"+ HF_TOKEN={SECRET} python {TRAINER} --batch-size 32 --max-steps 100\n" + out.stdout + out.stderr
    )
    return d


def _data(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content[0].text
    assert isinstance(result.structured_content, dict)
    # The text content is the same JSON, for clients that read only text.
    assert json.loads(result.content[0].text) == result.structured_content
    return result.structured_content


def _error(result: Any) -> str:
    assert result.is_error
    return result.content[0].text


mcp = pytest.importorskip("mcp")
anyio = pytest.importorskip("anyio")

from mcp import Client, StdioServerParameters  # noqa: E402

from mldebug_rules.mcp_server import Policy, build_server, report_uri  # noqa: E402


def in_process(policy: Policy, body: Callable[[Any], Awaitable[None]]) -> None:
    async def main() -> None:
        async with Client(build_server(policy)) as client:
            await body(client)

    anyio.run(main)


# --- over stdio: the whole loop ---------------------------------------------------------------------
def test_diagnose_plan_pair_gate_over_stdio(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    run = _oom_run(root)
    fixture = root / "device_mismatch"
    shutil.copytree(REPO / "fixtures" / "device_mismatch", fixture)
    env = {
        "PYTHONDONTWRITEBYTECODE": "1",
        "MLDEBUG_CACHE_DIR": str(tmp_path / "cache"),
        **{k: os.environ[k] for k in ("MLDEBUG_ENGINE",) if k in os.environ},
    }
    front_log = tmp_path / "front.log"

    def params(**extra: str) -> StdioServerParameters:
        return StdioServerParameters(
            command=sys.executable,
            args=["-m", "mldebug_rules", "mcp", "--root", str(root), "--allow-run"],
            env={**env, **extra},
            cwd=str(tmp_path),
        )

    transcript = tmp_path / "transcript.jsonl"
    transcript.write_text(
        json.dumps({"type": "user", "message": {"role": "user", "content": "why did it die?"}})
        + "\n"
        + json.dumps(
            {
                "type": "assistant",
                "message": {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": f"It ran out of memory.\nRoot cause: gpu_oom (run: {run})"}
                    ],
                },
            }
        )
        + "\n"
    )

    async def main() -> None:
        # A first session (an empty cache): the front answers the opening from the server's declarations,
        # loading the SDK only for the first tool call (MLDEBUG_MCP_FRONT_LOG).
        async with Client(params(MLDEBUG_MCP_FRONT_LOG=str(front_log))) as c:
            tools = {t.name: t for t in (await c.list_tools()).tools}
            assert set(tools) == {"diagnose", "smoke_plan", "smoke_run", "smoke_record", "gate", "rules_list"}
            assert tools["smoke_run"].input_schema["properties"]["argv"]["type"] == "array"

            # A fixture copy: the same JSON report as `diagnose --format json`.
            rep = _data(await c.call_tool("diagnose", {"run_dirs": [str(fixture)], "offline": True}))
            assert rep["schema"] == "mldebug-rules/report/v1"
            assert rep["hypotheses"][0]["id"] == "device_mismatch"
            cli = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "mldebug_rules",
                    "diagnose",
                    str(fixture),
                    "--offline",
                    "--format",
                    "json",
                ],
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert [h["id"] for h in json.loads(cli.stdout)["hypotheses"]] == [
                h["id"] for h in rep["hypotheses"]
            ]

            rep = _data(await c.call_tool("diagnose", {"run_dirs": [str(run)], "offline": True}))
            assert rep["verdict"] == "uncertain" and rep["hypotheses"][0]["id"] == "gpu_oom"
            closed = _data(await c.call_tool("gate", {"run_dir": str(run), "claim": "gpu_oom"}))
            assert closed["passed"] is False and closed["missing"] == "baseline" and closed["reason"]

            plan = _data(await c.call_tool("smoke_plan", {"run_dir": str(run)}))
            assert plan["schema"] == "mldebug-rules/smoke-plan/v1"
            lead = plan["hypotheses"][0]
            assert lead["id"] == "gpu_oom" and lead["missing"] == "baseline"
            assert "--batch-size 32 -> 1" in "; ".join(lead["smokes"][0]["argv_diff"])
            assert SECRET not in json.dumps(plan)

            base = _data(
                await c.call_tool(
                    "smoke_run",
                    {
                        "run_dir": str(run),
                        "hypothesis": "gpu_oom",
                        "argv": BIG,
                        "baseline": True,
                        "timeout_s": 120,
                    },
                )
            )
            assert base["record"]["role"] == "baseline" and base["record"]["classification"] == "reproduced"
            assert base["missing"] == "change" and base["status"] == "hypothesis"
            assert (
                _data(await c.call_tool("gate", {"run_dir": str(run), "claim": "gpu_oom"}))["missing"]
                == "change"
            )
            assert _hook(transcript).returncode == 2  # the hook still holds the claim

            change = _data(
                await c.call_tool(
                    "smoke_run",
                    {"run_dir": str(run), "hypothesis": "gpu_oom", "argv": SMALL, "timeout_s": 120},
                )
            )
            assert change["record"]["classification"] == "passed"
            assert change["status"] == "confirmed" and change["verdict"] == "cause"
            assert change["pair"]["baseline"]["seq"] == base["record"]["seq"]

            opened = _data(await c.call_tool("gate", {"run_dir": str(run), "claim": "gpu_oom"}))
            assert opened["passed"] is True and opened["missing"] is None and "smoke pair" in opened["reason"]

            latest = await c.read_resource(report_uri(run))
            assert json.loads(latest.contents[0].text)["cause"] == "gpu_oom"
            tax = await c.read_resource("mldebug://taxonomy")
            assert "gpu_oom:" in tax.contents[0].text
            rules = _data(await c.call_tool("rules_list", {}))
            titles = {h["id"]: h["title"] for h in rules["hypotheses"]}
            assert "gpu_oom" in titles and "memory" in titles["gpu_oom"]
            assert all(r["id"] and r["title"] for r in rules["rules"])

    anyio.run(main)
    assert _hook(transcript).returncode == 0  # the hook lets the claim through, now that a pair confirmed it
    events = [json.loads(line) for line in front_log.read_text().splitlines()]
    answered = [e for e in events if e["event"] == "answered"]
    assert [e["method"] for e in answered] == ["server/discover", "tools/list"]
    assert all(e["source"] == "declared" and not e["sdk_imported"] for e in answered)
    assert [e["same"] for e in events if e["event"] == "verified"] == [True, True]


def _hook(transcript: Path) -> subprocess.CompletedProcess[str]:
    """examples/hooks/claim-gate.sh as Claude Code's Stop hook calls it (the CLI through a shim)."""
    shim = transcript.with_name("mldebug-shim")
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} -m mldebug_rules "$@"\n')
    shim.chmod(0o755)
    event = json.dumps({"transcript_path": str(transcript), "stop_hook_active": False})
    return subprocess.run(
        ["bash", str(HOOK)],
        input=event,
        capture_output=True,
        text=True,
        env={**os.environ, "MLDEBUG_BIN": str(shim)},
        timeout=120,
    )


# --- in process: refusals ---------------------------------------------------------------------------
@pytest.fixture
def oom(tmp_path: Path) -> Path:
    return _oom_run(tmp_path / "runs")


def test_smoke_run_refused_without_allow_run(oom: Path, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    argv = [sys.executable, "-c", f"open({str(marker)!r}, 'w')"]

    async def body(c: Any) -> None:
        msg = _error(
            await c.call_tool("smoke_run", {"run_dir": str(oom), "hypothesis": "gpu_oom", "argv": argv})
        )
        assert "--allow-run" in msg

    in_process(Policy((oom.parent.resolve(),), allow_run=False), body)
    assert not marker.exists() and not (oom / ".mldebug").exists()


def test_paths_outside_the_roots_are_refused(oom: Path, tmp_path: Path) -> None:
    root = oom.parent.resolve()
    outside = tmp_path / "elsewhere"
    shutil.copytree(oom, outside)
    (root / "link").symlink_to(outside, target_is_directory=True)
    escapes = [str(outside), str(root / "link"), str(root / ".." / "elsewhere")]
    marker = tmp_path / "ran"
    argv = [sys.executable, "-c", f"open({str(marker)!r}, 'w')"]

    async def body(c: Any) -> None:
        for bad in escapes:
            calls = {
                "diagnose": {"run_dirs": [bad], "offline": True},
                "smoke_plan": {"run_dir": bad},
                "smoke_run": {"run_dir": bad, "hypothesis": "gpu_oom", "argv": argv},
                "smoke_record": {
                    "run_dir": bad,
                    "hypothesis": "gpu_oom",
                    "outcome": "confirmed",
                    "note": "x",
                },
                "gate": {"run_dir": bad, "claim": "gpu_oom"},
            }
            for tool, arguments in calls.items():
                assert "outside the server's roots" in _error(await c.call_tool(tool, arguments)), (tool, bad)
            # A bundle glob inside a root whose match leads outside it (a symlink) is refused as well.
            (root / "node0.mldebug.json").symlink_to(outside / "train.log")
            glob_in_root = {"bundles": [str(root / "*.mldebug.json")], "offline": True}
            assert "outside the server's roots" in _error(await c.call_tool("diagnose", glob_in_root))
            (root / "node0.mldebug.json").unlink()
            log = str(Path(bad) / "train.log")
            for kind in ("logs", "kernel_logs"):
                assert "outside the server's roots" in _error(
                    await c.call_tool("diagnose", {kind: [log], "offline": True})
                ), kind
            with pytest.raises(Exception, match="outside the server's roots"):
                await c.read_resource(report_uri(bad))
        # Inside the roots the same calls work.
        assert _data(await c.call_tool("gate", {"run_dir": str(oom), "claim": "gpu_oom"}))["passed"] is False

    in_process(Policy((root,), allow_run=True), body)
    assert not marker.exists() and not (outside / ".mldebug").exists()


def test_bad_arguments_are_refused(oom: Path) -> None:
    async def body(c: Any) -> None:
        run = str(oom)
        # argv is a list: a string (a shell command line) is not accepted, and there is no default command.
        shell = {"run_dir": run, "hypothesis": "gpu_oom", "argv": "python train.py; rm -rf /"}
        assert _error(await c.call_tool("smoke_run", shell))
        for argv in ([sys.executable, ""], [sys.executable, 1]):  # every item a non-empty string
            assert _error(
                await c.call_tool("smoke_run", {"run_dir": run, "hypothesis": "gpu_oom", "argv": argv})
            )
        assert "argv" in _error(
            await c.call_tool("smoke_run", {"run_dir": run, "hypothesis": "gpu_oom", "argv": []})
        )
        for t in (0, -1, 10**9):
            args = {"run_dir": run, "hypothesis": "gpu_oom", "argv": SMALL, "timeout_s": t}
            assert "timeout_s" in _error(await c.call_tool("smoke_run", args))
        assert "unknown hypothesis id" in _error(
            await c.call_tool("smoke_run", {"run_dir": run, "hypothesis": "nope", "argv": SMALL})
        )
        assert "unknown hypothesis id" in _error(await c.call_tool("gate", {"run_dir": run, "claim": "OOM"}))
        assert "unknown hypothesis id" in _error(
            await c.call_tool("smoke_plan", {"run_dir": run, "hypothesis": "x"})
        )
        no_note = {"run_dir": run, "hypothesis": "gpu_oom", "outcome": "confirmed", "note": ""}
        assert _error(await c.call_tool("smoke_record", no_note))
        maybe = {"run_dir": run, "hypothesis": "gpu_oom", "outcome": "maybe", "note": "ran it"}
        assert "outcome" in _error(await c.call_tool("smoke_record", maybe))
        assert "nothing to diagnose" in _error(await c.call_tool("diagnose", {"offline": True}))
        assert "no such run directory" in _error(
            await c.call_tool("gate", {"run_dir": run + "-x", "claim": "gpu_oom"})
        )

    in_process(Policy((oom.parent.resolve(),), allow_run=True), body)
    assert not (oom / ".mldebug" / "smokes.jsonl").exists()


def test_recorded_results_count_only_when_trusted(oom: Path) -> None:
    async def body(c: Any) -> None:
        args = {
            "run_dir": str(oom),
            "hypothesis": "gpu_oom",
            "outcome": "confirmed",
            "note": "ran bs=1 by hand",
        }
        rec = _data(await c.call_tool("smoke_record", args))
        assert rec["record"]["recorded"] is True
        gate = {"run_dir": str(oom), "claim": "gpu_oom"}
        assert _data(await c.call_tool("gate", gate))["passed"] is False
        assert _data(await c.call_tool("gate", {**gate, "trust_recorded": True}))["passed"] is True

    in_process(Policy((oom.parent.resolve(),)), body)


def test_no_command_from_a_log_is_run(tmp_path: Path) -> None:
    """The logged command line is shown in the plan, never run, by any tool."""
    root = tmp_path / "runs"
    run = root / "run"
    run.mkdir(parents=True)
    marker = tmp_path / "pwned"
    script = run / "train.py"  # what running the logged command would do: leave a mark
    script.write_text(f"open({str(marker)!r}, 'w')\n")
    logged = f"{sys.executable} {script} --batch-size 32"
    (run / "train.log").write_text(f"+ {logged}\n{oom}")

    async def body(c: Any) -> None:
        _data(await c.call_tool("diagnose", {"run_dirs": [str(run)], "offline": True}))
        plan = _data(await c.call_tool("smoke_plan", {"run_dir": str(run)}))
        assert plan["command"] and str(script) in plan["command"]
        _data(await c.call_tool("gate", {"run_dir": str(run), "claim": "gpu_oom"}))
        await c.read_resource(report_uri(run))
        assert "argv" in _error(
            await c.call_tool("smoke_run", {"run_dir": str(run), "hypothesis": "gpu_oom", "argv": []})
        )

    in_process(Policy((root.resolve(),), allow_run=True), body)
    assert not marker.exists()


def test_secrets_are_redacted(oom: Path) -> None:
    leaky = [
        sys.executable,
        "-c",
        f"print('step 1 | loss 1.0'); print('step 2 | loss 0.9'); print('token {SECRET}')",
        "--api-key",
        SECRET,
    ]

    async def body(c: Any) -> None:
        seen = [
            await c.call_tool("diagnose", {"run_dirs": [str(oom)], "offline": True}),
            await c.call_tool("smoke_plan", {"run_dir": str(oom)}),
            await c.call_tool("smoke_run", {"run_dir": str(oom), "hypothesis": "gpu_oom", "argv": leaky}),
            await c.call_tool("gate", {"run_dir": str(oom), "claim": "gpu_oom"}),
        ]
        for r in seen:
            text = json.dumps(_data(r))
            assert SECRET not in text and "[REDACTED]" in text
        latest = (await c.read_resource(report_uri(oom))).contents[0].text
        assert SECRET not in latest

    in_process(Policy((oom.parent.resolve(),), allow_run=True), body)


def test_long_smoke_reports_progress_and_is_bounded(oom: Path) -> None:
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(p: float, total: float | None, message: str | None) -> None:
        progress.append((p, total, message))

    slow = [
        sys.executable,
        "-c",
        "import time; time.sleep(1.5); print('step 1 | loss 1.0'); print('step 2 | loss 0.9')",
    ]
    hang = [sys.executable, "-c", "import time; time.sleep(600)"]

    async def body(c: Any) -> None:
        args = {"run_dir": str(oom), "hypothesis": "gpu_oom", "argv": slow, "timeout_s": 60}
        r = _data(await c.call_tool("smoke_run", args, progress_callback=on_progress))
        assert r["record"]["classification"] == "passed"
        assert progress and all(total == 60 for _, total, _ in progress)
        assert "running for" in (progress[-1][2] or "")
        stuck = {"run_dir": str(oom), "hypothesis": "gpu_oom", "argv": hang, "timeout_s": 1}
        r = _data(await c.call_tool("smoke_run", stuck))
        assert r["record"]["exit_code"] is None and r["record"]["classification"] == "timed_out"
        assert r["record"]["duration_s"] < 30

    in_process(Policy((oom.parent.resolve(),), allow_run=True, progress_every_s=0.2), body)
