"""What the MCP server declares, without the ``mcp`` SDK: its identity, its tools and resources, and their wire
form (the ``tools/list`` entries, the capabilities, ``serverInfo``), written as the SDK writes them.

``mcp_server`` registers its tools and resources with the SDK from these declarations (names, descriptions,
annotations); ``mcp_front`` answers a session's opening from them while the SDK loads. The parameter types live
twice, as Python annotations on the tool functions (the SDK validates calls against those) and as ``Param``
here; tests/test_mcp_declared.py compares every field of the SDK's answers with the ones built here, so the
two cannot drift apart silently. This module imports nothing beyond the standard library.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SERVER_NAME = "mldebug-rules"
TAXONOMY_URI = "mldebug://taxonomy"
REPORT_URI = "mldebug://report/{+run_dir}"  # mldebug://report/abs/path/to/run -> /abs/path/to/run

INSTRUCTIONS = """\
Diagnoses failing ML training runs, evidence first. The loop: diagnose -> smoke_plan -> smoke_run with
baseline=true (the unchanged command; it must reproduce the failure) -> smoke_run with the one-variable
change -> gate. Claim a root cause only when gate says passed. smoke_run runs only the argv you pass (no
shell), and only if the server was started with --allow-run. Paths must lie under the server's --root
directories."""

REQUIRED = object()  # a parameter without a default
EMPTY_LIST = object()  # a list parameter that defaults to a new empty list (pydantic writes no default)

# JSON schema types of the Python types the tools take.
_JSON_TYPES = {str: "string", bool: "boolean", float: "number", list: "array"}


@dataclass(frozen=True)
class Param:
    """One argument of a tool: its Python type (str, bool, float, or list for a list of strings)."""

    name: str
    type: type
    default: Any = REQUIRED
    optional: bool = False  # ``T | None``
    description: str | None = None
    pattern: str | None = None
    min_length: int | None = None

    def schema(self) -> dict[str, Any]:
        """The property's JSON schema, as pydantic writes it for the tool's arguments model."""
        of_type: dict[str, Any] = {"type": _JSON_TYPES[self.type]}
        if self.type is list:
            of_type["items"] = {"type": "string"}
        out: dict[str, Any] = {"anyOf": [of_type, {"type": "null"}]} if self.optional else dict(of_type)
        if self.default is not REQUIRED and self.default is not EMPTY_LIST:
            out["default"] = self.default
        if self.description is not None:
            out["description"] = self.description
        if self.pattern is not None:
            out["pattern"] = self.pattern
        if self.min_length is not None:
            out["minLength"] = self.min_length
        out["title"] = self.name.title().replace("_", " ")  # pydantic's default field title
        return out


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    params: tuple[Param, ...]
    # ToolAnnotations: hints for the client (which tools may be called without asking, say).
    read_only: bool
    destructive: bool | None = None
    idempotent: bool | None = None
    open_world: bool | None = None

    def param(self, name: str) -> Param:
        return next(p for p in self.params if p.name == name)

    def annotations(self) -> dict[str, Any]:
        hints = {
            "readOnlyHint": self.read_only,
            "destructiveHint": self.destructive,
            "idempotentHint": self.idempotent,
            "openWorldHint": self.open_world,
        }
        return {k: v for k, v in hints.items() if v is not None}

    def input_schema(self) -> dict[str, Any]:
        """The arguments model's JSON schema (pydantic's, titled ``<name>Arguments`` by the SDK)."""
        out: dict[str, Any] = {"properties": {p.name: p.schema() for p in self.params}}
        required = [p.name for p in self.params if p.default is REQUIRED]
        if required:
            out["required"] = required
        out["type"] = "object"
        out["title"] = f"{self.name}Arguments"
        return out

    def output_schema(self) -> dict[str, Any]:
        """Every tool returns a JSON object (``dict[str, Any]``), which the SDK wraps as ``<name>DictOutput``."""
        return {"type": "object", "additionalProperties": True, "title": f"{self.name}DictOutput"}

    def wire(self) -> dict[str, Any]:
        """The tool's entry in ``tools/list``."""
        return {
            "name": self.name,
            "description": self.description,
            "inputSchema": self.input_schema(),
            "outputSchema": self.output_schema(),
            "annotations": self.annotations(),
        }


@dataclass(frozen=True)
class Resource:
    """A resource (``uri``) or a resource template (``uri_template``)."""

    name: str
    description: str
    mime_type: str
    uri: str | None = None
    uri_template: str | None = None

    def wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "description": self.description, "mimeType": self.mime_type}
        if self.uri is not None:
            out["uri"] = self.uri
        else:
            out["uriTemplate"] = self.uri_template
        return out


