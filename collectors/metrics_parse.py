"""Parsers for metric series: printed log lines (one streaming Scanner pass) and structured metric files.

Every parser is total: garbage yields no points (and maybe an issue string), never an exception, because a
half-written metrics file is normal for a crashed run.

>>> parse_record("hf_dict", "{'loss': nan, 'grad_norm': inf, 'learning_rate': 4.9e-05, 'epoch': 0.42}")
{'loss': nan, 'grad_norm': inf, 'learning_rate': 4.9e-05, 'epoch': 0.42}
>>> parse_record("pipes", " iteration   10/  100 | lm loss: 2.345E+00 | loss scale: 65536.0 | grad norm: 1.2")
{'lm loss': 2.345, 'loss scale': 65536.0, 'grad norm': 1.2}
>>> parse_record("colon", "Train: 3 [ 1/50 (  2%)]  Loss: 3.2 (3.4)  Time: 0.250s, 1024.00/s  Data: 0.2")
{'Loss': 3.2, 'Time': 0.25, 'Data': 0.2, 'throughput': 1024.0}
>>> loads_tolerant('{"a": NaN, "b": nan, "c": -Infinity, "d": "nan"}')
{'a': nan, 'b': nan, 'c': -inf, 'd': 'nan'}
"""

from __future__ import annotations

import csv
import gzip
import json
import math
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..engine.safeio import Unreadable, open_regular, read_capped
from . import lineinfo
from .logscan import _TEXT_BYTES, LINE_MATCH_CAP, TEXT_CHARS, Pattern, Scanner
from .metrics_generic import _QUALIFIED_VAL, parse_generic  # the names a validation line already qualifies
from .metrics_series import SeriesSet, canonical, to_float

CHUNK = 1 << 20
# trainer_state.json and friends are read whole, so parsed in memory (about 5x their size): beyond this they are
# skipped, with an issue. 64 MiB holds a million log_history entries.
MAX_STRUCTURED_BYTES = 64 << 20
MAX_RECORD_BYTES = 1 << 20  # one metrics.jsonl / metrics.csv line; a longer one is skipped unread
NUMBER = r"[-+]?(?:nan|NaN|NAN|inf|Inf|INF|Infinity|infinity|(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"
_HF_PAIR = re.compile(r"'([^']{1,100})':\s*(" + NUMBER + r")(?=[,}\s])")
# One findall over the line instead of a split and a match per cell: a cell is what lies between two pipes
# (or the last pipe and the line end), so the pair must start right after a pipe and end at the next one.
_PIPE_PAIR = re.compile(r"\|\s*([A-Za-z][A-Za-z0-9 _()/.-]{0,80}?)\s*:\s*(" + NUMBER + r")\s*(?=\||$)")
_COLON_PAIR = re.compile(
    r"(?:^|\s)([A-Za-z][A-Za-z0-9_/]*(?: [a-z][a-z0-9_]*)?):\s+(" + NUMBER + r")s?(?=[\s,(]|$)"
)
_RATE = re.compile(r",\s*(\d+(?:\.\d+)?)/s\b")
# Ultralytics YOLO epoch lines (YOLOv5 to YOLO11): "  3/299  5.61G  0.0552  0.0348  0.019  87  640: 100%|..|
# 469/469 [02:59<00:00, 2.62it/s]" under a header "Epoch GPU_mem box_loss obj_loss cls_loss Instances Size":
# the memory in G, two to four loss columns, then instances and image size; tqdm's rate (it/s, or s/it when
# slower than one iteration a second).
# A diverged fp16 run prints "nan" (or "inf") in the loss columns: those must be read, not skip the line.
_YOLO = re.compile(
    r"^\s*\d+/\d+\s+(?P<mem>[0-9.]+)G\s+(?P<losses>(?:(?:[0-9.]+|nan|inf)\s+){2,4})\d+\s+\d+\b"
)
_TQDM_RATE = re.compile(r"(\d+(?:\.\d+)?)(it/s|s/it)\]")
_POSTFIX = re.compile(r"([A-Za-z][A-Za-z0-9_/.]{0,80})=(" + NUMBER + r")(?=[,\]\s]|$)")
_KV = re.compile(r"([A-Za-z][A-Za-z0-9_]{0,80})=(" + NUMBER + r")(?:[KMGT]i?B|ms|s)?(?=[,\s]|$)")
# Gradient-boosting libraries print one line per boosting round, one cell per (dataset, metric), tab-separated:
# XGBoost "[10]\ttrain-logloss:0.51\teval-logloss:0.62", LightGBM "[10]\ttraining's l2: 0.5\tvalid_1's l2: 0.7",
# CatBoost "10:\tlearn: 0.5\ttest: 0.7\tbest: 0.6 (5)\ttotal: 1s". The dataset names the split; the metric
# says whether lower (a loss) or higher (a score) is better.
_GBDT_CELL = re.compile(
    r"(?:^|\t)(?P<set>[A-Za-z][\w]*?)(?:-(?P<m1>[\w@.-]+?):|'s (?P<m2>[\w@.-]+): ?|: ?)(?P<v>"
    + NUMBER
    + r")(?=\t|\s*$)"
)
_GBDT_TRAIN = frozenset({"train", "training", "learn", "train_0"})
_GBDT_SCORES = ("auc", "aucpr", "map", "ndcg", "accuracy", "acc", "precision", "recall", "f1", "r2")
_LOOSE = re.compile(r"([A-Za-z][A-Za-z0-9_/.]{0,80})\s*(?:[:=]\s*|\s+)(" + NUMBER + r")(?![\w.])")
# Megatron's timers (`--timing-log-level`): "    batch-generator ......: (25.85, 30.42)" (min, max across ranks).
_TIMER = re.compile(r"^\s*([a-z][a-z-]+) \.+: \([-\d.]+, ([-\d.]+)\)")
# Lightning SimpleProfiler rows: "|  [_TrainingEpochLoop].train_dataloader_next  |  0.05  |  600  |  30.0  |  66.4  |"
# -> the action's total seconds (4th cell) as profile_data_s / profile_compute_s.
_SIMPLE_PROFILER = re.compile(
    r"^\|\s*(?:\[\w+\]\.)?(?:(train_dataloader_next)|run_training_batch)\s*\|\s*[\d.]+\s*\|\s*\d+\s*\|\s*([\d.]+)"
)
# torch.profiler key_averages().table(): the DataLoader row's "CPU total %" (third column) is the share of
# the profiled time spent fetching batches.
_TORCH_PROFILER = re.compile(r"^(enumerate\(DataLoader\))\S*\s+[\d.]+%\s+\S+\s+([\d.]+)%")
# The counter between a metric's name and its value ("Train loss 200 0.5889", "Validation loss 1000:  0.52").
_NAME_COUNTER = re.compile(r"^(\D*?[A-Za-z]) \d+:?\s")
_BARE_NONFINITE = re.compile(rb'(?<![\w"])(-?)(nan|NaN|inf|Inf|infinity|Infinity)(?![\w"])')
SKIP_KEYS = frozenset(
    {
        "step",
        "epoch",
        "iteration",
        "iter",
        "global_step",
        "_step",
        "_runtime",
        "_timestamp",
        "v_num",
        "trainer_global_step",
        "consumed_samples",
        "global_batch_size",
        "batch",
        "total_flos",
        "time_stamp",
    }
)


