"""Recognise what mldebug-rules itself wrote, so that it is never read back as evidence.

`diagnose RUN > RUN/diagnosis.txt` puts a report inside the run directory under a name that the conventions
read as a training log; the next `diagnose RUN` would otherwise cite the report's own quotes ("seen:
train.log:12: CUDA out of memory") as if the run had printed them. Reports, bundles and smoke plans are
recognised by their content (their first bytes), whatever they are called, and by the names the tool uses.

>>> own_output_kind("mldebug-rules diagnosis: NO FAILURE found\\n\\n1. What the probes found\\n")
'report'
>>> own_output_kind('{\\n  "schema": "mldebug-rules/report/v1",\\n  "verdict": "uncertain"')
'report'
>>> own_output_kind('{\\n "schema": "mldebug-rules/bundle/v1",\\n "facts": []}')
'bundle'
>>> own_output_kind("\\x1b[1mmldebug-rules diagnosis:\\x1b[0m UNCERTAIN")
'report'
>>> own_output_kind("step 10 loss 2.31\\nmldebug-rules diagnosis: quoted later in a log\\n") is None
True
>>> own_output_name("diagnosis.mldebug.txt"), own_output_name("train.log")
(True, False)
"""

from __future__ import annotations

import os
import re
from pathlib import Path

SNIFF_BYTES = 4096
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# The first line of a text or markdown report (report.to_text / render.py), after colour codes are removed.
_REPORT_HEAD = re.compile(r"\A\s*(?:#+\s*)?mldebug-rules (?:diagnosis|smoke plan|rules)\b")
_SMOKE_PLAN_HEAD = re.compile(r"\A\s*smoke plan for \S")
# JSON documents the tool writes all carry a schema of its own near their top.
_SCHEMA = re.compile(r'"schema"\s*:\s*"mldebug-rules/(\w+)/v\d+"')


def own_output_kind(head: str) -> str | None:
    """``report``, ``bundle``, ``plan`` (or another schema's name) when ``head`` (a file's first bytes) is
    something mldebug-rules wrote; None otherwise."""
    text = _ANSI.sub("", head.lstrip("\ufeff"))
    if _REPORT_HEAD.match(text):
        return "report"
    if _SMOKE_PLAN_HEAD.match(text):
        return "plan"
    if text.lstrip().startswith("{"):
        m = _SCHEMA.search(text)
        if m:
            return m.group(1)
    return None


def own_output_name(name: str) -> bool:
    """Names the tool and its documentation use for what it writes (`X.mldebug.txt`, `mldebug-report.md`).
    Bundles (`*.mldebug.json`) are not in this list: they are read, as bundles."""
    low = name.lower()
    if low.endswith(".mldebug.json"):
        return False
    return ".mldebug." in low or low.startswith(("mldebug-report", "mldebug_report"))


def read_head(path: Path | str, limit: int = SNIFF_BYTES) -> str:
    """The first bytes of a regular file, decoded leniently ("" when it cannot be read or is not a regular
    file: a FIFO or a device is never opened for a sniff)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return ""
    try:
        import stat

        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ""
        data = os.read(fd, limit)
    except OSError:
        return ""
    finally:
        os.close(fd)
    if data[:2] == b"\x1f\x8b":  # gzip: the tool never writes compressed files
        return ""
    return data.decode("utf-8", "replace")


def is_own_output(path: Path | str) -> str | None:
    """Why ``path`` is the tool's own output (``report``, ``bundle``, ``named``...), or None."""
    kind = own_output_kind(read_head(path))
    if kind:
        return kind
    return "named" if own_output_name(os.path.basename(str(path))) else None
