"""Tests for the streaming log scanner (both engines; hyperscan ones skip when it isn't importable)."""

from __future__ import annotations

import gzip
import os
import pickle
import re
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from mldebug_rules.collectors.logscan import (
    LINE_MATCH_CAP,
    TEXT_CHARS,
    Pattern,
    Scanner,
    ScanResult,
    hyperscan_available,
    scan_paths,
    tail_anchored,
)

try:
    import zstandard
except ImportError:  # pragma: no cover
    zstandard = None

HS = pytest.param(
    "hyperscan", marks=pytest.mark.skipif(not hyperscan_available(), reason="hyperscan not importable")
)
ENGINES = ["python", HS]
CHUNKS = [1, 2, 3, 7, 64, 1 << 20]


def reference(patterns: list[Pattern], data: bytes) -> tuple[list[tuple[int, int]], int]:
    """The specification, naively: per physical line, re.search of each pattern on the line alone."""
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    hits = []
    for line_no, raw in enumerate(lines, 1):
        line = raw[:-1] if raw.endswith(b"\r") else raw
        line = line[:LINE_MATCH_CAP]
        for idx, p in enumerate(patterns):
            if re.search(p.regex.encode(), line, re.IGNORECASE if p.ignore_case else 0):
                hits.append((line_no, idx))
    return hits, len(lines)


def pairs(res: ScanResult) -> list[tuple[int, int]]:
    return [(h.line_no, h.pattern) for h in res.hits]


def scan(patterns: list[Pattern], data: bytes, engine: str, chunk_size: int = 1 << 20, **kw) -> ScanResult:
    return Scanner(patterns, engine=engine, chunk_size=chunk_size, **kw).scan_bytes(data)


LOG = (
    b"2024-05-01 step 1/100 loss 2.31\n"
    b"NCCL INFO Channel 00/32\n"
    b"step 2/100 loss 2.20\n"
    b"torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    b"step 3/100 loss 2.10\n"
    b"Killed\n"
)
PATS = [
    Pattern("oom", r"CUDA out of memory\. Tried to allocate (?P<amount>[\d.]+ [GM]iB)"),
    Pattern("step", r"^step (?P<step>\d+)/(?P<total>\d+)", keep="last"),
    Pattern("killed", r"^Killed$"),
]


# ---------------------------------------------------------------------------------------------------------
# Unit tests


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("chunk_size", CHUNKS)
def test_basic_line_numbers_groups_and_keep_last(engine: str, chunk_size: int) -> None:
    res = scan(PATS, LOG, engine, chunk_size)
    assert pairs(res) == [(4, 0), (5, 1), (6, 2)]
    assert res.hits[0].groups == {"amount": "2.00 GiB"}
    assert res.hits[0].text.startswith("torch.cuda.OutOfMemoryError")
    assert res.hits[1].groups == {"step": "3", "total": "100"}
    assert res.counts == {0: 1, 1: 2, 2: 1}  # keep="last" still counts every hit
    assert res.total_lines == 6
    assert res.tail[-1] == (6, "Killed")
    assert [ln for ln, _ in res.tail] == [1, 2, 3, 4, 5, 6]
    assert not res.issues and not res.binary and not res.truncated
    assert res.bytes_read == len(LOG)
    assert res.engine == ("python-re" if engine == "python" else res.engine)
    assert res.engine.startswith("hyperscan ") or engine == "python"


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("chunk_size", CHUNKS)
def test_crlf_and_final_line_without_newline(engine: str, chunk_size: int) -> None:
    data = b"alpha\r\nbeta end\r\n\r\ngamma end"
    pats = [Pattern("end", r"end$"), Pattern("a", r"^a\w+$"), Pattern("g", r"\Agamma")]
    res = scan(pats, data, engine, chunk_size)
    assert pairs(res) == [(1, 1), (2, 0), (4, 0), (4, 2)]
    assert all("\r" not in h.text for h in res.hits)
    assert res.total_lines == 4
    assert res.tail == [(1, "alpha"), (2, "beta end"), (3, ""), (4, "gamma end")]


