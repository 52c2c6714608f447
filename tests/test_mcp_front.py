"""Issue 21: the stdio front of `mldebug-rules mcp` (mldebug_rules/mcp_front.py).

- over stdio, in both protocol eras (the `initialize` handshake, and the SDK client's `server/discover`): the
  opening of a session is answered before the SDK is imported, with the answers the SDK gave in an earlier
  session, and the SDK, once loaded, gives the same ones and serves the tool calls;
- without a subprocess: what the front answers, records, hands over and checks.
(test_mcp_server.py runs the whole diagnose -> plan -> baseline -> change -> gate loop through the front.)
"""

from __future__ import annotations

import io
import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from mldebug_rules import mcp_front
from mldebug_rules.mcp_front import FRONT_ID, Front, Records, normalised

LEGACY = [
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {"roots": {"listChanged": True}},
            "clientInfo": {"name": "an-editor", "version": "1.0"},
        },
    },
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}},
    {"jsonrpc": "2.0", "id": "three", "method": "resources/list", "params": {}},
    {"jsonrpc": "2.0", "id": 4, "method": "resources/templates/list", "params": {}},
    {"jsonrpc": "2.0", "id": 5, "method": "ping"},
]
OPENING = ["initialize", "tools/list", "resources/list", "resources/templates/list", "ping"]


class Session:
    """`mldebug-rules mcp` as a subprocess, spoken to in JSON-RPC lines (as the stdio transport frames it)."""

    def __init__(self, root: Path, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mldebug_rules", "mcp", "--root", str(root)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=root,
        )
        self.lines: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(b"")

    def send(self, msg: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(msg).encode() + b"\n")
        self.proc.stdin.flush()

    def reply(self, want: Any) -> dict[str, Any]:
        while True:
            line = self.lines.get(timeout=120)
            assert line, "the server exited before answering"
            msg = json.loads(line)
            if msg.get("id") == want:
                return msg

    def close(self) -> tuple[int, str]:
        assert self.proc.stdin is not None and self.proc.stderr is not None
        self.proc.stdin.close()
        rc = self.proc.wait(timeout=120)
        return rc, self.proc.stderr.read().decode()


def _env(cache: Path, log: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != mcp_front.LOG_ENV}
    env["MLDEBUG_CACHE_DIR"] = str(cache)
    if log is not None:
        env[mcp_front.LOG_ENV] = str(log)
    return env


def _opening(root: Path, env: dict[str, str], then_call: bool = False) -> list[dict[str, Any]]:
    s = Session(root, env)
    replies = []
    for msg in LEGACY:
        s.send(msg)
        if "id" in msg:
            replies.append(s.reply(msg["id"]))
    if then_call:  # a tool call: only the SDK can answer it
        s.send(
            {
                "jsonrpc": "2.0",
                "id": 6,
                "method": "tools/call",
                "params": {"name": "rules_list", "arguments": {}},
            }
        )
        result = s.reply(6)["result"]
        assert not result.get("isError") and result["structuredContent"]["hypotheses"]
    rc, err = s.close()
    assert rc == 0, err
    assert "differs" not in err
    return replies


