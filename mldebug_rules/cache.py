"""A small on-disk cache for what is slow to build and pure in its inputs: the loaded rule packs and the
compiled hyperscan database. It is what lets a diagnosis start in a fraction of a second. The engine does
not import it: the face hands this module to ``load_packs(cache=...)``, whose ``BlobCache`` it satisfies.

- Keys are content digests of every input (file bytes, versions, options), never modification times.
- Entries are written atomically (a temporary file, then a rename), owner-only, and carry a digest of their
  payload: a truncated or corrupt entry is a miss, never an error.
- An entry is only read from a directory owned by the current user and writable by nobody else, because the
  KB entry is a pickle.
- Any failure (read-only home, full disk) means "no cache": the caller rebuilds, and nothing is reported.

``MLDEBUG_CACHE_DIR`` moves the cache (default ``$XDG_CACHE_HOME/mldebug-rules``, else
``~/.cache/mldebug-rules``); ``MLDEBUG_CACHE=0`` turns it off.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from typing import Any

from .engine.keys import digest  # the one key function: packs, hyperscan databases and YAML data share it

_MAGIC = b"mldebug-cache-1\n"


def cache_dir() -> Path | None:
    if os.environ.get("MLDEBUG_CACHE", "1").strip().lower() in ("0", "no", "off", "false"):
        return None
    explicit = os.environ.get("MLDEBUG_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "mldebug-rules"


def _private(path: Path) -> bool:
    try:
        st = path.stat()
    except OSError:
        return False
    owner_ok = not hasattr(os, "geteuid") or st.st_uid == os.geteuid()
    return owner_ok and not (st.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def get(namespace: str, key: str) -> bytes | None:
    root = cache_dir()
    if root is None:
        return None
    folder = root / namespace
    path = folder / key
    if not (_private(root) and _private(folder) and _private(path)):
        return None
    try:
        blob = path.read_bytes()
    except OSError:
        return None
    head = len(_MAGIC) + 32
    if len(blob) < head or not blob.startswith(_MAGIC):
        return None
    payload = blob[head:]
    if hashlib.sha256(payload).digest() != blob[len(_MAGIC) : head]:
        return None
    return payload


def put(namespace: str, key: str, payload: bytes) -> bool:
    root = cache_dir()
    if root is None:
        return False
    folder = root / namespace
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        folder.mkdir(mode=0o700, exist_ok=True)
        import tempfile  # only on a miss: it drags in shutil, bz2, lzma and random

        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")  # created 0600
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(_MAGIC + hashlib.sha256(payload).digest() + payload)
            os.replace(tmp, folder / key)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
    except OSError:
        return False
    return True


def yaml_data(text: str) -> Any:
    """A data file the package ships, parsed once and then served as JSON from the cache: importing yaml
    alone costs more than the rest of some probes. Only documents that survive a JSON round trip unchanged
    are cached (no dates, no integer keys)."""
    import json

    key = digest(["yaml-data", text])
    blob = get("yaml-data", key)
    if blob is not None:
        try:
            return json.loads(blob)
        except ValueError:
            pass
    from .engine.yamlload import load_data

    doc = load_data(text)
    try:
        encoded = json.dumps(doc)
        if json.loads(encoded) == doc:
            put("yaml-data", key, encoded.encode())
    except (TypeError, ValueError):
        pass
    return doc
