"""The stdio front of ``mldebug-rules mcp``: it answers a session's opening at once while the SDK loads.

Importing the ``mcp`` SDK takes ~2 s (it builds pydantic models for two protocol eras); the server itself is
ready ~0.1 s later. A client waits for its ``initialize`` (or ``server/discover``) answer and the tool list
before it does anything else, so this front owns the process's stdin and stdout and:

- answers the opening itself (``ANSWERABLE``: the handshake, ``ping`` and the listings), while the conversation
  holds nothing but such requests and ``notifications/initialized``; from the first other message on,
  everything goes to the SDK, in arrival order;
- builds those answers without the SDK (``Declared``): from the server's declarations (``mcp_decl``), under
  the SDK's rules for protocol eras and versions, with the version table read from the installed SDK's
  files. It answers only requests whose shape it can check whole; anything else waits for the SDK;
- hands every message to the SDK server, which loads in a background thread and runs its own stdio
  transport over queues instead of the pipes. A request the front answered is handed over as well, under
  an id of the front's own, so that the SDK's state (protocol era, initialization) is what it would have
  been; the SDK's answer to it is not sent again but compared with the one given;
- when the two differ (a new SDK that writes something differently, say), says so on stderr, stops
  answering for the rest of the session, and from then on trusts only the SDK for this build of the server
  and SDK: it records what the SDK answered in the on-disk cache (``mcp-answers``), replays those records in
  later sessions (still checked), and waits for the SDK for anything not recorded. It records the same way
  what the SDK answered to an opening request the front could not build an answer for.

So every session, a client's first after an install or an upgrade included, gets the handshake and the
listings in about twice the time Python takes to start. ``MLDEBUG_CACHE=0`` turns the records off (a
difference is then forgotten at exit).

``MLDEBUG_MCP_FRONT_LOG=FILE`` (for tests) logs what the front answered (and from which source), handed over
and verified, one JSON object a line, and loads the SDK only when a message needs it rather than at start,
so that the log shows which answers came before the SDK was imported.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from . import mcp_decl

# Requests whose answer depends only on the server's build and on the conversation before them.
ANSWERABLE = frozenset(
    {
        "initialize",
        "ping",
        "server/discover",
        "tools/list",
        "resources/list",
        "resources/templates/list",
        "prompts/list",
    }
)
INITIALIZED = "notifications/initialized"
# The 2026-07-28 era's per-request envelope, in params._meta, and the server's stamp on its results.
PROTOCOL_VERSION_META = "io.modelcontextprotocol/protocolVersion"
CLIENT_INFO_META = "io.modelcontextprotocol/clientInfo"
CLIENT_CAPABILITIES_META = "io.modelcontextprotocol/clientCapabilities"
SERVER_INFO_META = "io.modelcontextprotocol/serverInfo"
FRONT_ID = "mldebug-front:"  # the ids of the requests the front hands over after answering them
NAMESPACE = "mcp-answers"
MAX_RECORDS = 256  # a few clients' openings; past that the records start over
LOG_ENV = "MLDEBUG_MCP_FRONT_LOG"

_EOF = ""  # what the SDK's transport reads as the end of input


def normalised(msg: dict[str, Any]) -> dict[str, Any]:
    """The message as a record's key sees it: without its id, and without who the client says it is."""
    out = {k: v for k, v in msg.items() if k != "id"}
    params = out.get("params")
    if isinstance(params, dict):
        params = {k: v for k, v in params.items() if k != "clientInfo"}
        meta = params.get("_meta")
        if isinstance(meta, dict) and CLIENT_INFO_META in meta:
            params["_meta"] = {k: v for k, v in meta.items() if k != CLIENT_INFO_META}
        out["params"] = params
    return out


def answer_of(msg: dict[str, Any]) -> dict[str, Any]:
    """A response without its envelope: ``{"result": ...}`` or ``{"error": ...}``."""
    return {k: v for k, v in msg.items() if k not in ("jsonrpc", "id")}


def _is_id(value: Any) -> bool:
    return isinstance(value, (str, int)) and not isinstance(value, bool)


def _id_key(value: Any) -> str:
    return json.dumps(value)  # 1 and "1" are different ids