@pytest.mark.parametrize("engine", ENGINES)
def test_empty_and_newline_only_inputs(engine: str) -> None:
    assert scan(PATS, b"", engine).total_lines == 0
    assert scan(PATS, b"\n", engine).total_lines == 1
    res = scan(PATS, b"\n\nKilled", engine, 1)
    assert res.total_lines == 3 and pairs(res) == [(3, 2)]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("chunk_size", [64 << 10, 1 << 20, 8 << 20])
def test_giant_line_matched_on_first_mib_only(engine: str, chunk_size: int) -> None:
    giant = b"HEAD " + b"x" * (3 * LINE_MATCH_CAP) + b" TAIL"
    data = b"first\n" + giant + b"\nKilled\n" + giant  # the second giant line ends the file
    pats = [Pattern("head", r"HEAD"), Pattern("tail", r"TAIL"), Pattern("killed", r"^Killed$")]
    res = scan(pats, data, engine, chunk_size, tail_lines=2)
    assert pairs(res) == [(2, 0), (3, 2), (4, 0)]
    assert res.total_lines == 4
    assert res.issues == [
        f"line 2 is {len(giant)} bytes; matched on its first 1 MiB only",
        f"line 4 is {len(giant)} bytes; matched on its first 1 MiB only",
    ]
    assert len(res.hits[0].text) == TEXT_CHARS
    assert res.tail[0] == (3, "Killed") and len(res.tail[1][1]) == TEXT_CHARS


@pytest.mark.parametrize("chunk_size", [7, 64 << 10, 1 << 20, 8 << 20])
def test_giant_crlf_line_length_excludes_the_cr(chunk_size: int) -> None:
    giant = b"z" * (2 * LINE_MATCH_CAP)
    res = scan([Pattern("z", "zz")], giant + b"\r\nok\r\n" + giant + b"\r", "python", chunk_size)
    assert res.total_lines == 3 and pairs(res) == [(1, 0), (3, 0)]
    assert res.issues == [f"line {n} is {len(giant)} bytes; matched on its first 1 MiB only" for n in (1, 3)]


@pytest.mark.parametrize("engine", ENGINES)
def test_line_of_exactly_the_cap_is_not_reported(engine: str) -> None:
    line = b"y" * (LINE_MATCH_CAP - 3) + b"END"
    res = scan([Pattern("end", r"END$")], line + b"\r\n" + line, engine, 4096)
    assert pairs(res) == [(1, 0), (2, 0)] and not res.issues


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("chunk_size", [1, 5, 1 << 20])
def test_invalid_utf8_and_non_ascii_pattern(engine: str, chunk_size: int) -> None:
    data = "ok\n进程已杀死 pid=42\n".encode() + b"bad \xff\xfe bytes \xc3 Killed\n"
    pats = [Pattern("zh", r"已杀死 pid=(?P<pid>\d+)"), Pattern("killed", r"Killed")]
    res = scan(pats, data, engine, chunk_size)
    assert pairs(res) == [(2, 0), (3, 1)]
    assert res.hits[0].text == "进程已杀死 pid=42" and res.hits[0].groups == {"pid": "42"}
    assert "\ufffd" in res.hits[1].text and res.hits[1].text.endswith("Killed")
    assert not res.binary


@pytest.mark.parametrize("engine", ENGINES)
def test_ignore_case_and_none_groups_omitted(engine: str) -> None:
    pats = [Pattern("err", r"(?P<kind>fatal|error)(?: code (?P<code>\d+))?", ignore_case=True)]
    res = scan(pats, b"ERROR code 7\nFatal\nfine\n", engine)
    assert pairs(res) == [(1, 0), (2, 0)]
    assert res.hits[0].groups == {"kind": "ERROR", "code": "7"}
    assert res.hits[1].groups == {"kind": "Fatal"}


@pytest.mark.parametrize("engine", ENGINES)
def test_max_hits_counts_beyond_the_cap(engine: str) -> None:
    data = b"".join(b"warn %d\n" % i for i in range(50))
    res = scan([Pattern("w", r"^warn \d+", max_hits=5)], data, engine, 7)
    assert pairs(res) == [(i, 0) for i in range(1, 6)]
    assert res.counts == {0: 50}


