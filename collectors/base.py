"""The probe framework: collectors declare what they read; this module runs them with deadlines.

Every probe reports ``ok``, ``unavailable``, ``timeout`` or ``error`` and never aborts a diagnosis: a broken
collector becomes a ``probe.status`` fact. Probes run in parallel on daemon threads; a probe that blocks (a
hung ``nvidia-smi``, a stat on a dead NFS mount) is abandoned at its deadline and reported as ``timeout``.
Anything that can block in the kernel should run in a subprocess (see ``run_command``) so it can be killed.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from ..engine.facts import Fact, FactRegistry
from .rundir import RunFiles, find_run_files

T = TypeVar("T")

STATUSES = ("ok", "unavailable", "timeout", "error")


class ProbeUnavailable(Exception):
    """The source is absent here (no GPU driver, no permission): not an error."""


@dataclass
class ProbeOutput:
    name: str
    status: str = "ok"
    detail: str = ""
    facts: list[Fact] = field(default_factory=list)
    seconds: float = 0.0
    payload: dict[str, Any] = field(default_factory=dict)  # Python-side extras (scrollback...)


class _Once:
    """One value computed by whichever thread asks first; the others wait for it (or its exception)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.done = False
        self.value: Any = None
        self.error: BaseException | None = None

    def get(self, make: Callable[[], Any]) -> Any:
        with self.lock:
            if not self.done:
                try:
                    self.value = make()
                except BaseException as e:  # every waiting probe sees the same failure
                    self.error = e
                self.done = True
        if self.error is not None:
            raise self.error
        return self.value


@dataclass
class Context:
    """What a diagnosis was asked to look at. Probes read it; nothing writes to the run directories.

    Work that several probes need is done once per diagnosis, whichever probe asks first, while the others
    wait: the run directories' file lists (``run_files``) and the one pass over each log (``once``)."""

    registry: FactRegistry
    run_dirs: list[Path] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)
    kernel_logs: list[Path] = field(default_factory=list)
    bundles: list[Path] = field(default_factory=list)
    offline: bool = True
    kb: Any = None  # KnowledgeBase
    options: dict[str, Any] = field(default_factory=dict)
    now: float = field(default_factory=time.time)
    _shared: dict[str, _Once] = field(default_factory=dict, init=False, repr=False, compare=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False, compare=False)

    def once(self, key: str, make: Callable[[], T]) -> T:
        """``make()``, computed by the first probe that asks for `key` in this diagnosis; later ones get the same
        value (waiting while it is computed), or the same exception."""
        with self._lock:
            cell = self._shared.get(key)
            if cell is None:
                cell = self._shared[key] = _Once()
        return cell.get(make)  # type: ignore[no-any-return]

    @property
    def run_files(self) -> dict[str, RunFiles]:
        """Each run directory's files (keyed by ``str(root)``), found once per diagnosis by the first probe that
        asks; the probes that run beside it wait for that walk rather than repeat it."""
        return self.once("run_files", lambda: {str(root): find_run_files(root) for root in self.run_dirs})

    def files_of(self, root: Path) -> RunFiles:
        """The files of one of this context's run directories (any other directory is walked on the spot)."""
        found = self.run_files.get(str(root))
        return found if found is not None else find_run_files(root)

    def seed_run_files(self, files: dict[str, RunFiles]) -> None:
        """Use these file lists instead of walking the run directories (tests, and a caller that walked them)."""
        self.once("run_files", lambda: files)


Probe = Callable[[Context], ProbeOutput]


@dataclass(frozen=True)
class ProbeSpec:
    name: str
    func: Probe
    deadline_s: float = 10.0
    live_only: bool = False


