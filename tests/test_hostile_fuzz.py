"""Property tests (hypothesis) for hostile input (issue 18): timestamps, rank numbers, fact counts, redaction
input length and file types. Each property is a bound or an invariant; none measures time."""

from __future__ import annotations

import os
import socket
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mldebug_rules.collectors import flightrec, kernel_log, lineinfo
from mldebug_rules.collectors.logscan import Pattern, Scanner
from mldebug_rules.collectors.metrics_parse import read_csv, read_jsonl, read_trainer_state
from mldebug_rules.engine.facts import FactRegistry
from mldebug_rules.engine.safeio import Unreadable, open_regular

from mldebug_rules.diagnose import bound_facts
from mldebug_rules.redact import MASK, clip, redact

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
REG = FactRegistry.load()

# -- timestamps ---------------------------------------------------------------------------------------------

stamps = st.builds(
    lambda y, mo, d, h, mi, s, frac, zone: f"{y:04d}-{mo:02d}-{d:02d}T{h:02d}:{mi:02d}:{s:02d}{frac}{zone}",
    st.integers(0, 9999),
    st.integers(0, 13),
    st.integers(0, 32),
    st.integers(0, 25),
    st.integers(0, 61),
    st.integers(0, 61),
    st.sampled_from(["", ".5", ".123456", ".1234567891"]),
    st.one_of(
        st.just(""),
        st.just("Z"),
        st.builds(
            lambda sg, hh, mm: f"{sg}{hh:02d}:{mm:02d}",
            st.sampled_from("+-"),
            st.integers(0, 24),
            st.integers(0, 59),
        ),
    ),
)
refs = st.one_of(
    st.none(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=-1e13, max_value=1e13),
)


@FUZZ
@given(stamp=stamps, ref=refs, glog=st.booleans())
def test_any_timestamp_costs_at_most_its_line(stamp: str, ref: float | None, glog: bool) -> None:
    t = lineinfo.time_of_line(f"{stamp} worker started")
    assert t is None or 0 <= t <= lineinfo.MAX_SANE_TIME
    t = lineinfo.time_of_line("[E1201 10:05:33.123 ProcessGroupNCCL.cpp:1] x", ref, until_ref=glog)
    assert t is None or 0 <= t <= lineinfo.MAX_SANE_TIME
    clock = lineinfo.FileClock(lambda: [(1, f"{stamp} start")], ref)
    clock.time(2, "[W1231 23:59:59.999999 c10d.cpp:9] late")
    kernel_log.line_time(f"{stamp} host kernel: oom-kill")


# -- rank numbers -------------------------------------------------------------------------------------------

ranks = st.one_of(st.integers(-5, 70), st.integers(0, 10**40))


@FUZZ
@given(dump_ranks=st.lists(ranks, min_size=1, max_size=6), members=st.lists(ranks, max_size=8))
def test_rank_numbers_never_size_anything(dump_ranks: list[int], members: list[int]) -> None:
    dumps = []
    for r in dump_ranks:
        d = flightrec.Dump(r, f"nccl_trace_rank_{r}", "ok")
        d.last = {"0": (r % 7 if r >= 0 else 0, "nccl:all_reduce", "scheduled")}
        d.group_ranks = {"0": list(members)}
        dumps.append(d)
    facts = flightrec.analyse(dumps, REG)
    missing = [f for f in facts if f.attrs.get("status") == "missing"]
    assert len(missing) <= flightrec.MAX_MISSING_FACTS
    assert all(f.rank is None or f.rank <= 10**40 for f in facts)
    assert len(facts) <= len(dumps) + flightrec.MAX_MISSING_FACTS + len(members) + len(dumps)


# -- fact counts ----------------------------------------------------------------------------------------------


@FUZZ
@given(counts=st.lists(st.integers(0, 300), min_size=1, max_size=3), per_kind=st.integers(1, 50))
def test_facts_per_kind_are_bounded_and_counted(counts: list[int], per_kind: int) -> None:
    kinds = ["probe.status", "log.file", "log.signature"][: len(counts)]
    facts = []
    for kind, n in zip(kinds, counts, strict=False):
        for i in range(n):
            facts.append(_fact(kind, i))
    kept, dropped = bound_facts(facts, per_kind=per_kind)
    for kind, n in zip(kinds, counts, strict=False):
        mine = [f for f in kept if f.kind == kind]
        assert len(mine) == min(n, per_kind)
        assert dropped.get(kind, 0) == max(0, n - per_kind)
    assert [facts.index(f) for f in kept] == sorted(facts.index(f) for f in kept)  # order kept