@pytest.mark.parametrize("engine", ENGINES)
def test_patterns_never_span_lines(engine: str) -> None:
    data = b"foo\nbar\nfoo bar\nfoo   \n  bar\n"
    pats = [Pattern("fb", r"foo\s+bar"), Pattern("neg", r"o[^x]*b"), Pattern("dot", r"(?s)o.b")]
    res = scan(pats, data, engine, 3)
    assert pairs(res) == [(3, 0), (3, 1), (3, 2)]


@pytest.mark.parametrize("engine", ENGINES)
def test_end_anchor_inside_alternation_and_python_brace_syntax(engine: str) -> None:
    pats = [Pattern("alt", r"(?:done$|fail)"), Pattern("brace", r"ab{,2}c")]
    res = scan(pats, b"x done\nfail here\ndone x\nac\nabbc\nabbbc\n", engine, 4)
    assert pairs(res) == [(1, 0), (2, 0), (4, 1), (5, 1)]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("chunk_size", [5, 1 << 20])
def test_literal_prefilter_finds_what_the_regex_matches(engine: str, chunk_size: int) -> None:
    """Alternatives with a literal no healthy line has are looked for by it (classes, optional parts and nested
    alternations multiplied out); the others (`loss ... nan`, whose words are on every metric line) by their
    regex: together exactly the lines the regex matches, case folding included."""
    pats = [
        Pattern("a", r"[Ff]ocal[_ -]?[Ll]oss|(?:Gradient|Grad) overflow(?: detected)?|loss\s*[:=]\s*nan\b"),
        Pattern("b", r"(?:CUDA|HIP) error: (?:out of memory|misaligned address)", ignore_case=True),
        Pattern("c", r"(?i)segmentation fault|^Killed$"),
        Pattern("d", r"epoch \d+ done|Training completed\.(?: Do not forget)?"),
    ]
    lines = [
        b"focal loss 0.3",
        b"FocalLoss",
        b"Focal-Loss x",
        b"focal_LOSS",  # no: [Ll] is not case folding
        b"Grad overflow detected, skipping",
        b"Gradient overflo",
        b"step 1 | loss: nan | lr 1e-4",
        b"step 2 | loss: 2.31 | number of nan iterations: 0",
        b"hip ERROR: Out Of Memory",
        b"cuda error: misaligned",
        b"Segmentation Fault (core dumped)",
        b"Killed",
        b"not Killed",
        b"epoch 3 done",
        b"Training completed. Do not forget to share",
        b"Training completed",
    ]
    data = b"\n".join(lines) + b"\n"
    assert pairs(scan(pats, data, engine, chunk_size)) == reference(pats, data)[0]


@pytest.mark.parametrize("engine", ENGINES)
def test_end_anchor_before_final_newline(engine: str) -> None:
    # hyperscan 5.4 misses this match in block mode; the scanner must not.
    res = scan([Pattern("x", r"(?:aa|b)$")], b"abababababa\nabab\n", engine)
    assert pairs(res) == [(2, 0)]


@pytest.mark.parametrize("engine", ENGINES)
def test_verbose_pattern(engine: str) -> None:
    pats = [Pattern("v", "(?x) cuda \\s+ error  # a comment")]
    res = scan(pats, b"cuda  error\ncudaerror\n", engine)
    assert pairs(res) == [(1, 0)]


@pytest.mark.parametrize("engine", ENGINES)
def test_bad_patterns_raise_value_error_naming_the_pattern(engine: str) -> None:
    with pytest.raises(ValueError, match=r"^pattern broken: "):
        Scanner([Pattern("ok", "fine"), Pattern("broken", r"(unclosed")], engine=engine)
    with pytest.raises(ValueError, match=r"^pattern empty: .*empty string"):
        Scanner([Pattern("empty", r"x*")], engine=engine)
    with pytest.raises(ValueError, match=r"^pattern k: "):
        Scanner([Pattern("k", r"x", keep="first")], engine=engine)