def build_key() -> str:
    """The build the records belong to: this package's version and server code, the SDK's versions."""
    from . import __version__, cache

    here = Path(__file__).resolve().parent
    parts: list[bytes | str] = [__version__, sys.version]
    for name in ("mcp_server.py", "mcp_front.py", "mcp_decl.py"):
        try:
            parts.append((here / name).read_bytes())
        except OSError:
            parts.append(name)
    parts.extend(_sdk_dists())
    return cache.digest(parts)


def _sdk_dists() -> list[str]:
    """The SDK's and pydantic's installed distributions, by their dist-info names (importlib.metadata would
    cost a tenth of a second here)."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("mcp")
    except (ImportError, ValueError):
        return []
    locations = list(spec.submodule_search_locations or []) if spec else []
    if not locations:
        return []
    site = Path(locations[0]).parent
    try:
        names = os.listdir(site)
    except OSError:
        return []
    wanted = ("mcp-", "mcp_types-", "pydantic-", "pydantic_core-")
    return sorted(n for n in names if n.endswith(".dist-info") and n.startswith(wanted))


@dataclass(frozen=True)
class ProtocolVersions:
    """The protocol versions the installed SDK serves, by era."""

    handshake: tuple[str, ...]  # reached through ``initialize``
    modern: tuple[str, ...]  # the per-request envelope (``server/discover``)
    latest_handshake: str  # what ``initialize`` settles on when the client offers none of them


def sdk_protocol_versions() -> ProtocolVersions | None:
    """The installed SDK's version table, from its own file (``mcp_types/version.py``, which imports only
    ``typing``) run on its own: importing the package would import the SDK's models. None when it is not
    there or not as expected; then the front builds no answers and the SDK gives them."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("mcp_types")
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or []) if spec else []
    if not locations:
        return None
    path = Path(locations[0]) / "version.py"
    table = importlib.util.spec_from_file_location("mldebug_rules._mcp_protocol_versions", path)
    if table is None or table.loader is None:
        return None
    module = importlib.util.module_from_spec(table)
    try:
        table.loader.exec_module(module)
        handshake = tuple(module.HANDSHAKE_PROTOCOL_VERSIONS)
        modern = tuple(module.MODERN_PROTOCOL_VERSIONS)
        latest = module.LATEST_HANDSHAKE_VERSION
    except Exception:  # moved or renamed in another SDK: no answers of the front's own
        return None
    if not all(isinstance(v, str) for v in (*handshake, *modern, latest)) or latest not in handshake:
        return None
    return ProtocolVersions(handshake, modern, latest)


def _is_meta(value: Any, envelope: bool) -> bool:
    """``params._meta`` of a request: a JSON object, carrying the 2026 envelope exactly when ``envelope``."""
    return isinstance(value, dict) and (PROTOCOL_VERSION_META in value) == envelope


def _only_meta(params: dict[str, Any], envelope: bool) -> bool:
    """Params that hold nothing but ``_meta`` (a cursor, say, is left to the SDK)."""
    if set(params) - {"_meta"}:
        return False
    if "_meta" not in params:
        return not envelope
    return _is_meta(params["_meta"], envelope)


def _well_formed_initialize(params: Any) -> bool:
    """What the SDK's InitializeRequestParams accepts, as far as a check without pydantic can tell."""
    if not isinstance(params, dict) or not isinstance(params.get("protocolVersion"), str):
        return False
    if "_meta" in params and not isinstance(params["_meta"], dict):
        return False
    info, caps = params.get("clientInfo"), params.get("capabilities")
    if not isinstance(info, dict) or not isinstance(caps, dict):
        return False
    if not all(isinstance(info.get(k), str) for k in ("name", "version")):
        return False
    if any(k in info and not isinstance(info[k], str) for k in ("title", "description", "websiteUrl")):
        return False
    if "icons" in info or not all(v is None or isinstance(v, dict) for v in caps.values()):
        return False
    roots = caps.get("roots") or {}
    return isinstance(roots.get("listChanged", False), bool)