# Which stop reason wins when a log says more than one (the most specific one).
STOP_RANK = {"early_stopping": 3, "max_steps": 2, "completed": 1}

# --- tables printed into a log ---------------------------------------------------------------------------
# fastai's fit table, the HF Trainer's notebook table (tab-separated, "No log" where nothing was logged yet),
# hand-printed f"{epoch:>5} {loss:>10.4f}" tables: a header line of column names, then rows of numbers.
_TABLE_COUNTERS = frozenset(
    {"epoch", "epochs", "step", "steps", "iter", "iteration", "iterations", "global_step"}
)
_TABLE_NA = re.compile(r"No log|#na#|N/A|None|-(?=\s|\||$)")
_TABLE_CELL = re.compile(r"[\t|,]|\s+")
TABLE_GAP_LINES = 200  # a row this far below the header (or the last row) belongs to some other printout


def table_header(text: str) -> tuple[tuple[str, ...], ...] | None:
    """The column names of a table header, in the ways it may be cut (by tabs or pipes, by runs of 2+ spaces,
    by any space), or None when the line is no metrics table header: fewer than 3 columns, no counter column
    (epoch, step, iteration) or no loss column, or a number among the names.

    >>> table_header("epoch     train_loss  valid_loss  accuracy  time    ")[0]
    ('epoch', 'train_loss', 'valid_loss', 'accuracy', 'time')
    >>> table_header("Epoch\\tTraining Loss\\tValidation Loss\\tAccuracy")[0]
    ('Epoch', 'Training Loss', 'Validation Loss', 'Accuracy')
    >>> table_header("epoch 3 loss 0.5 acc 0.9") is None
    True
    """
    body = text.strip().strip("|").strip()
    cuts: list[tuple[str, ...]] = []
    if "\t" in body or "|" in body:
        cuts.append(tuple(c.strip() for c in re.split(r"[\t|]", body) if c.strip()))
    cuts.append(tuple(re.split(r"\s{2,}", body)))
    cuts.append(tuple(body.split()))
    out = []
    for cols in dict.fromkeys(cuts):
        low = [c.lower() for c in cols]
        if (
            len(cols) >= 3
            and any(c in _TABLE_COUNTERS for c in low)
            and any("loss" in c for c in low)
            and not any(to_float(c) is not None for c in cols)
        ):
            out.append(cols)
    return tuple(out) or None


TABLE_MODES = ("table_header", "table_row")
# Lines that open and close an evaluation printed in the training's own format (PaddlePaddle's hapi: "Eval
# begin..." ... "Eval samples: N" around step lines that look like training's): the lines between are validation.
SECTION_MODES = ("section_begin", "section_end")


class TableReader:
    """The rows of the tables in one log, in file order: each row is read under the last header above it."""

    def __init__(self) -> None:
        self.cuts: tuple[tuple[str, ...], ...] | None = None
        self.line = 0  # the header's line, then the last row's

    def feed(self, mode: str, text: str, line_no: int) -> tuple[dict[str, float], dict[str, float]] | None:
        """A table_header line sets the columns (and returns None); a table_row line gives (metrics,
        {"x": counter}) when it fits the last header close enough above it."""
        if mode == "table_header":
            self.cuts, self.line = table_header(text), line_no
            return None
        if self.cuts is None or line_no - self.line > TABLE_GAP_LINES:
            return None
        row = table_row(self.cuts, text)
        if row is not None:
            self.line = line_no
        return row


