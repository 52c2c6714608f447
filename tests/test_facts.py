"""The typed fact model: schemas per kind, provenance, origins, and the fast validator agreeing with cerberus."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mldebug_rules.engine.facts import FactError, FactRegistry


@pytest.fixture(scope="module")
def reg() -> FactRegistry:
    return FactRegistry.load()


def test_defaults_and_provenance(reg: FactRegistry) -> None:
    f = reg.make(
        "kernel.xid", {"code": 79, "pci": "0000:3b:00"}, file="dmesg.txt", line=12, ts=1.0, rank=2, host="n1"
    )
    assert f.source == "dmesg.txt:12"
    assert f.origin == "probe"
    assert f.attrs["hardware"] is False and f.attrs["pid"] == -1
    e = f.to_engine()
    assert e["kind"] == "kernel.xid" and e["rank"] == 2 and e["host"] == "n1" and e["ts"] == 1.0
    assert e["key"] == f.key


def test_probe_source_and_unknown_ts(reg: FactRegistry) -> None:
    f = reg.make("probe.status", {"probe": "gpu", "status": "timeout"}, probe="gpu")
    assert f.source == "probe:gpu"
    assert f.to_engine()["ts"] == -1.0 and f.to_engine()["rank"] == -1


@pytest.mark.parametrize(
    ("kind", "attrs", "message"),
    [
        ("kernel.oom_kill", {"pid": "many"}, "pid"),
        ("probe.status", {"probe": "x", "status": "broken"}, "status"),
        ("kernel.xid", {}, "code"),
        ("no.such.kind", {}, "unknown fact kind"),
        ("process", {"pid": 1, "bogus": 2}, "bogus"),
        ("gpu.state", {"util_pct": float("nan")}, "finite"),
    ],
)
def test_bad_facts_are_refused_with_the_reason(
    reg: FactRegistry, kind: str, attrs: dict, message: str
) -> None:
    with pytest.raises(FactError, match=message):
        reg.make(kind, attrs)


def test_only_smokes_may_emit_smoke_results(reg: FactRegistry) -> None:
    ok = {"hypothesis": "gpu_oom", "outcome": "confirmed"}
    assert reg.make("smoke.result", ok, origin="smoke").origin == "smoke"
    for origin in ("probe", "derived"):
        with pytest.raises(FactError, match="may not have origin"):
            reg.make("smoke.result", ok, origin=origin)


def test_keys_are_deterministic(reg: FactRegistry) -> None:
    a = reg.make("log.signature", {"signature": "cuda_oom"}, file="train.log", line=3)
    b = reg.make("log.signature", {"signature": "cuda_oom"}, file="train.log", line=3)
    c = reg.make("log.signature", {"signature": "cuda_oom"}, file="train.log", line=4)
    assert a.key == b.key != c.key


def test_extend_open_kind(reg: FactRegistry) -> None:
    r = FactRegistry.load()
    r.extend("log.signature", "exit_code", "integer", "test")
    assert r.make("log.signature", {"signature": "x", "exit_code": 3}).attrs["exit_code"] == 3
    with pytest.raises(FactError):
        r.extend("log.signature", "exit_code", "string", "test")
    with pytest.raises(FactError):
        r.extend("kernel.xid", "extra", "integer", "test")
    with pytest.raises(FactError):
        r.extend("log.signature", "sid", "string", "test")


_values = st.one_of(
    st.integers(-5, 5), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=3), st.booleans()
)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(["process", "gpu.state", "disk.usage", "kernel.oom_kill", "checkpoint.file"]), st.data()
)
def test_normalise_agrees_with_cerberus(kind: str, data: st.DataObject) -> None:
    """``normalise`` takes a fast path for the common case; whichever path it takes, it accepts exactly what
    the kind's cerberus schema accepts (finite numbers only) and fills the same defaults."""
    import cerberus

    reg = FactRegistry.load()
    schema = reg.kinds[kind]["attrs"]
    attrs = data.draw(st.dictionaries(st.sampled_from(sorted(schema)), _values, max_size=4))
    if kind == "process":
        attrs.setdefault("pid", 1)
    v = cerberus.Validator(schema, purge_unknown=False)
    ok = v.validate(dict(attrs)) and all(
        not (isinstance(x, float) and not math.isfinite(x)) for x in v.document.values()
    )
    if not ok:
        with pytest.raises(FactError):
            reg.normalise(kind, attrs)
        return
    doc = {k: (float(x) if schema[k].get("type") == "float" else x) for k, x in v.document.items()}
    assert reg.normalise(kind, attrs) == doc
