"""What ``/proc`` says about a live process without ptrace: its state, the kernel function it sleeps in
(wchan), the system call it is blocked in and on which file, the file system under that file, and its CPU
time. Read-only and bounded: each read is capped, and nothing is ever written or signalled.

The analysis functions take the text of those files, so recorded values replay without a live process:

>>> syscall_of("0 0x5 0x7ffd1000 0x1000 0x0 0x0 0x0 0x7ffd0ff8 0x7f00aa", "x86_64")
('read', 5)
>>> syscall_of("running", "x86_64")
('running', -1)
>>> mount_of("/mnt/ckpt/step100/model.pt", [("/", "ext4"), ("/mnt/ckpt", "nfs4"), ("/mnt", "xfs")])
('/mnt/ckpt', 'nfs4')
"""

from __future__ import annotations

import os
import platform
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

_CAP = 64 * 1024

# The system calls a blocked process is usually found in, by number (x86_64 and the generic table that
# aarch64 and riscv64 use). Only these are named; others keep their number.
_SYSCALLS: dict[str, dict[int, str]] = {
    "x86_64": {
        0: "read", 1: "write", 2: "open", 7: "poll", 17: "pread64", 18: "pwrite64", 19: "readv", 20: "writev",
        23: "select", 35: "nanosleep", 42: "connect", 43: "accept", 45: "recvfrom", 47: "recvmsg", 61: "wait4",
        73: "flock", 74: "fsync", 75: "fdatasync", 162: "sync", 202: "futex", 208: "io_getevents",
        230: "clock_nanosleep", 232: "epoll_wait", 257: "openat", 262: "newfstatat", 270: "pselect6",
        271: "ppoll", 281: "epoll_pwait", 288: "accept4", 306: "syncfs", 332: "statx", 437: "openat2",
    },
    "generic": {
        4: "io_getevents", 22: "epoll_pwait", 32: "flock", 56: "openat", 63: "read", 64: "write", 65: "readv",
        66: "writev", 67: "pread64", 68: "pwrite64", 72: "pselect6", 73: "ppoll", 79: "newfstatat", 81: "sync",
        82: "fsync", 83: "fdatasync", 98: "futex", 101: "nanosleep", 115: "clock_nanosleep", 202: "accept",
        203: "connect", 207: "recvfrom", 212: "recvmsg", 242: "accept4", 260: "wait4", 267: "syncfs",
        291: "statx", 437: "openat2",
    },
}  # fmt: skip
# System calls whose first argument is a file descriptor: the blocked file can be named from /proc/PID/fd.
_FD_FIRST = frozenset(
    {"read", "write", "pread64", "pwrite64", "readv", "writev", "fsync", "fdatasync", "flock", "recvfrom",
     "recvmsg", "accept", "accept4", "connect", "syncfs"}
)  # fmt: skip


def syscall_of(text: str, machine: str | None = None) -> tuple[str, int]:
    """(name, first argument) of a /proc/PID/syscall line; 'running' when the process is on a CPU,
    'none' when it is not in a system call."""
    parts = text.split()
    if not parts:
        return "", -1
    if parts[0] == "running":
        return "running", -1
    try:
        nr = int(parts[0])
    except ValueError:
        return "", -1
    if nr < 0:
        return "none", -1
    table = _SYSCALLS["x86_64" if (machine or platform.machine()) in ("x86_64", "AMD64") else "generic"]
    try:
        arg = int(parts[1], 16) if len(parts) > 1 else -1
    except ValueError:
        arg = -1
    return table.get(nr, f"syscall_{nr}"), arg


def mount_of(path: str, mounts: Sequence[tuple[str, str]]) -> tuple[str, str]:
    """The longest mount point containing ``path``, and its file-system type."""
    best = ("", "")
    for point, fstype in mounts:
        inside = path == point or path.startswith(point.rstrip("/") + "/") or point == "/"
        if inside and len(point) >= len(best[0]):
            best = (point, fstype)
    return best


def parse_mountinfo(text: str) -> list[tuple[str, str]]:
    """(mount point, fs type) pairs of a /proc/PID/mountinfo (octal escapes in paths decoded)."""
    out = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields = left.split()
        if not sep or len(fields) < 5:
            continue
        point = fields[4].replace("\\040", " ").replace("\\011", "\t").replace("\\134", "\\")
        fstype = right.split()[0] if right.split() else ""
        out.append((point, fstype))
    return out