class Declared:
    """The SDK server's answers to the opening, built from ``mcp_decl`` without the SDK.

    It follows the conversation as the SDK's dual-era loop does: the client's first request decides the era
    (``initialize`` or a request without the envelope: the handshake era; an enveloped request: 2026-07-28),
    ``initialize`` negotiates the version, and a 2026 request stands on its own envelope. It answers only
    well-formed requests on the paths below; at the first request it cannot answer (an error, an odd shape,
    a second ``initialize``), it stops answering for the rest of the session, since the SDK's state may
    then differ from the one it follows.
    """

    def __init__(self, versions: ProtocolVersions, server_version: str) -> None:
        self.versions = versions
        self._server_info = mcp_decl.server_info(server_version)
        self.era: str | None = None  # "handshake" or "modern", once the first request has decided it
        self._initialized = False  # initialize answered (the handshake era's gate is open)
        self.lost = False

    def answer(self, msg: dict[str, Any]) -> dict[str, Any] | None:
        """``{"result": ...}`` as the SDK would answer the request, or None (then it stops answering)."""
        if self.lost:
            return None
        plain = msg.get("jsonrpc") == "2.0" and not set(msg) - {"jsonrpc", "id", "method", "params"}
        params = msg.get("params", {})  # absent params are {} to the SDK; null ones are left to it
        result = self._result(msg.get("method"), params) if plain and isinstance(params, dict) else None
        if result is None:
            self.lost = True
            return None
        return {"result": result}

    def notified(self, method: str) -> None:
        """``notifications/initialized``: before ``initialize``, it opens the SDK's gate without an answer."""
        if method == INITIALIZED and not self._initialized:
            self.lost = True

    def _result(self, method: Any, params: dict[str, Any]) -> dict[str, Any] | None:
        meta = params.get("_meta")
        enveloped = _is_meta(meta, True) and method != "initialize"
        if self.era is None:
            self.era = "modern" if enveloped else "handshake"
        if self.era == "modern":
            return self._modern(method, params) if enveloped else None
        if enveloped:  # refused on a handshake connection
            return None
        if method == "initialize":
            if self._initialized or not _well_formed_initialize(params):
                return None
            self._initialized = True
            offered = params["protocolVersion"]
            v = self.versions
            return {
                "protocolVersion": offered if offered in v.handshake else v.latest_handshake,
                "capabilities": mcp_decl.capabilities(modern=False),
                "serverInfo": dict(self._server_info),
                "instructions": mcp_decl.INSTRUCTIONS,
            }
        if not _only_meta(params, envelope=False):
            return None
        if method == "ping":  # served before initialize too
            return {}
        if method in mcp_decl.LISTINGS and self._initialized:
            return mcp_decl.listing(method)
        return None

    def _modern(self, method: Any, params: dict[str, Any]) -> dict[str, Any] | None:
        meta = params["_meta"]
        if meta[PROTOCOL_VERSION_META] not in self.versions.modern or CLIENT_CAPABILITIES_META not in meta:
            return None
        if not _only_meta(params, envelope=True):
            return None
        if method == "server/discover":
            result = {
                "supportedVersions": list(self.versions.modern),
                "capabilities": mcp_decl.capabilities(modern=True),
                "instructions": mcp_decl.INSTRUCTIONS,
            }
        elif method in mcp_decl.LISTINGS:
            result = mcp_decl.listing(method)
        else:  # ping is not a 2026 method
            return None
        # A 2026 result: the cache fields at the SDK's defaults (no cache hints are set), its type, and the
        # server's identity stamped in _meta.
        return {
            "cacheScope": "private",
            "ttlMs": 0,
            **result,
            "resultType": "complete",
            "_meta": {SERVER_INFO_META: dict(self._server_info)},
        }


def declared() -> Declared | None:
    """The front's own answers for the installed SDK, or None when its version table cannot be read."""
    from . import __version__

    versions = sdk_protocol_versions()
    return Declared(versions, __version__) if versions is not None else None


