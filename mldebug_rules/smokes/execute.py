"""Run a smoke command: argv as given (no shell), its own process group, a hard timeout, bounded capture.

Output is scanned as it streams with the same signature packs as the logs (complete lines only, so a
signature split across two reads is still seen), while only a bounded head and tail are kept in memory:
classification sees all of the output, storage stays bounded whatever the command prints.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..collectors.logscan import Pattern, Scanner
from ..engine.packs import KnowledgeBase
from ..redact import redact

HEAD_BYTES = 64 << 10
TAIL_BYTES = 192 << 10
MAX_PENDING_LINE = 1 << 20  # a newline-less stream is scanned in pieces of this size
KILL_GRACE_S = 3.0  # SIGTERM first so trainers can flush; SIGKILL after this


@dataclass
class Execution:
    argv: list[str]
    exit_code: int | None  # None when it timed out; negative: killed by that signal
    timed_out: bool
    duration_s: float
    head: bytes
    tail: bytes
    total_bytes: int
    signatures: dict[str, int] = field(default_factory=dict)  # signature id -> hits
    error: str = ""  # the command could not be started

    def output(self) -> bytes:
        """Head and tail, redacted; a marker where the middle was dropped.

        Redaction runs on whole lines only: a line the head/tail cut split in two is dropped, since a
        secret cut in half (a URL password without its ``@``) no longer looks like one."""
        if self.total_bytes <= len(self.head) + len(self.tail):
            return redact((self.head + self.tail).decode("utf-8", "replace")).encode("utf-8")
        dropped = self.total_bytes - len(self.head) - len(self.tail)
        head = self.head.decode("utf-8", "replace").rpartition("\n")[0]
        tail = self.tail.decode("utf-8", "replace").partition("\n")[2]
        marker = f"\n[... {dropped} bytes not kept, and the lines cut at either side ...]\n"
        return (redact(head) + marker + redact(tail)).encode("utf-8")

    def tail_text(self, lines: int = 40, chars: int = 4000) -> str:
        """The last lines of output, redacted before any cut (the first, partial line of the tail dropped)."""
        data = self.tail or self.head
        text = data.decode("utf-8", "replace")
        if self.tail and not self.head.endswith(b"\n"):
            text = text.partition("\n")[2]  # began before the tail was kept
        return redact("\n".join(text.splitlines()[-lines:]))[-chars:]


def signature_scanner(kb: KnowledgeBase) -> Scanner:
    """The packs' training-stream signatures, as in the log probe."""
    pats = [
        Pattern(s.id, s.regex, s.ignore_case, "all", 1000, prefilter=s.prefilter)
        for s in kb.signatures
        if "train" in s.streams or "scheduler" in s.streams
    ]
    return Scanner(pats, tail_lines=1, progress=False)


class _Capture:
    def __init__(self, scanner: Scanner, echo: bool):
        self.scanner = scanner
        self.echo = echo
        self.head = bytearray()
        self.tail: deque[bytes] = deque()
        self.tail_size = 0
        self.total = 0
        self.pending = b""
        self.signatures: dict[str, int] = {}

    def feed(self, data: bytes) -> None:
        if self.echo:
            try:
                sys.stdout.buffer.write(data)
                sys.stdout.buffer.flush()
            except (OSError, ValueError):
                self.echo = False
        self.total += len(data)
        room = HEAD_BYTES - len(self.head)
        if room > 0:
            self.head += data[:room]
            data_tail = data[room:]
        else:
            data_tail = data
        if data_tail:
            self.tail.append(data_tail)
            self.tail_size += len(data_tail)
            while self.tail_size - len(self.tail[0]) >= TAIL_BYTES:
                self.tail_size -= len(self.tail.popleft())
        buf = self.pending + data
        cut = buf.rfind(b"\n")
        if cut < 0 and len(buf) < MAX_PENDING_LINE:
            self.pending = buf
            return
        if cut < 0:
            cut = len(buf) - 1
        self._scan(buf[: cut + 1])
        self.pending = buf[cut + 1 :]

    def _scan(self, data: bytes) -> None:
        if not data:
            return
        res = self.scanner.scan_bytes(data)
        for idx, n in res.counts.items():
            sid = self.scanner.patterns[idx].id
            self.signatures[sid] = self.signatures.get(sid, 0) + n

    def finish(self) -> tuple[bytes, bytes]:
        self._scan(self.pending)
        self.pending = b""
        tail = b"".join(self.tail)[-TAIL_BYTES:]
        return bytes(self.head), tail