def table_row(
    headers: tuple[tuple[str, ...], ...], text: str
) -> tuple[dict[str, float], dict[str, float]] | None:
    """(metrics, {"x": the counter column's value}) of a table row under one of the header's cuts with as
    many columns, or None. Cells that hold no number ("No log", "#na#", a clock time) are left out.

    >>> table_row(table_header("epoch     train_loss  valid_loss  accuracy  time"), "3   0.41  0.52  0.81  00:12")
    ({'train_loss': 0.41, 'valid_loss': 0.52, 'accuracy': 0.81}, {'x': 3.0})
    >>> table_row(table_header("Epoch\\tTraining Loss\\tValidation Loss"), "1\\tNo log\\t0.48")
    ({'Validation Loss': 0.48}, {'x': 1.0})
    """
    cells = [c for c in _TABLE_CELL.split(_TABLE_NA.sub("#", text.strip().strip("|"))) if c]
    for cols in headers:
        if len(cols) != len(cells):
            continue
        rec: dict[str, float] = {}
        x: float | None = None
        for name, cell in zip(cols, cells, strict=True):
            value = None if ":" in cell or cell == "#" else to_float(cell)
            if value is None:
                continue
            if name.lower() in _TABLE_COUNTERS:
                x = value if x is None else x
            elif name.lower() != "time":
                rec[name] = value
        return (rec, {"x": x}) if rec and x is not None else None
    return None


@dataclass(frozen=True)
class LineParser:
    id: str
    regex: str
    parse: str = ""
    stop: str = ""
    prefix: str = ""  # prepended to every metric name the line gives ("val_": the line reports validation)


@lru_cache(maxsize=1)
def line_parsers() -> tuple[tuple[LineParser, ...], tuple[LineParser, ...]]:
    """(metric-line parsers, stop-line parsers) from metric_lines.yaml."""
    text = (Path(__file__).parent / "metric_lines.yaml").read_text("utf-8")
    from .. import cache

    doc = cache.yaml_data(text)
    lines = tuple(
        LineParser(e["id"], e["regex"], parse=e["parse"], prefix=e.get("prefix", "")) for e in doc["lines"]
    )
    stops = tuple(LineParser(e["id"], e["regex"], stop=e["stop"]) for e in doc["stops"])
    return lines, stops


def parse_record(mode: str, text: str) -> dict[str, float]:
    """Metric name -> value from one selected line, by the parser's mode."""
    out: dict[str, float] = {}
    pairs: list[tuple[str, str]]
    if mode == "hf_dict":
        pairs = _HF_PAIR.findall(text)
    elif mode == "pipes":
        pairs = _PIPE_PAIR.findall(text)
    elif mode == "colon":
        head_end = text.find("]")
        body = text[head_end + 1 :] if head_end >= 0 else text
        pairs = _COLON_PAIR.findall(body)
        rate = _RATE.search(body)
        if rate:
            pairs.append(("throughput", rate.group(1)))
    elif mode == "postfix":
        start = text.rfind("[")
        pairs = _POSTFIX.findall(text[start:] if start >= 0 else text)
    elif mode == "kv":
        pairs = _KV.findall(text)
    elif mode == "generic":
        return parse_generic(text)[0]
    elif mode == "name_counter_value":
        # "Train loss 200 0.5889 Grad Norm 0.6 0.99s/it": drop the counter after the first name, then read the
        # rest like any line ("Train loss 0.5889 Grad Norm 0.6 ...")
        return parse_generic(_NAME_COUNTER.sub(r"\1 ", text, count=1))[0]
    elif mode in TABLE_MODES or mode in SECTION_MODES:
        return out  # read in context (TableReader, SeriesBuilder): a row means nothing without its header
    elif mode == "bare_loss":
        value = to_float(text.rsplit(":", 1)[-1].strip())
        if value is not None:
            out["loss"] = value
        return out
    elif mode == "yolo_columns":
        m = _YOLO.match(text)
        if m is None:
            return out
        out["mem"] = float(m.group("mem")) * 1024.0  # G -> MiB
        out["loss"] = sum(float(v) for v in m.group("losses").split())
        r = _TQDM_RATE.search(text)
        if r is not None and float(r.group(1)) > 0:
            out["throughput"] = float(r.group(1)) if r.group(2) == "it/s" else 1.0 / float(r.group(1))
        return out
    elif mode == "gbdt":
        return _gbdt_record(text)
    elif mode == "timer":
        pairs = _TIMER.findall(text)
    elif mode == "simple_profiler":
        pairs = _SIMPLE_PROFILER.findall(text)
    elif mode == "torch_profiler":
        pairs = _TORCH_PROFILER.findall(text)
    else:  # loose
        pairs = _LOOSE.findall(text)
    for name, raw in pairs:
        if mode == "simple_profiler":
            name = "profile_data_s" if name else "profile_compute_s"
        elif mode == "torch_profiler":
            name = "data_share_pct"
        if name in out:
            continue
        try:  # every NUMBER spelling is one float() reads; to_float is the general fallback
            out[name] = float(raw)
        except ValueError:
            value = to_float(raw)
            if value is not None:
                out[name] = value
    return out


def _gbdt_record(text: str) -> dict[str, float]:
    """One boosting round's cells as loss/val_loss (or acc/val_acc for a score such as AUC): the first metric
    of each split is the one early stopping watches by default. CatBoost's "best" and timing cells are skipped."""
    out: dict[str, float] = {}
    cells = list(_GBDT_CELL.finditer(text))
    splits = {m.group("set").lower() for m in cells}
    # XGBoost's sklearn API names its eval_set validation_0, validation_1...: with two or more and no "train",
    # the first is, by the near-universal habit eval_set=[(X_train, y_train), (X_test, y_test)], the training set
    first_is_train = not splits & _GBDT_TRAIN and {"validation_0", "validation_1"} <= splits
    for m in cells:
        split = m.group("set").lower()
        if split in ("best", "total", "remaining", "passed"):
            continue
        if first_is_train and split == "validation_0":
            split = "train"
        metric = (m.group("m1") or m.group("m2") or "").lower()
        score = metric.startswith(_GBDT_SCORES)
        val = split not in _GBDT_TRAIN
        name = ("val_" if val else "") + ("acc" if score else "loss")
        if name in out:
            continue
        value = to_float(m.group("v"))
        if value is not None:
            out[name] = value
    return out


