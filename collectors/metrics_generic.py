"""The generic metric-line reader: any printed line with named numbers, in the author's own words.

Named formats stay data in metric_lines.yaml; this reads the rest. A line gives (metrics, counters):

- pairs ``name: v``, ``name=v``, ``name v``, ``'name': v`` (quoted numbers too) and ``name v (avg)`` (the
  running average in parentheses is left alone: the current value is the datapoint);
- a name may carry up to two qualifier words (``train loss``, ``grad norm``, ``data loading time``);
- numbers in scientific notation, with thousands separators (``3,456``), ``nan``/``inf``, and a unit: times
  (``ms``/``us``/``s``) are read in seconds, memory (``KB``..``TB``, ``KiB``..``TiB``, and a bare ``M``/``G`` on a
  memory name) in MiB, ``%`` as the number itself; the unit may follow one space after the number (``412 ms``);
- rates written after the number (``11,000 tok/s``, ``980 samples/s``, ``4.1it/s``, ``5.9 (6.0) Hz``) as
  ``throughput``;
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
from typing import Any

_QUAL = (
    r"(?:train|training|val|valid|validation|eval|test|dev|avg|average|mean|running|max|min|peak|grad|"
    r"gradient|loss|data|batch|step|iter|lm|total|global|gpu|cuda|elapsed|learning|epoch|loading|wait)"
)
# Prose prints ("average training loss is 2.01", "val loss was 0.9"): the linking verb joins, it is no name.
_LINK = r"(?:is|was|are|were|now|became)"
_NUMTOK = r"[-+]?(?:nan|inf(?:inity)?|\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?)"
# A name is a word (letters first; `@ / . -` allowed inside: Acc@1, train/loss), with up to two qualifier
# words before it ("data loading time"). The number must end the token: `eta: 0:30:00`, `1875/1875` and
# `trainer.py:412` are not pairs.
_PAIR = re.compile(
    rf"(?<![\w./@-])['\"]?(?P<name>(?:{_QUAL}[ ](?=[A-Za-z])){{0,2}}(?!{_LINK}\s)[A-Za-z][\w./@-]*)['\"]?"
    # a qualifier in brackets between the name and its colon is no part of the name ("Training loss (50 prc):
    # nan", "loss (avg): 0.52")
    r"(?:[ ]{1,2}\([\w %.,-]{1,24}\)(?=\s*[:=]))?"
    rf"(?:\s*[:=]\s*|\s+(?:{_LINK}\s+)?)['\"]?(?P<num>{_NUMTOK})['\"]?"
    # a time may be per iteration ("0.385s/it", "12ms/step"): still seconds of that iteration
    # a unit may follow after one space ("412 ms", "30.5 GiB"); a bare K/M/G/T multiplier only right after it
    r"(?:[ ]?(?P<unit>ms|us|s|%|[KMGT]i?B)|(?P<bare>[KMGT])(?![A-Za-z]))?(?:(?<=s)/(?:it|iter|step|batch))?"
    # a sentence's full stop may end the number ("acc is 0.5."), a dotted version may not ("1.2.3"), nor a
    # date ("INFO 2025-01-01") or a progress bar's percentage ("Training:  45%|####")
    r"(?![\w:/]|\.\w|-\d|%\||(?<=%)\|)",
    re.I,
)
_RATE = re.compile(
    r"(?<![\w.])(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)\s*"
    # the running average some loggers print between the number and its unit ("5.9 (5.9) Hz") is skipped
    r"(?:\(\s*[\d.]+\s*\)\s*)?"
    r"(?:(?:tok(?:en)?s?|samples?|examples?|imgs?|images?|seqs?|sequences?|it|iters?)/s(?:ec)?\b|Hz\b)",
    re.I,
)
_COUNTER = re.compile(
    r"(?<![\w.])(?P<kind>global[_ ]step|num_updates|iteration|iter|step|epoch|update)s?(?![\w])"
    r"\s*(?:[:=#]\s*|\s+)?[\[(]?\s*(?P<n>\d{1,3}(?:,\d{3})+|\d+)(?:\s*/\s*(?P<of>\d+))?\s*[\])]?"
    # the batch within the epoch: "Epoch: [3][ 100/500]" or matconvnet's "epoch 03: 100/1112:"
    r"(?:(?:\s*\[\s*|:\s+)(?P<b>\d+)\s*/\s*(?P<bs>\d+)\s*\]?)?",
    re.I,
)
# Counter words, any case: a cheap test before the counter regex (most lines of a long log have none).
_COUNTER_HINT = re.compile(r"(?i:step|iter|epoch|update)")
_VAL_HEAD = re.compile(
    r"(?<!\w)(?:val|valid|validation|validating|eval|evaluation|evaluating|test|testing)(?!\w)"
    # "DEV : loss 1.7" (flair) or "dev loss:": the development split; not the /dev/shm of a path
    r"|(?<![\w/])dev(?![\w/])",
    re.I,
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
# A data wait printed as a share of the step ("dataloader: 61%", "data wait 58.2%"): the data share itself.
_DATA_SHARE_NAME = re.compile(
    r"^(?:data|dataloader|data[ _]?load(?:er|ing)?)(?:[ _](?:wait|time|share))?$", re.I
)
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


def _share_name(name: str, unit: str) -> str:
    return "data_share_pct" if unit == "%" and _DATA_SHARE_NAME.match(name) else name


def _x(counters: dict[str, tuple[int, int | None, int | None, int | None]]) -> float | None:
    """The x coordinate from a line's counters: a global step, else epoch*batches+batch, else the epoch."""
    for kind in ("global_step", "global step", "num_updates"):
        if kind in counters:
            return float(counters[kind][0])
    ep = counters.get("epoch")
    for kind in ("step", "update"):
        if kind in counters:
            n, of = counters[kind][0], counters[kind][1]
            # "Epoch [2/5], Step [100/600]" (the PyTorch tutorials' loop): the step counts within the epoch, as
            # "epoch 3 iter 100/500" does. Were it a global step with its total, epoch*total+step still grows
            # with time, so the order of the points is right either way.
            if ep is not None and of:
                return float(ep[0] * of + n)
            return float(n)
    it = counters.get("iteration") or counters.get("iter")
    if it is not None:
        if ep is not None and it[1]:  # "epoch 3 iter 100/500": the iteration counts within the epoch
            return float(ep[0] * it[1] + it[0])
        return float(it[0])
    if ep is not None:
        if ep[2] is not None and ep[3]:  # "Epoch: [3][ 100/500]"
            return float(ep[0] * ep[3] + ep[2])
        return float(ep[0])
    return None