def _read(path: str, cap: int = _CAP) -> str:
    """A /proc file's text, capped; '' when it cannot be read (gone, no permission). /proc files report a
    size of 0, so the cap, not st_size, bounds the read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return ""
    try:
        return os.read(fd, cap).decode("utf-8", "replace")
    except OSError:
        return ""
    finally:
        os.close(fd)


@dataclass
class ProcState:
    state: str = ""  # R, S, D, T, Z... ('' when unreadable)
    wchan: str = ""
    syscall: str = ""
    blocked_path: str = ""
    blocked_fs: str = ""  # fs type of the mount under blocked_path; fifo, pipe, socket for those
    blocked_mount: str = ""  # the mount point under blocked_path
    kernel_stack: str = ""
    cpu_s: float = -1.0  # user + system CPU seconds so far
    threads_d: int = 0  # threads in uninterruptible sleep
    open_files: int = -1
    sockets: int = -1

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _fd_target(pid: int, fd: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/fd/{fd}")
    except OSError:
        return ""


def _classify_target(
    pid: int, fd: int, target: str, mounts: Sequence[tuple[str, str]], network: frozenset[str]
) -> str:
    if target.startswith("pipe:"):
        return "pipe"
    if target.startswith("socket:"):
        return "socket"
    if not target.startswith("/"):
        return ""
    _point, fstype = mount_of(target, mounts)
    if fstype in network or fstype.startswith("fuse"):
        return fstype  # never stat a file on a stalled network mount: the stat itself would hang
    try:
        mode = os.stat(f"/proc/{pid}/fd/{fd}").st_mode
    except OSError:
        return fstype
    return "fifo" if stat.S_ISFIFO(mode) else fstype


def read_proc(pid: int, network: frozenset[str] = frozenset()) -> ProcState:
    """One read of a process's /proc entries (nothing that needs ptrace; /proc/PID/stack needs root)."""
    st = ProcState()
    status = _read(f"/proc/{pid}/status", 8192)
    for line in status.splitlines():
        if line.startswith("State:"):
            st.state = line.split()[1] if len(line.split()) > 1 else ""
            break
    st.wchan = _read(f"/proc/{pid}/wchan", 256).strip()
    if st.wchan == "0":
        st.wchan = ""
    name, arg = syscall_of(_read(f"/proc/{pid}/syscall", 512))
    st.syscall = name
    mounts = parse_mountinfo(_read(f"/proc/{pid}/mountinfo", 512 * 1024))
    if name in _FD_FIRST and 0 <= arg < 1 << 20:
        target = _fd_target(pid, arg)
        st.blocked_path = target[:500]
        st.blocked_fs = _classify_target(pid, arg, target, mounts, network)
        if target.startswith("/"):
            st.blocked_mount = mount_of(target, mounts)[0]
    st.kernel_stack = _read(f"/proc/{pid}/stack", 4096).strip()[:2000]
    st.cpu_s = cpu_seconds(_read(f"/proc/{pid}/stat", 4096))
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        tids = []
    for tid in tids[:512]:
        s = _read(f"/proc/{pid}/task/{tid}/stat", 4096)
        if s.rpartition(")")[2].split()[:1] == ["D"]:
            st.threads_d += 1
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        fds = []
    if fds:
        st.open_files = st.sockets = 0
        for fd in fds[:65536]:
            t = _fd_target(pid, int(fd)) if fd.isdigit() else ""
            if t.startswith("socket:"):
                st.sockets += 1
            elif t.startswith("/"):
                st.open_files += 1
    return st


def cpu_seconds(stat_text: str) -> float:
    """utime + stime of a /proc/PID/stat line, in seconds (-1 when unreadable).

    >>> cpu_seconds("42 (python3 (x)) S 1 42 42 0 -1 4194560 1 0 0 0 250 50 0 0 20 0 1 0 1 1 1")
    3.0
    """
    rest = stat_text.rpartition(")")[2].split()
    if len(rest) < 13:
        return -1.0
    try:
        ticks = int(rest[11]) + int(rest[12])
    except ValueError:
        return -1.0
    try:
        hz = os.sysconf("SC_CLK_TCK")
    except (ValueError, OSError, AttributeError):
        hz = 100
    return round(ticks / float(hz or 100), 3)