class Records:
    """What the SDK answered, by a digest of the conversation up to and including the request, and whether
    the front's own answers still hold for this build (a difference from the SDK's turns them off)."""

    def __init__(self, key: str | None) -> None:
        self._key = key
        self._lock = threading.Lock()
        self.answers: dict[str, dict[str, Any]] = {}
        self.declared_trusted = True
        if key is None:
            return
        from . import cache

        raw = cache.get(NAMESPACE, key)
        try:
            data = json.loads(raw) if raw else {}
        except ValueError:
            data = {}
        if isinstance(data, dict):
            answers = data.get("answers")
            if isinstance(answers, dict):
                self.answers = {k: v for k, v in answers.items() if isinstance(v, dict)}
            self.declared_trusted = data.get("declared_trusted") is not False

    def get(self, conversation: str) -> dict[str, Any] | None:
        with self._lock:
            return self.answers.get(conversation)

    def add(self, conversation: str, answer: dict[str, Any]) -> None:
        with self._lock:
            if self.answers.get(conversation) == answer:
                return
            if len(self.answers) >= MAX_RECORDS:
                self.answers = {}
            self.answers[conversation] = answer
            self._save()

    def distrust(self, answers: dict[str, dict[str, Any]]) -> None:
        """The front's answers differed from the SDK's: from now on only the SDK's count, these first."""
        with self._lock:
            self.declared_trusted = False
            self.answers = dict(answers)
            self._save()

    def _save(self) -> None:
        if self._key is None:
            return
        from . import cache

        data = {"declared_trusted": self.declared_trusted, "answers": self.answers}
        cache.put(NAMESPACE, self._key, json.dumps(data, ensure_ascii=False).encode())


class _SdkStdin:
    """What the SDK's stdio transport reads: the lines the front hands over, "" at the end."""

    def __init__(self, lines: queue.Queue[str]) -> None:
        self._lines = lines

    def readline(self) -> str:
        return self._lines.get()


class _SdkStdout:
    """What the SDK's stdio transport writes to: each complete line goes to the front's filter."""

    def __init__(self, sink: Callable[[str], None]) -> None:
        self._sink = sink
        self._buf = ""

    def write(self, text: str) -> int:
        self._buf += text
        while "\n" in self._buf:
            line, self._buf = self._buf.split("\n", 1)
            if line.strip():
                self._sink(line)
        return len(text)

    def flush(self) -> None:
        pass


