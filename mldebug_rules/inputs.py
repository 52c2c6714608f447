"""What each input is, checked before the probes read it.

- ``--bundle`` takes globs (``'node*.mldebug.json'``) and several files: a shell-expanded
  ``--bundle bundles/*.mldebug.json`` leaves every file after the first as a positional argument, and those
  that are bundles (by name or by content) are bundles, not run directories.
- The tool's own outputs (reports in every format, bundles named as logs, smoke plans, anything under
  ``.mldebug/``) are never read as evidence, whether named with ``--log`` or found in a run directory.
- An input that holds nothing to read (an empty log, a "kernel log" with no kernel line, a "bundle" that is
  not one, a run directory with nothing the conventions recognise) gets one clear line in the report, and
  keeps the verdict from being ``no_failure``: nothing read is not a healthy run.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .collectors.own_outputs import is_own_output, own_output_kind, read_head
from .errors import UsageError

SNIFF_KERNEL_BYTES = 256 * 1024
SNIFF_BUNDLE_BYTES = 16 * 2**20  # larger bundles are checked by their first bytes only
_GLOB_CHARS = re.compile(r"[*?\[]")
# A kernel log line: dmesg (uptime or -T stamps), journalctl -k (ISO or short), syslog/kern.log, printk
# levels, or one of the kernel messages the parser reads (journalctl -o cat prints them bare).
_KERNEL_LINE = re.compile(
    r"^(?:<\d>)?\[\s*\d+\.\d+\]"
    r"|^\[\w{3} \w{3} [ \d]\d \d{2}:\d{2}:\d{2} \d{4}\]"
    r"|^\S+ \S+ kernel: "
    r"|^\w{3} [ \d]\d \d{2}:\d{2}:\d{2} \S+ kernel: "
    r"|^kernel: "
    r"|^<\d>\S"
    r"|^-- (?:Logs begin|Journal begins|No entries)"
    r"|NVRM: |Out of memory: |oom-kill:|Killed process \d+ |nfs: server |LustreError: "
    r"|blocked for more than \d+ seconds|segfault at |mce: |EDAC ",
    re.M,
)
_OWN_WHAT = {
    "report": "a report written by mldebug-rules",
    "bundle": "a bundle written by mldebug-rules collect",
    "plan": "a smoke plan written by mldebug-rules",
    "named": "named as an mldebug-rules output",
}


@dataclass(frozen=True)
class InputNote:
    """One line about one input: what it is, and why it was not read (or read nothing)."""

    source: str  # the path as the user named it, or as shown in citations
    problem: str  # own_output | empty | no_kernel_lines | not_a_bundle | nothing_found
    text: str  # the line shown in the report
    blocking: bool  # a named input that gave nothing: the verdict is never `no_failure`

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def looks_like_bundle(path: Path) -> bool:
    if path.name.endswith(".mldebug.json"):
        return True
    return own_output_kind(read_head(path)) == "bundle"


def expand_paths(run_dirs: Sequence[str], bundles: Sequence[str]) -> tuple[list[Path], list[Path]]:
    """(run directories, bundles) as the user meant them: globs in ``--bundle`` expanded (sorted, so the
    report is deterministic), and positional files that are bundles moved to the bundles."""
    out_bundles: list[Path] = []
    for spec in bundles:
        if not os.path.exists(spec) and _GLOB_CHARS.search(spec):
            matches = sorted(glob.glob(os.path.expanduser(spec)))
            if not matches:
                raise UsageError(f"--bundle {spec!r}: no file matches")
            out_bundles += [Path(m) for m in matches]
        else:
            out_bundles.append(Path(spec))
    out_dirs: list[Path] = []
    for spec in run_dirs:
        p = Path(spec)
        if p.is_file() and looks_like_bundle(p):
            out_bundles.append(p)
        else:
            out_dirs.append(p)
    seen: set[str] = set()
    unique = []
    for b in out_bundles:
        key = os.path.realpath(b)
        if key not in seen:
            seen.add(key)
            unique.append(b)
    return out_dirs, unique


def is_blank(path: Path, limit: int = 1 << 20) -> bool:
    """True for an empty or whitespace-only regular file. Reads only until the first visible character
    (a few bytes for any real log), at most ``limit`` bytes; compressed files are not blank by this test
    (the scanner decompresses them), and neither is what cannot be opened (the probes report that)."""
    import stat

    if path.name.endswith((".gz", ".zst")):
        return False
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return False
    try:
        st_ = os.fstat(fd)
        if not stat.S_ISREG(st_.st_mode):
            return False
        if st_.st_size == 0:
            return True
        seen = 0
        while seen < limit:
            chunk = os.read(fd, 64 * 1024)
            if not chunk:
                return True
            if chunk.strip():
                return False
            seen += len(chunk)
        return False
    except OSError:
        return False
    finally:
        os.close(fd)


def has_kernel_lines(path: Path) -> bool:
    if path.name.endswith((".gz", ".zst")):
        return True  # the scanner reads those; a sniff of compressed bytes would say nothing
    return bool(_KERNEL_LINE.search(read_head(path, SNIFF_KERNEL_BYTES)))


def _own(source: str, why: str) -> InputNote:
    what = _OWN_WHAT.get(why, f"a {why} written by mldebug-rules")
    shown = source.split(" ", 1)[-1] if source.startswith("--") else source
    return InputNote(shown, "own_output", f"{source}: {what}; not read as evidence", False)


def examine(
    logs: Sequence[Path], kernel_logs: Sequence[Path], bundles: Sequence[Path]
) -> tuple[list[Path], list[Path], list[InputNote]]:
    """The named logs and kernel logs worth reading, and a note for each named input that is not."""
    notes: list[InputNote] = []
    keep_logs: list[Path] = []
    for p in logs:
        own = is_own_output(p)
        if own:
            notes.append(_own(f"--log {p}", own))
        elif is_blank(p):
            notes.append(InputNote(str(p), "empty", f"--log {p}: the file is empty; nothing to read", True))
        else:
            keep_logs.append(p)
    keep_kernel: list[Path] = []
    for p in kernel_logs:
        if is_blank(p):
            notes.append(
                InputNote(str(p), "empty", f"--kernel-log {p}: the file is empty; nothing to read", True)
            )
        elif not has_kernel_lines(p):
            notes.append(
                InputNote(
                    str(p),
                    "no_kernel_lines",
                    f"--kernel-log {p}: holds no kernel log line (dmesg, journalctl -k, kern.log); nothing to "
                    "read (a training log goes with --log)",
                    True,
                )
            )
        else:
            keep_kernel.append(p)
    for p in bundles:
        why = _bundle_problem(p)
        if why:
            notes.append(
                InputNote(
                    str(p), "not_a_bundle", f"--bundle {p}: not a bundle ({why}); nothing to read", True
                )
            )
    return keep_logs, keep_kernel, notes


def _bundle_problem(path: Path) -> str:
    """Why ``path`` is not a bundle ("" when it is one, or when only the bundle probe can tell: a file that is
    not a regular one is left to it, under its deadline). Large files are judged by their first bytes, so a
    big bundle is not parsed twice."""
    import stat

    from .collectors.bundles import BundleError, read_bundle

    try:
        st_ = path.stat()
    except OSError:
        return ""
    if not stat.S_ISREG(st_.st_mode):
        return ""
    if is_blank(path):
        return "the file is empty"
    if st_.st_size > SNIFF_BUNDLE_BYTES:
        kind = own_output_kind(read_head(path))
        return "" if kind == "bundle" else "no bundle schema in its first bytes"
    try:
        read_bundle(path)
    except BundleError as e:
        return str(e)
    return ""


def run_dir_notes(run_dirs: Sequence[Path], runfiles: dict[str, Any]) -> list[InputNote]:
    """Notes for what the run directories hold: the tool's own outputs that were skipped, and a directory in
    which nothing was found to read (or only empty files)."""
    from .collectors.rundir import find_run_files

    notes: list[InputNote] = []
    for root in run_dirs:
        files = runfiles.get(str(root)) or find_run_files(root)
        runfiles[str(root)] = files
        prefix = "" if len(run_dirs) == 1 else root.name.rstrip("/") + "/"
        for path, why in files.own_outputs:
            notes.append(_own(prefix + files.rel(path), why))
        readable = any(not is_blank(p) for ps in files.by_role.values() for p in ps)
        if not readable and not files.checkpoint_dirs:
            found = sum(len(ps) for ps in files.by_role.values())
            detail = f"only {found} empty file(s)" if found else "no log, metrics, checkpoint or bundle file"
            notes.append(
                # Not blocking by itself: evidence from elsewhere (a bundle, a named log) still counts; with
                # none, the verdict is `uncertain` anyway (nothing was read).
                InputNote(str(root), "nothing_found", f"{root}: {detail} found; nothing to read", False)
            )
    return notes


def blank_sources(run_dirs: Sequence[Path], runfiles: dict[str, Any], logs: Sequence[Path]) -> set[str]:
    """Citation names (as the logs probe shows them) of the blank logs: a blank file is no evidence."""
    out = {str(p) for p in logs if is_blank(p)}
    for root in run_dirs:
        files = runfiles.get(str(root))
        if files is None:
            continue
        prefix = "" if len(run_dirs) == 1 else root.name.rstrip("/") + "/"
        for role in ("train", "scheduler", "kernel"):
            out |= {prefix + files.rel(p) for p in files.files(role) if is_blank(p)}
    return out
