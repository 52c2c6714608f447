"""Property checks: the metric parsers never crash on garbage, whatever the bytes."""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mldebug_rules.collectors.metrics_parse import LineReader, loads_tolerant, parse_record, read_any
from mldebug_rules.collectors.trends import detect

_READER = LineReader()
_SNIPPETS = st.sampled_from(
    [
        "{'loss': ",
        "nan",
        "inf",
        "Infinity",
        " iteration 12/ 100 |",
        " lm loss: ",
        "|",
        "Epoch: [1]  [ 2/10]",
        "Train: 1 [ 2/10 ( 20%)]",
        "Epoch 0:  50%|##   | 1/2 [",
        "loss=",
        "step ",
        "loss ",
        "\r",
        "\n",
        "1e309",
        "-",
        "\x00",
        "é",
        "max mem: ",
        "Data: ",
        "Time: 0.1s, 10/s",
        "Training completed",
        "{",
        "}",
        "'",
        '"',
        ",",
    ]
)
_TEXT = st.lists(
    st.one_of(_SNIPPETS, st.text(max_size=12), st.integers().map(str), st.floats().map(str)), max_size=60
).map("".join)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_TEXT)
def test_line_parsing_never_crashes(text: str) -> None:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "train.log"
        p.write_bytes(text.encode("utf-8", "replace"))
        ss = _READER.read(p, "train.log")
        detect(ss)
    for mode in ("hf_dict", "pipes", "colon", "postfix", "loose"):
        parse_record(mode, text)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.binary(max_size=400),
    st.sampled_from(
        [
            "metrics.jsonl",
            "metrics.csv",
            "trainer_state.json",
            "wandb-summary.json",
            "events.out.tfevents.1.h",
            "x.jsonl.gz",
        ]
    ),
)
def test_structured_readers_never_crash(data: bytes, name: str) -> None:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / name
        p.write_bytes(data)
        ss = read_any(p, name)
        assert ss is not None
        detect(ss)


@settings(max_examples=100, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.floats() | st.text(max_size=5),
        lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
        max_leaves=10,
    )
)
def test_trainer_state_of_any_shape(doc: object) -> None:
    import json

    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "trainer_state.json"
        p.write_text(json.dumps({"log_history": doc, "stateful_callbacks": doc, "global_step": doc}))
        ss = read_any(p, "trainer_state.json")
        assert ss is not None
        detect(ss)
    with contextlib.suppress(ValueError):
        loads_tolerant(json.dumps(doc))
