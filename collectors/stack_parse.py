"""Stacks of a live process, as ``py-spy dump --json`` prints them: parsed, normalised, and read for what each
thread waits on (with the frame table in ``stack_frames.yaml``), and compared between two samples.

>>> doc = [{"pid": 7, "thread_id": 1, "thread_name": "MainThread", "os_thread_id": 7, "active": False,
...   "owns_gil": False, "frames": [
...     {"name": "clock_nanosleep", "filename": "/usr/lib/libc.so.6", "module": "/usr/lib/libc.so.6", "line": 0},
...     {"name": "_try_get_data", "line": 1133, "module": None,
...      "filename": "/opt/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py"},
...     {"name": "train", "filename": "/home/me/proj/train.py", "line": 88, "module": None}]}]
>>> threads = parse_pyspy_json(doc)
>>> t = threads[0]
>>> t.main, t.idle, [f.file for f in t.frames]
(True, True, ['libc.so.6', 'torch/utils/data/dataloader.py', 'train.py'])
>>> w = classify(t, load_table())
>>> w.wait, w.frame.text
('dataloader_queue', '_try_get_data (torch/utils/data/dataloader.py:1133)')
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .tracebacks import normalise_path


def normalise_file(path: str) -> tuple[str, str]:
    """(file, origin) of a Python frame's path, read as the traceback parser reads paths
    (``tracebacks.normalise_path``): the module path after site-packages or the standard library's folder,
    else the file name alone for the user's own code; origin is package, stdlib or user.

    >>> normalise_file("/usr/lib/python3.11/site-packages/torch/serialization.py")
    ('torch/serialization.py', 'package')
    >>> normalise_file("/root/.pyenv/versions/3.11.7/lib/python3.11/threading.py")
    ('threading.py', 'stdlib')
    >>> normalise_file("C:\\\\Users\\\\me\\\\proj\\\\train.py")
    ('train.py', 'user')
    """
    module, package = normalise_path(path or "")
    if package == "user":
        return re.split(r"[\\/]", module)[-1], "user"
    return module, "stdlib" if package == "stdlib" else "package"


@dataclass(frozen=True)
class Frame:
    function: str
    file: str  # normalised (Python frames) or the library's base name (native frames)
    line: int
    native: bool
    origin: str = "user"  # user, package, stdlib, native

    @property
    def text(self) -> str:
        where = f"{self.file}:{self.line}" if self.line > 0 else self.file
        return f"{self.function} ({where})"

    @property
    def package(self) -> str:
        """Top-level package owning the frame ('' for the user's own files and the standard library)."""
        if self.native or "/" not in self.file:
            return ""
        return self.file.split("/", 1)[0]


@dataclass
class Thread:
    tid: int
    name: str
    idle: bool
    gil: bool
    main: bool
    frames: list[Frame] = field(default_factory=list)  # innermost first

    def python_frames(self) -> list[Frame]:
        return [f for f in self.frames if not f.native]

    def shape(self) -> tuple[str, ...]:
        """The Python functions on the stack, innermost first (lines left out: a loop moves its line)."""
        return tuple(f"{f.function}@{f.file}" for f in self.python_frames())


def parse_pyspy_json(doc: Any) -> list[Thread]:
    """Threads of one ``py-spy dump --json`` document (a list of thread objects); malformed entries are
    skipped, never raised on: the dump is read from a process we do not control."""
    out: list[Thread] = []
    if not isinstance(doc, list):
        return out
    for t in doc:
        if not isinstance(t, Mapping):
            continue
        frames: list[Frame] = []
        for fr in t.get("frames") or []:
            if not isinstance(fr, Mapping):
                continue
            native = bool(fr.get("module"))
            name = str(fr.get("name") or "?")[:200]
            filename = str(fr.get("filename") or "")
            file, origin = (
                (re.split(r"[\\/]", filename)[-1], "native") if native else normalise_file(filename)
            )
            try:
                line = int(fr.get("line") or 0)
            except (TypeError, ValueError):
                line = 0
            frames.append(Frame(name, file[:200], line, native, origin))
        pid = t.get("pid")
        os_tid = t.get("os_thread_id")
        tid = int(os_tid) if isinstance(os_tid, int) else int(t.get("thread_id") or 0)
        name = str(t.get("thread_name") or "")[:100]
        out.append(
            Thread(
                tid=tid,
                name=name,
                idle=not bool(t.get("active")),
                gil=bool(t.get("owns_gil")),
                main=(isinstance(pid, int) and tid == pid) or name == "MainThread",
                frames=frames,
            )
        )
    return out


# --- the frame table ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FrameRule:
    functions: frozenset[str]
    files: tuple[str, ...]
    native: tuple[str, ...]

    def matches(self, f: Frame) -> bool:
        if f.native:
            return bool(self.native) and any(s in f.function for s in self.native)
        if not self.files:
            return False
        if self.functions and f.function.rsplit(".", 1)[-1] not in self.functions:
            return False
        return any(f.file == s or f.file.endswith("/" + s) for s in self.files)


@dataclass(frozen=True)
class Table:
    waits: tuple[tuple[str, tuple[FrameRule, ...]], ...]
    roles: tuple[tuple[str, tuple[FrameRule, ...]], ...]
    network_filesystems: frozenset[str]


def _rules(entries: Iterable[Mapping[str, Any]]) -> tuple[FrameRule, ...]:
    return tuple(
        FrameRule(
            frozenset(map(str, e.get("functions") or ())),
            tuple(map(str, e.get("files") or ())),
            tuple(map(str, e.get("native") or ())),
        )
        for e in entries
    )


@functools.lru_cache(maxsize=1)
def load_table(path: str | None = None) -> Table:
    from ..engine.yamlload import load_data

    file = Path(path) if path else Path(__file__).with_name("stack_frames.yaml")
    doc = load_data(file.read_text(encoding="utf-8"))
    return Table(
        waits=tuple((str(w["class"]), _rules(w["frames"])) for w in doc.get("waits", [])),
        roles=tuple((str(r["role"]), _rules(r["frames"])) for r in doc.get("roles", [])),
        network_filesystems=frozenset(map(str, doc.get("network_filesystems", []))),
    )


@dataclass(frozen=True)
class Wait:
    wait: str  # a class of stack_frames.yaml, or "" when no frame names one
    frame: Frame | None  # the innermost frame of that class
    user_frame: Frame | None  # the innermost frame of the user's own code

    def describe(self, thread: Thread) -> str:
        """The wait frame, the Python frame it was called from when it is native, and the user's frame."""
        if self.frame is None:
            return ""
        parts = [self.frame.text]
        if self.frame.native:
            frames = thread.frames
            after = frames[frames.index(self.frame) + 1 :] if self.frame in frames else []
            py = next((f for f in after if not f.native), None)
            if py is not None and py != self.user_frame:
                parts.append(f"from {py.text}")
        if self.user_frame is not None and self.user_frame != self.frame:
            parts.append(f"in user code {self.user_frame.text}")
        return ", ".join(parts)


def classify(thread: Thread, table: Table) -> Wait:
    user = next((f for f in thread.python_frames() if f.origin == "user"), None)
    for cls, rules in table.waits:
        for f in thread.frames:
            if any(r.matches(f) for r in rules):
                return Wait(cls, f, user)
    return Wait("", None, user)


def role_of(threads: Sequence[Thread], table: Table) -> str:
    ordered = sorted(threads, key=lambda t: not t.main)
    for role, rules in table.roles:
        if any(r.matches(f) for r in rules for t in ordered for f in t.frames):
            return role
    return ""


def main_thread(threads: Sequence[Thread]) -> Thread | None:
    return next((t for t in threads if t.main), threads[0] if threads else None)


def hot_frame(first: Thread | None, second: Thread | None) -> Frame | None:
    """The innermost Python frame both samples share, counted from the outermost: where a spinning thread
    keeps coming back to."""
    if first is None or second is None:
        return None
    a, b = first.python_frames()[::-1], second.python_frames()[::-1]
    shared: Frame | None = None
    for fa, fb in zip(a, b, strict=False):
        if (fa.function, fa.file) != (fb.function, fb.file):
            break
        shared = fb
    return shared


def moved(first: Sequence[Thread], second: Sequence[Thread]) -> bool:
    """Did the main thread's Python stack change shape between the samples? Background threads (a watchdog,
    a logger, pin-memory) keep moving in a stuck process, so they do not count; lines are ignored, because a
    loop stuck in one function moves its line without making progress."""
    a, b = main_thread(first), main_thread(second)
    if a is None or b is None:
        return False
    return a.shape() != b.shape()
