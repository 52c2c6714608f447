"""Issue 21: the opening's answers that the front builds without the SDK (mcp_front.Declared, from mcp_decl)
are the SDK server's, field by field: every tool (its description, inputSchema, outputSchema, annotations),
every resource and template, the capabilities, serverInfo and the protocol version negotiated, for every
protocol version the installed SDK knows, in both eras. A new SDK, or a tool changed on one side only, fails
here, rather than only at a user's (where the front would notice the difference, say so, and step aside).

The SDK server runs in process, over the very transport the front gives it (mcp_front.run_sdk_server).
"""

from __future__ import annotations

import json
import queue
import threading
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from mcp_types import version as sdk_versions

from mldebug_rules import __version__, mcp_decl
from mldebug_rules.mcp_front import (
    CLIENT_CAPABILITIES_META,
    CLIENT_INFO_META,
    PROTOCOL_VERSION_META,
    Declared,
    _SdkStdin,
    _SdkStdout,
    answer_of,
    declared,
    run_sdk_server,
    sdk_protocol_versions,
)
from mldebug_rules.mcp_server import Policy, build_server

LISTINGS = ["tools/list", "resources/list", "resources/templates/list", "prompts/list"]


class SdkSession:
    """One connection to the SDK server, in process: a request at a time, its answer without the envelope."""

    def __init__(self, root: Path) -> None:
        self._in: queue.Queue[str] = queue.Queue()
        self._out: queue.Queue[dict[str, Any]] = queue.Queue()
        server = build_server(Policy((root.resolve(),)))
        streams = (_SdkStdin(self._in), _SdkStdout(lambda line: self._out.put(json.loads(line))))
        self._thread = threading.Thread(target=run_sdk_server, args=(server, *streams), daemon=True)
        self._thread.start()

    def send(self, msg: dict[str, Any]) -> dict[str, Any] | None:
        self._in.put(json.dumps(msg) + "\n")
        if "id" not in msg:
            return None
        while True:
            reply = self._out.get(timeout=60)
            if reply.get("id") == msg["id"] and "method" not in reply:
                return answer_of(reply)

    def close(self) -> None:
        self._in.put("")
        self._thread.join(timeout=60)


def same(built: Any, sdk: Any, where: str) -> None:
    """built == sdk, compared down the tree so that a failure names the field (and types count: 600 is not
    600.0 on the wire, nor 1 true)."""
    if isinstance(built, dict) and isinstance(sdk, dict):
        only = sorted(set(built) ^ set(sdk))
        assert not only, f"{where}: {only} in only one of (built, SDK): {built} / {sdk}"
        for k in built:
            same(built[k], sdk[k], f"{where}.{k}")
    elif isinstance(built, list) and isinstance(sdk, list):
        names = [x.get("name") if isinstance(x, dict) else None for x in sdk]
        assert len(built) == len(sdk), f"{where}: {len(built)} items built, {len(sdk)} from the SDK ({names})"
        for i, (a, b) in enumerate(zip(built, sdk, strict=True)):
            same(a, b, f"{where}[{names[i] or i}]")
    else:
        assert type(built) is type(sdk) and built == sdk, f"{where}: built {built!r}, SDK {sdk!r}"


def converse(root: Path, messages: list[dict[str, Any]]) -> list[tuple[str, Any, dict[str, Any]]]:
    """Each request of the conversation: its method, the front's own answer (None: it leaves it to the
    SDK) and the SDK's answer. Every answer the front gives must be the SDK's, field by field."""
    versions = sdk_protocol_versions()
    assert versions is not None
    front = Declared(versions, __version__)
    sdk = SdkSession(root)
    out = []
    try:
        for i, msg in enumerate(messages):
            if "id" not in msg:
                front.notified(msg["method"])
                sdk.send(msg)
                continue
            built = front.answer(msg)
            answer = sdk.send(msg)
            assert answer is not None
            if built is not None:
                same(built, answer, f"#{i} {msg['method']}")
            out.append((msg["method"], built, answer))
    finally:
        sdk.close()
    return out


