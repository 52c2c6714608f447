"""``mldebug-rules mcp``: a stdio Model Context Protocol server over the same pipeline as the command line.

Each tool is one CLI command and calls the function the CLI calls (``diagnose`` + ``report.build``,
``smokes.plan.plan_data``, ``run_smoke``, ``record_smoke``, ``gate_check``); nothing shells out to the CLI.

Safety, decided here and nowhere else:
- every path a tool or resource is given must resolve (symlinks followed) inside one of the ``--root``
  directories given at start-up (default: the directory the server was started in);
- ``smoke_run`` runs only the argv list the client passes (no shell, never a command read from a log) and
  only when the server was started with ``--allow-run``; it is bounded by its timeout;
- what comes back went through the same redaction as every report.

The tools' and resources' names, descriptions and annotations come from ``mcp_decl``, which does not
import the SDK. The ``mcp`` SDK is an optional extra (``pip install "mldebug-rules[agent]"``); the core never
imports this module. ``main`` serves through ``mcp_front``, which answers the session's opening from those
declarations while the SDK and the pipeline load in the background, so that a client gets ``initialize``
and the tool list fast.
"""

# No `from __future__ import annotations`: the SDK reads the tools' signatures, whose types are local names.
import argparse
import json
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from .errors import UsageError
from .mcp_decl import INSTRUCTIONS, RESOURCES, SERVER_NAME, TEMPLATES, TOOLS_BY_NAME

INSTALL_HINT = 'the MCP server needs the optional extra: pip install "mldebug-rules[agent]"'
MAX_TIMEOUT_S = 6 * 3600.0  # a smoke is a few steps; a day-long "smoke" is a mistake, not a check
PROGRESS_EVERY_S = 5.0


class Refused(UsageError):
    """A request the server's policy does not allow (outside the roots, running disabled)."""


@dataclass(frozen=True)
class Policy:
    roots: tuple[Path, ...]
    allow_run: bool = False
    progress_every_s: float = PROGRESS_EVERY_S

    @classmethod
    def from_args(cls, roots: Sequence[str], allow_run: bool, progress_every_s: float) -> "Policy":
        resolved = tuple(Path(r).expanduser().resolve() for r in (roots or ["."]))
        for r in resolved:
            if not r.is_dir():
                raise UsageError(f"--root {r}: not a directory")
        return cls(resolved, allow_run, progress_every_s)

    def path(self, value: str, what: str) -> Path:
        """The path resolved (symlinks and `..` followed) if it lies under a root; else refused."""
        if not isinstance(value, str) or not value.strip() or "\x00" in value:
            raise Refused(f"{what}: expected a path")
        p = Path(value).expanduser().resolve()
        if not any(p == r or p.is_relative_to(r) for r in self.roots):
            roots = ", ".join(str(r) for r in self.roots)
            raise Refused(f"{what} {value}: outside the server's roots ({roots}); start it with --root DIR")
        return p


# --- the tools' bodies: plain functions over the CLI's code paths (tested without the SDK too) --------
def _ns(**kw: Any) -> argparse.Namespace:
    return argparse.Namespace(rules=[], **kw)


def diagnose_report(
    policy: Policy,
    run_dirs: Sequence[str] = (),
    logs: Sequence[str] = (),
    kernel_logs: Sequence[str] = (),
    bundles: Sequence[str] = (),
    offline: bool = False,
) -> dict[str, Any]:
    from . import report as rep
    from .diagnose import Request, diagnose
    from .inputs import expand_paths

    # The roots first, before anything looks at the disk (a refusal says nothing of what exists there); then
    # the CLI's expansion (bundle globs, a bundle given as a run directory), whose results are checked again.
    for p in run_dirs:
        policy.path(p, "run_dir")
    for p in bundles:
        policy.path(p, "bundle")
    rds, bds = expand_paths([str(p) for p in run_dirs], [str(p) for p in bundles])
    req = Request(
        run_dirs=[policy.path(str(p), "run_dir") for p in rds],
        logs=[policy.path(p, "log") for p in logs],
        kernel_logs=[policy.path(p, "kernel_log") for p in kernel_logs],
        bundles=[policy.path(str(p), "bundle") for p in bds],
        offline=offline,
    )
    if not (req.run_dirs or req.logs or req.kernel_logs or req.bundles):
        raise UsageError("nothing to diagnose: give run_dirs, logs, kernel_logs or bundles")
    # The JSON report exactly as `diagnose --format json` writes it (redacted in report.build).
    return json.loads(rep.to_json(rep.build(diagnose(req))))


