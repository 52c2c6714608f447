"""The on-disk cache behind a fast start: a changed pack is never served stale, a damaged or foreign entry is a
miss, errors are never cached, and MLDEBUG_CACHE=0 writes nothing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from mldebug_rules.engine.packs import PackError, load_packs
from test_packs import GOOD_RULE, pack

from mldebug_rules import cache


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "cache"
    monkeypatch.setenv("MLDEBUG_CACHE_DIR", str(d))
    monkeypatch.delenv("MLDEBUG_CACHE", raising=False)
    return d


def entries(d: Path, ns: str) -> list[Path]:
    return sorted((d / ns).glob("[0-9a-f]*")) if (d / ns).is_dir() else []


def test_roundtrip_and_damage_is_a_miss(cache_dir: Path) -> None:
    assert cache.put("t", "k", b"payload")
    assert cache.get("t", "k") == b"payload"
    path = cache_dir / "t" / "k"
    assert oct(path.stat().st_mode & 0o777) == oct(0o600)
    blob = path.read_bytes()
    path.write_bytes(blob[:-1])  # truncated
    assert cache.get("t", "k") is None
    path.write_bytes(blob[:-1] + b"X")  # same length, other bytes
    assert cache.get("t", "k") is None
    path.write_bytes(b"")
    assert cache.get("t", "k") is None


def test_writable_by_others_is_not_read(cache_dir: Path) -> None:
    cache.put("t", "k", b"payload")
    os.chmod(cache_dir / "t", 0o777)
    assert cache.get("t", "k") is None


def test_unwritable_cache_is_no_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("MLDEBUG_CACHE_DIR", str(blocker / "cache"))
    assert cache.put("t", "k", b"x") is False
    assert cache.get("t", "k") is None


def test_digest_parts_cannot_run_together() -> None:
    assert cache.digest(["ab", "c"]) != cache.digest(["a", "bc"])


def test_kb_cache_hit_and_invalidation(cache_dir: Path, tmp_path: Path) -> None:
    d = pack(tmp_path, GOOD_RULE)
    first = load_packs([d], entry_points=False, cache=cache)
    assert len(entries(cache_dir, "kb")) == 1
    again = load_packs([d], entry_points=False, cache=cache)
    assert [r.id for r in again.rules] == [r.id for r in first.rules]
    assert len(entries(cache_dir, "kb")) == 1  # served, not rebuilt
    # An edit that keeps the size and the second-resolution mtime still changes the key: keys are contents.
    rules = d / "rules.yaml"
    st = rules.stat()
    text = rules.read_text()
    assert "r1" in text
    rules.write_text(text.replace("r1", "r2", 1))
    os.utime(rules, ns=(st.st_atime_ns, st.st_mtime_ns))
    edited = load_packs([d], entry_points=False, cache=cache)
    ids = {r.id for r in edited.rules}
    assert "acme.r2" in ids and "acme.r1" not in ids
    assert len(entries(cache_dir, "kb")) == 2


def test_errors_are_not_cached(cache_dir: Path, tmp_path: Path) -> None:
    d = pack(tmp_path, GOOD_RULE.replace("hypothesis: gpu_oom", "hypothesis: no_such_id"))
    for _ in range(2):
        with pytest.raises(PackError):
            load_packs([d], entry_points=False, strict=True, cache=cache)
    assert entries(cache_dir, "kb") == []


def test_cache_off_writes_nothing(cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLDEBUG_CACHE", "0")
    load_packs([pack(tmp_path, GOOD_RULE)], entry_points=False, cache=cache)
    assert not cache_dir.exists()


def test_hyperscan_database_is_cached(cache_dir: Path) -> None:
    from mldebug_rules.collectors import logscan

    if logscan._hs is None:
        pytest.skip("hyperscan not installed")
    logscan._HS_DATABASES.clear()
    pats = [logscan.Pattern("a", r"CUDA out of memory"), logscan.Pattern("b", r"Xid \(PCI:[0-9a-f:.]+\): 79")]
    first = logscan.Scanner(pats).scan_bytes(b"x\nRuntimeError: CUDA out of memory. Tried\n")
    assert len(entries(cache_dir, "hyperscan")) == 1
    logscan._HS_DATABASES.clear()  # a new process: the database now comes from disk
    again = logscan.Scanner(pats).scan_bytes(b"x\nRuntimeError: CUDA out of memory. Tried\n")
    assert (
        [(h.pattern, h.line_no) for h in again.hits]
        == [(h.pattern, h.line_no) for h in first.hits]
        == [(0, 2)]
    )


def test_yaml_data_is_served_as_json_and_only_when_that_is_lossless(cache_dir: Path) -> None:
    doc = cache.yaml_data("lines:\n  - {id: a, regex: 'x+'}\n")
    assert doc == {"lines": [{"id": "a", "regex": "x+"}]}
    assert len(entries(cache_dir, "yaml-data")) == 1
    assert cache.yaml_data("lines:\n  - {id: a, regex: 'x+'}\n") == doc
    assert cache.yaml_data("1: one\nwhen: 2024-01-01\n") == {
        1: "one",
        "when": __import__("datetime").date(2024, 1, 1),
    }
    assert len(entries(cache_dir, "yaml-data")) == 1  # integer keys and dates do not survive JSON


def test_the_engine_caches_only_what_it_is_handed(cache_dir: Path, tmp_path: Path) -> None:
    """The engine imports no cache: a load without one writes nothing, and the same load with the face's cache
    keeps its result there."""
    d = pack(tmp_path, GOOD_RULE)
    load_packs([d], entry_points=False)
    assert not cache_dir.exists() or entries(cache_dir, "kb") == []
    load_packs([d], entry_points=False, cache=cache)
    assert len(entries(cache_dir, "kb")) == 1