def _die_with_parent(parent: int) -> Callable[[], None] | None:
    """A preexec hook (Linux): the child gets SIGKILL when `smoke run` dies, even by SIGKILL itself, so a
    smoke never outlives its runner with no timeout. None where prctl is not available."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None

    def hook() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the runner died before the prctl took effect
            os._exit(137)

    return hook


_PR_SET_PDEATHSIG = 1


@contextlib.contextmanager
def _forward_signals(proc: subprocess.Popen[bytes]) -> Iterator[None]:
    """While the smoke runs, SIGTERM/SIGHUP/SIGINT to `smoke run` go to the smoke's whole process group
    (it runs in its own session), and then end `smoke run` as they would have."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        return
    previous: dict[int, Any] = {}

    def handler(signum: int, _frame: Any) -> None:
        _kill_group(proc, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(KILL_GRACE_S)
        _kill_group(proc, signal.SIGKILL)
        signal.signal(signum, previous.get(signum, signal.SIG_DFL))
        raise SystemExit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        with contextlib.suppress(ValueError, OSError):
            previous[sig] = signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            with contextlib.suppress(ValueError, OSError):
                signal.signal(sig, old)


def _kill_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def run_command(
    argv: Sequence[str], timeout_s: float, scanner: Scanner, echo: bool | None = None
) -> Execution:
    """Run argv in a new session (so the whole process group can be killed), capturing stdout+stderr."""
    echo = sys.stdout.isatty() if echo is None else echo
    cap = _Capture(scanner, echo)
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own session and process group: killed as a whole
            preexec_fn=_die_with_parent(os.getpid()),
        )
    except OSError as e:
        return Execution(list(argv), None, False, 0.0, b"", b"", 0, error=f"{argv[0]}: {e.strerror or e}")
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    os.set_blocking(fd, False)
    sel = selectors.DefaultSelector()
    sel.register(fd, selectors.EVENT_READ)
    deadline = t0 + timeout_s
    timed_out = False
    eof = False
    try:
        with _forward_signals(proc):
            while not eof:
                left = deadline - time.monotonic()
                if left <= 0:
                    timed_out = True
                    break
                if sel.select(min(left, 0.5)):
                    eof = not _drain(fd, cap)
                # The command may exit while a grandchild keeps the pipe open (and even keeps writing to it):
                # the smoke is over when the command is; the group is killed below.
                if proc.poll() is not None:
                    break
            if timed_out:
                _kill_group(proc, signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(KILL_GRACE_S)
                _kill_group(proc, signal.SIGKILL)
                proc.wait()
            else:
                proc.wait()
        _drain(fd, cap)
    finally:
        # Whatever the smoke left running in its group (workers, a stuck rank) must not outlive it.
        _kill_group(proc, signal.SIGKILL)
        sel.close()
        proc.stdout.close()
    head, tail = cap.finish()
    return Execution(
        argv=list(argv),
        exit_code=None if timed_out else proc.returncode,
        timed_out=timed_out,
        duration_s=round(time.monotonic() - t0, 3),
        head=head,
        tail=tail,
        total_bytes=cap.total,
        signatures=dict(sorted(cap.signatures.items())),
    )


def _drain(fd: int, cap: _Capture) -> bool:
    """Read what is available; False at end of stream."""
    while True:
        try:
            data = os.read(fd, 1 << 16)
        except BlockingIOError:
            return True
        except OSError:
            return False
        if not data:
            return False
        cap.feed(data)


def failure_signatures(kb: KnowledgeBase) -> set[str]:
    """Signatures that mean something failed: not advice lines, not 'training completed'."""
    out = set()
    for s in kb.signatures:
        if s.role == "context":
            continue
        if s.hypotheses and not any(kb.is_failure(h) for h in s.hypotheses):
            continue
        out.add(s.id)
    return out


def classify(ex: Execution, original: Iterable[str], failures: set[str], progress: bool) -> tuple[str, str]:
    """(outcome, why): passed | reproduced | failed_differently | no_progress | timed_out.

    ``passed`` needs all three: exit 0, training progress in the command's own output (``progress``: step or
    loss lines the metrics reader recognises) and none of the failure signatures. A command that merely
    exits 0 (``true``, a script that never reaches the training loop) proves nothing."""
    if ex.timed_out:
        return "timed_out", "stopped at the timeout"
    seen = set(ex.signatures)
    same = sorted(seen & set(original))
    if same:
        return "reproduced", f"the original failure's signature again: {', '.join(same)}"
    other = sorted(seen & failures)
    if ex.error:
        return "failed_differently", ex.error
    if other:
        return "failed_differently", f"exit {ex.exit_code}; a different failure: {', '.join(other)}"
    if ex.exit_code != 0:
        return "failed_differently", f"exit {ex.exit_code} without the original failure's signature"
    if not progress:
        return "no_progress", "exit 0, but no training step or loss line in its own output"
    return "passed", "exit 0, training progress, no failure signature"