# A span of the line: (start, end).
_Span = tuple[int, int]


def _analyse(text: str) -> tuple[dict[str, tuple[_Span, ...]], list[tuple[_Span, _Span, str]], bool]:
    """Where the line's counters, names and values are: ({kind: (n, of, b, bs) spans}, [(name span, value span,
    unit)] in order, whether the line reports validation). Spans of absent parts are (-1, -1)."""
    none = (-1, -1)
    counters: dict[str, tuple[_Span, ...]] = {}
    if _COUNTER_HINT.search(text):
        for m in _COUNTER.finditer(text):
            kind = m.group("kind").lower()
            if kind not in counters:
                counters[kind] = tuple(m.span(g) if m.group(g) else none for g in ("n", "of", "b", "bs"))
    pairs: list[tuple[_Span, _Span, str]] = []
    names: set[str] = set()
    head_end = -1
    for m in _PAIR.finditer(text):
        name = m.group("name")
        if name.lower() in _COUNTER_NAMES or _NOT_METRICS.search(name) or name in names:
            continue
        names.add(name)
        head_end = m.start() if head_end < 0 else head_end
        pairs.append((m.span("name"), m.span("num"), m.group("unit") or m.group("bare") or ""))
    if ("/s" in text or "Hz" in text) and "throughput" not in names:
        rate = _RATE.search(text)
        if rate is not None:
            pairs.append((none, rate.span(1), ""))
            head_end = rate.start() if head_end < 0 else head_end
    val = bool(pairs) and head_end > 0 and _VAL_HEAD.search(text, 0, head_end) is not None
    return counters, pairs, val


def _counter_int(raw: str) -> int:
    if raw.isdigit():
        return int(raw)
    if "," in raw and not _THOUSANDS.fullmatch(raw):
        raise ValueError(raw)
    raw = raw.replace(",", "")
    return int(raw) if raw.isdigit() else int(float(raw))


def parse_slow(text: str) -> tuple[dict[str, float], dict[str, float]]:
    """(counters, values) of one line, analysed from scratch: the reference the plan cache's replay must agree
    with (the tests compare the two on every fixture line)."""
    if "\x1b" in text:
        text = _ANSI.sub("  ", text)
    counters, pairs, val = _analyse(text)
    out: dict[str, float] = {}
    for (ns, ne), (vs, ve), unit in pairs:
        name = _share_name(text[ns:ne], unit) if ns >= 0 else "throughput"
        value = _number(text[vs:ve])
        if value is not None:
            out[name] = _scaled(name, value, unit)
    return _finish(
        out,
        val,
        {k: tuple(None if a < 0 else _counter_int(text[a:b]) for a, b in c) for k, c in counters.items()},
    )


def _finish(
    out: dict[str, float], val: bool, counters: dict[str, tuple[int | None, ...]]
) -> tuple[dict[str, float], dict[str, float]]:
    if val:
        # "[eval] step 40: loss=..." / "Test: [10/196] ... Loss ...": the line reports validation metrics.
        out = {(k if _QUALIFIED_VAL.match(k) else "val_" + k): v for k, v in out.items()}
    x = _x(counters)  # type: ignore[arg-type]
    return out, ({"x": x} if x is not None else {})