def _fact(kind: str, i: int):  # type: ignore[no-untyped-def]
    if kind == "probe.status":
        return REG.make(kind, {"probe": f"p{i}", "status": "ok", "detail": ""})
    if kind == "log.file":
        return REG.make(kind, {"stream": "train", "lines": i}, file=f"f{i}.log")
    return REG.make(kind, {"signature": "cuda_oom"}, file=f"r{i}.log", line=i + 1, text="CUDA out of memory")


# -- redaction input length ---------------------------------------------------------------------------------

SECRET = "Q7unguessableValue0042"
noise = st.text(alphabet=st.sampled_from(list("ab_-=:/@.\"' \tTOKENkeyx0\n")), max_size=3000)


@FUZZ
@given(before=noise, after=noise, form=st.sampled_from(range(6)), limit=st.integers(1, 4000))
def test_a_planted_secret_never_survives_redaction_or_a_cut(
    before: str, after: str, form: int, limit: int
) -> None:
    planted = [
        f" HF_TOKEN={SECRET} ",
        f" --api-key {SECRET} ",
        f" https://u:{SECRET}@host/x ",
        f' "db_password": "{SECRET}" ',
        f"\npassword: {SECRET}\n",
        f" Authorization: Bearer {SECRET} ",
    ][form]
    text = before + planted + after
    out = redact(text)
    assert SECRET not in out and MASK in out
    cut = clip(text, limit)
    assert SECRET[:10] not in cut
    assert len(cut) <= limit + 1


@FUZZ
@given(
    word=st.sampled_from(["x", "token", "A_KEY", "a.", "x:", "--key ", 'password="']), n=st.integers(0, 20000)
)
def test_redaction_is_total_on_long_repetitive_input(word: str, n: int) -> None:
    text = word * n
    assert isinstance(redact(text), str)  # linear: the 200,000-character case runs in test_hostile_inputs


# -- file types ---------------------------------------------------------------------------------------------

KINDS = ["regular", "fifo", "devnull", "devzero", "link_fifo", "dangling", "directory", "socket"]
NAMES = ["train.log", "metrics.jsonl", "metrics.csv", "trainer_state.json", "dmesg.txt", "x.mldebug.json"]


def _make(path: Path, kind: str, holder: list[socket.socket]) -> None:
    if kind == "regular":
        path.write_text("step 1 loss 2.0\n")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind in ("devnull", "devzero"):
        path.symlink_to("/dev/null" if kind == "devnull" else "/dev/zero")
    elif kind == "link_fifo":
        target = path.with_name(path.name + ".fifo-target")
        os.mkfifo(target)
        path.symlink_to(target)
    elif kind == "dangling":
        path.symlink_to(path.with_name("nowhere"))
    elif kind == "directory":
        path.mkdir()
    else:
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(path))
        holder.append(s)


@FUZZ
@given(kind=st.sampled_from(KINDS), name=st.sampled_from(NAMES))
def test_only_regular_files_are_read(kind: str, name: str) -> None:
    holder: list[socket.socket] = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        if kind == "socket" and len(str(path)) > 100:
            pytest.skip("socket path too long here")
        _make(path, kind, holder)
        try:
            if kind == "regular":
                open_regular(path).close()
            else:
                with pytest.raises(Unreadable):
                    open_regular(path)
            res = Scanner([Pattern("oom", "CUDA out of memory")], engine="python").scan_path(path)
            assert (not res.issues) == (kind == "regular"), res.issues
            # Every metrics reader returns (an issue, or points), whatever the file is.
            for reader in (read_jsonl, read_csv, read_trainer_state):
                out = reader(path, name)
                if kind != "regular":
                    assert out.issues and not out.series
        finally:
            for s in holder:
                s.close()