def x_of(groups: Mapping[str, str], rec: Mapping[str, float], ordinal: int) -> tuple[float, str]:
    """The x coordinate of a record: the logged step, else epoch*batches+batch, else the record's ordinal."""
    step = groups.get("step")
    if step is not None and step.isdigit():
        return float(step), "step"
    epoch, batch, batches = groups.get("epoch"), groups.get("batch"), groups.get("batches")
    if epoch is not None and batch is not None and batches is not None:
        try:
            return float(int(epoch) * int(batches) + int(batch)), "step"
        except ValueError:
            pass
    return float(ordinal), "entry"


class LineReader:
    """One streaming pass over a log: metric lines and stop lines.

    The file is cut into segments of whole lines (so only one segment's matches are ever held in memory).
    Progress bars that rewrite themselves with bare CRs are split into their updates first, keeping physical
    line numbers. Candidate lines come from the Scanner's prefilter (hyperscan, or required literals), then
    the parsers are confirmed in order and the first that matches a line reads it (``_matches``): a long
    log is mostly metric lines, and a full Scan would confirm, record and decode every parser's hit on every
    one of them (a Megatron line is also a generic step line) only for all but the first to be dropped.
    """

    def __init__(self, engine: str = "auto") -> None:
        metric, stops = line_parsers()
        self.parsers = metric + stops
        self.n_metric = len(metric)
        patterns = [Pattern(p.id, p.regex, False, "all", 1 << 30) for p in self.parsers]
        # metric_lines.yaml is ours and tested: compile each parser's Python form on its first candidate.
        self.scanner = Scanner(patterns, tail_lines=0, engine=engine, progress=False, trusted=True)
        # Every candidate is confirmed on its line alone (a hyperscan match can run on across a newline through
        # `\s`), with the standard `re`: several times faster than the `regex` module the Scanner uses for the
        # packs' patterns, and these are ours (`re` syntax is the contract).
        self._confirm: list[Any] = [re.compile(p.regex.encode("utf-8")).search for p in self.parsers]

    def _matches(self, seg: bytes) -> tuple[list[tuple[int, int, str, dict[str, str]]], int]:
        """([(line number in seg, parser index, text, groups)], lines in seg) for one segment of whole lines.

        Per line: the first metric parser that confirms, else every stop parser that does. Line semantics
        are the Scanner's: CR LF is one terminator, a line is matched on its first LINE_MATCH_CAP bytes,
        texts and groups are decoded and capped as in Hit.
        """
        unterminated = bool(seg) and not seg.endswith(b"\n")  # only a file's last line may lack one
        if b"\r" in seg:
            seg = seg.replace(b"\r\n", b"\n")
            if unterminated and seg.endswith(b"\r"):  # a final line cut inside its CR LF
                seg = seg[:-1]
        npat = len(self.parsers)
        n_metric = self.n_metric
        confirm = self._confirm
        out: list[tuple[int, int, str, dict[str, str]]] = []
        counted_to = newlines = 0
        prev_end = prev_idx = -1
        done = False  # the current line already has its metric parser
        line = b""
        for key in self.scanner._candidates(seg):
            end, idx = divmod(key, npat)
            if end != prev_end:
                prev_end, done = end, False
                start = seg.rfind(b"\n", 0, end) + 1
                line = seg[start : min(end, start + LINE_MATCH_CAP)]
                prev_idx = -1
            if done or idx == prev_idx:
                continue  # first parser wins on a line; duplicate candidates are possible
            prev_idx = idx
            m = confirm[idx](line)
            if m is None:
                continue
            newlines += seg.count(b"\n", counted_to, end)
            counted_to = end
            groups = {k: _text(v) for k, v in m.groupdict().items() if v is not None}
            out.append((newlines + 1, idx, _text(line), groups))
            done = idx < n_metric
        total = seg.count(b"\n") + (1 if unterminated else 0)
        return out, total

    def read(self, path: Path, display: str, tail_window: int = 40) -> SeriesSet:
        """Read one log's metric lines on its own (the diagnosis gets them from the logs probe's pass instead:
        MetricSampler)."""
        build = SeriesBuilder(self, display, tail_window)
        total = 0
        try:
            for seg, phys, base in segments(path, build.out.issues):
                matches, seg_lines = self._matches(seg)
                build.add_matches(base, matches, phys)
                total = base + (phys[-1] if phys else seg_lines)
        except (OSError, EOFError, gzip.BadGzipFile) as e:
            build.out.issues.append(f"{display}: read error: {e}")
        except (ValueError, MemoryError) as e:  # defensive: a parser bug must not sink the probe
            build.out.issues.append(f"{display}: {type(e).__name__}: {e}")
        return build.finish(total)