def _log(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_opening_is_answered_before_the_sdk_is_imported(tmp_path: Path) -> None:
    pytest.importorskip("mcp")
    cache, log = tmp_path / "cache", tmp_path / "front.log"
    first = _opening(tmp_path, _env(cache, log))  # nothing recorded: the SDK answers, and is recorded
    assert [e for e in _log(log) if e["event"] == "answered"] == []
    assert first[0]["result"]["protocolVersion"] == "2025-06-18"
    assert first[0]["result"]["serverInfo"]["name"] == "mldebug-rules"
    assert {t["name"] for t in first[1]["result"]["tools"]} >= {"diagnose", "smoke_run", "gate"}

    log.unlink()
    second = _opening(tmp_path, _env(cache, log), then_call=True)
    assert second == first  # the same answers, ids and all, byte for byte in JSON terms
    events = _log(log)
    answered = [e for e in events if e["event"] == "answered"]
    assert [e["method"] for e in answered] == OPENING
    assert not any(e["sdk_imported"] for e in answered)
    # Once the tool call loaded it, the SDK saw the whole opening too and gave the same answers.
    assert [e["same"] for e in events if e["event"] == "verified"] == [True] * len(OPENING)
    assert [e["method"] for e in events if e["event"] == "handed_over"] == [
        "notifications/initialized",
        "tools/call",
    ]


def test_another_protocol_version_or_client_capabilities_is_asked_of_the_sdk(tmp_path: Path) -> None:
    """A record is for the same request after the same messages: a different offer is not one."""
    pytest.importorskip("mcp")
    cache, log = tmp_path / "cache", tmp_path / "front.log"
    _opening(tmp_path, _env(cache))
    s = Session(tmp_path, _env(cache, log))
    init = json.loads(json.dumps(LEGACY[0]))
    init["params"]["protocolVersion"] = "2024-11-05"
    init["params"]["clientInfo"] = {"name": "another", "version": "9"}  # who it is does not matter
    s.send(init)
    assert s.reply(1)["result"]["protocolVersion"] == "2024-11-05"
    s.close()
    assert [e for e in _log(log) if e["event"] == "answered"] == []


def test_the_sdk_clients_opening_is_answered_by_the_front(tmp_path: Path) -> None:
    """The SDK's own stdio client (the modern era: server/discover, then requests with an envelope)."""
    pytest.importorskip("mcp")
    anyio = pytest.importorskip("anyio")
    from mcp import Client, StdioServerParameters

    from mldebug_rules.mcp_server import Policy, build_server

    cache, log = tmp_path / "cache", tmp_path / "front.log"

    def params(env: dict[str, str]) -> Any:
        return StdioServerParameters(
            command=sys.executable, args=["-m", "mldebug_rules", "mcp", "--root", str(tmp_path)], env=env
        )

    async def listing(server: Any) -> tuple[Any, Any, Any]:
        async with Client(server) as c:
            return (await c.list_tools()), (await c.list_resources()), (await c.list_resource_templates())

    sdk = anyio.run(listing, build_server(Policy((tmp_path.resolve(),))))  # the SDK server in process
    first = anyio.run(listing, params(_env(cache)))
    second = anyio.run(listing, params(_env(cache, log)))
    assert first == sdk and second == sdk
    answered = [e for e in _log(log) if e["event"] == "answered"]
    assert [e["method"] for e in answered] == [
        "server/discover",
        "tools/list",
        "resources/list",
        "resources/templates/list",
    ]
    assert not any(e["sdk_imported"] for e in answered)


def test_a_broken_sdk_says_how_to_install_the_extra(tmp_path: Path) -> None:
    """`mcp` is found but does not import (the check before the front passes): exit 2, one line."""
    fake = tmp_path / "site" / "mcp"
    (fake / "server").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "server" / "__init__.py").write_text("raise ImportError('half an install')\n")
    env = _env(tmp_path / "cache")
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "site"), str(Path(__file__).resolve().parents[1])])
    r = subprocess.run(
        [sys.executable, "-m", "mldebug_rules", "mcp", "--root", str(tmp_path)],
        input=json.dumps(LEGACY[0]) + "\n",
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and 'pip install "mldebug-rules[agent]"' in r.stderr
    assert r.stdout == ""


# --- the front alone -------------------------------------------------------------------------------
class Harness:
    """A Front over a byte buffer, with the SDK played by the test."""

    def __init__(self, records: Records) -> None:
        self.out = io.BytesIO()
        self.started = 0
        self.front = Front(self.out, records, self._start, eager=False)

    def _start(self, front: Front) -> None:
        self.started += 1

    def sent(self) -> list[dict[str, Any]]:
        return [json.loads(x) for x in self.out.getvalue().splitlines()]

    def handed(self) -> list[Any]:
        items = []
        while not self.front.to_sdk.empty():
            items.append(self.front.to_sdk.get())
        return [json.loads(x) if x else x for x in items]


def _records(answers: dict[str, dict[str, Any]] | None = None) -> Records:
    r = Records(None)
    r.answers = dict(answers or {})
    return r


def _record_opening(records: Records) -> None:
    """One session in which the SDK answered the opening: the front records what it said."""
    h = Harness(records)
    for msg in LEGACY:
        h.front.handle(json.dumps(msg))
    assert h.sent() == [] and h.started == 1  # nothing to answer from: the SDK is needed
    for msg in LEGACY:
        if "id" in msg:
            h.front.from_sdk(
                json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": {"for": msg["method"]}})
            )
    assert [m["id"] for m in h.sent()] == [1, 2, "three", 4, 5]


def test_the_front_records_then_answers_and_hands_everything_over() -> None:
    records = _records()
    _record_opening(records)
    assert len(records.answers) == 5

    h = Harness(records)
    for msg in LEGACY:
        h.front.handle(json.dumps(msg))
    assert h.started == 0 and not h.front.needs_sdk
    assert h.sent() == [
        {"jsonrpc": "2.0", "id": m["id"], "result": {"for": m["method"]}} for m in LEGACY if "id" in m
    ]
    handed = h.handed()
    # Everything reaches the SDK in order; what the front answered goes under its own ids.
    assert [m["method"] for m in handed] == [m["method"] for m in LEGACY]
    front_ids = [m["id"] for m in handed if "id" in m]
    assert [i.startswith(FRONT_ID) for i in front_ids] == [True] * 5 and len(set(front_ids)) == 5
    # The SDK's answers to those are checked, not sent again.
    for m in handed:
        if "id" in m:
            h.front.from_sdk(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": {"for": m["method"]}}))
    assert len(h.sent()) == 5 and len(records.answers) == 5


def test_after_any_other_message_the_sdk_answers_everything() -> None:
    records = _records()
    _record_opening(records)
    h = Harness(records)
    call = {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "gate", "arguments": {}}}
    for msg in [LEGACY[0], LEGACY[1], call, LEGACY[2]]:
        h.front.handle(json.dumps(msg))
    assert [m["id"] for m in h.sent()] == [1]  # tools/list after the call waits for the SDK
    assert h.started == 1 and h.front.needs_sdk
    ids = [m.get("id") for m in h.handed()]
    assert ids[0].startswith(FRONT_ID) and ids[1:] == [None, 9, 2]


def test_the_client_name_does_not_matter_and_everything_else_does() -> None:
    a = LEGACY[0]
    b = json.loads(json.dumps(a))
    b["id"] = 77
    b["params"]["clientInfo"] = {"name": "other", "version": "2"}
    assert normalised(a) == normalised(b)
    modern = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "server/discover",
        "params": {
            "_meta": {
                mcp_front.CLIENT_INFO_META: {"name": "x"},
                "io.modelcontextprotocol/protocolVersion": "v",
            }
        },
    }
    assert normalised(modern)["params"]["_meta"] == {"io.modelcontextprotocol/protocolVersion": "v"}
    c = json.loads(json.dumps(a))
    c["params"]["capabilities"] = {}
    assert normalised(c) != normalised(a)

    records = _records()
    _record_opening(records)
    h = Harness(records)
    h.front.handle(json.dumps(c))  # another offer of capabilities: not recorded, so the SDK answers
    assert h.sent() == [] and h.front.needs_sdk