# --- the plan cache ------------------------------------------------------------------------------------------
# A long log prints the same few line shapes millions of times with new numbers. The line's template (the text
# with every number token replaced) fixes where the counters, names, units and values are, so the analysis is
# done once per template and replayed on the next lines' number tokens. Tokens exclude the sign (a sign is part
# of the template: "step -5" is not a counter); a value that is not a token (nan, inf) is a constant of the
# template. A token is any run of digits (with inner dots and commas, and an exponent), even inside a word: a name
# such as "Acc@1" or "layer2_loss" is then replayed from its pieces. A template whose analysis does not fall on
# token boundaries ("loss 2." read as "2.") is not cached: its lines are read the slow way.
_TOKEN = re.compile(r"(\d(?:[\d.,]*\d)?(?:[eE][-+]?\d+)?)")
_THOUSANDS = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?(?:[eE][-+]?\d+)?")
PLANS: dict[str, Any] = {}  # template -> plan (or _UNCACHEABLE); public so tests can see what was cached
_MAX_PLANS = 4096
_UNCACHEABLE = object()
# A name: literal text pieces and token indices ("Acc@1" -> ("Acc@", 0)).
_Name = tuple[str | int, ...]


def _plan(text: str, parts: list[str]) -> Any:
    starts: dict[int, tuple[int, int]] = {}
    pos = 0
    for i, piece in enumerate(parts):
        if i % 2:
            starts[pos] = (i // 2, pos + len(piece))
        pos += len(piece)

    def token_at(a: int, b: int) -> int | None:
        hit = starts.get(a)
        return hit[0] if hit is not None and hit[1] == b else None

    def name_of(a: int, b: int) -> _Name | None:
        pieces: list[str | int] = []
        cur = a
        for st in sorted(k for k in starts if a <= k < b):
            idx, end = starts[st]
            if end > b:
                return None
            if st > cur:
                pieces.append(text[cur:st])
            pieces.append(idx)
            cur = end
        if cur < b:
            pieces.append(text[cur:b])
        return tuple(pieces)

    counters, pairs, val = _analyse(text)
    cplan: dict[str, tuple[int | None, ...]] = {}
    for kind, spans in counters.items():
        refs = []
        for a, b in spans:
            if a < 0:
                refs.append(None)
                continue
            idx = token_at(a, b)
            if idx is None:
                return _UNCACHEABLE
            refs.append(idx)
        cplan[kind] = tuple(refs)
    mplan: list[tuple[str | _Name, int | None, float, float, str]] = []  # (name, token, sign, constant, unit)
    for (ns, ne), (vs, ve), unit in pairs:
        pieces = name_of(ns, ne) if ns >= 0 else ("throughput",)
        if pieces is None:
            return _UNCACHEABLE
        # a name without digits is replayed as is; one with digits from its pieces
        name: str | _Name = pieces[0] if len(pieces) == 1 and isinstance(pieces[0], str) else pieces
        if isinstance(name, str):
            name = _share_name(name, unit)
        sign = 1.0
        if text[vs] in "+-":
            sign = -1.0 if text[vs] == "-" else 1.0
            vs += 1
        idx = token_at(vs, ve)
        if idx is None:
            if any(c.isdigit() for c in text[vs:ve]):
                return _UNCACHEABLE
            const = _number(text[vs:ve])
            if const is None:
                return _UNCACHEABLE
            mplan.append((name, None, sign, sign * const, unit))
        else:
            mplan.append((name, idx, sign, 0.0, unit))
    return cplan, mplan, val


def parse_generic(text: str) -> tuple[dict[str, float], dict[str, float]]:
    """(metric name -> value, {"x": step} when the line has a counter)."""
    if "\x1b" in text:
        text = _ANSI.sub("  ", text)
    parts = _TOKEN.split(text)
    template = "\0".join(parts[0::2])
    plan = PLANS.get(template)
    if plan is None:
        if len(PLANS) >= _MAX_PLANS:
            PLANS.clear()
        plan = PLANS[template] = _plan(text, parts)
    if plan is _UNCACHEABLE:
        return parse_slow(text)
    try:
        return _replay(plan, parts[1::2])
    except (
        ValueError
    ):  # a token the template's first line did not have ("1.2.3" where "5" was): read it slowly
        return parse_slow(text)


def _replay(plan: Any, tokens: list[str]) -> tuple[dict[str, float], dict[str, float]]:
    cplan, mplan, val = plan
    out: dict[str, float] = {}
    for name, idx, sign, const, unit in mplan:
        if name.__class__ is not str:
            name = "".join(p if isinstance(p, str) else tokens[p] for p in name)
            if name in out:
                continue
        if idx is None:
            value = const
        else:
            tok = tokens[idx]
            if "," in tok:  # only a thousands separator ("1,234.5") is read through; "3,4" is not one number
                if not _THOUSANDS.fullmatch(tok):
                    raise ValueError(tok)
                tok = tok.replace(",", "")
            value = sign * float(tok)
        out[name] = _scaled(name, value, unit) if unit else value
    if not cplan:
        return _finish(out, val, {})
    counters = {
        kind: tuple(None if r is None else _counter_int(tokens[r]) for r in refs)
        for kind, refs in cplan.items()
    }
    return _finish(out, val, counters)


__all__ = ["parse_generic"]