def plan_json(
    policy: Policy, run_dir: str, hypothesis: str | None = None, cmd: str | None = None
) -> dict[str, Any]:
    from .smokes.plan import plan_data

    rd = policy.path(run_dir, "run_dir")
    return plan_data(_ns(run_dir=str(rd), hypothesis=hypothesis, cmd=cmd, timeout=600.0))


def _check_run(policy: Policy, argv: Any, timeout_s: float) -> list[str]:
    if not policy.allow_run:
        raise Refused("smoke_run is disabled: the server was not started with --allow-run")
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) and a for a in argv):
        # Never a fallback to the command the logs recorded: only what the client passes explicitly runs.
        raise Refused("smoke_run: argv must be a non-empty list of strings (the command, no shell)")
    if not 0 < timeout_s <= MAX_TIMEOUT_S:
        raise Refused(f"smoke_run: timeout_s must be > 0 and at most {MAX_TIMEOUT_S:.0f} seconds")
    return list(argv)


@dataclass
class _Started:
    """When the command itself started (after the diagnosis), for progress reports."""

    at: float | None = None


def run_pair_half(
    policy: Policy,
    run_dir: str,
    hypothesis: str,
    argv: Any,
    baseline: bool = False,
    timeout_s: float = 600.0,
    smoke: str = "",
    control: str | None = None,
    started: _Started | None = None,
) -> dict[str, Any]:
    from .smokes.common import pair_state
    from .smokes.execute import run_command
    from .smokes.run import run_smoke

    argv = _check_run(policy, argv, timeout_s)
    rd = policy.path(run_dir, "run_dir")

    def execute(cmd: list[str], timeout: float, scanner: Any) -> Any:
        if started is not None:
            started.at = time.monotonic()
        return run_command(cmd, timeout, scanner, echo=False)  # stdout is the protocol's

    args = _ns(
        run_dir=str(rd),
        hypothesis=hypothesis,
        argv=argv,
        baseline=baseline,
        timeout=float(timeout_s),
        smoke=smoke,
        control=[control] if control else [],
    )
    rec, g, _spec = run_smoke(args, execute)
    hid = rec["hypothesis"]
    h = next((x for x in g.hypotheses if x.id == hid), None)
    state = pair_state(g, hid)
    pair = next((p for p in state["pairs"] if _has_seq(p, rec["seq"])), None)
    return {
        "record": rec,
        "hypothesis": hid,
        "status": h.status if h else "not raised",
        "pair": pair,
        "missing": state["missing"],
        "verdict": g.verdict,
        "cause": g.cause,
    }


def _has_seq(pair: dict[str, Any], seq: int) -> bool:
    return any(isinstance(pair.get(k), dict) and pair[k].get("seq") == seq for k in ("baseline", "change"))


def record_result(
    policy: Policy, run_dir: str, hypothesis: str, outcome: str, note: str, smoke: str = ""
) -> dict[str, Any]:
    from .smokes.record import record_smoke

    if outcome not in ("confirmed", "refuted", "inconclusive"):
        raise UsageError("outcome: confirmed, refuted or inconclusive")
    rd = policy.path(run_dir, "run_dir")
    rec = record_smoke(_ns(run_dir=str(rd), hypothesis=hypothesis, outcome=outcome, note=note, smoke=smoke))
    return {
        "record": rec,
        "counted_by_gate": "only with trust_recorded=true; a smoke pair counts by itself",
    }


def gate_result(policy: Policy, run_dir: str, claim: str, trust_recorded: bool = False) -> dict[str, Any]:
    from .smokes.claim import gate_check

    rd = policy.path(run_dir, "run_dir")
    out = gate_check(_ns(run_dir=str(rd), claim=claim, trust_recorded=trust_recorded))
    out["explanation"] = "\n".join(out.pop("lines"))
    return out


