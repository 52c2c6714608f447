"""``mldebug-rules collect``: record the probes' facts into a replayable, schema-versioned bundle.

The bundle holds what the probes saw, not what the rules concluded: replaying it with ``diagnose --bundle``
(or from a run directory that contains it) runs today's rules over yesterday's evidence. Everything written
passes through ``redact``; the only file written is ``--out``.

Layout (``mldebug-rules/bundle/v1``)::

    {"schema": "mldebug-rules/bundle/v1",
     "tool": {"name": "mldebug-rules", "version": "0.1.0"},
     "host": "node17", "created": "2024-05-01T12:00:00Z", "created_ts": 1714564800.0,
     "offline": false, "run_dirs": ["/runs/r7"],
     "probes": [{"name": "gpu", "status": "timeout", "detail": "...", "seconds": 5.0, "facts": 0}],
     "facts": [{"kind": "kernel.xid", "attrs": {...}, "origin": "probe", "source": "dmesg:12", ...}],
     "scrollback": [{"file": "train.log", "lines": [[1042, "..."]]}]}
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from . import __version__
from .collectors.base import ProbeOutput, run_probes
from .collectors.bundles import SCHEMA, bundle_checksum
from .collectors.deadlines import hostname
from .collectors.registry import default_probes
from .errors import UsageError
from .redact import redact_obj

SCROLLBACK_FILES = 16


def build_bundle(
    outputs: Sequence[ProbeOutput], run_dirs: Sequence[Path], offline: bool, now: float
) -> dict[str, Any]:
    facts = [f for o in outputs for f in o.facts]
    scrollback = [
        {"file": f.file, "lines": f.extra.get("scrollback", [])}
        for f in facts
        if f.kind == "log.tail" and f.extra.get("scrollback")
    ]
    doc = {
        "schema": SCHEMA,
        "tool": {"name": "mldebug-rules", "version": __version__},
        "host": hostname(),
        "created": datetime.fromtimestamp(now, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "created_ts": round(now, 3),
        "offline": offline,
        "run_dirs": [str(p) for p in run_dirs],
        "probes": [
            {
                "name": o.name,
                "status": o.status,
                "detail": o.detail,
                "seconds": round(o.seconds, 3),
                "facts": sum(1 for f in o.facts if f.kind != "probe.status"),
            }
            for o in outputs
        ],
        "facts": [f.to_json() for f in facts],
        "scrollback": sorted(scrollback, key=lambda s: s["file"])[:SCROLLBACK_FILES],
    }
    # The raw stacks the stacks probe read (py-spy JSON and /proc, per process and sample): what a person
    # reads when the classification is in doubt, and what `stacks.analyse` replays.
    stacks = next((o.payload["stacks"] for o in outputs if o.payload.get("stacks")), None)
    if stacks is not None:
        doc["stacks"] = stacks
    return redact_obj(doc)


def write_atomically(path: Path, data: bytes) -> None:
    """Write `data` to `path` whole or not at all: a temporary file beside it, fsync, then rename (a full disk
    leaves no partial bundle behind, and a reader never sees a half-written one)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent or Path("."))
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # the rename itself is durable once the directory is synced
        dfd = os.open(path.parent or Path("."), os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def collect(req: Any) -> dict[str, Any]:
    """Run every probe but the bundle replayer (a bundle never nests another) and build the bundle."""
    from .diagnose import check_inputs, load_kb, probe_context

    check_inputs(req)
    kb = load_kb(req)
    ctx = probe_context(req, kb, with_bundles=False)
    probes = [p for p in default_probes() if p.name != "bundle"]
    outputs = run_probes(ctx, probes)
    return build_bundle(outputs, req.run_dirs, req.offline, time.time())


def collect_main(args: argparse.Namespace) -> int:
    from .diagnose import Request

    out = Path(args.out)
    if out.is_dir():
        raise UsageError(f"--out {out}: is a directory")
    req = Request(
        run_dirs=[Path(x) for x in args.run_dirs],
        logs=[Path(x) for x in getattr(args, "log", [])],
        kernel_logs=[Path(x) for x in getattr(args, "kernel_log", [])],
        rules_dirs=[Path(x) for x in getattr(args, "rules", [])],
        offline=bool(getattr(args, "offline", False)),
    )
    doc = collect(req)
    doc["checksum"] = bundle_checksum(doc)  # last key: a cut file loses it, an edited one fails it
    text = json.dumps(doc, indent=1, ensure_ascii=False, default=str) + "\n"
    try:
        write_atomically(out, text.encode("utf-8"))
    except OSError as e:
        raise UsageError(f"--out {out}: {e.strerror or e}; nothing written") from None
    states = ", ".join(f"{p['name']} {p['status']}" for p in doc["probes"])
    print(f"mldebug-rules: wrote {out}: {len(doc['facts'])} facts ({states})", file=sys.stderr)
    return 0
