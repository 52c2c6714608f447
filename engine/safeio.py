"""Opening input files safely: regular files only, and never more bytes than a cap.

Every collector that reads a file from a run directory, a ``--log`` or a bundle opens it here. What a run
directory holds is not trusted: a ``train.log`` may be a FIFO (``open`` blocks until a writer comes), a symlink
to ``/dev/zero`` (endless, and ``st_size`` says 0), or a device whose mere opening has side effects. So:

* the path is ``stat``-ed first and anything but a regular file is refused without being opened;
* it is then opened with ``O_NONBLOCK`` (a FIFO swapped in after the ``stat`` cannot block the open) and
  checked again with ``fstat`` on the descriptor actually read;
* ``read_capped`` reads at most ``cap + 1`` bytes, whatever ``st_size`` claims, and says when it stopped.

A refusal is an ``Unreadable`` error whose message is one line for the report ("not a regular file (fifo)"),
so that the input shows up as unreadable evidence instead of hanging or exhausting memory.

>>> import tempfile, os
>>> d = tempfile.mkdtemp()
>>> os.mkfifo(os.path.join(d, "train.log"))
>>> try:
...     open_regular(os.path.join(d, "train.log"))
... except Unreadable as e:
...     print(e.reason)
not a regular file (fifo)
"""

from __future__ import annotations

import os
import stat
from typing import BinaryIO

_KINDS = (
    (stat.S_ISDIR, "is a directory"),
    (stat.S_ISFIFO, "not a regular file (fifo)"),
    (stat.S_ISCHR, "not a regular file (character device)"),
    (stat.S_ISBLK, "not a regular file (block device)"),
    (stat.S_ISSOCK, "not a regular file (socket)"),
)


class Unreadable(OSError):
    """An input that is not read: missing, not permitted, not a regular file, or over its byte cap."""

    def __init__(self, path: str | os.PathLike[str], reason: str) -> None:
        super().__init__(f"{os.fspath(path)}: {reason}")
        self.path = os.fspath(path)
        self.reason = reason


def kind_problem(mode: int) -> str | None:
    """Why a file of this mode is not read (None for a regular file)."""
    if stat.S_ISREG(mode):
        return None
    for test, why in _KINDS:
        if test(mode):
            return why
    return "not a regular file"


def _reason(e: OSError) -> str:
    if isinstance(e, FileNotFoundError):
        return "file not found"
    if isinstance(e, PermissionError):
        return "permission denied"
    if isinstance(e, IsADirectoryError):
        return "is a directory"
    return f"cannot open: {e.strerror or e}"


def open_regular(path: str | os.PathLike[str]) -> BinaryIO:
    """An unbuffered binary file object for `path`, which must be a regular file (symlinks followed)."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise Unreadable(path, _reason(e)) from None
    why = kind_problem(st.st_mode)
    if why:
        raise Unreadable(path, why)
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        raise Unreadable(path, _reason(e)) from None
    try:
        why = kind_problem(os.fstat(fd).st_mode)  # swapped for a FIFO or device since the stat above
        if why:
            raise Unreadable(path, why)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb", buffering=0)
    except BaseException:
        os.close(fd)
        raise


def read_capped(path: str | os.PathLike[str], cap: int) -> bytes:
    """The whole content of a regular file of at most `cap` bytes; ``Unreadable`` when it is more.

    The cap is enforced on the bytes actually read, not on ``st_size`` (which a growing file, or a procfs-like
    file, gets wrong)."""
    with open_regular(path) as fh:
        data = read_up_to(fh, cap + 1)
    if len(data) > cap:
        raise Unreadable(path, f"larger than {cap} bytes; not read")
    return data


def read_up_to(fh: BinaryIO, limit: int) -> bytes:
    """At most `limit` bytes from `fh` (fewer at end of file), read in pieces so no buffer exceeds it."""
    parts: list[bytes] = []
    left = limit
    while left > 0:
        chunk = fh.read(min(left, 1 << 20))
        if not chunk:
            break
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)
