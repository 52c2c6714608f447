"""Python tracebacks as objects: type, message, errno, frames, origin and chain.

Only traceback *regions* are parsed: the lines the scanner kept after a ``Traceback (most recent call last)``
(or a launcher's root-cause header), and the file's tail. Nothing here looks at every line of a log.

Formats read: CPython 2.7 and 3.x; IPython/Jupyter (``Cell In[3], line 5``, ``---> 12``, ``File path:N, in
f``, ``<ipython-input-...> in f()``); Windows paths; rich and loguru boxed/annotated tracebacks; lines
prefixed per rank (``[rank3]:``, ``[default0]:``), interleaved or not; a DataLoader worker's ``Caught X in
DataLoader worker process N`` with its original traceback; ``-- Process N terminated with the following
error`` (``mp.spawn``); elastic's root-cause block; ``Exception in thread ...``; a bare final exception line.

>>> excs = parse_lines(list(enumerate(['Traceback (most recent call last):',
...     '  File "/opt/conda/lib/python3.10/site-packages/torch/serialization.py", line 1025, in load',
...     '    return _load(f)',
...     "OSError: [Errno 5] Input/output error: '/ckpt/model.pt'"], 1)))
>>> e = excs[0]
>>> e.bare_type, e.errno, e.errno_name, e.frames[0].module, e.frames[0].package
('OSError', 5, 'EIO', 'torch/serialization.py', 'torch')
"""

from __future__ import annotations

import builtins
import errno as _errno
import functools
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ..redact import clip

HEADER = "Traceback (most recent call last)"
# Region starts the scanner reports, with the lines it keeps after each (collectors/logs.py).
REGION_START = (
    r"Traceback \(most recent call last\)|Root Cause \(first observed failure\)"
    r"|-- Process \d+ terminated with the following error|Caught \w+ in DataLoader worker process \d+"
)
REGION_LINES = 160
MESSAGE_CHARS = 300
MESSAGE_LINES = 12  # continuation lines of a multi-line message kept

