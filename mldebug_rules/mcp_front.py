"""The stdio front of ``mldebug-rules mcp``: it answers a session's opening at once while the SDK loads.

Importing the ``mcp`` SDK takes ~2 s (it builds pydantic models for two protocol eras); the server itself is
ready ~0.1 s later. A client waits for its ``initialize`` (or ``server/discover``) answer and the tool list
before it does anything else, so this front owns the process's stdin and stdout and:

- answers a request itself only with an answer the SDK server gave before: the same request (ids aside, and
  the client's name and version aside) after the same earlier messages, to the same build of this server
  and SDK (``Records``). The answers are the SDK's own output, so there is nothing to keep in step by hand;
- answers only while the conversation holds nothing but such requests (``ANSWERABLE``: the handshake,
  ``ping`` and the listings) and ``notifications/initialized``; from the first other message on, everything
  goes to the SDK, in arrival order;
- hands every message to the SDK server, which loads in a background thread and runs its own stdio
  transport over queues instead of the pipes. A request the front answered is handed over as well, under
  an id of the front's own, so that the SDK's state (protocol era, initialization) is what it would have
  been; the SDK's answer to it is not sent again but compared with the one given. A difference is reported
  on stderr and drops every record, so the next start asks the SDK again;
- records what the SDK answers to an answerable request on a pure conversation, for the next start (in the
  on-disk cache, ``mcp-answers``; ``MLDEBUG_CACHE=0`` turns that off, and then the SDK answers everything).

So the first session of a client (of its handshake parameters) after installing or upgrading waits for the
SDK; later ones get the handshake and the listings in about twice the time Python takes to start.

``MLDEBUG_MCP_FRONT_LOG=FILE`` (for tests) logs what the front answered and handed over, one JSON object a
line, and loads the SDK only when a message needs it rather than at start, so that the log shows which
answers came before the SDK was imported.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

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
CLIENT_INFO_META = "io.modelcontextprotocol/clientInfo"  # the modern era's envelope key
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
    for name in ("mcp_server.py", "mcp_front.py"):
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


class Records:
    """The SDK's answers, by a digest of the conversation up to and including the request."""

    def __init__(self, key: str | None) -> None:
        self._key = key
        self._lock = threading.Lock()
        self.answers: dict[str, dict[str, Any]] = {}
        if key is None:
            return
        from . import cache

        raw = cache.get(NAMESPACE, key)
        try:
            data = json.loads(raw) if raw else {}
        except ValueError:
            data = {}
        if isinstance(data, dict):
            self.answers = {k: v for k, v in data.items() if isinstance(v, dict)}

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

    def drop_all(self) -> None:
        with self._lock:
            self.answers = {}
            self._save()

    def _save(self) -> None:
        if self._key is None:
            return
        from . import cache

        cache.put(NAMESPACE, self._key, json.dumps(self.answers, ensure_ascii=False).encode())


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
    """Reads the client's messages, answers what it can from the records, hands everything to the SDK."""

    def __init__(
        self,
        wire_out: BinaryIO,
        records: Records,
        start_sdk: Callable[[Front], None],
        eager: bool = True,
        log: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self._out = wire_out
        self._write_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._records = records
        self._start_sdk = start_sdk
        self._log = log or (lambda event: None)
        self.to_sdk: queue.Queue[str] = queue.Queue()
        self._conversation = hashlib.sha256(b"mldebug-rules mcp conversation\n")
        self._pure = True  # only answerable requests and notifications/initialized so far
        self._answered = 0
        # The ids under which the front hands over what it answered: no client's id can be one of them.
        self._front_id = f"{FRONT_ID}{os.urandom(6).hex()}:"
        self._given: dict[str, dict[str, Any]] = {}  # front id -> the answer the client got
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
            answer = self._records.get(conversation)
            if answer is not None:
                self._answer(msg, answer)
                return
            with self._state_lock:
                self._recording[_id_key(msg["id"])] = conversation
        elif self._pure and notification and method == INITIALIZED:
            self._advance(msg)
        else:
            self._pure = False
        # A request, or anything malformed, waits for the SDK's answer; notifications and responses do not.
        self._hand_over(line.rstrip("\n"), method, needs_sdk=not (notification or response))

    def _advance(self, msg: dict[str, Any]) -> str:
        self._conversation.update(json.dumps(normalised(msg), sort_keys=True).encode() + b"\n")
        return self._conversation.hexdigest()

    def _answer(self, msg: dict[str, Any], answer: dict[str, Any]) -> None:
        self.write({"jsonrpc": "2.0", "id": msg["id"], **answer})
        self._answered += 1
        front_id = f"{self._front_id}{self._answered}"
        with self._state_lock:
            self._given[front_id] = answer
        self._log({"event": "answered", "method": msg["method"], "sdk_imported": "mcp" in sys.modules})
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
        with self._state_lock:
            given = self._given.pop(msg["id"], None) if isinstance(msg["id"], str) else None
            conversation = None if given is not None else self._recording.pop(_id_key(msg["id"]), None)
        if given is not None:
            same = answer_of(msg) == given
            self._log({"event": "verified", "same": same})
            if not same:
                print(
                    "mldebug-rules mcp: an answer recorded from the SDK differs from the SDK's answer now; "
                    "the records are dropped",
                    file=sys.stderr,
                    flush=True,
                )
                self._records.drop_all()
            return True
        if conversation is not None:
            self._records.add(conversation, answer_of(msg))
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
            import anyio
            from mcp.server.stdio import stdio_server

            server = make_server()
        except BaseException as e:  # the process cannot serve: say why and stop
            _stop(fail(e), wire_out)
            return
        # The pipeline next, beside the server, so that the first tool call does not wait for it.
        threading.Thread(target=_quietly, args=(warm_up,), name="mcp-warm-up", daemon=True).start()
        stdin, stdout = front.sdk_streams()

        async def main() -> None:
            async with stdio_server(anyio.wrap_file(stdin), anyio.wrap_file(stdout)) as (read, write):  # type: ignore[arg-type]
                # What MCPServer.run_stdio_async does, over the front's streams instead of the pipes.
                low = server._lowlevel_server
                await low.run(read, write, low.create_initialization_options())

        try:
            anyio.run(main)
        except BaseException as e:
            status.append(fail(e))

    front = Front(
        wire_out,
        records,
        run_sdk,
        eager=not log_path,
        log=_logger(log_path) if log_path else None,
    )
    if front.serve(wire_in) and front.sdk is not None:
        front.sdk.join()  # until the SDK has answered what was handed to it and seen the end of input
    # Otherwise nothing is left for the SDK to answer: no need to wait for it to finish importing.
    _stop(status[0] if status else 0, wire_out)
    return 0  # not reached


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