_RUN_DIR = Param("run_dir", str)
_PATHS = ("run_dirs", "logs", "kernel_logs", "bundles")

TOOLS: tuple[Tool, ...] = (
    Tool(
        "diagnose",
        "Diagnose run directories, logs and bundles; the JSON report (schema v1).",
        (
            *(Param(name, list, EMPTY_LIST) for name in _PATHS),
            Param("offline", bool, False, description="read only what was named; never probe the machine"),
        ),
        # It reads logs and probes the machine (GPUs, kernel log), and writes nothing but its own cache.
        read_only=True,
        open_world=False,
    ),
    Tool(
        "smoke_plan",
        "The smoke pair (baseline, then the one-variable change) that would settle the leading hypotheses, "
        "or the one named; commands are shown, never run.",
        (
            _RUN_DIR,
            Param("hypothesis", str, None, optional=True),
            Param(
                "cmd", str, None, optional=True, description="the run's command line when the logs lack it"
            ),
        ),
        read_only=True,
        open_world=False,
    ),
    Tool(
        "smoke_run",
        "Run one half of a smoke pair: baseline=true for the unchanged command (it must reproduce the failure), "
        "else the one-variable change. argv is run as given, without a shell, and killed after timeout_s. "
        "Needs a server started with --allow-run.",
        (
            _RUN_DIR,
            Param("hypothesis", str),
            Param("argv", list, description="the command and its arguments; no shell"),
            Param("baseline", bool, False),
            Param("timeout_s", float, 600.0),
            Param("smoke", str, ""),
            Param("control", str, None, optional=True, description="NAME=VALUE: a control run"),
        ),
        # It runs whatever command it is given: a client should ask before each call.
        read_only=False,
        destructive=True,
        idempotent=False,
        open_world=True,
    ),
    Tool(
        "smoke_record",
        "Record a check run by hand; kept as `recorded`, counted by the gate only when trusted.",
        (
            _RUN_DIR,
            Param("hypothesis", str),
            Param("outcome", str, pattern="^(confirmed|refuted|inconclusive)$"),
            Param("note", str, min_length=1, description="what was run by hand, and what it showed"),
            Param("smoke", str, ""),
        ),
        # It appends a record to the run directory's .mldebug/smokes.jsonl, and never removes one.
        read_only=False,
        destructive=False,
        idempotent=False,
        open_world=False,
    ),
    Tool(
        "gate",
        "Is the claimed cause smoke-confirmed? passed, the reason, and the missing half of the pair.",
        (_RUN_DIR, Param("claim", str), Param("trust_recorded", bool, False)),
        read_only=True,
        open_world=False,
    ),
    Tool(
        "rules_list",
        "The rule ids and the hypothesis ids, with their titles.",
        (),
        read_only=True,
        open_world=False,
    ),
)
TOOLS_BY_NAME = {t.name: t for t in TOOLS}

RESOURCES: tuple[Resource, ...] = (
    Resource(
        "taxonomy",
        "The diagnosis ids (hypotheses) and what each claims.",
        "application/yaml",
        uri=TAXONOMY_URI,
    ),
)
TEMPLATES: tuple[Resource, ...] = (
    Resource(
        "report",
        "The latest report of a run directory (diagnosed offline now, with the smokes recorded so far).",
        "application/json",
        uri_template=REPORT_URI,
    ),
)


def server_info(version: str) -> dict[str, Any]:
    return {"name": SERVER_NAME, "version": version}


def capabilities(modern: bool) -> dict[str, Any]:
    """The server's capabilities, as the SDK derives them from the handlers an ``MCPServer`` registers (tools,
    resources and prompts, no logging or completion handler).

    In the handshake era, ``listChanged`` comes from the notification options (none are set) and ``subscribe``
    from a ``resources/subscribe`` handler (there is none). From 2026-07-28 on, change notifications travel on
    ``subscriptions/listen`` streams, which ``MCPServer`` serves, so all of them are true."""
    changed = modern
    return {
        "prompts": {"listChanged": changed},
        "resources": {"listChanged": changed, "subscribe": changed},
        "tools": {"listChanged": changed},
    }


def listing(method: str) -> dict[str, Any]:
    """The result of one of the listing requests."""
    if method == "tools/list":
        return {"tools": [t.wire() for t in TOOLS]}
    if method == "resources/list":
        return {"resources": [r.wire() for r in RESOURCES]}
    if method == "resources/templates/list":
        return {"resourceTemplates": [r.wire() for r in TEMPLATES]}
    if method == "prompts/list":
        return {"prompts": []}
    raise KeyError(method)


LISTINGS = frozenset({"tools/list", "resources/list", "resources/templates/list", "prompts/list"})
