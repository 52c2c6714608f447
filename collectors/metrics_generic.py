"""The generic metric-line reader: any printed line with named numbers, in the author's own words.

Named formats stay data in metric_lines.yaml; this reads the rest. A line gives (metrics, counters):

- pairs ``name: v``, ``name=v``, ``name v``, ``'name': v`` (quoted numbers too) and ``name v (avg)`` (the
  running average in parentheses is left alone: the current value is the datapoint);
- a name may carry one qualifier word (``train loss``, ``val loss``, ``grad norm``, ``max mem``);
- numbers in scientific notation, with thousands separators (``3,456``), ``nan``/``inf``, and a unit: times
  (``ms``/``us``/``s``) are read in seconds, memory (``KB``..``TB``, ``KiB``..``TiB``, and a bare ``M``/``G`` on a
  memory name) in MiB, ``%`` as the number itself;
- rates written after the number (``11,000 tok/s``, ``980 samples/s``) as ``throughput``;
- counters (``step``, ``iter``, ``iteration``, ``global_step``, ``num_updates``, ``epoch`` with ``[i/n]`` or
  ``iter i/n``) place the point; a line whose head says ``val``/``eval``/``test`` has its unqualified names read
  as validation metrics.

>>> m, c = parse_generic("Epoch: [2][  10/500]\\tTime  0.520 ( 0.610)\\tData  0.480 ( 0.550)\\tLoss 6.9e+00 (6.9e+00)")
>>> m, c
({'Time': 0.52, 'Data': 0.48, 'Loss': 6.9}, {'x': 1010.0})
>>> parse_generic("step 1,200 | train loss 2.31 | memory: 30.5GiB(32.1%) | tps: 3,456 | data 12ms")[0]
{'train loss': 2.31, 'memory': 31232.0, 'tps': 3456.0, 'data': 0.012}
>>> parse_generic("[eval] iter 40: loss=NaN 'acc': '0.5'")
({'val_loss': nan, 'val_acc': 0.5}, {'x': 40.0})
"""

from __future__ import annotations

import re