# Per-rank prefixes launchers put on every line: "[rank3]: ", "[default0]:", "rank3: ", "3: ", "[1,0]<stderr>:".
_RANK_PREFIX = re.compile(
    r"^(?:\[(?:rank|default)(?P<r1>\d+)\]:[ ]?|(?:rank|Rank)(?P<r2>\d+): |(?P<r3>\d{1,4}): |\[1,(?P<r4>\d+)\]<std\w+>:)"
)
_FRAME_PY = re.compile(
    r'^(?P<ind>\s*)(?:> )?File "(?P<path>[^"]+)", line (?P<line>\d+)(?:, in (?P<func>.+?))?\s*$'
)
_FRAME_IPY = re.compile(r"^(?P<ind>)File (?P<path>\S.*?):(?P<line>\d+)(?:, in (?P<func>[^(]+))?")
_FRAME_CELL = re.compile(
    r"^(?P<ind>)(?:Cell In ?\[(?P<cell>\d+)\]|Input In \[(?P<cell2>\d+)\]), line (?P<line>\d+)(?:, in (?P<func>\S+))?"
)
_FRAME_OLDIPY = re.compile(r"^(?P<ind>)(?P<path>\S+?\.py|<ipython-input-[\w-]+>) in (?P<func>[\w<>.]+)\(")
_FRAME_RICH = re.compile(
    r"^(?P<ind>)(?P<path>(?:[A-Za-z]:)?[^\s:]+\.py):(?P<line>\d+) in(?: (?P<func>\S+))?\s*$"
)
_ARROW = re.compile(r"^-*> ?(?P<line>\d+)\b")  # IPython's "----> 12 y = f(x)": the current line of a frame
_EXC = re.compile(r"^(?P<type>(?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*)(?::[ ]?(?P<msg>.*))?$")
# A bare exception line must look like one on its own: an Error/Exception-like name, or a dotted one.
_BARE_EXC = re.compile(
    r"^(?P<type>(?:[a-z_][\w]*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Fault|Failure|Timeout|BadZipFile)"
    r"|(?:[a-z_][\w]*\.)+[A-Z]\w*)(?::[ ]?(?P<msg>.*))?$"
)
_ERRNO = re.compile(r"^\[(?:Errno|WinError) (?P<no>-?\d+)\] (?P<str>[^:']+?)(?::|$)")
_CAUGHT = re.compile(r"Caught (?P<type>\w+) in DataLoader worker process (?P<n>\d+)")
_PROCESS = re.compile(r"-- Process (?P<n>\d+) terminated with the following error")
_ELASTIC_RANK = re.compile(r"^\s*rank\s*:\s*(?P<n>\d+)")
_THREAD = re.compile(r"^Exception in thread (?P<name>.+?):?\s*$")
_CONTEXT = "During handling of the above exception, another exception occurred"
_CAUSE = "The above exception was the direct cause of the following exception"
_BOX = "│┃|║"
_BOX_EDGE = re.compile(r"^[╭╰┏┗─━╔╚]")
_SITE = re.compile(r"(?:^|/)(?:site|dist)-packages/")
_STDLIB = re.compile(r"(?:^|/)(?:lib|Lib)/(?:python\d(?:\.\d+)?/)?")
# Distribution directory -> the package name rules use (lightning ships under three names).
_ALIASES = {"pytorch_lightning": "lightning", "lightning_fabric": "lightning", "lightning": "lightning"}
_STRERROR = {os.strerror(n): name for n, name in _errno.errorcode.items()}
# Windows system error codes ([WinError N]) -> the errno name rules match on: CPython's own mapping
# (PC/errmap.h) where it has one, else the POSIX error of the same meaning. Their messages are localised,
# so the number is what names them.
_WIN_ERRNO = {
    2: "ENOENT",  # ERROR_FILE_NOT_FOUND
    3: "ENOENT",  # ERROR_PATH_NOT_FOUND
    4: "EMFILE",  # ERROR_TOO_MANY_OPEN_FILES
    5: "EACCES",  # ERROR_ACCESS_DENIED
    6: "EBADF",  # ERROR_INVALID_HANDLE
    8: "ENOMEM",  # ERROR_NOT_ENOUGH_MEMORY
    14: "ENOMEM",  # ERROR_OUTOFMEMORY
    19: "EROFS",  # ERROR_WRITE_PROTECT
    21: "EIO",  # ERROR_NOT_READY
    23: "EIO",  # ERROR_CRC
    32: "EACCES",  # ERROR_SHARING_VIOLATION (another process holds the file)
    33: "EACCES",  # ERROR_LOCK_VIOLATION
    39: "ENOSPC",  # ERROR_HANDLE_DISK_FULL
    53: "ENOENT",  # ERROR_BAD_NETPATH
    59: "EIO",  # ERROR_UNEXP_NET_ERR
    64: "EIO",  # ERROR_NETNAME_DELETED
    80: "EEXIST",  # ERROR_FILE_EXISTS
    112: "ENOSPC",  # ERROR_DISK_FULL
    123: "EINVAL",  # ERROR_INVALID_NAME
    183: "EEXIST",  # ERROR_ALREADY_EXISTS
    206: "ENAMETOOLONG",  # ERROR_FILENAME_EXCED_RANGE
    1117: "EIO",  # ERROR_IO_DEVICE
    1450: "ENOMEM",  # ERROR_NO_SYSTEM_RESOURCES
    1455: "ENOMEM",  # ERROR_COMMITMENT_LIMIT ("The paging file is too small")
    10053: "ECONNABORTED",  # WSAECONNABORTED
    10054: "ECONNRESET",  # WSAECONNRESET
    10060: "ETIMEDOUT",  # WSAETIMEDOUT
    10061: "ECONNREFUSED",  # WSAECONNREFUSED
}
_BUILTIN_FAMILIES = (
    "OSError",
    "ValueError",
    "LookupError",
    "ArithmeticError",
    "ImportError",
    "RuntimeError",
    "MemoryError",
    "TypeError",
    "AttributeError",
    "NameError",
    "EOFError",
    "AssertionError",
    "KeyboardInterrupt",
    "SystemExit",
    "UnicodeError",
    "StopIteration",
    "SyntaxError",
)
# Python 2 names and qualified stdlib names whose family the builtins cannot say.
_EXTRA_FAMILIES = {
    "IOError": "OSError",
    "EnvironmentError": "OSError",
    "WindowsError": "OSError",
    "socket.error": "OSError",
    "socket.timeout": "OSError",
    "socket.gaierror": "OSError",
    "zipfile.BadZipFile": "ValueError",
    "zipfile.BadZipfile": "ValueError",
    "json.decoder.JSONDecodeError": "ValueError",
    "JSONDecodeError": "ValueError",
    "_pickle.UnpicklingError": "UnpicklingError",
    "pickle.UnpicklingError": "UnpicklingError",
    "UnpicklingError": "UnpicklingError",
    "subprocess.CalledProcessError": "CalledProcessError",
    "multiprocessing.context.TimeoutError": "TimeoutError",
    "queue.Empty": "Empty",
}
# Not exceptions, though they parse as a name and a colon.
_NOT_TYPES = frozenset(
    {
        "Note",
        "Warning",
        "Info",
        "INFO",
        "Error",
        "ERROR",
        "Hint",
        "Original",
        "Failures",
        "Root",
        "File",
        "Traceback",
        "During",
        "The",
        "Cell",
        "Input",
        "Process",
    }
)