class SeriesBuilder:
    """Turns a log's metric-line matches (LineReader._matches), given in file order a segment at a time, into its
    SeriesSet: the rank followed, the x axis, the names the generic reader learns, the stop lines."""

    def __init__(self, reader: LineReader, display: str, tail_window: int = 40) -> None:
        self.reader = reader
        self.tail_window = tail_window
        self.out = SeriesSet(display)
        self.ordinal = 0
        self.stop_hits: list[tuple[int, str]] = []
        self.kinds: set[str] = set()
        self.first_rank: int | None = None
        self.keys: dict[str, str] = {}  # metric name as logged -> canonical name ("" = not a metric)
        self.learned: dict[str, int] = {}  # generic-reader names: sightings, up to 2
        self.held: dict[str, tuple[float, float, int]] = {}  # a generic name's first point, until its second
        self.last_x: float | None = None
        self.table = TableReader()
        self.in_eval = False  # between a section_begin and a section_end line
        self.failed = False

    def add(
        self, base: int, matched: tuple[list[tuple[int, int, str, dict[str, str]]], list[int] | None]
    ) -> None:
        """SampleBuilder.add: a MetricSampler.match result; a parser bug ends the series here, not the scan."""
        if self.failed:
            return
        try:
            self.add_matches(base, *matched)
        except (ValueError, MemoryError) as e:  # defensive, as in LineReader.read
            self.failed = True
            self.out.issues.append(f"{self.out.source}: {type(e).__name__}: {e}")

    def add_matches(
        self, base: int, matches: list[tuple[int, int, str, dict[str, str]]], phys: list[int] | None
    ) -> None:
        parsers = self.reader.parsers
        out, keys, learned, held = self.out, self.keys, self.learned, self.held
        # Points are gathered per series for the segment, then added in bulk (Series.extend).
        pending: dict[str, tuple[list[float], list[float], list[int]]] = {}
        for seg_line, idx, text, groups in matches:
            p = parsers[idx]
            line_no = base + (phys[seg_line - 1] if phys is not None else seg_line)
            if p.stop:
                self.stop_hits.append((line_no, p.stop))
                continue
            head = text[:200]
            rank = lineinfo.rank_of_line(text) if ("ank" in head or "NCCL" in head) else None
            if rank is not None:
                # Interleaved ranks would zig-zag one series: follow the first rank the file shows.
                self.first_rank = rank if self.first_rank is None else self.first_rank
                if rank != self.first_rank:
                    continue
            if p.parse in SECTION_MODES:
                self.in_eval = p.parse == "section_begin"
                continue
            generic = p.parse == "generic"
            if p.parse in TABLE_MODES:
                row = self.table.feed(p.parse, text, line_no)
                if row is None:
                    continue
                rec, counters = row
            elif generic:
                rec, counters = parse_generic(text)
            else:
                rec, counters = parse_record(p.parse, text), {}
            if not rec or "train_runtime" in rec:
                continue  # HF's end-of-training summary averages the whole run: not a datapoint
            if p.prefix:  # (a counter the line also names, "global_step = 1000", stays a counter)
                rec = {
                    (k if k.startswith(p.prefix) else p.prefix + k): v
                    for k, v in rec.items()
                    if canonical(k) not in SKIP_KEYS
                }
            self.ordinal += 1
            # An evaluation's own step counter restarts each time: it is placed at the training step it follows.
            if self.in_eval:
                rec = {(k if _QUALIFIED_VAL.match(k) else "val_" + k): v for k, v in rec.items()}
                counters, groups = {}, {}
                if self.last_x is not None:
                    counters = {"x": self.last_x}
            if "x" in counters and not groups:
                x, kind = counters["x"], "step"
            elif groups or self.last_x is None:
                x, kind = x_of(groups, rec, self.ordinal)
            else:  # no counter of its own (a validation or timer line): the last step seen
                x, kind = self.last_x, "step"
            if kind == "step":
                self.last_x = x
            self.kinds.add(kind)
            out.parsers.add(p.id)
            for name, value in rec.items():
                key = keys.get(name)
                if key is None:  # a log repeats the same few names: resolve each once
                    key = keys[name] = "" if canonical(name) in SKIP_KEYS else canonical(name)
                if not key:
                    continue
                if generic and learned.get(key, 0) < 2:
                    # Names are learned per file: a name becomes a series on its second sighting, so
                    # one stray "word number" in a chatter line does not make a curve.
                    seen = learned[key] = learned.get(key, 0) + 1
                    if seen == 1:
                        held[key] = (x, value, line_no)
                        continue
                    hx, hv, hl = held.pop(key)
                    buf = pending.get(key)
                    if buf is None:
                        buf = pending[key] = ([], [], [])
                    buf[0].append(hx)
                    buf[1].append(hv)
                    buf[2].append(hl)
                buf = pending.get(key)
                if buf is None:
                    buf = pending[key] = ([], [], [])
                buf[0].append(x)
                buf[1].append(value)
                buf[2].append(line_no)
        for key, (xs, vs, lns) in pending.items():
            out.extend_canonical(key, xs, vs, lns)

    def finish(self, total: int) -> SeriesSet:
        """SampleBuilder.finish: the series, with the stop reason announced near the end (`total` lines)."""
        out = self.out
        out.step_kind = "entry" if self.kinds == {"entry"} else "step"
        near_end = [(STOP_RANK[r], ln, r) for ln, r in self.stop_hits if total - ln <= self.tail_window]
        if near_end:  # "early stopping" then "Training completed": the specific reason wins
            _, out.stop_line, out.stop = max(near_end)
            out.stop_from_log = True
        return out