@pytest.mark.skipif(not hyperscan_available(), reason="hyperscan not importable")
def test_what_hyperscan_refuses_falls_back_to_python_for_that_pattern_only() -> None:
    """A back-reference or look-ahead (which hyperscan cannot compile) is left to the Python path; the other
    patterns stay with hyperscan and the scanner keeps working for all of them."""
    pats = [Pattern("br", r"(\w+) again \1"), Pattern("ok", r"CUDA out of memory"), Pattern("la", r"x(?=y)")]
    sc = Scanner(pats, engine="hyperscan")
    assert sc.engine.startswith("hyperscan")
    assert [f.split(":")[0] for f in sc.fallbacks] == ["pattern br", "pattern la"]
    res = sc.scan_bytes(b"foo again foo\nfoo again bar\nCUDA out of memory\nxy\nxz\n")
    assert [(h.pattern, h.line_no) for h in res.hits] == [(0, 1), (1, 3), (2, 4)]


def test_engine_selection() -> None:
    assert Scanner(PATS, engine="python").engine == "python-re"
    auto = Scanner(PATS).engine
    assert auto.startswith("hyperscan ") if hyperscan_available() else auto == "python-re"
    with pytest.raises(ValueError):
        Scanner(PATS, engine="grep")


@pytest.mark.parametrize("engine", ENGINES)
def test_no_patterns(engine: str) -> None:
    res = scan([], LOG, engine)
    assert res.hits == [] and res.counts == {} and res.total_lines == 6


# ---------------------------------------------------------------------------------------------------------
# Files, compression, errors


@pytest.mark.parametrize("engine", ENGINES)
def test_gzip_and_multimember_gzip(tmp_path: Path, engine: str) -> None:
    p = tmp_path / "train.log.gz"
    p.write_bytes(gzip.compress(LOG[:40]) + gzip.compress(LOG[40:]))
    res = Scanner(PATS, engine=engine, chunk_size=5).scan_path(p)
    assert pairs(res) == [(4, 0), (5, 1), (6, 2)]
    assert res.bytes_read == p.stat().st_size and not res.truncated and not res.issues