_QUAL = (
    r"(?:train|training|val|valid|validation|eval|test|dev|avg|average|mean|running|max|min|peak|grad|"
    r"gradient|loss|data|batch|step|iter|lm|total|global|gpu|cuda|elapsed|learning)"
)
_NUMTOK = r"[-+]?(?:nan|inf(?:inity)?|\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?)"
# A name is a word (letters first; `@ / . -` allowed inside: Acc@1, train/loss), with an optional qualifier
# word before it. The number must end the token: `eta: 0:30:00`, `1875/1875` and `trainer.py:412` are not pairs.
_PAIR = re.compile(
    rf"(?<![\w./@-])['\"]?(?P<name>(?:{_QUAL}[ ](?=[A-Za-z]))?[A-Za-z][\w./@-]*)['\"]?"
    rf"(?:\s*[:=]\s*|\s+)['\"]?(?P<num>{_NUMTOK})['\"]?"
    r"(?P<unit>ms|us|s|%|[KMGT]i?B|[KMGT](?![A-Za-z]))?(?![\w.:/])",
    re.I,
)
_RATE = re.compile(
    r"(?<![\w.])(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)\s*"
    r"(?:tok(?:en)?s?|samples?|imgs?|images?|seqs?|sequences?)/s(?:ec)?\b",
    re.I,
)
_COUNTER = re.compile(
    r"(?<![\w.])(?P<kind>global[_ ]step|num_updates|iteration|iter|step|epoch|update)s?(?![\w])"
    r"\s*(?:[:=#]\s*|\s+)?[\[(]?\s*(?P<n>\d{1,3}(?:,\d{3})+|\d+)(?:\s*/\s*(?P<of>\d+))?\s*[\])]?"
    r"(?:\s*\[\s*(?P<b>\d+)\s*/\s*(?P<bs>\d+)\s*\])?",
    re.I,
)
_VAL_HEAD = re.compile(
    r"(?<!\w)(?:val|valid|validation|validating|eval|evaluation|evaluating|test|testing)(?!\w)", re.I
)
_QUALIFIED_VAL = re.compile(r"^(?:val|valid|validation|eval|test|dev)[ _/.]", re.I)
_COUNTER_NAMES = frozenset(
    {
        "step",
        "steps",
        "global_step",
        "global step",
        "num_updates",
        "iteration",
        "iter",
        "epoch",
        "update",
        "updates",
    }
)
_NOT_METRICS = re.compile(
    r"\.(?:py|cc|cpp|h|cu|c|rs|go|java|js)$|^(?:rank|local_rank|pid|tid|node|gpu|device|worker|line|port|seed|v_num|version)$",
    re.I,
)
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # colour codes (torchtitan, rich) would glue onto the names
_MEM_NAME = re.compile(r"mem|alloc", re.I)
_TIME_UNITS = {"ms": 1e-3, "us": 1e-6, "s": 1.0}
_BYTES = {"k": 1.0 / 1024, "m": 1.0, "g": 1024.0, "t": 1024.0 * 1024}
_PLAIN_MULT = {"k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}


def _number(raw: str) -> float | None:
    try:
        return float(raw.replace(",", ""))
    except ValueError:
        return None


def _scaled(name: str, value: float, unit: str) -> float:
    if not unit:
        return value
    u = unit.lower()
    if u in _TIME_UNITS:
        return value * _TIME_UNITS[u]
    if u == "%":
        return value
    if u.endswith("b"):  # KB..TB, KiB..TiB: memory in MiB
        return value * _BYTES[u[0]]
    if _MEM_NAME.search(name):  # detectron2's "max_mem: 5678M"
        return value * _BYTES[u[0]]
    return value * _PLAIN_MULT[u[0]]  # "12.5M tokens"


def _x(counters: dict[str, tuple[int, int | None, int | None, int | None]]) -> float | None:
    """The x coordinate from a line's counters: a global step, else epoch*batches+batch, else the epoch."""
    for kind in ("global_step", "global step", "num_updates", "step", "update"):
        if kind in counters:
            return float(counters[kind][0])
    it = counters.get("iteration") or counters.get("iter")
    ep = counters.get("epoch")
    if it is not None:
        if ep is not None and it[1]:  # "epoch 3 iter 100/500": the iteration counts within the epoch
            return float(ep[0] * it[1] + it[0])
        return float(it[0])
    if ep is not None:
        if ep[2] is not None and ep[3]:  # "Epoch: [3][ 100/500]"
            return float(ep[0] * ep[3] + ep[2])
        return float(ep[0])
    return None


def parse_generic(text: str) -> tuple[dict[str, float], dict[str, float]]:
    """(metric name -> value, {"x": step} when the line has a counter)."""
    if "\x1b" in text:
        text = _ANSI.sub("  ", text)
    counters: dict[str, tuple[int, int | None, int | None, int | None]] = {}
    for m in _COUNTER.finditer(text):
        kind = m.group("kind").lower()
        if kind not in counters:
            of, b, bs = m.group("of"), m.group("b"), m.group("bs")
            counters[kind] = (
                int(m.group("n").replace(",", "")),
                int(of) if of else None,
                int(b) if b else None,
                int(bs) if bs else None,
            )
    out: dict[str, float] = {}
    head_end = -1
    for m in _PAIR.finditer(text):
        name = m.group("name")
        low = name.lower()
        if low in _COUNTER_NAMES or _NOT_METRICS.search(name):
            continue
        value = _number(m.group("num"))
        if value is None or name in out:
            continue
        if head_end < 0:
            head_end = m.start()
        out[name] = _scaled(name, value, m.group("unit") or "")
    rate = _RATE.search(text)
    if rate is not None and "throughput" not in out:
        v = _number(rate.group(1))
        if v is not None:
            out["throughput"] = v
            head_end = rate.start() if head_end < 0 else head_end
    if out and head_end > 0 and _VAL_HEAD.search(text, 0, head_end):
        # "[eval] step 40: loss=..." / "Test: [10/196] ... Loss ...": the line reports validation metrics.
        out = {(k if _QUALIFIED_VAL.match(k) else "val_" + k): v for k, v in out.items()}
    x = _x(counters)
    return out, ({"x": x} if x is not None else {})


__all__ = ["parse_generic"]
