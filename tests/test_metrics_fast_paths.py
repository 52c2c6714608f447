"""The metric parsers' fast paths give exactly what the straightforward versions gave.

The references below are the earlier implementations, kept here verbatim in spirit: a full Scanner pass per
segment with "first parser wins" applied to its hits, a split-and-match per pipe cell, a pair-merging loop
for series compaction, and min()/max()/isfinite() bookkeeping per point.
"""

from __future__ import annotations

import math
import re
import tempfile
from pathlib import Path

from conftest import FIXTURES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mldebug_rules.collectors import lineinfo
from mldebug_rules.collectors.metrics_generic import parse_generic
from mldebug_rules.collectors.metrics_parse import (
    NUMBER,
    SKIP_KEYS,
    STOP_RANK,
    TABLE_MODES,
    LineReader,
    TableReader,
    parse_record,
    segments,
    x_of,
)
from mldebug_rules.collectors.metrics_series import Series, SeriesSet, canonical

_READER = LineReader()
_PY_READER = LineReader(engine="python")  # the prefilter without hyperscan (bytes.find / re candidates)

# --- references ------------------------------------------------------------------------------------------


def reference_matches(seg: bytes) -> tuple[list[tuple[int, int, str, dict[str, str]]], int]:
    res = _READER.scanner.scan_bytes(seg, "seg")
    out = []
    seen_line = -1
    for h in res.hits:
        if h.line_no == seen_line:
            continue
        out.append((h.line_no, h.pattern, h.text, h.groups))
        if not _READER.parsers[h.pattern].stop:
            seen_line = h.line_no
    return out, res.total_lines


def reference_read(path: Path, tail_window: int = 40) -> SeriesSet:
    """The earlier LineReader.read: Scanner hits per segment, one Series.add per value."""
    out = SeriesSet("ref")
    ordinal = total = 0
    stop_hits: list[tuple[int, str]] = []
    kinds: set[str] = set()
    first_rank = None
    last_x: float | None = None
    sightings: dict[str, int] = {}  # the generic reader learns a name on its second sighting
    first: dict[str, tuple[float, float, int]] = {}
    tables = TableReader()
    for seg, phys, base in segments(path):
        res = _READER.scanner.scan_bytes(seg, "ref")
        seen_line = -1
        for h in res.hits:
            if h.line_no == seen_line:
                continue
            p = _READER.parsers[h.pattern]
            line_no = base + (phys[h.line_no - 1] if phys is not None else h.line_no)
            if p.stop:
                stop_hits.append((line_no, p.stop))
                continue
            seen_line = h.line_no
            rank = (
                lineinfo.rank_of_line(h.text) if ("ank" in h.text[:200] or "NCCL" in h.text[:200]) else None
            )
            if rank is not None:
                first_rank = rank if first_rank is None else first_rank
                if rank != first_rank:
                    continue
            if p.parse in TABLE_MODES:
                row = tables.feed(p.parse, h.text, line_no)
                if row is None:
                    continue
                rec, counters = row
            else:
                rec = parse_record(p.parse, h.text)
                counters = parse_generic(h.text)[1] if p.parse == "generic" else {}
            if not rec or "train_runtime" in rec:
                continue
            if p.prefix:
                rec = {
                    (k if k.startswith(p.prefix) else p.prefix + k): v
                    for k, v in rec.items()
                    if canonical(k) not in SKIP_KEYS
                }
            ordinal += 1
            if "x" in counters and not h.groups:
                x, kind = counters["x"], "step"
            elif h.groups or last_x is None:
                x, kind = x_of(h.groups, rec, ordinal)
            else:
                x, kind = last_x, "step"
            if kind == "step":
                last_x = x
            kinds.add(kind)
            out.parsers.add(p.id)
            for name, value in rec.items():
                key = canonical(name)
                if key in SKIP_KEYS:
                    continue
                if p.parse == "generic" and sightings.get(key, 0) < 2:
                    sightings[key] = sightings.get(key, 0) + 1
                    if sightings[key] == 1:
                        first[key] = (x, value, line_no)
                        continue
                    out.add(name, *first.pop(key))
                out.add(name, x, value, line_no)
        total = base + (phys[-1] if phys else res.total_lines)
    out.step_kind = "entry" if kinds == {"entry"} else "step"
    near_end = [(STOP_RANK[r], ln, r) for ln, r in stop_hits if total - ln <= tail_window]
    if near_end:
        _, out.stop_line, out.stop = max(near_end)
        out.stop_from_log = True
    return out


def _same_reading(a: SeriesSet, b: SeriesSet) -> None:
    assert (a.stop, a.stop_line, a.stop_from_log, a.parsers, a.step_kind) == (
        b.stop,
        b.stop_line,
        b.stop_from_log,
        b.parsers,
        b.step_kind,
    )
    assert list(a.series) == list(b.series)
    for name in a.series:
        _assert_same_series(a.series[name], b.series[name])


_PIPE_CELL = re.compile(r"^\s*([A-Za-z][A-Za-z0-9 _()/.-]{0,80}?)\s*:\s*(" + NUMBER + r")\s*$")


