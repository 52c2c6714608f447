"""Find a run directory's files by the conventions in CONTRACT.md.

>>> classify("dmesg.txt"), classify("slurm-123.out"), classify("train.log"), classify("metrics.jsonl")
('kernel', 'scheduler', 'train', 'metrics')
>>> classify("nvidia-smi-q.txt"), classify("model.safetensors"), classify("run.mldebug.json"), classify("a.png")
('gpu', 'checkpoint', 'bundle', None)
"""

from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..engine.safeio import open_regular
from .own_outputs import is_own_output

MAX_DEPTH = 6
MAX_FILES = 20000
SKIP_DIRS = {".git", ".mldebug", "__pycache__", ".hg", ".svn", "node_modules", ".venv", "venv"}
_COMPRESSED = (".gz", ".zst")
_CHECKPOINT_SUFFIXES = (".pt", ".pth", ".ckpt", ".bin", ".safetensors")
_LOG_SUFFIXES = (".log", ".out", ".err", ".txt")
# PBS/Torque and Grid Engine name a job's output JOBNAME.oJOBID and JOBNAME.eJOBID (an array task adds
# -TASK or .TASK); their wall-time kills are written there.
_PBS_OUTPUT = re.compile(r"\.[oe]\d+(?:[.-]\d+)?$")
# Roles whose files a redirected report or a renamed bundle could land in (read as text by the probes).
_SNIFFED_ROLES = ("train", "scheduler", "kernel", "gpu")


def _strip_compression(name: str) -> str:
    for suffix in _COMPRESSED:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def classify(name: str) -> str | None:
    """The role of a file by its name alone (the order of tests follows CONTRACT.md)."""
    base = _strip_compression(name)
    low = base.lower()
    if low.startswith(("dmesg", "kern.log", "journal", "syslog")):
        return "kernel"
    if low.startswith("nvidia-smi"):
        return "gpu"
    if fnmatch.fnmatch(low, "slurm-*.out") or fnmatch.fnmatch(low, "slurm-*.err") or _PBS_OUTPUT.search(base):
        return "scheduler"
    if name.endswith(".mldebug.json"):
        return "bundle"
    if (
        low.endswith(".jsonl")
        or low == "metrics.csv"
        or low == "trainer_state.json"
        or low.startswith("events.out.tfevents.")
        or low == "wandb-summary.json"
    ):
        return "metrics"
    if low.endswith(_CHECKPOINT_SUFFIXES):
        return "checkpoint"
    if low.endswith(_LOG_SUFFIXES) or low in ("stdout", "stderr"):
        return "train"
    return None


# A saved `nvidia-smi --query-gpu=... --format=csv` log keeps whatever name its author gave it
# (gpu_stats.csv, smi_log.csv): its header, made of nvidia-smi's own field names, says what it is.
_SMI_CSV_FIELDS = re.compile(
    rb"(?:^|,)\s*(?:utilization\.gpu|temperature\.gpu|clocks\.(?:sm|gr|current\.sm|max\.sm)|"
    rb"clocks_(?:throttle|event)_reasons\.[a-z_.]+|power\.draw|memory\.used)\s*(?:\[[^\]]*\])?\s*(?=,|\r?$)",
    re.M,
)


_CSV_COUNTERS = frozenset({"epoch", "step", "global_step", "iter", "iteration", "trainer/global_step"})


def sniff_csv(path: Path) -> str | None:
    """The role of a `.csv` file that its name does not give: a saved nvidia-smi query log is `gpu`, a
    training logger's table (a counter column and a loss column) is `metrics`."""
    try:
        with open_regular(path) as f:
            head = f.read(1024)
    except OSError:
        return None
    first = head.split(b"\n", 1)[0]
    if len(_SMI_CSV_FIELDS.findall(first)) >= 2:
        return "gpu"
    # A training logger's CSV under a name of its own (Ultralytics' results.csv, Keras CSVLogger's history.csv,
    # a hand-written log.csv): a counter column and a loss column.
    fields = {f.strip().strip('"').lower() for f in first.decode("utf-8", "replace").split(",")}
    if fields & _CSV_COUNTERS and any("loss" in f for f in fields):
        return "metrics"
    return None


@dataclass
class RunFiles:
    root: Path
    by_role: dict[str, list[Path]] = field(default_factory=dict)
    checkpoint_dirs: list[Path] = field(default_factory=list)
    issues: list[str] = field(default_factory=list)
    own_outputs: list[tuple[Path, str]] = field(default_factory=list)  # what mldebug-rules wrote: never read

    def files(self, role: str) -> list[Path]:
        return self.by_role.get(role, [])

    def rel(self, path: Path) -> str:
        try:
            return path.relative_to(self.root).as_posix()
        except ValueError:
            return str(path)


def find_run_files(root: Path, max_depth: int = MAX_DEPTH) -> RunFiles:
    """Walk ``root`` read-only, in sorted order so the result is deterministic."""
    out = RunFiles(root=root)
    count = 0

    def onerror(e: OSError) -> None:
        out.issues.append(f"cannot list {e.filename}: {e.strerror}")

    for dirpath, dirnames, filenames in os.walk(root, onerror=onerror, followlinks=False):
        here = Path(dirpath)
        depth = len(here.relative_to(root).parts)
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        if depth >= max_depth:
            if dirnames:
                out.issues.append(f"{out.rel(here)}: deeper than {max_depth} levels, not read")
            dirnames[:] = []
        for d in dirnames:
            if d.startswith("checkpoint-") or d.startswith("global_step"):
                out.checkpoint_dirs.append(here / d)
        for name in sorted(filenames):
            role = classify(name)
            if role is None and name.lower().endswith(".csv"):
                role = sniff_csv(here / name)
            if role is None:
                continue
            if role in _SNIFFED_ROLES:
                own = is_own_output(here / name)  # `diagnose RUN > RUN/diagnosis.txt` is not evidence
                if own:
                    out.own_outputs.append((here / name, own))
                    continue
            count += 1
            if count > MAX_FILES:
                out.issues.append(f"more than {MAX_FILES} files; the rest are not read")
                return out
            out.by_role.setdefault(role, []).append(here / name)
    return out
