"""Issue 21: the stdio front of `mldebug-rules mcp` (mldebug_rules/mcp_front.py).

- over stdio, in both protocol eras (the `initialize` handshake, and the SDK client's `server/discover`): the
  opening of every session, the first after an install included, is answered before the SDK is imported,
  from the server's declarations; the SDK, once loaded, gives the same answers and serves the tool calls;
  an answer that differs from the SDK's is reported, and the SDK's answers are given from then on;
- without a subprocess: what the front answers, records, hands over and checks.
(test_mcp_declared.py compares the front's answers with the SDK's field by field; test_mcp_server.py runs the
whole diagnose -> plan -> baseline -> change -> gate loop through the front.)
"""

from __future__ import annotations

import importlib.util
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

from mldebug_rules import mcp_decl, mcp_front
from mldebug_rules.mcp_front import FRONT_ID, Declared, Front, ProtocolVersions, Records, normalised

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
CALL = {"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {"name": "rules_list", "arguments": {}}}


class Session:
    """`mldebug-rules mcp` as a subprocess, spoken to in JSON-RPC lines (as the stdio transport frames it)."""

    def __init__(self, root: Path, env: dict[str, str], cmd: list[str] | None = None) -> None:
        self.proc = subprocess.Popen(
            cmd or [sys.executable, "-m", "mldebug_rules", "mcp", "--root", str(root)],
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
        s.send(CALL)
        result = s.reply(6)["result"]
        assert not result.get("isError") and result["structuredContent"]["hypotheses"]
    rc, err = s.close()
    assert rc == 0, err
    assert "differs" not in err
    return replies


def _log(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_first_session_is_answered_before_the_sdk_is_imported(tmp_path: Path) -> None:
    """A client's first session after an install: nothing in the cache, and the opening is answered by the
    front, from the declarations, before the SDK is imported; the SDK then gives the same answers."""
    pytest.importorskip("mcp")
    cache, log = tmp_path / "cache", tmp_path / "front.log"
    first = _opening(tmp_path, _env(cache, log), then_call=True)
    assert first[0]["result"]["protocolVersion"] == "2025-06-18"
    assert first[0]["result"]["serverInfo"]["name"] == "mldebug-rules"
    assert {t["name"] for t in first[1]["result"]["tools"]} >= {"diagnose", "smoke_run", "gate"}
    events = _log(log)
    answered = [e for e in events if e["event"] == "answered"]
    assert [e["method"] for e in answered] == OPENING
    assert all(e["source"] == "declared" and not e["sdk_imported"] for e in answered)
    # Once the tool call loaded it, the SDK saw the whole opening too and gave the same answers.
    assert [e["same"] for e in events if e["event"] == "verified"] == [True] * len(OPENING)
    assert [e["method"] for e in events if e["event"] == "handed_over"] == [
        "notifications/initialized",
        "tools/call",
    ]
    assert not list(cache.glob(f"{mcp_front.NAMESPACE}/*"))  # nothing to record when the answers held

    log.unlink()
    second = _opening(tmp_path, _env(cache, log))
    assert second == first  # the same answers, ids and all, byte for byte in JSON terms
    answered = [e for e in _log(log) if e["event"] == "answered"]
    assert [e["method"] for e in answered] == OPENING and not any(e["sdk_imported"] for e in answered)


# A server whose SDK side lists the gate tool with another description than the declarations give (as a
# new SDK that wrote a field differently would): the front cannot know until the SDK answers.
DRIFT = (
    "import dataclasses, sys\n"
    "from mldebug_rules import mcp_decl\n"
    "gate = mcp_decl.TOOLS_BY_NAME['gate']\n"
    "mcp_decl.TOOLS_BY_NAME['gate'] = dataclasses.replace(gate, description='changed on one side')\n"
    "from mldebug_rules.cli import main\n"
    "raise SystemExit(main(sys.argv[1:]))\n"
)


def _gate(tools_list: dict[str, Any]) -> dict[str, Any]:
    return next(t for t in tools_list["result"]["tools"] if t["name"] == "gate")


def test_a_difference_from_the_sdk_is_reported_and_the_sdk_wins_from_then_on(tmp_path: Path) -> None:
    pytest.importorskip("mcp")
    cache, log = tmp_path / "cache", tmp_path / "front.log"
    cmd = [sys.executable, "-c", DRIFT, "mcp", "--root", str(tmp_path)]
    s = Session(tmp_path, _env(cache, log), cmd)
    for msg in [*LEGACY[:3], CALL]:
        s.send(msg)
    assert _gate(s.reply(2))["description"] != "changed on one side"  # the front's answer
    assert not s.reply(6)["result"].get("isError")
    rc, err = s.close()
    assert rc == 0
    assert err.count("answer to tools/list differs from the SDK's") == 1, err  # said once, on stderr
    verified = [(e["source"], e["same"]) for e in _log(log) if e["event"] == "verified"]
    assert verified == [("declared", True), ("declared", False)]

    # The next session gets the SDK's answers, replayed from the records it left, still checked.
    log.unlink()
    s = Session(tmp_path, _env(cache, log), cmd)
    for msg in [*LEGACY[:3], CALL]:
        s.send(msg)
    assert _gate(s.reply(2))["description"] == "changed on one side"
    s.reply(6)
    rc, err = s.close()
    assert rc == 0 and "differs" not in err
    events = _log(log)
    answered = [(e["method"], e["source"]) for e in events if e["event"] == "answered"]
    assert answered == [("initialize", "recorded"), ("tools/list", "recorded")]
    assert [e["same"] for e in events if e["event"] == "verified"] == [True, True]


def test_the_sdk_clients_opening_is_answered_by_the_front(tmp_path: Path) -> None:
    """The SDK's own stdio client (the modern era: server/discover, then requests with an envelope)."""
    pytest.importorskip("mcp")
    anyio = pytest.importorskip("anyio")
    from mcp import Client, StdioServerParameters

    from mldebug_rules.mcp_server import Policy, build_server

    cache = tmp_path / "cache"

    def params(env: dict[str, str]) -> Any:
        return StdioServerParameters(
            command=sys.executable, args=["-m", "mldebug_rules", "mcp", "--root", str(tmp_path)], env=env
        )

    async def listing(server: Any) -> tuple[Any, Any, Any]:
        async with Client(server) as c:
            return (await c.list_tools()), (await c.list_resources()), (await c.list_resource_templates())

    sdk = anyio.run(listing, build_server(Policy((tmp_path.resolve(),))))  # the SDK server in process
    for session in ("first", "second"):
        log = tmp_path / f"{session}.log"
        assert anyio.run(listing, params(_env(cache, log))) == sdk
        answered = [e for e in _log(log) if e["event"] == "answered"]
        assert [e["method"] for e in answered] == [
            "server/discover",
            "tools/list",
            "resources/list",
            "resources/templates/list",
        ]
        assert all(e["source"] == "declared" and not e["sdk_imported"] for e in answered)


def test_a_broken_sdk_says_how_to_install_the_extra(tmp_path: Path) -> None:
    """`mcp` is found but does not import (the check before the front passes): exit 2, one line, once a
    message needs the SDK (the front may have answered the opening by then, not the tool call)."""
    fake = tmp_path / "site" / "mcp"
    (fake / "server").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "server" / "__init__.py").write_text("raise ImportError('half an install')\n")
    env = _env(tmp_path / "cache")
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "site"), str(Path(__file__).resolve().parents[1])])
    r = subprocess.run(
        [sys.executable, "-m", "mldebug_rules", "mcp", "--root", str(tmp_path)],
        input="".join(json.dumps(m) + "\n" for m in [*LEGACY[:2], CALL]),
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and 'pip install "mldebug-rules[agent]"' in r.stderr
    assert all(json.loads(line)["id"] == 1 for line in r.stdout.splitlines())


# --- the front alone -------------------------------------------------------------------------------
class Harness:
    """A Front over a byte buffer, with the SDK played by the test."""

    def __init__(self, records: Records, declared: Declared | None = None) -> None:
        self.out = io.BytesIO()
        self.started = 0
        self.front = Front(self.out, records, self._start, eager=False, declared=declared)

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


def test_a_recorded_answer_that_differs_from_the_sdks_is_replaced(capsys: pytest.CaptureFixture[str]) -> None:
    records = _records()
    _record_opening(records)
    h = Harness(records)
    h.front.handle(json.dumps(LEGACY[0]))
    (replayed,) = h.handed()
    h.front.from_sdk(
        json.dumps({"jsonrpc": "2.0", "id": replayed["id"], "result": {"for": "something else"}})
    )
    assert "recorded answer to initialize differs from the SDK's" in capsys.readouterr().err
    assert list(records.answers.values()) == [{"result": {"for": "something else"}}]
    assert not records.declared_trusted
    assert len(h.sent()) == 1  # the SDK's answer to the front's own request never reaches the client


# A version table as an SDK would have it (the tests of the front alone do not need the SDK).
VERSIONS = ProtocolVersions(("2024-11-05", "2025-06-18", "2025-11-25"), ("2026-07-28",), "2025-11-25")


def _declared() -> Declared:
    return Declared(VERSIONS, "0.1.0")


def test_the_front_answers_the_opening_from_the_declarations() -> None:
    h = Harness(_records(), _declared())
    for msg in LEGACY:
        h.front.handle(json.dumps(msg))
    assert h.started == 0 and not h.front.needs_sdk
    sent = h.sent()
    assert [m["id"] for m in sent] == [1, 2, "three", 4, 5]
    assert sent[0]["result"]["protocolVersion"] == "2025-06-18"
    assert sent[0]["result"]["serverInfo"] == {"name": "mldebug-rules", "version": "0.1.0"}
    assert [t["name"] for t in sent[1]["result"]["tools"]] == [t.name for t in mcp_decl.TOOLS]
    assert sent[4]["result"] == {}
    handed = h.handed()
    assert [m["method"] for m in handed] == [m["method"] for m in LEGACY]
    for given, m in zip(sent, [m for m in handed if "id" in m], strict=True):  # the SDK agrees
        h.front.from_sdk(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": given["result"]}))
    assert len(h.sent()) == 5 and h.front._records.answers == {}  # nothing to record


def test_a_difference_from_the_sdk_hands_it_everything_from_then_on(
    capsys: pytest.CaptureFixture[str],
) -> None:
    records = _records()
    h = Harness(records, _declared())
    for msg in LEGACY[:3]:
        h.front.handle(json.dumps(msg))
    init, tools = h.sent()
    theirs = {**tools["result"], "tools": tools["result"]["tools"][:-1]}  # the SDK lists one tool fewer
    handed = [m for m in h.handed() if "id" in m]
    h.front.from_sdk(json.dumps({"jsonrpc": "2.0", "id": handed[0]["id"], "result": init["result"]}))
    h.front.from_sdk(json.dumps({"jsonrpc": "2.0", "id": handed[1]["id"], "result": theirs}))
    assert "declared answer to tools/list differs from the SDK's" in capsys.readouterr().err
    assert not records.declared_trusted
    assert sorted(a["result"].get("protocolVersion", "") for a in records.answers.values()) == [
        "",
        "2025-06-18",
    ]
    # The rest of the session: the SDK answers, and what it answers is recorded for the next one.
    h.front.handle(json.dumps(LEGACY[3]))
    assert len(h.sent()) == 2 and h.front.needs_sdk
    h.front.from_sdk(json.dumps({"jsonrpc": "2.0", "id": "three", "result": {"resources": []}}))
    assert h.sent()[-1] == {"jsonrpc": "2.0", "id": "three", "result": {"resources": []}}
    assert len(records.answers) == 3

    # The next session: the SDK's answers, replayed; and nothing of the front's own.
    h = Harness(records, _declared())
    for msg in LEGACY[:5]:
        h.front.handle(json.dumps(msg))
    assert [m["id"] for m in h.sent()] == [1, 2, "three"]  # templates/list was not recorded: the SDK answers
    assert h.sent()[1]["result"] == theirs and h.front.needs_sdk


def test_declared_answers_follow_the_sdks_era_rules() -> None:
    def env(version: str = "2026-07-28", **meta: Any) -> dict[str, Any]:
        return {
            "_meta": {
                mcp_front.PROTOCOL_VERSION_META: version,
                mcp_front.CLIENT_CAPABILITIES_META: {},
                **meta,
            }
        }

    d = _declared()
    found = d.answer({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": env()})
    assert found is not None and found["result"]["supportedVersions"] == ["2026-07-28"]
    assert d.answer({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": env()}) is not None
    assert (
        d.answer({"jsonrpc": "2.0", "id": 3, "method": "ping", "params": env()}) is None
    )  # not a 2026 method
    assert (
        d.answer({"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": env()}) is None
    )  # lost track: the SDK's turn
    init = {"protocolVersion": "2099-01-01", "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}}
    d = _declared()
    assert (
        d.answer({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init})["result"][
            "protocolVersion"
        ]
        == "2025-11-25"
    )
    assert (
        d.answer({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"cursor": "c"}}) is None
    )  # a shape it leaves
    for first in (
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},  # before initialize
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {**init, "clientInfo": {"name": "x"}}},
        {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": env("2025-06-18")},
        {
            "id": 1,
            "method": "server/discover",
            "params": {"_meta": {mcp_front.PROTOCOL_VERSION_META: "2026-07-28"}},
        },
    ):
        assert _declared().answer(first) is None, first
    for odd in (
        {"id": 1, "method": "ping"},  # not JSON-RPC 2.0
        {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": None},
        {"jsonrpc": "2.0", "id": 1, "method": "ping", "extra": True},
    ):
        assert _declared().answer(odd) is None, odd
    assert _declared().answer({"jsonrpc": "2.0", "id": 1, "method": "ping"}) == {"result": {}}
    d = _declared()
    d.notified(mcp_front.INITIALIZED)  # before initialize: the SDK opens its gate, the front steps aside
    assert d.answer({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}) is None


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
    assert Records(key).declared_trusted
    Records(key).distrust({"other": {"result": {}}})
    again = Records(key)
    assert not again.declared_trusted and again.answers == {"other": {"result": {}}}
    assert Records("another build").get("other") is None and Records("another build").declared_trusted


def test_the_front_imports_neither_the_sdk_nor_the_pipeline() -> None:
    """Neither importing the front nor building its answers to both eras' openings imports the SDK."""
    sdk = importlib.util.find_spec("mcp_types") is not None
    code = (
        "import sys\n"
        "import mldebug_rules.mcp_server, mldebug_rules.mcp_front as f\n"
        "d = f.declared()\n"
        f"assert (d is not None) == {sdk}, 'the SDK version table was not read'\n"
        "if d is not None:\n"
        "    init = {'protocolVersion': '2025-06-18', 'capabilities': {}, 'clientInfo': {'name': 'x', 'version': '1'}}\n"
        "    opening = [('initialize', init), ('tools/list', {}), ('resources/list', {}),\n"
        "               ('resources/templates/list', {}), ('prompts/list', {}), ('ping', {})]\n"
        "    assert all(d.answer({'jsonrpc': '2.0', 'id': i, 'method': m, 'params': p})\n"
        "               for i, (m, p) in enumerate(opening))\n"
        "    meta = {'_meta': {f.PROTOCOL_VERSION_META: d.versions.modern[-1], f.CLIENT_CAPABILITIES_META: {}}}\n"
        "    d = f.declared()\n"
        "    for m in ('server/discover', 'tools/list', 'resources/list', 'prompts/list'):\n"
        "        assert d.answer({'jsonrpc': '2.0', 'id': 1, 'method': m, 'params': meta}), m\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('mcp', 'mcp_types', 'pydantic', 'anyio')"
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