def reference_pipes(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for cell in text.split("|")[1:]:
        m = _PIPE_CELL.match(cell)
        if m and m.group(1) not in out:
            out[m.group(1)] = float(m.group(2))
    return out


def reference_series(points: list[tuple[float, float, int]], cap: int, keep_last: int) -> Series:
    s = Series("x", cap=cap, keep_last=keep_last)
    for step, value, line in points:
        s.total += 1
        if math.isfinite(value):
            s.min_value = min(s.min_value, value)
            s.max_value = max(s.max_value, value)
        elif s.nan_onset is None:
            s.nan_onset = (step, value, line)
            s.finite_before_nan = s.total - 1
        s.steps.append(step)
        s.values.append(value)
        s.lines.append(line)
        if len(s.steps) > s.cap:
            head = len(s.steps) - min(s.keep_last, s.cap // 2)
            steps, values, lines = [], [], []
            i = 0
            while i + 1 < head:
                a, b = s.values[i], s.values[i + 1]
                if not math.isfinite(a):
                    v, ln = a, s.lines[i]
                elif not math.isfinite(b):
                    v, ln = b, s.lines[i + 1]
                else:
                    v, ln = (a + b) / 2.0, s.lines[i + 1]
                steps.append(s.steps[i + 1])
                values.append(v)
                lines.append(ln)
                i += 2
            s.steps, s.values, s.lines = steps + s.steps[i:], values + s.values[i:], lines + s.lines[i:]
            s.compactions += 1
    return s


# --- generated input -------------------------------------------------------------------------------------

_PIECES = st.sampled_from(
    [
        "{'loss': 0.5, 'grad_norm': 1.0, 'epoch': 0.1}",
        "{'eval_loss': nan, 'epoch': 1.0}",
        " iteration       10/    100 | consumed samples: 640 | lm loss: 2.3E+00 | loss scale: 4096.0 |",
        " | grad norm: inf | number of skipped iterations:   1 |",
        "Epoch: [1]  [ 20/500]  eta: 0:01:00  lr: 0.1  loss: 2.30 (2.31)  time: 0.25  data: 0.1  max mem: 900",
        "Train: 2 [  50/500 ( 10%)]  Loss: 3.2 (3.4)  Time: 0.250s, 1024.00/s  (0.255s, 1003.92/s)  Data: 0.2",
        "Epoch 0:  40%|####      | 200/500 [00:10<00:15, 20.00it/s, loss=0.123, v_num=1]",
        "step 12 | loss 2.5 | lr 3e-4",
        "global_step=7 train_loss=nan",
        "Training completed. Do not forget to share your model on huggingface.co/models =)",
        "`Trainer.fit` stopped: `max_epochs=3` reached.",
        "Epoch 4: early stopping",
        "[Rank 1] step 3 loss 1.0",
        "\r",
        "\r\n",
        "\n",
        "\n",
        " | ",
        "é",
        "loss",
    ]
)
_LOG = st.lists(st.one_of(_PIECES, st.text(max_size=8)), max_size=40).map("".join)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_LOG)
def test_matches_equal_a_full_scan(text: str) -> None:
    seg = text.encode("utf-8", "replace")
    if seg[:2] == b"\x1f\x8b" or seg[:4] == b"\x28\xb5\x2f\xfd":
        return  # scan_bytes would read these as compressed streams; segments are always plain text
    assert _READER._matches(seg) == reference_matches(seg)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_LOG)
def test_read_equals_the_reference_reader(text: str) -> None:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "train.log"
        p.write_bytes(text.encode("utf-8", "replace"))
        _same_reading(_READER.read(p, "ref"), reference_read(p))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_LOG)
def test_matches_equal_a_full_scan_with_the_pure_python_prefilter(text: str) -> None:
    seg = text.encode("utf-8", "replace")
    if seg[:2] == b"\x1f\x8b" or seg[:4] == b"\x28\xb5\x2f\xfd":
        return
    assert _PY_READER._matches(seg) == reference_matches(seg)


def test_every_fixture_log_reads_as_before() -> None:
    logs = [p for p in FIXTURES.rglob("*") if p.is_file() and p.suffix in (".log", ".txt", ".out")]
    assert len(logs) > 20
    for p in logs:
        seg = p.read_bytes()
        if seg[:2] != b"\x1f\x8b":
            assert _READER._matches(seg) == reference_matches(seg), p
        _same_reading(_READER.read(p, "ref"), reference_read(p))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(_PIECES, st.text(alphabet=" |:.-+eE0123456789nafiINtyl()_/", max_size=20)), max_size=20
    )
)
def test_pipe_cells_read_as_before(parts: list[str]) -> None:
    text = "".join(parts)
    assert parse_record("pipes", text) == reference_pipes(text)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.floats(allow_nan=True, allow_infinity=True, width=32), min_size=0, max_size=300),
    st.integers(4, 40),
    st.integers(1, 30),
    st.lists(st.integers(1, 50), min_size=1, max_size=20),
)
def test_series_bookkeeping_and_compaction_as_before(
    values: list[float], cap: int, keep_last: int, chunks: list[int]
) -> None:
    points = [(float(i), v, i + 1) for i, v in enumerate(values)]
    ref = reference_series(points, cap, keep_last)
    one_by_one = Series("x", cap=cap, keep_last=keep_last)
    for step, value, line in points:
        one_by_one.add(step, value, line)
    in_bulk = Series("x", cap=cap, keep_last=keep_last)  # as LineReader adds them: a segment at a time
    i = 0
    for size in chunks * (len(points) // sum(chunks) + 1):
        part = points[i : i + size]
        if not part:
            break
        in_bulk.extend([p[0] for p in part], [p[1] for p in part], [p[2] for p in part])
        i += size
    for s in (one_by_one, in_bulk):
        _assert_same_series(s, ref)


def _assert_same_series(s: Series, ref: Series) -> None:
    assert s.steps == ref.steps and s.lines == ref.lines and s.compactions == ref.compactions
    assert [repr(v) for v in s.values] == [repr(v) for v in ref.values]  # nan == nan, bit for bit
    assert (s.total, s.finite_before_nan, s.min_value, s.max_value) == (
        ref.total,
        ref.finite_before_nan,
        ref.min_value,
        ref.max_value,
    )
    assert repr(s.nan_onset) == repr(ref.nan_onset)
