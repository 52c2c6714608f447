"""Space and inodes on the filesystems a run uses, and whether they are network filesystems.

``statvfs`` on a dead NFS mount blocks in the kernel, so each path is measured by its own short-lived child
process with a deadline; one that does not answer becomes a ``disk.usage`` fact with ``stalled=True``, and
the probe reports ``timeout``. Mount types come from /proc/mounts, which does not touch the filesystems.

>>> mounts = parse_mounts("server:/export /scratch nfs4 rw,relatime 0 0\\n/dev/nvme0n1p1 / ext4 rw 0 0\\n"
...                       "tmpfs /dev/shm tmpfs rw 0 0\\ns3fs /mnt/my\\\\040bucket fuse.s3fs rw 0 0\\n")
>>> mount_for("/scratch/r7/ckpt", mounts), mount_for("/home/a", mounts), mount_for("/mnt/my bucket/x", mounts)
(('/scratch', 'nfs4', True), ('/', 'ext4', False), ('/mnt/my bucket', 'fuse.s3fs', True))
>>> usage_attrs({"frsize": 4096, "blocks": 1000, "bfree": 10, "bavail": 5, "files": 100, "ffree": 0})
{'used_pct': 99.5, 'free_bytes': 20480, 'total_bytes': 4096000, 'inodes_used_pct': 100.0}
"""

from __future__ import annotations

import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..engine.facts import FactError
from .base import CommandResult, Context, ProbeOutput, run_command
from .deadlines import command_timeout, hostname

NETWORK_FS = frozenset(
    {
        "nfs",
        "nfs4",
        "cifs",
        "smb3",
        "smbfs",
        "lustre",
        "gpfs",
        "beegfs",
        "ceph",
        "cephfs",
        "glusterfs",
        "panfs",
        "wekafs",
        "afs",
        "9p",
        "virtiofs",
        "davfs",
        "orangefs",
        "pvfs2",
    }
)
_LOCAL_FUSE = frozenset({"fuse.lxcfs", "fuse-overlayfs", "fuse.fuse-overlayfs", "fuse.portal", "fusectl"})
MAX_CHECKPOINT_DIRS = 4
# Runs in a fresh interpreter (-I -S: no site, no user paths) so it starts in tens of milliseconds.
_WORKER = (
    "import json, os, sys\n"
    "s = os.statvfs(sys.argv[1])\n"
    "keys = ('frsize', 'blocks', 'bfree', 'bavail', 'files', 'ffree')\n"
    "print(json.dumps({k: getattr(s, 'f_' + k) for k in keys}))\n"
)


def parse_mounts(text: str) -> list[tuple[str, str]]:
    """(mount point, fstype) from /proc/mounts, octal escapes (\\040 for a space) decoded."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3:
            point = parts[1].encode().decode("unicode_escape") if "\\" in parts[1] else parts[1]
            out.append((point, parts[2]))
    return out


def is_network(fstype: str) -> bool:
    base = fstype.split(".", 1)[0]
    if fstype in _LOCAL_FUSE:
        return False
    return fstype in NETWORK_FS or base in NETWORK_FS or fstype.startswith("fuse.") or fstype == "fuse"


def mount_for(path: str, mounts: list[tuple[str, str]]) -> tuple[str, str, bool]:
    """The mount holding ``path`` by longest prefix, without resolving links (that could block)."""
    best = ("", "", False)
    for point, fstype in mounts:
        if (path == point or path.startswith(point.rstrip("/") + "/") or point == "/") and len(point) >= len(
            best[0]
        ):
            best = (point, fstype, is_network(fstype))
    return best


def usage_attrs(s: dict[str, int]) -> dict[str, Any]:
    """df's arithmetic: Use% = used / (used + available to unprivileged users)."""
    used = s["blocks"] - s["bfree"]
    denom = used + s["bavail"]
    attrs: dict[str, Any] = {
        "used_pct": round(100.0 * used / denom, 2) if denom > 0 else -1.0,
        "free_bytes": int(s["bavail"] * s["frsize"]),
        "total_bytes": int(s["blocks"] * s["frsize"]),
        "inodes_used_pct": round(100.0 * (s["files"] - s["ffree"]) / s["files"], 2)
        if s["files"] > 0
        else -1.0,
    }
    return attrs