def run_probes(
    ctx: Context, probes: Sequence[ProbeSpec], total_deadline_s: float = 25.0
) -> list[ProbeOutput]:
    """Run probes concurrently; each gets its own deadline, and the live probes a global one too.

    The global deadline bounds what can hang on the machine (a stuck nvidia-smi, a dead NFS mount). File
    probes are bounded by their own deadlines only: a 10 GB log, or a loaded machine, must not lose the
    log's facts to the live probes' budget."""
    results: dict[str, ProbeOutput] = {}
    threads: dict[str, threading.Thread] = {}
    started = time.monotonic()

    def runner(spec: ProbeSpec) -> None:
        t0 = time.monotonic()
        try:
            out = spec.func(ctx)
        except ProbeUnavailable as e:
            out = ProbeOutput(spec.name, "unavailable", str(e))
        except Exception as e:  # a broken collector is evidence of nothing but itself
            out = ProbeOutput(spec.name, "error", f"{type(e).__name__}: {e}")
        out.name = spec.name
        out.seconds = time.monotonic() - t0
        results[spec.name] = out

    active = [p for p in probes if not (p.live_only and ctx.offline)]
    for spec in active:
        t = threading.Thread(target=runner, args=(spec,), name=f"probe-{spec.name}", daemon=True)
        threads[spec.name] = t
        t.start()
    for spec in active:
        own = spec.deadline_s - (time.monotonic() - started)
        if spec.live_only:
            own = min(own, total_deadline_s - (time.monotonic() - started))
        threads[spec.name].join(max(0.0, own))
    outputs: list[ProbeOutput] = []
    for spec in active:
        out = results.get(spec.name)
        if out is None:
            limit = min(spec.deadline_s, total_deadline_s) if spec.live_only else spec.deadline_s
            out = ProbeOutput(spec.name, "timeout", f"no answer within {limit:g} s", seconds=limit)
        outputs.append(out)
    for out in outputs:
        out.facts.append(
            ctx.registry.make(
                "probe.status",
                {"probe": out.name, "status": out.status, "detail": out.detail[:300]},
                probe=out.name,
            )
        )
    return outputs


@dataclass
class CommandResult:
    status: str  # ok, unavailable (not found / permission), timeout, error (non-zero exit)
    stdout: str = ""
    stderr: str = ""
    returncode: int | None = None


def run_command(argv: Sequence[str], timeout_s: float, env: Mapping[str, str] | None = None) -> CommandResult:
    """Run a read-only command with a hard deadline that kills its whole process group, and afterwards
    anything it left behind: each run is tagged with a fresh environment token that every descendant
    inherits, even one that ``setsid``-ed or double-forked out of the group (see ``_kill_tagged``)."""
    token = f"{os.getpid()}-{secrets.token_hex(8)}"
    child_env = dict(env) if env is not None else dict(os.environ)
    child_env[_TAG] = token
    try:
        proc = subprocess.Popen(
            list(argv),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=child_env,
        )
    except FileNotFoundError:
        return CommandResult("unavailable", stderr=f"{argv[0]}: not found")
    except PermissionError as e:
        return CommandResult("unavailable", stderr=f"{argv[0]}: {e.strerror}")
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # our own child, never a training process
        except OSError:
            pass
        _kill_tagged(token)
        with contextlib.suppress(Exception):
            proc.communicate(timeout=1.0)
        return CommandResult("timeout", stderr=f"{argv[0]}: no answer within {timeout_s:g} s")
    _kill_tagged(token)  # a daemonised grandchild of a command that did answer
    text_out = out.decode("utf-8", "replace")
    text_err = err.decode("utf-8", "replace")
    if proc.returncode != 0:
        low = text_err.lower()
        if "permission" in low or "not permitted" in low:
            return CommandResult("unavailable", text_out, text_err.strip(), proc.returncode)
        return CommandResult("error", text_out, text_err.strip(), proc.returncode)
    return CommandResult("ok", text_out, text_err, 0)


_TAG = "MLDEBUG_PROBE_RUN"


def _kill_tagged(token: str) -> int:
    """SIGKILL every process whose environment carries this run's token: the probe command's descendants
    only (a training process never has it), wherever setsid or a double fork put them. Linux /proc only."""
    needle = f"{_TAG}={token}".encode()
    killed = 0
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return 0
    me = os.getpid()
    for pid in pids:
        if pid == me:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read(1 << 20)
        except OSError:  # gone, or not ours to read (so not ours to signal either)
            continue
        if needle in env.split(b"\0"):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
    return killed


Runner = Callable[[Sequence[str], float], CommandResult]


def runner_of(ctx: Context) -> Runner:
    """The command runner a live probe uses: ``run_command``, or one injected as ``ctx.options["runner"]``
    (tests pass one that answers with recorded output, or that runs a real command which never answers)."""
    injected = ctx.options.get("runner")
    return injected if callable(injected) else run_command