def rules_index() -> dict[str, Any]:
    from . import cache
    from .engine.packs import load_packs

    kb = load_packs([], cache=cache)
    hyps = []
    for hid in sorted(set(kb.taxonomy) | set(kb.hypotheses)):
        info = kb.hypotheses.get(hid) or {}
        title = info.get("title") or kb.taxonomy.get(hid, {}).get("claim", "")
        hyps.append({"id": hid, "title": str(title)})
    return {
        "packs": [{"name": p.name, "version": p.version, "origin": p.origin} for p in kb.packs],
        "rules": [
            {"id": r.id, "title": str(r.spec.get("title", "")), "pack": r.pack}
            for r in kb.rules
            if not r.disabled
        ],
        "hypotheses": hyps,
    }


def taxonomy_text() -> str:
    """The taxonomy shipped in the package (engine/taxonomy.yaml)."""
    from importlib import resources

    return (resources.files("mldebug_rules.engine") / "taxonomy.yaml").read_text(encoding="utf-8")


# --- the MCP server ---------------------------------------------------------------------------------
def build_server(policy: Policy) -> Any:
    """The MCPServer with the tools and resources bound to ``policy``. Raises ImportError without the SDK."""
    import anyio
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.mcpserver.exceptions import ResourceError, ToolError
    from mcp.server.mcpserver.resources import ResourceSecurity
    from mcp.types import ToolAnnotations
    from pydantic import Field

    from . import __version__
    from .redact import redact

    server = MCPServer(SERVER_NAME, version=__version__, instructions=INSTRUCTIONS, log_level="WARNING")
    # One pipeline call at a time: the rule engine's host and the state file are shared.
    lock = threading.Lock()

    async def call(fn: Any, *a: Any, **kw: Any) -> Any:
        def work() -> Any:
            with lock:
                return fn(*a, **kw)

        try:
            return await anyio.to_thread.run_sync(work)
        except UsageError as e:  # bad input or a refusal: one line, as on the command line
            raise ToolError(redact(str(e))) from None
        except Exception as e:
            from .engine.facts import FactError
            from .engine.packs import PackError
            from .engine.yamlload import YamlError

            if isinstance(e, (PackError, YamlError, FactError)):
                raise ToolError(redact(str(e))) from None
            # As the CLI says it (exit 1): the agent sees what broke, not only that something did.
            raise ToolError(redact(f"internal error: {type(e).__name__}: {e}")) from e

    def tool(name: str) -> Any:
        """Registers the tool as mcp_decl declares it (the parameters' types are the function's own)."""
        decl = TOOLS_BY_NAME[name]
        hints = ToolAnnotations.model_validate(decl.annotations())
        return server.tool(name=name, description=decl.description, annotations=hints)

    def doc(name: str, param: str) -> Any:
        """A parameter's description and constraints, as mcp_decl declares them."""
        p = TOOLS_BY_NAME[name].param(param)
        return Field(description=p.description, pattern=p.pattern, min_length=p.min_length)

    Paths = Annotated[list[str], Field(default_factory=list)]

    @tool("diagnose")
    async def diagnose(
        run_dirs: Paths,
        logs: Paths,
        kernel_logs: Paths,
        bundles: Paths,
        offline: Annotated[bool, doc("diagnose", "offline")] = False,
    ) -> dict[str, Any]:
        return await call(diagnose_report, policy, run_dirs, logs, kernel_logs, bundles, offline)

    @tool("smoke_plan")
    async def smoke_plan(
        run_dir: str,
        hypothesis: str | None = None,
        cmd: Annotated[str | None, doc("smoke_plan", "cmd")] = None,
    ) -> dict[str, Any]:
        return await call(plan_json, policy, run_dir, hypothesis, cmd)

    @tool("smoke_run")
    async def smoke_run(
        run_dir: str,
        hypothesis: str,
        argv: Annotated[list[str], doc("smoke_run", "argv")],
        ctx: Context,
        baseline: bool = False,
        timeout_s: float = 600.0,
        smoke: str = "",
        control: Annotated[str | None, doc("smoke_run", "control")] = None,
    ) -> dict[str, Any]:
        try:
            _check_run(policy, argv, timeout_s)  # refuse before anything else happens
        except UsageError as e:
            raise ToolError(str(e)) from None
        started = _Started()

        async def progress() -> None:
            while True:
                await anyio.sleep(policy.progress_every_s)
                if started.at is not None:
                    done = time.monotonic() - started.at
                    message = f"{argv[0]} running for {done:.0f}s of at most {timeout_s:.0f}s"
                    await ctx.report_progress(round(done, 1), timeout_s, message)

        out: dict[str, Any] = {}
        error: BaseException | None = None
        async with anyio.create_task_group() as tg:
            tg.start_soon(progress)
            try:
                out = await call(
                    run_pair_half,
                    policy,
                    run_dir,
                    hypothesis,
                    argv,
                    baseline,
                    timeout_s,
                    smoke,
                    control,
                    started,
                )
            except Exception as e:  # raised after the task group, unwrapped
                error = e
            tg.cancel_scope.cancel()
        if error is not None:
            raise error
        return out

    @tool("smoke_record")
    async def smoke_record(
        run_dir: str,
        hypothesis: str,
        outcome: Annotated[str, doc("smoke_record", "outcome")],
        note: Annotated[str, doc("smoke_record", "note")],
        smoke: str = "",
    ) -> dict[str, Any]:
        return await call(record_result, policy, run_dir, hypothesis, outcome, note, smoke)

    @tool("gate")
    async def gate(run_dir: str, claim: str, trust_recorded: bool = False) -> dict[str, Any]:
        return await call(gate_result, policy, run_dir, claim, trust_recorded)

    @tool("rules_list")
    async def rules_list() -> dict[str, Any]:
        return await call(rules_index)

    (tax,) = RESOURCES
    (rep,) = TEMPLATES

    @server.resource(tax.uri or "", name=tax.name, description=tax.description, mime_type=tax.mime_type)
    def taxonomy() -> str:
        return taxonomy_text()

    @server.resource(
        rep.uri_template or "",
        name=rep.name,
        description=rep.description,
        mime_type=rep.mime_type,
        # The SDK refuses absolute paths in template parameters by default; the roots decide here instead.
        security=ResourceSecurity(exempt_params={"run_dir"}),
    )
    async def report(run_dir: str) -> str:
        path = "/" + run_dir.lstrip("/")
        try:
            data = await call(diagnose_report, policy, [path], offline=True)
        except ToolError as e:  # a refusal reads as one, not as an unexpected error
            raise ResourceError(str(e)) from None
        return json.dumps(data, indent=2, ensure_ascii=False)

    return server


def report_uri(run_dir: str | Path) -> str:
    return "mldebug://report/" + str(Path(run_dir).resolve()).lstrip("/")


def warm_up() -> None:
    """Imports what the tools call, ahead of the first call (the server runs this in the background)."""
    from . import diagnose, report  # noqa: F401
    from .smokes import claim, common, execute, plan, record, run  # noqa: F401


def _failed(e: BaseException) -> int:
    """The exit status for an error while the server loads, after saying it on stderr."""
    import sys

    if isinstance(e, ImportError):
        print(f"mldebug-rules: error: {INSTALL_HINT} ({e})", file=sys.stderr, flush=True)
        return 2
    import traceback

    traceback.print_exception(e, file=sys.stderr)
    return 1


def main(args: argparse.Namespace) -> int:
    import importlib.util

    policy = Policy.from_args(args.root, args.allow_run, args.progress_every)
    try:
        sdk = importlib.util.find_spec("mcp")
    except (ImportError, ValueError):
        sdk = None
    if sdk is None:
        raise UsageError(INSTALL_HINT)
    # The SDK loads in the background while a front answers the session's opening (see mcp_front).
    from .mcp_front import serve

    return serve(lambda: build_server(policy), warm_up, _failed)