def request(i: int, method: str, params: Any = None) -> dict[str, Any]:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": i, "method": method}
    if params is not None:
        msg["params"] = params
    return msg


def initialize(i: int, version: str, **extra: Any) -> dict[str, Any]:
    params = {
        "protocolVersion": version,
        "capabilities": {},
        "clientInfo": {"name": "an-editor", "version": "1.0"},
        **extra,
    }
    return request(i, "initialize", params)


INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def envelope(version: str, **meta: Any) -> dict[str, Any]:
    return {
        "_meta": {
            PROTOCOL_VERSION_META: version,
            CLIENT_INFO_META: {"name": "an-agent", "version": "2"},
            CLIENT_CAPABILITIES_META: {},
            **meta,
        }
    }


def test_the_front_reads_the_sdks_version_table() -> None:
    versions = sdk_protocol_versions()
    assert versions is not None
    assert versions.handshake == tuple(sdk_versions.HANDSHAKE_PROTOCOL_VERSIONS)
    assert versions.modern == tuple(sdk_versions.MODERN_PROTOCOL_VERSIONS)
    assert versions.latest_handshake == sdk_versions.LATEST_HANDSHAKE_VERSION
    assert declared() is not None


# Every version the SDK serves through initialize, and one it does not (it counter-offers its latest).
@pytest.mark.parametrize("version", [*sdk_versions.HANDSHAKE_PROTOCOL_VERSIONS, "1999-01-01"])
def test_the_handshake_era_opening_is_the_sdks(tmp_path: Path, version: str) -> None:
    caps = {"roots": {"listChanged": True}, "sampling": {}, "experimental": {"x": {}}}
    info = {"name": "an-editor", "title": "An Editor", "version": "1.0"}
    messages = [
        initialize(1, version, capabilities=caps, clientInfo=info),
        INITIALIZED,
        request(2, "tools/list", {}),
        request(3, "resources/list"),
        request(4, "resources/templates/list", {"_meta": {"progressToken": 4}}),
        request(5, "prompts/list", {}),
        request(6, "ping"),
    ]
    answers = converse(tmp_path, messages)
    assert all(built is not None for _, built, _ in answers), [m for m, b, _ in answers if b is None]
    init = answers[0][2]["result"]
    expected = (
        version
        if version in sdk_versions.HANDSHAKE_PROTOCOL_VERSIONS
        else sdk_versions.LATEST_HANDSHAKE_VERSION
    )
    assert init["protocolVersion"] == expected
    tools = answers[1][2]["result"]["tools"]
    assert [t["name"] for t in tools] == [t.name for t in mcp_decl.TOOLS]


def test_ping_first_and_listings_before_the_initialized_notification(tmp_path: Path) -> None:
    messages = [
        request(1, "ping"),
        initialize(2, sdk_versions.LATEST_HANDSHAKE_VERSION),
        request(3, "tools/list"),
    ]
    answers = converse(tmp_path, messages)
    assert all(built is not None for _, built, _ in answers)


@pytest.mark.parametrize("version", sdk_versions.MODERN_PROTOCOL_VERSIONS)
def test_the_2026_era_opening_is_the_sdks(tmp_path: Path, version: str) -> None:
    bare = envelope(version)
    del bare["_meta"][CLIENT_INFO_META]  # optional in the envelope
    rich = envelope(version, **{CLIENT_CAPABILITIES_META: {"roots": {"listChanged": True}}})
    messages = [
        request(1, "server/discover", envelope(version)),
        request(2, "tools/list", bare),
        request(3, "resources/list", rich),
        request(4, "resources/templates/list", envelope(version)),
        request(5, "prompts/list", envelope(version)),
    ]
    answers = converse(tmp_path, messages)
    assert all(built is not None for _, built, _ in answers), [m for m, b, _ in answers if b is None]
    assert answers[0][2]["result"]["supportedVersions"] == list(sdk_versions.MODERN_PROTOCOL_VERSIONS)