@pytest.mark.parametrize("engine", ENGINES)
def test_truncated_gzip_keeps_data_so_far(tmp_path: Path, engine: str) -> None:
    data = (
        b"".join(b"line %d ok\n" % i for i in range(20000)) + b"CUDA out of memory. Tried to allocate 1 GiB\n"
    )
    comp = gzip.compress(data)
    p = tmp_path / "cut.log.gz"
    p.write_bytes(comp[: len(comp) * 3 // 4])
    res = Scanner(PATS, engine=engine).scan_path(p)
    assert res.truncated
    assert 0 < res.total_lines < 20001
    assert any(i.startswith("gzip stream truncated after line ") for i in res.issues)
    assert res.hits == []
    # Everything before the cut is scanned: line texts in the tail are intact and consecutive.
    ln, text = res.tail[-2]
    assert text == f"line {ln - 1} ok"


@pytest.mark.skipif(zstandard is None, reason="zstandard not importable")
@pytest.mark.parametrize("engine", ENGINES)
def test_zstd_and_truncated_zstd(tmp_path: Path, engine: str) -> None:
    cctx = zstandard.ZstdCompressor()
    p = tmp_path / "train.log.zst"
    p.write_bytes(cctx.compress(LOG[:40]) + cctx.compress(LOG[40:]))
    res = Scanner(PATS, engine=engine).scan_path(p)
    assert pairs(res) == [(4, 0), (5, 1), (6, 2)] and not res.truncated
    big = b"".join(b"line %d\n" % i for i in range(200000))
    comp = cctx.compress(big)
    p.write_bytes(comp[: len(comp) // 2])
    res = Scanner(PATS, engine=engine).scan_path(p)
    assert res.truncated and any("zstd stream truncated" in i for i in res.issues)


@pytest.mark.parametrize("engine", ENGINES)
def test_binary_content_is_scanned_and_flagged(engine: str) -> None:
    data = b"\x00\x01\x02 Killed\n" * 10 + b"Killed\n"
    res = scan(PATS, data, engine)
    assert res.binary
    assert any("binary" in i for i in res.issues)
    assert pairs(res) == [(11, 2)]


def test_mostly_undecodable_is_binary() -> None:
    res = scan(PATS, bytes(range(128, 256)) * 100, "python")
    assert res.binary


@pytest.mark.parametrize("engine", ENGINES)
def test_unreadable_paths_never_raise(tmp_path: Path, engine: str) -> None:
    sc = Scanner(PATS, engine=engine)
    missing = sc.scan_path(tmp_path / "nope.log")
    assert missing.issues == ["file not found"] and missing.hits == [] and missing.total_lines == 0
    assert sc.scan_path(tmp_path).issues == ["is a directory"]


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root can read anything")
def test_permission_denied(tmp_path: Path) -> None:
    p = tmp_path / "secret.log"
    p.write_bytes(LOG)
    p.chmod(0)
    try:
        assert Scanner(PATS).scan_path(p).issues == ["permission denied"]
    finally:
        p.chmod(0o600)


def test_permission_denied_via_open(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = tmp_path / "secret.log"
    p.write_bytes(LOG)

    def deny(*_a: object, **_k: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("os.open", deny)  # the scanner opens through engine/safeio.py (os.open, O_NONBLOCK)
    assert Scanner(PATS).scan_path(p).issues == ["permission denied"]


def test_scan_paths_parallel_in_input_order(tmp_path: Path) -> None:
    paths = []
    for i in range(5):
        p = tmp_path / f"r{i}.log"
        p.write_bytes(b"x\n" * i + b"Killed\n")
        paths.append(str(p))
    paths.append(str(tmp_path / "missing.log"))
    sc = Scanner(PATS)
    for jobs in (None, 1, 2):
        results = scan_paths(sc, paths, jobs=jobs)
        assert [r.path for r in results] == paths
        assert [pairs(r) for r in results[:5]] == [[(i + 1, 2)] for i in range(5)]
        assert results[5].issues == ["file not found"]
    assert scan_paths(sc, []) == []


@pytest.mark.skipif(sys.platform == "win32", reason="no fork server on Windows")
def test_scan_workers_start_from_a_fork_server_while_threads_run(tmp_path: Path) -> None:
    """The probes run on threads: a worker fork()ed from that process could wait forever on a lock another
    thread held at the fork. Workers come from the single-threaded fork server, and scan while a parent
    thread holds a lock."""
    import threading

    from mldebug_rules.collectors.logscan import _worker_context

    assert _worker_context().get_start_method() == "forkserver"
    held, release = threading.Lock(), threading.Event()

    def hold() -> None:
        with held:
            release.wait(30)

    t = threading.Thread(target=hold, daemon=True)
    t.start()
    try:
        paths = []
        for i in range(3):
            p = tmp_path / f"r{i}.log"
            p.write_bytes(b"x\n" * i + b"Killed\n")
            paths.append(str(p))
        results = scan_paths(Scanner(PATS), paths, jobs=2)
        assert [pairs(r) for r in results] == [[(i + 1, 2)] for i in range(3)]
    finally:
        release.set()
        t.join()


def test_scanner_pickles() -> None:
    sc = pickle.loads(pickle.dumps(Scanner(PATS, tail_lines=3, chunk_size=5)))
    res = sc.scan_bytes(LOG)
    assert pairs(res) == [(4, 0), (5, 1), (6, 2)] and len(res.tail) == 3


def test_no_progress_output_when_not_a_tty(capfd: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    p = tmp_path / "a.log"
    p.write_bytes(LOG)
    Scanner(PATS).scan_path(p)
    assert capfd.readouterr().err == ""


# ---------------------------------------------------------------------------------------------------------
# Property-based: hyperscan engine == python engine == naive per-line reference, for any chunking

_PIECES = [b"a", b"b", b"ab", b" ", b"\r", b"1", b"42", "é".encode(), "已".encode(), b"\xff", b"\t", b"x"]
_line = st.lists(st.sampled_from(_PIECES), max_size=8).map(b"".join)
_ATOMS = [
    "a",
    "b",
    "ab",
    "ba",
    "é",
    "已",
    " ",
    r"\d",
    r"\d+",
    r"\s",
    r"\s+",
    r"\w",
    "[ab]",
    "[^a]",
    "[^x]*b",
    ".",
    "a.*b",
    r"\bab",
    "b{,2}a",
    "(?P<g>a+)",
    "(?:a|1)",
]
_ANCHORS_START = ["", "", "^", r"\A"]
_ANCHORS_END = ["", "", "$", r"\Z"]


@st.composite
def _regex(draw: st.DrawFn) -> str:
    body = "".join(draw(st.lists(st.sampled_from(_ATOMS), min_size=1, max_size=3)))
    rx = draw(st.sampled_from(_ANCHORS_START)) + body + draw(st.sampled_from(_ANCHORS_END))
    if draw(st.booleans()):
        rx = "(?:" + rx + "|" + draw(st.sampled_from(_ATOMS)) + "$)"
    return rx


@st.composite
def _pattern(draw: st.DrawFn) -> Pattern:
    rx = draw(_regex())
    assume(rx.count("(?P<g>") <= 1)
    ic = draw(st.booleans())
    assume(re.search(rx.encode(), b"", re.IGNORECASE if ic else 0) is None)
    return Pattern(id=rx, regex=rx, ignore_case=ic)


@st.composite
def _log(draw: st.DrawFn) -> bytes:
    lines = draw(st.lists(_line, max_size=12))
    sep = draw(st.sampled_from([b"\n", b"\r\n"]))
    data = sep.join(lines)
    if lines and draw(st.booleans()):
        data += sep
    return data


_ENGINES_AVAILABLE = ["python"] + (["hyperscan"] if hyperscan_available() else [])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    patterns=st.lists(_pattern(), min_size=1, max_size=4),
    data=_log(),
    chunk_size=st.integers(min_value=1, max_value=40),
)
def test_engines_agree_with_reference(patterns: list[Pattern], data: bytes, chunk_size: int) -> None:
    expected, n_lines = reference(patterns, data)
    # trusted: patterns the pack loader already checked, compiled on first use (only differs with hyperscan)
    for engine, cs, trusted in [(e, c, False) for e in _ENGINES_AVAILABLE for c in (chunk_size, 1 << 20)] + [
        (e, chunk_size, True) for e in _ENGINES_AVAILABLE
    ]:
        res = scan(patterns, data, engine, cs, trusted=trusted)
        assert pairs(res) == expected, (engine, cs, trusted)
        assert res.total_lines == n_lines
        assert sum(res.counts.values()) == len(expected)
        for h in res.hits:  # groups come from re on the exact line
            line = data.split(b"\n")[h.line_no - 1].removesuffix(b"\r")
            m = re.search(
                patterns[h.pattern].regex.encode(), line, re.I if patterns[h.pattern].ignore_case else 0
            )
            assert m is not None
            assert h.groups == {
                k: v.decode("utf-8", "replace") for k, v in m.groupdict().items() if v is not None
            }
            assert h.text == line.decode("utf-8", "replace")


@settings(max_examples=100, deadline=None)
@given(data=_log(), chunk_size=st.integers(min_value=1, max_value=16), tail=st.integers(0, 5))
def test_tail_and_line_count_match_reference(data: bytes, chunk_size: int, tail: int) -> None:
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    texts = [ln.removesuffix(b"\r").decode("utf-8", "replace") for ln in lines]
    res = Scanner([Pattern("a", "a")], tail_lines=tail, engine="python", chunk_size=chunk_size).scan_bytes(
        data
    )
    assert res.total_lines == len(lines)
    want = list(enumerate(texts, 1))[-tail:] if tail else []
    assert res.tail == want


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    patterns=st.lists(_pattern(), min_size=1, max_size=3),
    data=_log(),
    chunk_size=st.integers(min_value=1, max_value=40),
    window=st.integers(min_value=1, max_value=30),
)
def test_keep_last_is_the_last_matching_line(
    patterns: list[Pattern], data: bytes, chunk_size: int, window: int
) -> None:
    """keep="last" patterns are searched from each segment's end (with hyperscan, in a window first): the one
    hit kept is still the file's last matching line, with its groups."""
    import mldebug_rules.collectors.logscan as ls

    old = ls.LAST_WINDOW
    ls.LAST_WINDOW = window
    try:
        last = [Pattern(p.id, p.regex, p.ignore_case, "last", 1) for p in patterns]
        expected, _ = reference(last, data)
        want = {idx: line for line, idx in expected}  # the last line per pattern
        for engine in _ENGINES_AVAILABLE:
            for cs in (chunk_size, 1 << 20):
                res = scan(last, data, engine, cs)
                assert {h.pattern: h.line_no for h in res.hits} == want, (engine, cs)
    finally:
        ls.LAST_WINDOW = old


@pytest.mark.skipif(not hyperscan_available(), reason="hyperscan not importable")
def test_keep_last_falls_back_when_the_window_does_not_confirm(monkeypatch: pytest.MonkeyPatch) -> None:
    """If hyperscan's lines at a segment's end all fail the Python confirmation, the rest is searched."""
    import mldebug_rules.collectors.logscan as ls

    monkeypatch.setattr(ls, "LAST_WINDOW", 64)
    sc = Scanner(
        [Pattern("oom", "CUDA out of memory"), Pattern("step", r"step \d+", keep="last", max_hits=1)]
    )
    assert sc._last_idx == [1]
    sc._comp(1).confirm = __import__("regex").compile(
        rb"step 1\b"
    )  # stands in for a hyperscan/re disagreement
    data = b"".join(f"step {i} loss 2.0\n".encode() for i in range(1, 200))
    res = sc.scan_bytes(data)
    assert [(h.pattern, h.line_no, h.text) for h in res.hits] == [(1, 1, "step 1 loss 2.0")]


# --- one big file in byte ranges (threads) -----------------------------------------------------------------


def _split_log(n: int, seed: int) -> bytes:
    import random

    rng = random.Random(seed)
    out = []
    for i in range(1, n + 1):
        r = rng.random()
        if r < 0.002:
            out.append("Traceback (most recent call last):")
            out += [f'  File "train.py", line {k}, in step' for k in range(rng.randrange(1, 6))]
            out.append("RuntimeError: CUDA error: an illegal memory access was encountered")
        elif r < 0.004:
            out.append(f"[rank{i % 8}] NCCL WARN timeout {i}\r")  # a CR LF line
        elif r < 0.6:
            out.append(f"step {i} | loss {rng.random():.4f} | step_time: {rng.random():.3f}")
        else:
            out.append(f"node:{i} NCCL INFO chatter {'x' * rng.randrange(0, 300)}")
    return ("\n".join(out) + ("\n" if seed % 2 else "")).encode()


SPLIT_PATTERNS = [
    Pattern("tb", r"Traceback \(most recent call last\)", max_hits=7, after=4),
    Pattern("cuda", r"CUDA error: (?P<what>[a-z ]+)"),
    Pattern("warn", r"NCCL WARN timeout (?P<n>\d+)$"),
    Pattern("step", r"^step (?P<step>\d+) \|", keep="last", max_hits=1),
    Pattern("time", r"step_time: (?P<t>[\d.]+)", keep="last", max_hits=1),
]


@pytest.mark.skipif(not hyperscan_available(), reason="hyperscan not importable")
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_split_scan_equals_one_range(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    import mldebug_rules.collectors.logscan as ls

    monkeypatch.setattr(ls, "SPLIT_MIN_BYTES", 1 << 10)
    path = tmp_path / "train.log"
    path.write_bytes(_split_log(6000, seed))
    sc = Scanner(SPLIT_PATTERNS, tail_lines=50, engine="hyperscan", chunk_size=4096)
    one = sc.scan_path(path, threads=1)
    for parts in (2, 3, 5):
        many = sc.scan_path(path, threads=parts)
        assert many.ranges == parts and one.ranges == 1 and many.passes == one.passes == 1
        assert many.hits == one.hits
        assert many.total_lines == one.total_lines
        assert many.tail == one.tail
        assert many.recent == one.recent
        assert many.bytes_read == one.bytes_read == path.stat().st_size
        exact = {i: c for i, c in one.counts.items() if SPLIT_PATTERNS[i].keep != "last"}
        assert {i: many.counts[i] for i in exact} == exact


@pytest.mark.skipif(not hyperscan_available(), reason="hyperscan not importable")
@pytest.mark.parametrize("chunk", [64, 4096, 1 << 20])
def test_keep_last_and_recent_hits_match_the_reference(tmp_path: Path, chunk: int) -> None:
    data = _split_log(3000, 4)
    path = tmp_path / "train.log"
    path.write_bytes(data)
    tail = 40
    res = Scanner(SPLIT_PATTERNS, tail_lines=tail, engine="hyperscan", chunk_size=chunk).scan_path(path)
    lines = data.decode().replace("\r\n", "\n").split("\n")
    if lines[-1] == "":
        lines.pop()
    for idx, p in enumerate(SPLIT_PATTERNS):
        if p.keep != "last":
            continue
        rx = re.compile(p.regex)
        matching = [n for n, text in enumerate(lines, 1) if rx.search(text)]
        (last,) = [h for h in res.hits if h.pattern == idx]
        assert last.line_no == matching[-1]
        assert last.groups == rx.search(lines[matching[-1] - 1]).groupdict()  # type: ignore[union-attr]
        recent = [h.line_no for h in res.recent if h.pattern == idx]
        assert recent == [n for n in matching if n > len(lines) - tail]
        assert 1 <= res.counts[idx] <= len(matching)
    assert [n for n, _ in res.tail] == list(range(len(lines) - tail + 1, len(lines) + 1))


@pytest.mark.parametrize(
    ("regex", "form"),
    [
        # the end anchor ends an alternative: the newline itself stands for it, other endings get the line's rest
        (r"epoch 0(?:[^0-9./]|$)", r"epoch 0(?:[^0-9./][^\n]*\n|\n)"),
        (r"Killed$|OOM", r"Killed\n|OOM[^\n]*\n"),
        (r"(?P<n>\d+) done\s*$", r"(?P<n>\d+) done\s*\n"),
        (r"a(?:b(?:c|$)|d)", r"a(?:b(?:c[^\n]*\n|\n)|d[^\n]*\n)"),
        # anywhere else, or where an alternative could be empty, the caller keeps the plain loosening
        (r"a$b", None),
        (r"(?:a$)+", None),
        (r"a$|", None),
        (r"(?=a)$", None),
    ],
)
def test_tail_anchored_form(regex: str, form: str | None) -> None:
    assert tail_anchored(regex) == form


@pytest.mark.skipif(not hyperscan_available(), reason="hyperscan is not installed")
def test_an_end_anchored_pattern_costs_no_confirmation_on_lines_it_cannot_match(monkeypatch) -> None:
    """`(?:[^0-9./]|$)` with the $ dropped matched every `epoch 0.5` line: one Python confirmation per line of an
    HF log in its first epoch. With the newline standing for the $, hyperscan reports only the real hits."""
    import regex as regex_module

    calls: list[bytes] = []
    real = regex_module.compile

    def counting(pattern: object, flags: int = 0, **kw: object) -> object:
        compiled = real(pattern, flags, **kw)

        class Counted:
            def search(self, data: bytes, *a: object, **k: object) -> object:
                calls.append(bytes(data))
                return compiled.search(data, *a, **k)

            def __getattr__(self, name: str) -> object:
                return getattr(compiled, name)

        return Counted()

    monkeypatch.setattr(regex_module, "compile", counting)
    lines = [f"{{'loss': 2.1, 'epoch': 0.{k:02d}}}" for k in range(1, 90)] + [
        "Epoch 0: 10%",
        "starting epoch 0",
    ]
    scanner = Scanner([Pattern("zero", r"[Ee]poch'?:? 0(?:[^0-9./]|$)")], engine="hyperscan")
    calls.clear()  # building it checks that the regex does not match an empty line
    res = scanner.scan_bytes(("\n".join(lines) + "\n").encode())
    assert [h.line_no for h in res.hits] == [90, 91]
    assert len(calls) == 2, calls