def test_an_answer_that_differs_from_the_sdks_drops_the_records(capsys: pytest.CaptureFixture[str]) -> None:
    records = _records()
    _record_opening(records)
    h = Harness(records)
    h.front.handle(json.dumps(LEGACY[0]))
    (replayed,) = h.handed()
    h.front.from_sdk(
        json.dumps({"jsonrpc": "2.0", "id": replayed["id"], "result": {"for": "something else"}})
    )
    assert "differs" in capsys.readouterr().err
    assert records.answers == {}
    assert len(h.sent()) == 1  # the SDK's answer to the front's own request never reaches the client


def test_what_is_not_json_rpc_goes_to_the_sdk_as_it_came() -> None:
    h = Harness(_records())
    h.front.handle("not json\n")
    h.front.handle(json.dumps({"jsonrpc": "2.0", "id": 1.5, "method": "ping"}))  # an id no record is for
    assert h.front.to_sdk.get() == "not json\n"
    assert json.loads(h.front.to_sdk.get())["id"] == 1.5
    assert h.front.needs_sdk and h.sent() == []


def test_records_persist_in_the_cache_per_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLDEBUG_CACHE_DIR", str(tmp_path))
    key = mcp_front.build_key()
    Records(key).add("conversation", {"result": {"tools": [{"name": "b"}, {"name": "a"}]}})
    assert Records(key).get("conversation") == {"result": {"tools": [{"name": "b"}, {"name": "a"}]}}
    assert Records("another build").get("conversation") is None


def test_the_front_imports_neither_the_sdk_nor_the_pipeline() -> None:
    code = (
        "import sys\n"
        "import mldebug_rules.mcp_server, mldebug_rules.mcp_front\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('mcp', 'pydantic', 'anyio')"
        " or m in ('mldebug_rules.diagnose', 'mldebug_rules.report')]\n"
        "assert not bad, bad\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def test_notifications_and_responses_do_not_wait_for_the_sdk() -> None:
    h = Harness(_records())
    h.front.handle(
        json.dumps({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 3}})
    )
    h.front.handle(json.dumps({"jsonrpc": "2.0", "id": "server-1", "result": {"roots": []}}))
    assert not h.front.needs_sdk and h.started == 0
    assert [m.get("method") for m in h.handed()] == ["notifications/cancelled", None]
    h.front.handle(json.dumps({"jsonrpc": "2.0", "id": 7}))  # neither: the SDK says what is wrong with it
    assert h.front.needs_sdk and h.started == 1


def test_warm_up_imports_every_module_the_tools_call() -> None:
    """The warm-up runs in a thread whose errors are swallowed, so a stale module path there would only
    show as a slow first tool call: it must import cleanly, and cover each module the tools import."""
    import ast

    from mldebug_rules import mcp_server

    mcp_server.warm_up()  # raises ImportError on a module path that moved away
    tree = ast.parse(Path(mcp_server.__file__).read_text())
    called: set[str] = set()
    warmed: set[str] = set()
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                if node.module is None:  # from . import diagnose, report
                    mods = {a.name for a in node.names}
                elif node.module == "smokes":  # from .smokes import plan, run
                    mods = {f"smokes.{a.name}" for a in node.names}
                else:  # from .smokes.plan import plan_data
                    mods = {node.module}
                (warmed if fn.name == "warm_up" else called).update(mods)
    pipeline = {m for m in called if m.split(".")[0] in ("diagnose", "report", "smokes")}
    assert pipeline and pipeline <= warmed, sorted(pipeline - warmed)