def targets(ctx: Context) -> list[tuple[str, str]]:
    """(role, absolute path) for every filesystem worth measuring, each path once."""
    out: list[tuple[str, str]] = []
    for root in ctx.run_dirs:
        out.append(("run_dir", os.path.abspath(root)))
        files = ctx.files_of(root)
        dirs = {os.path.abspath(p.parent) for p in files.files("checkpoint")}
        dirs |= {os.path.abspath(p) for p in files.checkpoint_dirs}
        for d in sorted(dirs)[:MAX_CHECKPOINT_DIRS]:
            out.append(("checkpoint_dir", d))
    # Not tempfile.gettempdir(): it test-writes a file to pick a directory, and probes never write.
    out.append(("tmp", os.path.abspath(os.environ.get("TMPDIR") or "/tmp")))
    out.append(("shm", "/dev/shm"))
    home = os.path.expanduser("~")
    for var, default in (
        ("HF_HOME", os.path.join(home, ".cache", "huggingface")),
        ("TORCH_HOME", os.path.join(home, ".cache", "torch")),
    ):
        out.append(("cache", os.path.abspath(os.environ.get(var) or default)))
    # Caches moved off HF_HOME (often onto a shared or scratch filesystem of their own).
    for var in ("HF_HUB_CACHE", "HF_DATASETS_CACHE", "TRANSFORMERS_CACHE"):
        if os.environ.get(var):
            out.append(("cache", os.path.abspath(os.environ[var])))
    seen: set[str] = set()
    unique = []
    for role, path in out:
        if path not in seen:
            seen.add(path)
            unique.append((role, path))
    return unique


def statvfs_in_child(path: str, timeout_s: float) -> CommandResult:
    return run_command([sys.executable, "-I", "-S", "-c", _WORKER, path], timeout_s)


def probe_disks(ctx: Context) -> ProbeOutput:
    out = ProbeOutput("disks")
    recorded = ctx.options.get("recorded", {})
    try:
        with open("/proc/mounts") as f:
            mounts = parse_mounts(recorded.get("mounts") or f.read())
    except OSError:
        mounts = parse_mounts(recorded.get("mounts", ""))
    timeout_s = command_timeout()
    todo = targets(ctx)
    measure = recorded.get("statvfs") or (lambda p: statvfs_in_child(p, timeout_s))
    with ThreadPoolExecutor(max_workers=max(1, len(todo)), thread_name_prefix="statvfs") as pool:
        results = list(pool.map(lambda rp: measure(rp[1]), todo))
    host = hostname()
    stalled: list[str] = []
    for (role, path), res in zip(todo, results, strict=True):
        _point, fstype, network = mount_for(path, mounts)
        attrs: dict[str, Any] = {"path": path, "role": role, "fstype": fstype, "network": network}
        if res.status == "timeout":
            attrs["stalled"] = True
            stalled.append(f"{path} ({fstype or 'unknown fs'})")
        elif res.status != "ok":
            continue  # absent cache directories are normal
        else:
            try:
                attrs.update(usage_attrs(json.loads(res.stdout)))
            except (ValueError, KeyError, TypeError):
                continue
        try:
            out.facts.append(
                ctx.registry.make("disk.usage", attrs, probe="disks", host=host, text=f"{role} {path}")
            )
        except FactError:
            continue
    out.detail = f"{len(out.facts)} filesystem(s)"
    if stalled:
        out.status = "timeout"
        out.detail += f"; statvfs did not answer within {timeout_s:g} s: {', '.join(stalled)}"
    return out
