"""Metric series with bounded memory, and the canonical metric names the trend detectors look for.

A series keeps every point up to ``cap``; beyond that the older part is halved by merging neighbours (the
mean of each pair) while the last ``keep_last`` points stay raw. What trends need even after compaction is
tracked exactly on the side: the first non-finite point (NaN onset), the extremes, and the point count.

>>> s = Series("loss", cap=8, keep_last=2)
>>> for i in range(20): s.add(i, float(i))
>>> len(s.steps) <= 8, s.total, s.max_value, s.steps[-1]
(True, 20, 19.0, 19.0)
>>> s.add(20, float("nan")); s.nan_onset
(20.0, nan, 0)
>>> canonical("lm loss"), canonical("eval_loss"), canonical("train/grad_norm"), canonical("max mem")
('loss', 'val_loss', 'grad_norm', 'mem')
>>> to_float("1.5E+00"), to_float("NaN"), to_float("-inf"), to_float("0.250s"), to_float("abc")
(1.5, nan, -inf, 0.25, None)
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from functools import lru_cache

DEFAULT_CAP = 20000
DEFAULT_KEEP_LAST = 2000
MAX_SERIES_PER_SOURCE = 64  # a logger with thousands of per-layer scalars must not grow without bound

# Canonical name -> the spellings loggers use (lower-cased, separators normalised to "_").
_ALIASES: dict[str, tuple[str, ...]] = {
    "loss": (
        "loss",
        "train_loss",
        "lm_loss",
        "train_lm_loss",
        "training_loss",
        "train_loss_step",
        "loss_step",
        "total_loss",
        # the sum of a detector's or a multi-task model's terms, as their loggers name it
        "all_loss",
        "loss_all",
        "sum_loss",
        "loss_sum",
        "loss_total",
        "overall_loss",
        "objective_loss",
        "objective",  # matconvnet's cnn_train
        "epoch_loss",  # Keras' TensorBoard scalar; "epoch loss 0.31" (an epoch's time stays apart from a step's)
        "cross_entropy",  # MXNet's CrossEntropy metric ("Epoch[3] Train-cross-entropy=2.1")
        "train_cross_entropy",
        "avg_loss",
        "average_loss",
        "mean_loss",
        "running_loss",
        "avg_train_loss",
        "train_loss_avg",
        # not a bare "cost": MXNet's "Epoch[3] Time cost=24.695" is read as one (a healthy run's epoch time)
        "train_cost",
        "training_cost",
        "avg_cost",
    ),
    "val_loss": (
        "val_loss",
        "eval_loss",
        "validation_loss",
        "valid_loss",
        "val_loss_epoch",
        "eval_lm_loss",
        "validation_lm_loss",
        "val_lm_loss",
        "test_loss",
        "val_objective",
        "val_cost",
        "validation_cost",
        "dev_loss",  # a development set is the validation split (flair, NLP toolkits)
        "validation_cross_entropy",  # MXNet's "Epoch[3] Validation-cross-entropy=2.3"
        "val_cross_entropy",
    ),
    # accuracies: overfitting is also read from a train/validation accuracy gap (collectors/trends.py)
    "acc": (
        "acc",
        "accuracy",
        "train_acc",
        "train_accuracy",
        "training_acc",
        "training_accuracy",
        "categorical_accuracy",
        "sparse_categorical_accuracy",
    ),
    "val_acc": (
        "val_acc",
        "val_accuracy",
        "eval_accuracy",
        "eval_acc",
        "valid_acc",
        "valid_accuracy",
        "validation_accuracy",
        "validation_acc",
        "test_acc",
        "test_accuracy",
        "val_categorical_accuracy",
        "val_sparse_categorical_accuracy",
        "dev_acc",
        "dev_accuracy",
    ),
    "grad_norm": (
        "grad_norm",
        "gradient_norm",
        "grad_norm_total",
        "total_norm",
        "global_grad_norm",
        "gnorm",
    ),
    "lr": ("lr", "learning_rate"),
    "loss_scale": ("loss_scale", "scale", "grad_scale", "amp_scale"),
    "skipped_iters": ("number_of_skipped_iterations", "skipped_iterations", "skipped_steps"),
    # DeepSpeed's engine prints the run's running total (step=N, skipped=K), not a per-interval count.
    "skipped_total": ("skipped", "skipped_total"),
    "nan_iters": ("number_of_nan_iterations", "nan_iterations"),
    "step_time": (
        "time",
        "batch_time",
        "step_time",
        "iter_time",
        "elapsed_time_per_iteration_ms",
        "elapsed_time_per_iteration",
        "time_per_step",
        "train_step_time",
        # Paddle's suites (PaddleOCR, PaddleDetection, PaddleSeg, PaddleClas): the whole batch, reading included
        "batch_cost",
        "avg_batch_cost",
    ),
    # the training step's own time when a log prints it apart from the data wait ("data 0.4s | compute 0.04s")
    "compute_time": ("compute", "compute_time", "model_time", "forward_backward_time", "fwd_bwd_time"),
    "data_time": (
        "data",
        "data_time",
        "dataloader_time",
        "data_wait",
        "data_load_time",
        "time_data",
        "data_loading",
        "data_loading_time",
        "dataloader_wait",
        "data_wait_time",
        "batch_generator",  # Megatron's timer: the time spent fetching the batch (ms, like its step time)
        "reader_cost",  # Paddle's suites: the share of batch_cost spent reading the batch
        "avg_reader_cost",
        "data_cost",
    ),
    "mem": (
        "max_mem",
        "mem",
        "mem_allocated",
        "memory_allocated",
        "gpu_mem",
        "allocated",
        "max_memory_allocated",
        "mem_allocated_mb",
        "memory",
        "cuda_mem",
        "gpu_memory",
        "mem_gb",
        "memory_allocated_mb",
        "memallocated",
        # printed straight from the torch calls ("torch.cuda.memory_allocated: 2.1GB")
        "torch_cuda_memory_allocated",
        "cuda_memory_allocated",
        "torch_cuda_max_memory_allocated",
        "cuda_max_memory_allocated",
        "max_allocated",
        "gpu_mem_allocated",
        "gpu_memory_allocated",
    ),
    "throughput": (
        "throughput",
        "samples_per_second",
        "samples_per_sec",
        "img_s",
        "images_per_sec",
        "tokens_per_sec",
        "tokens_per_second",
        "tok_s",
        "it_s",
        "speed",  # MXNet's Speedometer ("Speed: 2015.42 samples/sec")
        "train_samples_per_second",
        "rate",
        "currsamplespersec",
        "tps",
        "wps",
        "tokens_s",
        "samples_s",
    ),
}
_CANON = {alias: name for name, aliases in _ALIASES.items() for alias in aliases}
_PREFIX = re.compile(r"^(?:train|training)[/.]")
_VAL_PREFIX = re.compile(r"^(?:val|eval|valid|validation)[/.]")
_SEP = re.compile(r"[^a-z0-9]+")
_AVERAGED = re.compile(r"^(?:avg|average|mean|running|smoothed)_(?=[a-z])")
_VAL_AVERAGED = re.compile(
    r"^(?:val|valid|validation|eval|test)_(?=(?:avg|average|mean|running|smoothed)_[a-z])"
)
_NUM = re.compile(r"^[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


@lru_cache(maxsize=4096)  # a log repeats the same few names millions of times
def canonical(name: str) -> str:
    """The canonical metric name, or the normalised name itself when it is not one the detectors use."""
    low = name.strip().lower()
    val = bool(_VAL_PREFIX.match(low))
    low = _VAL_PREFIX.sub("", _PREFIX.sub("", low))
    key = _SEP.sub("_", low).strip("_")
    if val:
        return "val_" + key if key != "loss" else "val_loss"
    qualified = _VAL_AVERAGED.match(key)
    if qualified:  # "val_average_loss" (a "Test set: Average loss" line): the validation series itself
        rest = canonical(key[qualified.end() :])
        if rest in _ALIASES:
            return "val_loss" if rest == "loss" else "val_" + rest
    hit = _CANON.get(key)
    if hit is None and _AVERAGED.match(key):
        # "average training loss", "mean val loss": a logged average is the series itself
        rest = canonical(_AVERAGED.sub("", key))
        return rest if rest in _ALIASES else key
    return hit or key


def to_float(text: str | float | int | None) -> float | None:
    """A number from a logged token: tolerant of units ("0.25s"), NaN/Inf spellings and thousands commas."""
    if text is None or isinstance(text, bool):
        return None
    if isinstance(text, (int, float)):
        return float(text)
    try:  # the common case; float() also reads nan/inf/infinity in any letter case
        return float(text)
    except ValueError:
        pass
    t = text.strip().strip("'\"").replace(",", "")
    low = t.lower()
    if low in ("nan", "-nan", "+nan"):
        return math.nan
    if low in ("inf", "+inf", "infinity", "+infinity"):
        return math.inf
    if low in ("-inf", "-infinity"):
        return -math.inf
    m = _NUM.match(t)
    if m is None:
        return None
    try:
        return float(m.group(0))
    except ValueError:
        return None


@dataclass
class Series:
    name: str
    cap: int = DEFAULT_CAP
    keep_last: int = DEFAULT_KEEP_LAST
    steps: list[float] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)  # source line of each point (0 when not from a line)
    total: int = 0
    nan_onset: tuple[float, float, int] | None = None  # (step, value, line) of the first non-finite value
    finite_before_nan: int = 0
    min_value: float = math.inf
    max_value: float = -math.inf
    compactions: int = 0

    def add(self, step: float, value: float, line: int = 0) -> None:
        # Hot path (millions of calls on a long log): comparisons instead of min()/max()/isfinite() calls.
        self.total += 1
        if value - value == 0.0:  # finite: inf - inf and nan - nan are nan
            if value < self.min_value:
                self.min_value = value
            if value > self.max_value:
                self.max_value = value
        elif self.nan_onset is None:
            self.nan_onset = (float(step), value, line)
            self.finite_before_nan = self.total - 1
        self.steps.append(float(step))
        self.values.append(value)
        self.lines.append(line)
        if len(self.steps) > self.cap:
            self._compact()

    def extend(self, steps: list[float], values: list[float], lines: list[int]) -> None:
        """``add`` for each point in turn, with the same result (compactions happen at the same points), but
        with the per-point bookkeeping done by C builtins: a long log's metric lines arrive a segment at a
        time."""
        n = len(values)
        finite = [v for v in values if v - v == 0.0]  # inf - inf and nan - nan are nan
        if finite:
            self.min_value = min(self.min_value, min(finite))
            self.max_value = max(self.max_value, max(finite))
        if self.nan_onset is None and len(finite) < n:
            i = next(i for i, v in enumerate(values) if v - v != 0.0)
            self.nan_onset = (float(steps[i]), values[i], lines[i])
            self.finite_before_nan = self.total + i
        self.total += n
        i = 0
        while i < n:
            take = self.cap + 1 - len(self.steps)  # points until the next compaction is due
            self.steps.extend(map(float, steps[i : i + take]))
            self.values.extend(values[i : i + take])
            self.lines.extend(lines[i : i + take])
            i += take
            if len(self.steps) > self.cap:
                self._compact()

    def _compact(self) -> None:
        """Merge neighbour pairs in the older part; a pair with a non-finite value keeps that value (so the
        onset stays visible on a plot), otherwise the mean."""
        head = len(self.steps) - min(self.keep_last, self.cap // 2)
        even = head - head % 2  # pairs (0,1), (2,3), ...; an odd last point of the head stays raw
        va, vb = self.values[0:even:2], self.values[1:even:2]
        la, lb = self.lines[0:even:2], self.lines[1:even:2]
        values = [
            a if a - a != 0.0 else b if b - b != 0.0 else (a + b) / 2.0 for a, b in zip(va, vb, strict=True)
        ]
        lines = [
            la[k] if va[k] - va[k] != 0.0 else lb[k] for k in range(len(va))
        ]  # the line of the kept non-finite value, else the later one
        self.steps = self.steps[1:even:2] + self.steps[even:]
        self.values = values + self.values[even:]
        self.lines = lines + self.lines[even:]
        self.compactions += 1

    def finite(self) -> tuple[list[float], list[float]]:
        xs, ys = [], []
        for x, y in zip(self.steps, self.values, strict=False):
            if math.isfinite(y):
                xs.append(x)
                ys.append(y)
        return xs, ys

    def line_at(self, step: float) -> int:
        for x, ln in zip(self.steps, self.lines, strict=False):
            if x >= step:
                return ln
        return self.lines[-1] if self.lines else 0


@dataclass
class SeriesSet:
    """All series read from one source (a file), with the stop reason that source announced."""

    source: str
    series: dict[str, Series] = field(default_factory=dict)
    stop: str = ""  # early_stopping, max_steps, completed, or ""
    stop_line: int = 0
    stop_from_log: bool = False  # a stop line in a log (the lifecycle pack's signatures already read those)
    parsers: set[str] = field(default_factory=set)
    step_kind: str = "step"  # "step" (the logger's own step) or "entry" (ordinal of log records)
    last_values_only: bool = (
        False  # a run summary (wandb-summary.json): one final value per metric, no history
    )
    issues: list[str] = field(default_factory=list)

    def add(self, name: str, step: float, value: float, line: int = 0) -> None:
        self.add_canonical(canonical(name), step, value, line)

    def add_canonical(self, key: str, step: float, value: float, line: int = 0) -> None:
        if key == "step_time" and value > 1e8:
            return  # a wall-clock timestamp logged as "time", not a duration
        s = self.series.get(key)
        if s is None:
            if len(self.series) >= MAX_SERIES_PER_SOURCE:
                return
            s = self.series[key] = Series(key)
        s.add(step, value, line)

    def extend_canonical(self, key: str, steps: list[float], values: list[float], lines: list[int]) -> None:
        """``add_canonical`` for many points of one series, in order."""
        if key == "step_time" and any(v > 1e8 for v in values):
            keep = [i for i, v in enumerate(values) if not v > 1e8]
            steps, values, lines = (
                [steps[i] for i in keep],
                [values[i] for i in keep],
                [lines[i] for i in keep],
            )
        if not values:
            return
        s = self.series.get(key)
        if s is None:
            if len(self.series) >= MAX_SERIES_PER_SOURCE:
                return
            s = self.series[key] = Series(key)
        s.extend(steps, values, lines)

    def get(self, name: str) -> Series | None:
        s = self.series.get(name)
        return s if s is not None and s.total > 0 else None