def test_every_tool_and_resource_is_declared_as_the_sdk_lists_it(tmp_path: Path) -> None:
    """Per tool and per field, so that a failure names the tool (the conversations above check the rest)."""
    answers = converse(
        tmp_path,
        [initialize(1, sdk_versions.LATEST_HANDSHAKE_VERSION)]
        + [request(i + 2, m) for i, m in enumerate(LISTINGS)],
    )
    sdk = {m: a["result"] for m, _, a in answers}
    listed = {t["name"]: t for t in sdk["tools/list"]["tools"]}
    assert sorted(listed) == sorted(mcp_decl.TOOLS_BY_NAME)
    for tool in mcp_decl.TOOLS:
        got = listed[tool.name]
        same(tool.description, got["description"], f"{tool.name}.description")
        same(tool.annotations(), got["annotations"], f"{tool.name}.annotations")
        same(tool.output_schema(), got["outputSchema"], f"{tool.name}.outputSchema")
        schema = got["inputSchema"]
        assert [p.name for p in tool.params] == list(schema["properties"]), tool.name
        for p in tool.params:
            same(p.schema(), schema["properties"][p.name], f"{tool.name}.inputSchema.properties.{p.name}")
        same(tool.input_schema(), schema, f"{tool.name}.inputSchema")
    resources = {r["uri"]: r for r in sdk["resources/list"]["resources"]}
    assert sorted(resources) == sorted(r.uri for r in mcp_decl.RESOURCES)
    for r in mcp_decl.RESOURCES:
        same(r.wire(), resources[r.uri], f"resource {r.uri}")
    templates = {t["uriTemplate"]: t for t in sdk["resources/templates/list"]["resourceTemplates"]}
    assert sorted(templates) == sorted(t.uri_template for t in mcp_decl.TEMPLATES)
    for t in mcp_decl.TEMPLATES:
        same(t.wire(), templates[t.uri_template], f"template {t.uri_template}")


V_OLD, V_NEW = sdk_versions.LATEST_HANDSHAKE_VERSION, sdk_versions.LATEST_MODERN_VERSION
# Conversations in which the SDK answers some request with an error: the front must leave each such
# request to it (and, having lost track of the SDK's state, everything after it).
REFUSED = {
    "a listing before initialize": [request(1, "tools/list")],
    "initialize without clientInfo": [
        request(1, "initialize", {"protocolVersion": V_OLD, "capabilities": {}})
    ],
    "an envelope on a handshake connection": [
        initialize(1, V_OLD),
        request(2, "tools/list", envelope(V_NEW)),
    ],
    "ping in the 2026 era": [
        request(1, "server/discover", envelope(V_NEW)),
        request(2, "ping", envelope(V_NEW)),
    ],
    "initialize in the 2026 era": [request(1, "tools/list", envelope(V_NEW)), initialize(2, V_OLD)],
    "a request without the envelope in the 2026 era": [
        request(1, "server/discover", envelope(V_NEW)),
        request(2, "tools/list", {}),
    ],
    "an envelope of a version the SDK does not serve": [
        request(1, "server/discover", envelope("2099-01-01"))
    ],
    "an envelope without client capabilities": [
        request(1, "server/discover", {"_meta": {PROTOCOL_VERSION_META: V_NEW}})
    ],
    "server/discover in the handshake era": [initialize(1, V_OLD), request(2, "server/discover")],
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_what_the_sdk_refuses_is_left_to_it(tmp_path: Path, case: str) -> None:
    answers = converse(tmp_path, REFUSED[case])
    refused = [i for i, (_, _, sdk) in enumerate(answers) if "error" in sdk]
    assert refused, "the SDK was expected to refuse a request of this conversation"
    assert all(answers[i][1] is None for i in range(refused[0], len(answers)))