class MetricSampler:
    """The metric-line reader riding on the logs probe's scan (logscan.Sampler): one pass over a log feeds both
    its signatures and its curves. The stretches read are those of ``_sampled_chunks`` (a big plain log: its
    start, its end and evenly spaced stretches; everything otherwise), and the probe's detail says so."""

    def __init__(self, tail_window: int = 40, engine: str = "auto") -> None:
        self.tail_window = tail_window
        self.engine = engine
        self._reader: LineReader | None = None

    def __getstate__(self) -> dict[str, Any]:  # to worker processes: the reader is rebuilt there
        return {"tail_window": self.tail_window, "engine": self.engine}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["tail_window"], state["engine"])  # type: ignore[misc]

    @property
    def reader(self) -> LineReader:
        if self._reader is None:
            self._reader = LineReader(self.engine)
        return self._reader

    def ranges(self, size: int, compressed: bool) -> list[tuple[int, int]] | None:
        return None if compressed else sample_ranges(size)

    def match(
        self, seg: bytes, offset: int = 0, ranges: list[tuple[int, int]] | None = None
    ) -> tuple[list[tuple[int, int, str, dict[str, str]]], list[int] | None]:
        """The metric lines of `seg` (which starts at byte `offset`) that lie in `ranges` (whole lines)."""
        skipped = 0
        if ranges is not None:
            lo = min((a for a, b in ranges if a < offset + len(seg) and offset < b), default=offset) - offset
            hi = max((b for a, b in ranges if a < offset + len(seg) and offset < b), default=offset) - offset
            start = seg.rfind(b"\n", 0, max(0, lo)) + 1 if lo > 0 else 0
            stop = len(seg) if hi >= len(seg) else seg.find(b"\n", hi) + 1 or len(seg)
            if start or stop < len(seg):
                skipped = seg.count(b"\n", 0, start)
                seg = seg[start:stop]
        seg, phys = _split_cr(seg)
        matches = self.reader._matches(seg)[0]
        if skipped:  # line numbers stay those of the whole segment
            if phys is not None:
                phys = [skipped + p for p in phys]
            else:
                matches = [(n + skipped, i, t, g) for n, i, t, g in matches]
        return matches, phys

    def builder(self, path: str, size: int, compressed: bool) -> SeriesBuilder:
        build = SeriesBuilder(self.reader, path, self.tail_window)
        ranges = self.ranges(size, compressed)
        if ranges is not None:
            read = sum(b - a for a, b in ranges)
            build.out.issues.append(
                f"{Path(path).name}: {size / (1 << 30):.1f} GiB: metric lines read in {read / (1 << 20):.1f} MiB "
                f"({len(ranges)} stretches: its start, its end and evenly spaced ones); line numbers exact"
            )
        return build


def _text(b: bytes) -> str:
    """Decoded and capped like a Scanner Hit's text."""
    return b[:_TEXT_BYTES].decode("utf-8", "replace")[:TEXT_CHARS]


# A plain log bigger than SAMPLE_MIN_BYTES has its metric lines read in SAMPLE_CHUNKS chunks: the first
# SAMPLE_HEAD, the last SAMPLE_TAIL and evenly spaced ones between. The rest is only counted (newlines, at C
# speed), so line numbers stay exact and a 10 GB log costs a bounded amount of parsing. Curves keep their
# shape; onsets inside a skipped stretch are placed at the next sampled point, and each trend states its
# window and datapoints. Signatures (NaN lines, OOMs) come from the full scan of the logs probe regardless.
SAMPLE_MIN_BYTES = 64 << 20
SAMPLE_HEAD, SAMPLE_TAIL, SAMPLE_CHUNKS = 2, 4, 10
# In the logs probe's pass (MetricSampler) each of those stretches is this long: a log dense with metric lines
# has ~5,000 of them per MiB, and reading one costs ~60 us of Python (measured: 0.3 s of CPU for 2.5 MiB of a dense
# mix); 10 x 128 KiB keeps that near a tenth of a 1 GiB diagnosis, with over a thousand points per series still.
# The head and the tail stretches are contiguous, the tail ending with the file.
SAMPLE_STRETCH = 128 << 10