class Front:
    """Reads the client's messages, answers the opening itself (from the records of the SDK's answers, else
    from the declarations), hands everything to the SDK, and checks what it answered against the SDK."""

    def __init__(
        self,
        wire_out: BinaryIO,
        records: Records,
        start_sdk: Callable[[Front], None],
        eager: bool = True,
        log: Callable[[dict[str, Any]], None] | None = None,
        declared: Declared | None = None,
    ) -> None:
        self._out = wire_out
        self._write_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._records = records
        self._declared = declared
        # False once an answer of the front's differed from the SDK's: then the SDK answers everything.
        self._trusted = True
        # The SDK's answers to the requests the front answered and verified, for Records.distrust.
        self._verified: dict[str, dict[str, Any]] = {}
        self._start_sdk = start_sdk
        self._log = log or (lambda event: None)
        self.to_sdk: queue.Queue[str] = queue.Queue()
        self._conversation = hashlib.sha256(b"mldebug-rules mcp conversation\n")
        self._pure = True  # only answerable requests and notifications/initialized so far
        self._answered = 0
        # The ids under which the front hands over what it answered: no client's id can be one of them.
        self._front_id = f"{FRONT_ID}{os.urandom(6).hex()}:"
        # front id -> the answer the client got, where it came from, the conversation it answers, the method
        self._given: dict[str, tuple[dict[str, Any], str, str, str]] = {}
        self._recording: dict[str, str] = {}  # client id -> the conversation digest to record under
        self.needs_sdk = False  # a message that only the SDK can answer was handed over
        self.sdk: threading.Thread | None = None
        if eager:
            self._ensure_sdk()

    # --- from the client ---------------------------------------------------------------------------
    def serve(self, wire_in: BinaryIO) -> bool:
        """Reads to the end of input. True when the SDK still has to answer something (wait for it)."""
        for raw in wire_in:
            self.handle(raw.decode("utf-8", "replace"))
        self.to_sdk.put(_EOF)
        return self.needs_sdk

    def handle(self, line: str) -> None:
        if not line.strip():
            return  # carries no message: nothing to answer, nothing to hand over
        try:
            msg = json.loads(line)
        except ValueError:
            msg = None
        if not isinstance(msg, dict):
            self._pure = False
            self._hand_over(line.rstrip("\n"), None, needs_sdk=True)
            return
        method = msg.get("method")
        notification = "method" in msg and "id" not in msg
        response = "method" not in msg and "id" in msg and ("result" in msg or "error" in msg)
        if self._pure and not notification and method in ANSWERABLE and _is_id(msg.get("id")):
            conversation = self._advance(msg)
            # Built for every opening request, so that Declared follows the whole conversation.
            built = self._declared.answer(msg) if self._declared is not None else None
            with self._state_lock:
                trusted, declared_ok = self._trusted, self._records.declared_trusted
            if trusted:
                recorded = self._records.get(conversation)
                if recorded is not None:
                    self._answer(msg, recorded, "recorded", conversation)
                    return
                if built is not None and declared_ok:
                    self._answer(msg, built, "declared", conversation)
                    return
            with self._state_lock:
                self._recording[_id_key(msg["id"])] = conversation
        elif self._pure and notification and method == INITIALIZED:
            self._advance(msg)
            if self._declared is not None:
                self._declared.notified(method)
        else:
            self._pure = False
        # A request, or anything malformed, waits for the SDK's answer; notifications and responses do not.
        self._hand_over(line.rstrip("\n"), method, needs_sdk=not (notification or response))

    def _advance(self, msg: dict[str, Any]) -> str:
        self._conversation.update(json.dumps(normalised(msg), sort_keys=True).encode() + b"\n")
        return self._conversation.hexdigest()

    def _answer(self, msg: dict[str, Any], answer: dict[str, Any], source: str, conversation: str) -> None:
        self.write({"jsonrpc": "2.0", "id": msg["id"], **answer})
        self._answered += 1
        front_id = f"{self._front_id}{self._answered}"
        with self._state_lock:
            self._given[front_id] = (answer, source, conversation, msg["method"])
        self._log(
            {
                "event": "answered",
                "method": msg["method"],
                "source": source,
                "sdk_imported": "mcp" in sys.modules,
            }
        )
        # The SDK sees the request too, so that its session is where the client's is.
        self.to_sdk.put(json.dumps({**msg, "id": front_id}) + "\n")

    def _hand_over(self, line: str, method: Any, needs_sdk: bool) -> None:
        self._log({"event": "handed_over", "method": method if isinstance(method, str) else None})
        self.to_sdk.put(line + "\n")
        if needs_sdk:
            self.needs_sdk = True
            self._ensure_sdk()

    def _ensure_sdk(self) -> None:
        if self.sdk is None:
            self.sdk = threading.Thread(target=self._start_sdk, args=(self,), name="mcp-sdk", daemon=True)
            self.sdk.start()

    # --- from the SDK ------------------------------------------------------------------------------
    def from_sdk(self, line: str) -> None:
        """One line the SDK server wrote: to the client, unless it answers a request the front answered."""
        if FRONT_ID in line or self._recording:
            try:
                msg = json.loads(line)
            except ValueError:
                msg = None
            if isinstance(msg, dict) and "method" not in msg and _is_id(msg.get("id")) and self._settle(msg):
                return
        with self._write_lock:
            self._out.write(line.encode("utf-8") + b"\n")
            self._out.flush()

    def _settle(self, msg: dict[str, Any]) -> bool:
        """Compares or records the SDK's answer; True when it is not for the client."""
        sdk = answer_of(msg)
        with self._state_lock:
            given = self._given.pop(msg["id"], None) if isinstance(msg["id"], str) else None
            conversation = None if given is not None else self._recording.pop(_id_key(msg["id"]), None)
        if given is not None:
            answer, source, conversation, method = given
            same = sdk == answer
            with self._state_lock:
                self._verified[conversation] = sdk
                first_difference = not same and self._trusted
                if not same:
                    self._trusted = False
                keep = dict(self._verified)
            self._log({"event": "verified", "method": method, "same": same, "source": source})
            if first_difference:
                print(
                    f"mldebug-rules mcp: the front's {source} answer to {method} differs from the SDK's; until "
                    "the server or the SDK changes, the SDK's answers are the ones given",
                    file=sys.stderr,
                    flush=True,
                )
                self._records.distrust(keep)
            elif not self._records.declared_trusted:
                self._records.add(conversation, sdk)
            return True
        if conversation is not None:
            self._records.add(conversation, sdk)
        return False

    def write(self, msg: dict[str, Any]) -> None:
        data = json.dumps(msg, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"
        with self._write_lock:
            self._out.write(data)
            self._out.flush()

    def sdk_streams(self) -> tuple[_SdkStdin, _SdkStdout]:
        return _SdkStdin(self.to_sdk), _SdkStdout(self.from_sdk)


def _dup_above_std(fd: int) -> int:
    """A private copy of fd that no later dup2 onto 0, 1 or 2 can replace."""
    try:
        import fcntl
    except ImportError:  # Windows: os.dup cannot land on 0-2 while they are open
        return os.dup(fd)
    return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)