@dataclass
class Frame:
    module: (
        str  # normalised: path under site-packages or the stdlib, else the path as written ('/' separators)
    )
    function: str
    lineno: int
    package: (
        str  # the top-level package owning the file (torch, PIL, transformers, lightning...), stdlib, user
    )
    log_line: int  # line in the log
    text: str = ""  # the frame's line as printed


@dataclass
class ParsedException:
    qual_type: str
    bare_type: str
    message: str
    line: int  # line of the exception line in the log (or of the region start when no exception line)
    frames: list[Frame] = field(default_factory=list)  # outermost first, as printed
    errno: int = -1
    errno_name: str = ""
    strerror: str = ""
    family: str = ""
    origin: str = "main"  # main, worker, process, thread
    worker: int = -1
    rank: int | None = None
    link: str = ""  # how it leads to the next exception of its chain: context, cause, worker, process
    chain: int = 0  # chain number within the parse
    position: str = "only"  # only, root, middle, surfaced
    in_traceback: bool = True
    text: str = ""
    last_line: int = 0  # the last log line of its message

    @property
    def innermost(self) -> Frame | None:
        return self.frames[-1] if self.frames else None

    @property
    def user_frame(self) -> Frame | None:
        for f in reversed(self.frames):
            if f.package == "user":
                return f
        return None


def family_of(qual: str) -> str:
    """The builtin base class an exception type belongs to (Python's own hierarchy), or ''."""
    bare = qual.rsplit(".", 1)[-1]
    if qual in _EXTRA_FAMILIES:
        return _EXTRA_FAMILIES[qual]
    if bare in _EXTRA_FAMILIES:
        return _EXTRA_FAMILIES[bare]
    cls = getattr(builtins, bare, None) if ("." not in qual or qual.startswith("builtins.")) else None
    if isinstance(cls, type) and issubclass(cls, BaseException):
        for base in cls.__mro__:
            if base.__name__ in _BUILTIN_FAMILIES:
                return base.__name__
        return bare
    return ""


@functools.lru_cache(maxsize=4096)  # tracebacks repeat the same files (every rank, every step)
def normalise_path(path: str) -> tuple[str, str]:
    """(module, package) of a traceback path."""
    p = path.strip().replace("\\", "/")
    if p.startswith("~"):
        p = p[1:]
    m = None
    for m in _SITE.finditer(p):  # noqa: B007 - the last site-packages in the path owns the file
        pass
    if m is not None:
        mod = p[m.end() :]
        top = mod.split("/", 1)[0]
        top = top[:-3] if top.endswith(".py") else top
        return mod, _ALIASES.get(top, top)
    if p.startswith("<frozen "):
        return p, "stdlib"
    if p.startswith(("<ipython-input", "<string>", "Cell In", "<stdin>")):
        return p, "user"
    parts = p.split("/")
    for i in range(len(parts) - 1):
        seg = parts[i]
        if (seg.startswith("python") and seg[6:7].isdigit() and i and parts[i - 1] in ("lib", "lib64")) or (
            seg == "Lib" and i + 1 < len(parts) and parts[i + 1] != "site-packages"
        ):
            mod = "/".join(parts[i + 1 :])
            return mod, "stdlib"
    return p, "user"