def sample_ranges(size: int) -> list[tuple[int, int]] | None:
    """The byte ranges whose metric lines a big plain log's pass reads (None: all of it).

    >>> r = sample_ranges(1 << 30)
    >>> r[:2], r[-1], len(r), sum(b - a for a, b in r) >> 10
    ([(0, 262144), (2097152, 2228224)], (1073217536, 1073741824), 6, 1280)
    >>> sample_ranges(64 << 20) is None
    True
    """
    chunks = _sampled_chunks(size)
    if chunks is None:
        return None
    n = -(-size // CHUNK)
    head, tail = SAMPLE_HEAD * SAMPLE_STRETCH, SAMPLE_TAIL * SAMPLE_STRETCH
    middle = sorted(i for i in chunks if SAMPLE_HEAD <= i < n - SAMPLE_TAIL)
    out = [(0, head)]
    out += [(i * CHUNK, min(size, i * CHUNK + SAMPLE_STRETCH)) for i in middle]
    out.append((max(head, size - tail), size))
    return out


def _sampled_chunks(size: int) -> set[int] | None:
    """Indices of the CHUNK-sized pieces to parse, or None for all of them."""
    n = -(-size // CHUNK)
    if size <= SAMPLE_MIN_BYTES or n <= SAMPLE_CHUNKS:
        return None
    keep = set(range(SAMPLE_HEAD)) | set(range(n - SAMPLE_TAIL, n))
    middle = SAMPLE_CHUNKS - SAMPLE_HEAD - SAMPLE_TAIL
    span = n - SAMPLE_HEAD - SAMPLE_TAIL
    keep |= {SAMPLE_HEAD + (k * span) // middle for k in range(middle)}
    return keep


def _sampled_note(name: str, size: int, chunks: int) -> str:
    return (
        f"{name}: {size / (1 << 30):.1f} GiB: metric lines read in {chunks * CHUNK >> 20} MiB "
        "(start, end and evenly spaced stretches); line numbers exact"
    )


def segments(path: Path, notes: list[str] | None = None) -> Iterator[tuple[bytes, list[int] | None, int]]:
    """(segment of whole lines, physical-line map or None, physical lines before the segment)."""
    gz = path.name.endswith(".gz")
    raw = open_regular(path)  # a FIFO or a device is refused (Unreadable, an OSError) before any read
    size = os.fstat(raw.fileno()).st_size
    keep = None if gz else _sampled_chunks(size)
    if keep is not None and notes is not None:
        notes.append(_sampled_note(path.name, size, len(keep)))
    base = 0
    carry = b""
    index = -1
    with raw, gzip.GzipFile(fileobj=raw, mode="rb") if gz else raw as fh:
        while True:
            chunk = fh.read(CHUNK)
            if not chunk:
                break
            index += 1
            if keep is not None and index not in keep:
                # A skipped stretch is only counted; its unfinished last line is carried for the next chunk.
                nl = chunk.rfind(b"\n")
                if nl < 0:
                    carry += chunk
                    if len(carry) > 4 * CHUNK:  # a newline-less monster: not a metric line
                        carry = carry[-CHUNK:]
                    continue
                base += chunk.count(b"\n")
                carry = chunk[nl + 1 :]
                continue
            buf = carry + chunk
            cut = buf.rfind(b"\n")
            if cut < 0:
                if len(buf) > 4 * CHUNK:  # a newline-less monster: cut anyway, it is not a metric line
                    cut = len(buf) - 1
                else:
                    carry = buf
                    continue
            seg, carry = buf[: cut + 1], buf[cut + 1 :]
            if keep is None or index in keep:
                yield (*_split_cr(seg), base)
            base += seg.count(b"\n")
        if carry:
            yield (*_split_cr(carry), base)


def _split_cr(seg: bytes) -> tuple[bytes, list[int] | None]:
    """tqdm rewrites its bar with bare CRs: make each update a line, remembering its physical line number."""
    norm = seg.replace(b"\r\n", b"\n")
    if b"\r" not in norm:
        return seg, None
    phys: list[int] = []
    parts: list[bytes] = []
    for i, line in enumerate(norm.split(b"\n")):
        pieces = [p for p in line.split(b"\r") if p] or [b""]
        parts.extend(pieces)
        phys.extend([i + 1] * len(pieces))
    if norm.endswith(b"\n"):  # split() made an empty last piece for the final terminator
        parts.pop()
        phys.pop()
    return b"\n".join(parts) + b"\n", phys


# --- structured files ------------------------------------------------------------------------------------


def loads_tolerant(text: str | bytes) -> Any:
    """JSON that may hold bare NaN / Infinity (Python's json accepts those) or lower-case nan / inf."""
    data = text.encode("utf-8", "replace") if isinstance(text, str) else text
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        pass

    def fix(m: re.Match[bytes]) -> bytes:
        word = m.group(2).lower()
        return m.group(1) + (b"NaN" if word == b"nan" else b"Infinity")

    return json.loads(_BARE_NONFINITE.sub(fix, data))


def _num(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str) and len(v) < 40:
        f = to_float(v)
        if f is not None and v.strip().lower().lstrip("+-") in ("nan", "inf", "infinity"):
            return f
        try:
            return float(v)
        except ValueError:
            return None
    return None


def _add_record(out: SeriesSet, rec: Mapping[str, Any], x: float, line: int) -> None:
    for k, v in rec.items():
        if not isinstance(k, str) or canonical(k) in SKIP_KEYS:
            continue
        f = _num(v)
        if f is not None:
            out.add(k, x, f, line)


def _record_x(rec: Mapping[str, Any], ordinal: int) -> tuple[float, bool]:
    for key in ("step", "global_step", "_step", "iteration", "iter", "trainer/global_step"):
        v = _num(rec.get(key))
        if v is not None and math.isfinite(v):
            return v, True
    return float(ordinal), False


def bounded_lines(fh: Any, limit: int) -> Iterator[bytes | None]:
    """The lines of a binary file, each at most `limit` bytes; a longer line is skipped (read in pieces, never
    held) and yields None, so line numbers stay exact.

    >>> import io
    >>> list(bounded_lines(io.BytesIO(b"a\\n" + b"x" * 10 + b"\\nb"), 4))
    [b'a\\n', None, b'b']
    """
    while True:
        line = fh.readline(limit + 1)
        if not line:
            return
        if len(line) <= limit:
            yield line
            continue
        while not line.endswith(b"\n"):  # the rest of the over-long line, a piece at a time
            line = fh.readline(1 << 20)
            if not line:
                break
        yield None


def read_jsonl(path: Path, display: str) -> SeriesSet:
    out = SeriesSet(display)
    has_step = False
    ordinal = 0
    try:
        raw_fh = open_regular(path)
        with raw_fh, gzip.GzipFile(fileobj=raw_fh, mode="rb") if path.name.endswith(".gz") else raw_fh as fh:
            for line_no, raw in enumerate(bounded_lines(fh, MAX_RECORD_BYTES), 1):
                if raw is None or not raw.strip():
                    continue
                try:
                    rec = loads_tolerant(raw)
                except (ValueError, RecursionError):
                    continue  # a torn last line of a crashed run
                if not isinstance(rec, dict):
                    continue
                ordinal += 1
                x, stepped = _record_x(rec, ordinal)
                has_step |= stepped
                _add_record(out, rec, x, line_no)
    except (OSError, EOFError, gzip.BadGzipFile) as e:
        out.issues.append(f"{display}: read error: {e}")
    out.step_kind = "step" if has_step else "entry"
    out.parsers.add("jsonl")
    return out


def _loss_components(cols: list[str]) -> dict[str, list[str]]:
    """{total: its component columns} for a CSV that logs only a loss's parts (Ultralytics' results.csv:
    train/box_loss, train/obj_loss, train/cls_loss and their val/ twins): the total is their sum, as the
    trainer optimises it, so the curve detectors see a loss."""
    names = {c: canonical(c) for c in cols}
    out: dict[str, list[str]] = {}
    for total, val in (("loss", False), ("val_loss", True)):
        if total in names.values():
            continue
        parts = [
            c
            for c, n in names.items()
            if n.endswith("_loss") and n not in ("loss", "val_loss") and n.startswith("val_") is val
        ]
        if len(parts) >= 2:
            out[total] = parts
    return out


def read_csv(path: Path, display: str) -> SeriesSet:
    """Lightning CSVLogger (sparse rows: train and val metrics on different rows) and generic metric CSVs."""
    out = SeriesSet(display)
    has_step = False
    try:
        with open_regular(path) as fh:
            # Over-long rows come through as empty lines: a 500 MB line is never held (csv skips blank rows).
            lines = (
                (b"\n" if raw is None else raw).decode("utf-8", "replace")
                for raw in bounded_lines(fh, MAX_RECORD_BYTES)
            )
            reader = csv.reader(lines)
            header = next(reader, None)
            if not header:
                return out
            cols = [c.strip() for c in header]
            totals = _loss_components(cols)
            for row_no, row in enumerate(reader, 2):
                if len(row) > 10000:
                    continue
                rec = {c: v for c, v in zip(cols, row, strict=False) if v.strip() != ""}
                if not rec:
                    continue
                for total, parts in totals.items():
                    vals = [to_float(rec.get(c)) for c in parts]
                    if all(v is not None for v in vals):
                        rec[total] = repr(sum(v for v in vals if v is not None))
                x, stepped = _record_x(rec, row_no - 1)
                if not stepped and "epoch" in rec:
                    e = _num(rec["epoch"])
                    x = e if e is not None and math.isfinite(e) else x
                has_step |= stepped
                _add_record(out, rec, x, row_no)
    except (OSError, csv.Error, UnicodeError) as e:
        out.issues.append(f"{display}: {e}")
    out.step_kind = "step" if has_step else "entry"
    out.parsers.add("csv")
    return out


def read_trainer_state(path: Path, display: str) -> SeriesSet:
    """HF ``trainer_state.json``: ``log_history`` (bare NaN/Infinity allowed) and the stop reason."""
    out = SeriesSet(display)
    out.parsers.add("trainer_state")
    doc = _read_json(path, display, out)
    if not isinstance(doc, dict):
        return out
    history = doc.get("log_history")
    if isinstance(history, list):
        for i, rec in enumerate(history, 1):
            if isinstance(rec, dict) and "train_runtime" not in rec:
                x, _ = _record_x(rec, i)
                _add_record(out, rec, x, 0)
    out.stop = _hf_stop_reason(doc)
    return out


def _hf_stop_reason(doc: Mapping[str, Any]) -> str:
    """Early stopping is only visible in the saved state: the callback prints nothing."""
    cbs = doc.get("stateful_callbacks")
    if isinstance(cbs, dict):
        es = cbs.get("EarlyStoppingCallback")
        if isinstance(es, list):  # several instances are saved as a list
            es = es[0] if es else None
        if isinstance(es, dict):
            patience = _num((es.get("args") or {}).get("early_stopping_patience"))
            counter = _num((es.get("attributes") or {}).get("early_stopping_patience_counter"))
            if patience is not None and counter is not None and counter >= patience > 0:
                return "early_stopping"
    step, max_steps = _num(doc.get("global_step")), _num(doc.get("max_steps"))
    history = doc.get("log_history")
    finished = isinstance(history, list) and any(
        isinstance(r, dict) and "train_runtime" in r for r in history
    )
    if finished and step is not None and max_steps is not None and max_steps > 0:
        return "max_steps" if step >= max_steps else "early_stopping"
    return "completed" if finished else ""


def read_wandb_summary(path: Path, display: str) -> SeriesSet:
    """``wandb-summary.json`` holds the last value of each metric: one point each, at ``_step``."""
    out = SeriesSet(display, last_values_only=True)
    out.parsers.add("wandb_summary")
    doc = _read_json(path, display, out)
    if isinstance(doc, dict):
        x, _ = _record_x(doc, 1)
        _add_record(out, doc, x, 0)
    return out


def _read_json(path: Path, display: str, out: SeriesSet) -> Any:
    try:
        return loads_tolerant(read_capped(path, MAX_STRUCTURED_BYTES))
    except Unreadable as e:
        out.issues.append(f"{display}: {e.reason}")
        return None
    except (OSError, ValueError, RecursionError) as e:
        out.issues.append(f"{display}: not readable as JSON: {str(e)[:120]}")
        return None


def read_any(path: Path, display: str) -> SeriesSet | None:
    """Dispatch a metrics file by name; None when the name is not a metrics format we read."""
    low = path.name.lower()
    if low.endswith((".jsonl", ".jsonl.gz")):
        return read_jsonl(path, display)
    if low == "metrics.csv" or low.endswith(".csv"):
        return read_csv(path, display)
    if low == "trainer_state.json":
        return read_trainer_state(path, display)
    if low == "wandb-summary.json":
        return read_wandb_summary(path, display)
    if low.startswith("events.out.tfevents."):
        from .tfevents import read_tfevents

        return read_tfevents(path, display)
    return None


def parse_text_lines(text: str) -> SeriesSet:
    """Parse an in-memory log (tests and property checks)."""
    import tempfile

    with tempfile.NamedTemporaryFile("wb", suffix=".log", delete=True) as tmp:
        tmp.write(text.encode("utf-8", "replace"))
        tmp.flush()
        return LineReader().read(Path(tmp.name), "<text>")


__all__ = [
    "LineReader",
    "MetricSampler",
    "SeriesBuilder",
    "line_parsers",
    "loads_tolerant",
    "parse_record",
    "parse_text_lines",
    "read_any",
    "read_csv",
    "read_jsonl",
    "read_trainer_state",
    "read_wandb_summary",
]