def _logger(path: str) -> Callable[[dict[str, Any]], None]:
    lock = threading.Lock()

    def log(event: dict[str, Any]) -> None:
        with lock, open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(event) + "\n")

    return log


def serve(
    make_server: Callable[[], Any], warm_up: Callable[[], None], fail: Callable[[BaseException], int]
) -> int:
    """Serves MCP over the process's stdin and stdout until the end of input.

    ``make_server`` builds the SDK server (it imports the SDK); ``warm_up`` imports the pipeline, in the
    background once the SDK serves; ``fail`` turns an error while loading into the exit status, after
    saying what broke.
    """
    # As the SDK's own stdio transport does: the protocol gets private copies of fd 0 and 1, and fd 0 and 1
    # point at the null device and at stderr, so that stray output of a handler or a child misses the wire.
    wire_in_fd, wire_out_fd = _dup_above_std(0), _dup_above_std(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    wire_in = os.fdopen(wire_in_fd, "rb")
    wire_out = os.fdopen(wire_out_fd, "wb")

    log_path = os.environ.get(LOG_ENV)
    records = Records(_records_key())
    status: list[int] = []

    def run_sdk(front: Front) -> None:
        try:
            import anyio  # noqa: F401  (what run_sdk_server needs, loaded before the server is built)
            import mcp.server.stdio  # noqa: F401

            server = make_server()
        except BaseException as e:  # the process cannot serve: say why and stop
            _stop(fail(e), wire_out)
            return
        # The pipeline next, beside the server, so that the first tool call does not wait for it.
        threading.Thread(target=_quietly, args=(warm_up,), name="mcp-warm-up", daemon=True).start()
        try:
            run_sdk_server(server, *front.sdk_streams())
        except BaseException as e:
            status.append(fail(e))

    front = Front(
        wire_out,
        records,
        run_sdk,
        eager=not log_path,
        log=_logger(log_path) if log_path else None,
        declared=declared(),
    )
    if front.serve(wire_in) and front.sdk is not None:
        front.sdk.join()  # until the SDK has answered what was handed to it and seen the end of input
    # Otherwise nothing is left for the SDK to answer: no need to wait for it to finish importing.
    _stop(status[0] if status else 0, wire_out)
    return 0  # not reached


def run_sdk_server(server: Any, stdin: _SdkStdin, stdout: _SdkStdout) -> None:
    """Runs the SDK's ``MCPServer`` over the front's streams until ``stdin`` reads the end of input: what
    ``MCPServer.run_stdio_async`` does, over these streams instead of the pipes."""
    import anyio
    from mcp.server.stdio import stdio_server

    async def main() -> None:
        async with stdio_server(anyio.wrap_file(stdin), anyio.wrap_file(stdout)) as (read, write):  # type: ignore[arg-type]
            low = server._lowlevel_server
            await low.run(read, write, low.create_initialization_options())

    anyio.run(main)


def _quietly(fn: Callable[[], None]) -> None:
    """A head start only: what fails here fails again in the tool call that needs it, and is reported there."""
    try:
        fn()
    except Exception:
        pass


def _records_key() -> str | None:
    from . import cache

    return build_key() if cache.cache_dir() is not None else None


def _stop(code: int, wire_out: BinaryIO) -> None:
    """Ends the process at once: the SDK's thread may be halfway through an import, which interpreter
    shutdown does not always survive."""
    try:
        wire_out.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)
