"""Checkpoint integrity, read-only: sizes, mtimes, zero-byte files, a torch zip's central directory, a
safetensors header, and a size drop against earlier checkpoints.

>>> import io, zipfile
>>> buf = io.BytesIO()
>>> with zipfile.ZipFile(buf, "w") as z: z.writestr("archive/data.pkl", b"x" * 100)
>>> data = buf.getvalue()
>>> inspect_bytes(data[:8], len(data), data[-66000:], "m.pt")
('torch_zip', '')
>>> inspect_bytes(data[:8], len(data) - 30, data[:-30][-66000:], "m.pt")
('torch_zip', 'truncated')
>>> inspect_bytes(b"", 0, b"", "m.pt")
('unknown', 'zero_bytes')
>>> [step_of(p) for p in ("checkpoint-1000/pytorch_model.bin", "global_step500/mp_rank_00_model_states.pt",
...  "ckpt/model_step100.pt", "lightning/epoch=3-step=1200.ckpt", "iter_0001000/mp_rank_00/model_optim_rng.pt",
...  "final.pt")]
[1000, 500, 100, 1200, 1000, -1]
"""

from __future__ import annotations

import json
import os
import re
import struct
from pathlib import Path

from ..engine.safeio import Unreadable, open_regular
from .base import Context, ProbeOutput, ProbeUnavailable
from .numeric import median
from .rundir import RunFiles

_TAIL = 66000  # a zip's end-of-central-directory record sits in the last 65,557 bytes
_MAX_SAFETENSORS_HEADER = 100 << 20  # safetensors caps its JSON header at 100 MB
_MAX_ST_HEADER = 100 * 1024 * 1024
# The step a checkpoint was written at, as HF Trainer, DeepSpeed, Lightning, Megatron and hand-written loops
# name them. The last match in the path wins (checkpoint-1000/step_1000.pt names one step).
_STEP = re.compile(r"(?:checkpoint|ckpt|global_step|step|iter)[-_=]?(\d+)(?=\D|$)", re.I)


def step_of(rel: str) -> int:
    found = _STEP.findall(rel)
    return int(found[-1]) if found else -1


def _last_log_write(files: RunFiles) -> float | None:
    """When the run's training log was last written (its newest mtime)."""
    times = []
    for p in files.files("train"):
        try:
            times.append(os.stat(p).st_mtime)
        except OSError:
            continue
    return max(times) if times else None


def inspect_bytes(head: bytes, size: int, tail: bytes, name: str) -> tuple[str, str]:
    """(format, problem) from the first bytes, the size and the last bytes of a file."""
    if size == 0:
        return "unknown", "zero_bytes"
    if head.startswith(b"PK\x03\x04"):
        return "torch_zip", "" if b"PK\x05\x06" in tail else "truncated"
    if name.endswith(".safetensors") and len(head) >= 8:
        (n,) = struct.unpack("<Q", head[:8])
        if n > _MAX_ST_HEADER or 8 + n > size:
            return "safetensors", "bad_header"
        return "safetensors", ""
    if head[:1] == b"\x80":
        return "torch_legacy", ""
    return "unknown", ""


def _safetensors_ok(path: Path, size: int) -> bool:
    with open_regular(path) as f:
        (n,) = struct.unpack("<Q", f.read(8))
        if n > min(size, _MAX_SAFETENSORS_HEADER):  # a corrupt length must not size a read
            return False
        try:
            header = json.loads(f.read(n))
        except ValueError:
            return False
    end = 0
    for k, v in header.items():
        if k != "__metadata__" and isinstance(v, dict):
            end = max(end, int(v.get("data_offsets", [0, 0])[1]))
    return 8 + n + end <= size


def probe_checkpoints(ctx: Context) -> ProbeOutput:
    out = ProbeOutput("checkpoints")
    found = 0
    for root in ctx.run_dirs:
        files = ctx.files_of(root)
        entries = []
        for p in files.files("checkpoint"):
            try:  # a FIFO or device named like a checkpoint is refused, never opened for reading
                f = open_regular(p)
            except Unreadable as e:
                out.detail += f"{files.rel(p)}: {e.reason}; "
                continue
            with f:
                st = os.fstat(f.fileno())
                head = f.read(16)
                if st.st_size > len(head):
                    f.seek(max(0, st.st_size - _TAIL))
                tail = f.read(_TAIL)
            fmt, problem = inspect_bytes(head, st.st_size, tail, p.name)
            if fmt == "safetensors" and not problem and not _safetensors_ok(p, st.st_size):
                problem = "truncated"
            entries.append((st.st_mtime, files.rel(p), st.st_size, fmt, problem, p.suffix))
        entries.sort()
        newest = max((e[0] for e in entries), default=None)
        # Live only: in a copied or checked-out run directory, mtimes say when the copy was made.
        log_written = None if ctx.offline else _last_log_write(files)
        for i, (mtime, rel, size, fmt, problem, suffix) in enumerate(entries):
            earlier = [e[2] for e in entries[:i] if e[5] == suffix and e[2] > 0]
            ratio = size / median(earlier) if earlier else -1.0
            if not problem and 0 <= ratio < 0.5:
                problem = "size_drop"
            attrs = {
                "size": size,
                "format": fmt,
                "valid": problem in ("", "size_drop"),
                "problem": problem,
                "newest": mtime == newest,
                "size_ratio": round(ratio, 3),
                "step": step_of(rel),
                "log_ahead_s": round(max(0.0, log_written - mtime), 1) if log_written is not None else -1.0,
            }
            ts = mtime if not ctx.offline else None
            out.facts.append(ctx.registry.make("checkpoint.file", attrs, file=rel, ts=ts))
            found += 1
    if not found:
        raise ProbeUnavailable("no checkpoint files")
    out.detail = f"{found} checkpoint file(s)" + (f"; {out.detail}" if out.detail else "")
    return out