def _strip_prefix(text: str) -> tuple[str, int | None]:
    m = _RANK_PREFIX.match(text)
    if not m:
        return text, None
    r = next((g for g in m.group("r1", "r2", "r3", "r4") if g is not None), None)
    return text[m.end() :], int(r) if r is not None else None


def _prefix_rx(prefix: str) -> re.Pattern[str]:
    """A logger's per-line prefix as a pattern: its digits (timestamps, pids, line numbers) may change."""
    return re.compile(re.sub(r"\d+", r"\\d+", re.escape(prefix)))


def _strip_repeated_prefixes(lines: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """Remove a prefix that a logger or launcher put on every line of a traceback ("stderr: ", "ERROR 06-03
    10:20:03 worker.py:145] "): it is whatever precedes the header, when the next line starts the same way."""
    out = list(lines)
    k = 0
    while k < len(out):
        no, text = out[k]
        at = text.find(HEADER)
        prefix = text[:at] if at > 0 else ""
        if prefix.strip() and k + 1 < len(out):
            rx = _prefix_rx(prefix)
            if rx.match(out[k + 1][1]):
                out[k] = (no, text[at:])
                k += 1
                while k < len(out) and (m := rx.match(out[k][1])):
                    out[k] = (out[k][0], out[k][1][m.end() :])
                    k += 1
                continue
        k += 1
    return out


def _unbox(text: str) -> str:
    t = text.rstrip()
    if t[:1] in _BOX:
        t = t[1:]
        if t[-1:] in _BOX:
            t = t[:-1]
        return t.strip()
    return text


def _errno_of(message: str) -> tuple[int, str, str]:
    m = _ERRNO.match(message)
    if m:
        no = int(m.group("no"))
        strerror = m.group("str").strip()
        name = _errno.errorcode.get(no, "") if message.startswith("[Errno") else _WIN_ERRNO.get(no, "")
        return no, _STRERROR.get(strerror, name) or name, strerror
    for text, name in _STRERROR.items():  # no number printed: the C library's own wording names it
        if text and len(text) > 12 and text in message:
            return -1, name, text
    return -1, "", ""


def _make_exc(qual: str, message: str, line: int, text: str) -> ParsedException:
    bare = qual.rsplit(".", 1)[-1]
    no, name, strerror = _errno_of(message)
    e = ParsedException(
        qual_type=qual, bare_type=bare, message=clip(message, MESSAGE_CHARS), line=line, text=text
    )
    e.errno, e.errno_name, e.strerror = no, name, strerror
    e.family = family_of(qual)
    return e


def _frame_of(text: str, log_line: int) -> tuple[Frame, int] | None:
    """(frame, indentation) if the line is a frame header in any of the known formats."""
    if "File" not in text and ".py" not in text and " In" not in text and "<ipython" not in text:
        return None  # most lines of a traceback are code lines: skip the regexes for them
    for rx in (_FRAME_PY, _FRAME_IPY, _FRAME_CELL, _FRAME_OLDIPY, _FRAME_RICH):
        m = rx.match(text)
        if not m:
            continue
        gd = m.groupdict()
        if gd.get("cell") or gd.get("cell2"):
            path = f"Cell In[{gd.get('cell') or gd.get('cell2')}]"
        else:
            path = gd["path"]
        mod, pkg = normalise_path(path)
        func = (gd.get("func") or "").strip()
        lineno = int(gd["line"]) if gd.get("line") else -1
        return Frame(mod, func, lineno, pkg, log_line), len(gd.get("ind") or "")
    return None


def _exception_line(text: str, strict: bool) -> tuple[str, str] | None:
    m = (_BARE_EXC if strict else _EXC).match(text)
    if not m:
        return None
    qual = m.group("type")
    if len(qual) < 3 or qual in _NOT_TYPES or (qual.rsplit(".", 1)[-1] in _NOT_TYPES and "." not in qual):
        return None
    if (
        not strict
        and m.group("msg") is None
        and not re.search(r"(?:Error|Exception|Exit|Interrupt|Iteration|[a-z]\.[A-Z]\w*)$", qual)
    ):
        return None  # a bare word alone is only an exception when its name says so
    if not strict and not (qual[:1].isupper() or "." in qual or qual[:1] == "_"):
        return None
    return qual, (m.group("msg") or "").strip()


class _Parser:
    def __init__(self) -> None:
        self.out: list[ParsedException] = []
        self.chain = 0

    def parse(self, lines: Sequence[tuple[int, str]]) -> list[ParsedException]:
        # Per-rank prefixes: group lines by rank, so that interleaved tracebacks come apart.
        streams: dict[int | None, list[tuple[int, str]]] = {}
        for no, raw in lines:
            text, rank = _strip_prefix(raw.rstrip("\r\n"))
            streams.setdefault(rank, []).append((no, text))
        for rank, stream in streams.items():
            before = len(self.out)
            self._parse_stream(stream)
            for e in self.out[before:]:
                if rank is not None and e.rank is None:
                    e.rank = rank
        return self.out

    def _parse_stream(self, lines: list[tuple[int, str]]) -> None:
        lines = _strip_repeated_prefixes(lines)
        i, n = 0, len(lines)
        pending_link = ""  # link from the previous exception to the next one
        pending_origin: tuple[str, int, int | None] | None = None  # origin for the next traceback
        last_exc: ParsedException | None = None
        while i < n:
            raw = lines[i][1]
            text = _unbox(raw)
            stripped = text.strip()
            if _CONTEXT in stripped or _CAUSE in stripped:
                pending_link = "context" if _CONTEXT in stripped else "cause"
                i += 1
                continue
            pm = _PROCESS.search(stripped)
            if pm:
                pending_origin = ("process", -1, int(pm.group("n")))
                pending_link = "process"
                i += 1
                continue
            tm = _THREAD.match(stripped)
            if tm:
                pending_origin = ("thread", -1, None)
                pending_link = ""
                i += 1
                continue
            em = _ELASTIC_RANK.match(text)
            if em and "local_rank" in text:
                pending_origin = ("process", -1, int(em.group("n")))
                pending_link = "process"
                i += 1
                continue
            if HEADER in text:
                exc, i = self._traceback(lines, i)
                if exc is not None:
                    if pending_origin:
                        exc.origin, exc.worker, r = pending_origin
                        if r is not None:
                            exc.rank = r
                        pending_origin = None
                    self._link(last_exc, exc, pending_link)
                    pending_link = ""
                    last_exc = exc
                    cm = _CAUGHT.search(exc.message + " " + exc.text)
                    if cm:  # the worker's original traceback follows, inside this message
                        pending_origin = ("worker", int(cm.group("n")), None)
                        pending_link = "worker"
                continue
            i += 1

    def _link(self, prev: ParsedException | None, exc: ParsedException, link: str) -> None:
        if prev is not None and link:
            if link in ("context", "cause"):
                # printed root first: prev -> exc, exc surfaces
                prev.link = link
                exc.chain = prev.chain
            else:
                # worker/process: the surfaced exception was printed first, the root follows
                exc.link = link
                exc.chain = prev.chain
            return
        self.chain += 1
        exc.chain = self.chain

    def _traceback(self, lines: list[tuple[int, str]], start: int) -> tuple[ParsedException | None, int]:
        """Parse one traceback from its header line; return the exception and the next line index."""
        n = len(lines)
        frames: list[Frame] = []
        frame_ind = 0
        i = start + 1
        gap = 0
        head_no, head = lines[start]
        # Jupyter prints the type on the header line: "ZeroDivisionError      Traceback (most recent call last)"
        head_type = _unbox(head).split(HEADER)[0].strip().strip("-").strip()
        while i < n:
            no, raw = lines[i]
            text = _unbox(raw)
            if _BOX_EDGE.match(text.strip()) or not text.strip():
                i += 1
                gap += 1
                if gap > 40:
                    break
                continue
            if HEADER in text and not frames:
                # "Original Traceback (most recent call last):" or a repeated header: start over here
                return self._traceback(lines, i)
            fr = _frame_of(text.strip() if _FRAME_PY.match(text) is None else text, no)
            if fr is None and text.strip().startswith("> File"):
                fr = _frame_of(text.strip()[2:], no)
            if fr is not None:
                frame, ind = fr
                frame.text = text.strip()
                if frame.function == "" and i + 1 < n:  # rich wraps "path:N in" / "func" over two lines
                    nxt = _unbox(lines[i + 1][1]).strip()
                    if nxt and " " not in nxt:
                        frame.function = nxt
                        i += 1
                frames.append(frame)
                frame_ind = ind
                gap = 0
                i += 1
                continue
            am = _ARROW.match(text.strip())
            if am and frames and frames[-1].lineno < 0:
                frames[-1].lineno = int(am.group("line"))
            ind = len(text) - len(text.lstrip())
            body = text.strip()
            if body.startswith("traceback :") or body.startswith("traceback:"):
                body = body.split(":", 1)[1].strip()
            cand = _exception_line(body, strict=False) if (ind <= frame_ind or not frames) else None
            if cand is not None and not body.startswith(("File ", "Cell In", "Input In")):
                qual, msg = cand
                if (not frames and qual == head_type) or frames or head_type or ind == 0:
                    exc = _make_exc(qual, msg, no, raw)
                    exc.frames = frames
                    i += 1
                    # Continuation lines of a multi-line message (until a blank line or the next structure).
                    # They stay for the caller's loop too: a launcher's block may follow without a blank line.
                    extra: list[str] = []
                    j = i
                    while j < n and len(extra) < MESSAGE_LINES:
                        t = _unbox(lines[j][1])
                        if (
                            not t.strip()
                            or HEADER in t
                            or _CONTEXT in t
                            or _CAUSE in t
                            or _PROCESS.search(t)
                            or _frame_of(t.strip(), 0)
                        ):
                            break
                        extra.append(t.strip())
                        j += 1
                    exc.last_line = lines[j - 1][0] if j > i else no
                    if extra:
                        exc.text = raw + "\n" + "\n".join(extra)
                        if not exc.message:
                            exc.message = clip(extra[0], MESSAGE_CHARS)
                            no2, name, se = _errno_of(exc.message)
                            exc.errno, exc.errno_name, exc.strerror = no2, name, se
                        elif exc.errno < 0 and not exc.errno_name:
                            no2, name, se = _errno_of(" ".join(extra))
                            exc.errno, exc.errno_name, exc.strerror = no2, name, se
                    self.out.append(exc)
                    return exc, i
            gap += 1
            if gap > 40:
                break
            i += 1
        if frames or head_type:
            # A traceback cut short (the log ends, or the region does): keep what was seen.
            exc = _make_exc(head_type if _exception_line(head_type, strict=False) else "", "", head_no, head)
            exc.frames = frames
            if exc.qual_type:
                self.out.append(exc)
                return exc, i
        return None, i


def parse_lines(lines: Sequence[tuple[int, str]]) -> list[ParsedException]:
    """Every exception in these (line number, text) lines, chained and with positions set."""
    excs = _Parser().parse(lines)
    _positions(excs)
    return excs


def bare_exceptions(lines: Sequence[tuple[int, str]], known: Iterable[int] = ()) -> list[ParsedException]:
    """Final exception lines with no traceback above them (a log that ends on ``KeyError: 'label'``)."""
    seen = set(known)
    out: list[ParsedException] = []
    for no, raw in lines:
        if no in seen:
            continue
        text, rank = _strip_prefix(raw.rstrip())
        m = _exception_line(text.strip() if text[:1] != " " else "", strict=True)
        if m is None:
            continue
        e = _make_exc(m[0], m[1], no, raw)
        e.in_traceback = False
        e.rank = rank
        out.append(e)
    for k, e in enumerate(out):
        e.chain = 10_000 + k
    return out


def _positions(excs: list[ParsedException]) -> None:
    chains: dict[int, list[ParsedException]] = {}
    for e in excs:
        chains.setdefault(e.chain, []).append(e)
    for members in chains.values():
        ordered = order_chain(members)
        if len(ordered) == 1:
            ordered[0].position = "only"
            continue
        for k, e in enumerate(ordered):
            e.position = "root" if k == 0 else "surfaced" if k == len(ordered) - 1 else "middle"


def order_chain(members: list[ParsedException]) -> list[ParsedException]:
    """Root first, surfaced last. Context/cause chains print the root first; worker and process chains print
    the surfaced exception first and the root (the worker's or process's own traceback) after it."""
    out: list[ParsedException] = []
    for e in members:
        if e.link in ("worker", "process"):
            out.insert(0, e)
        else:
            out.append(e)
    return out
