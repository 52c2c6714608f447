"""One pass per log: the logs probe's scan feeds the metrics probe's curves, run directories are walked once per
diagnosis, and a big log's metric lines sampled on the way keep exact line numbers."""

from __future__ import annotations

from pathlib import Path

import pytest
from mldebug_rules.collectors import base, logscan, metrics_parse
from mldebug_rules.collectors.logscan import Pattern, Scanner
from mldebug_rules.collectors.metrics_parse import LineReader, MetricSampler
from mldebug_rules.collectors.metrics_series import SeriesSet

from mldebug_rules.diagnose import Request, diagnose

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
_SCANNER = Scanner(
    [Pattern("oom", r"CUDA out of memory"), Pattern("step", r"\bstep (?P<step>\d+)", keep="last")]
)


def _same(a: SeriesSet, b: SeriesSet) -> None:
    assert (a.stop, a.stop_line, a.parsers, a.step_kind) == (b.stop, b.stop_line, b.parsers, b.step_kind)
    assert sorted(a.series) == sorted(b.series)
    for name, s in a.series.items():
        t = b.series[name]
        assert (s.steps, s.lines, s.total) == (t.steps, t.lines, t.total), name
        assert [repr(v) for v in s.values] == [repr(v) for v in t.values], name


def test_the_scan_reads_every_fixture_log_metric_lines_as_the_line_reader_does() -> None:
    logs = [p for p in FIXTURES.rglob("*") if p.is_file() and p.suffix in (".log", ".txt", ".out")]
    assert len(logs) > 20
    reader = LineReader()
    for p in logs:
        res = _SCANNER.scan_path(p, MetricSampler())
        assert isinstance(res.sampled, SeriesSet), p
        _same(res.sampled, reader.read(p, str(p)))


@pytest.mark.parametrize("threads", [1, 3])
def test_a_big_log_is_sampled_in_the_pass_with_exact_line_numbers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, threads: int
) -> None:
    monkeypatch.setattr(metrics_parse, "CHUNK", 2048)
    monkeypatch.setattr(metrics_parse, "SAMPLE_STRETCH", 700)
    monkeypatch.setattr(metrics_parse, "SAMPLE_MIN_BYTES", 10_000)
    monkeypatch.setattr(logscan, "SPLIT_MIN_BYTES", 10_000)
    n = 6000
    lines = [f"step {i} | loss {1.0 + i / n:.6f}" if i % 3 else f"noise line {i}" for i in range(1, n + 1)]
    lines[4000] = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    path = tmp_path / "train.log"
    path.write_text("\n".join(lines) + "\n")
    sc = Scanner(_SCANNER.patterns, chunk_size=1024)
    res = sc.scan_path(path, MetricSampler(), threads=threads)
    assert (
        res.ranges == (threads if logscan.hyperscan_available() else 1)
        and res.passes == 1
        and res.bytes_read == path.stat().st_size
    )
    assert [(h.pattern, h.line_no) for h in res.hits] == [(0, 4001), (1, n - 1)]
    loss = res.sampled.series["loss"]
    assert 0 < loss.total < n // 4  # sampled: the start, the end and a few stretches between
    assert all(int(step) == line for step, line in zip(loss.steps, loss.lines, strict=True))
    assert loss.steps[0] == 1 and loss.steps[-1] == n - 1  # the start and the end of the log are read
    assert any("metric lines read in" in i and "stretches" in i for i in res.sampled.issues)


def test_a_diagnosis_reads_each_log_once_and_walks_each_run_dir_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    log = run / "train.log"
    log.write_text("".join(f"step {i} | loss {2.0 - i / 500:.4f}\n" for i in range(1, 400)) + "killed\n")
    (run / "metrics.jsonl").write_text('{"step": 1, "loss": 2.0}\n')
    opened: list[str] = []
    walks: list[Path] = []
    real_open, real_walk = logscan.open_regular, base.find_run_files

    def counting_open(path, *a, **k):  # type: ignore[no-untyped-def]
        opened.append(str(path))
        return real_open(path, *a, **k)

    def counting_walk(root, *a, **k):  # type: ignore[no-untyped-def]
        walks.append(root)
        return real_walk(root, *a, **k)

    monkeypatch.setattr(logscan, "open_regular", counting_open)
    monkeypatch.setattr(metrics_parse, "open_regular", counting_open)
    monkeypatch.setattr(base, "find_run_files", counting_walk)
    d = diagnose(Request(run_dirs=[run], offline=True))
    assert opened.count(str(log)) == 1
    assert walks == [run]
    metrics = next(p for p in d.probes if p.name == "metrics")
    assert metrics.status == "ok" and "generic" in metrics.detail  # its curve came from the logs probe's pass
    assert "loss" in metrics.payload["series"]["train.log"]["series"]


def _write_log(path: Path, mib: int) -> None:
    block = []
    for i in range(1, 2001):
        if i % 100 == 0:
            block.append(
                f"[rank{i % 8}]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {i} MiB"
            )
        elif i % 3:
            block.append(
                f"step {i} | loss {2.0 - i / 4000:.4f} | lr 1.00e-04 | grad_norm 0.{i:04d} | 11000 tok/s"
            )
        else:
            block.append(
                f"node01:44{i % 8}:45{i % 8} [{i % 8}] NCCL INFO Channel {i % 32:02d}/32 : 0 1 2 3 4 5 6 7"
            )
    data = ("\n".join(block) + "\n").encode()
    with path.open("wb") as f:
        for _ in range((mib << 20) // len(data) + 1):
            f.write(data)


def test_memory_does_not_grow_with_the_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a scan holds is bounded (kept hits, tail, held segments, sampled stretches): a log four times as big
    peaks at the same traced memory. Measured with tracemalloc, not timed."""
    import tracemalloc

    monkeypatch.setattr(metrics_parse, "SAMPLE_MIN_BYTES", 4 << 20)
    monkeypatch.setattr(logscan, "SPLIT_MIN_BYTES", 4 << 20)
    peaks = []
    for mib in (8, 32):
        path = tmp_path / f"train-{mib}.log"
        _write_log(path, mib)
        tracemalloc.start()
        res = _SCANNER.scan_path(path, MetricSampler(), threads=2)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        assert res.ranges == (2 if logscan.hyperscan_available() else 1) and res.counts[0] > 1000 == len(
            [h for h in res.hits if h.pattern == 0]
        )
        path.unlink()
    print("traced peaks (KiB):", [p >> 10 for p in peaks])
    assert peaks[1] <= peaks[0] + (2 << 20), [p >> 20 for p in peaks]
