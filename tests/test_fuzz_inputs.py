"""Fuzz the whole offline pipeline (hypothesis): tracebacks (with and without rank prefixes), metric lines,
bundles and kernel log lines, generated near their real formats and broken on purpose, go through
``diagnose`` and every report format. Nothing may crash, every hypothesis cites evidence, and the verdict
is one of the three. The number of examples is bounded (and the search derandomised) so CI stays fast and
repeatable."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mldebug_rules.engine.facts import FactRegistry
from mldebug_rules.engine.packs import KnowledgeBase

from mldebug_rules import report
from mldebug_rules.diagnose import Request, diagnose
from mldebug_rules.render import render

FUZZ = settings(
    max_examples=int(os.environ.get("MLDEBUG_FUZZ_EXAMPLES", "20")),  # bounded in CI; raise it locally
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
_WORD = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=0, max_size=24
)
_IDENT = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,15}", fullmatch=True)
_NUM = st.one_of(
    st.integers(-(2**40), 2**40).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["nan", "inf", "-inf", "1e309", "0x1f", "", "-"]),
)
_RANK = st.one_of(st.just(""), st.integers(0, 4096).map(lambda r: f"[rank{r}]: "), st.just("[default3]:"))
_EXC_TYPE = st.one_of(
    st.sampled_from(
        [
            "KeyError",
            "RuntimeError",
            "torch.OutOfMemoryError",
            "OSError",
            "ValueError",
            "torch.distributed.DistBackendError",
            "ZeroDivisionError",
            "KeyboardInterrupt",
            "SystemExit",
        ]
    ),
    _IDENT.map(lambda s: s[:1].upper() + s[1:] + "Error"),
)


@st.composite
def tracebacks(draw: Any) -> str:
    rank = draw(_RANK)
    lines = [f"{rank}Traceback (most recent call last):"]
    for _ in range(draw(st.integers(0, 6))):
        path = draw(
            st.sampled_from(["train.py", "/usr/lib/python3.11/site-packages/torch/nn/x.py", "C:\\a\\b.py"])
        )
        lines.append(f'{rank}  File "{path}", line {draw(_NUM)}, in {draw(_IDENT)}')
        lines.append(f"{rank}    {draw(_WORD)}")
    msg = draw(st.one_of(st.just(""), _WORD, st.just("CUDA out of memory. Tried to allocate 2.00 GiB")))
    lines.append(f"{rank}{draw(_EXC_TYPE)}" + (f": {msg}" if msg or draw(st.booleans()) else ""))
    if draw(st.booleans()):
        lines.insert(
            0,
            draw(
                st.sampled_from(["During handling of the above exception, another exception occurred:", ""])
            ),
        )
    return "\n".join(lines)


@st.composite
def metric_lines(draw: Any) -> str:
    step, loss, lr = draw(st.integers(-5, 10**9)), draw(_NUM), draw(_NUM)
    form = draw(st.integers(0, 5))
    if form == 0:
        return f"step {step} loss {loss}"
    if form == 1:
        return f"{{'loss': {loss}, 'learning_rate': {lr}, 'epoch': {draw(_NUM)}}}"
    if form == 2:
        return json.dumps({"step": step, "loss": loss, "lr": lr, draw(_IDENT): draw(_WORD)})
    if form == 3:
        return f" iteration {step}/ {draw(_NUM)} | lm loss: {loss} | loss scale: {lr} |"
    if form == 4:
        return f"Epoch {draw(_NUM)}:  50%|##   | {step}/{draw(_NUM)} [00:01<00:01, loss={loss}]"
    return f"{draw(_RANK)}step {step} step_time={draw(_NUM)}s {draw(_WORD)}"


@st.composite
def kernel_lines(draw: Any) -> str:
    stamp = draw(
        st.sampled_from(
            ["[ 8123.456789] ", "[Tue Mar  5 10:12:01 2024] ", "2024-03-05T10:12:01+0000 n17 kernel: ", ""]
        )
    )
    pid, name, n = draw(st.integers(-1, 2**31)), draw(_WORD), draw(_NUM)
    body = draw(
        st.sampled_from(
            [
                f"Out of memory: Killed process {pid} ({name}) total-vm:{n}kB, anon-rss:{n}kB, file-rss:0kB",
                f"oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),oom_memcg={name},task={name},pid={pid},uid=0",
                f"NVRM: Xid (PCI:0000:3b:00): {n}, pid={pid}, name={name}, {draw(_WORD)}",
                f"nfs: server {name} not responding, still trying",
                f"INFO: task {name}:{pid} blocked for more than {n} seconds.",
                f"{name}[{pid}]: segfault at {n} ip 0 sp 0 error 4 in {name}",
                f"mce: [Hardware Error]: {draw(_WORD)}",
                f"NVRM: GPU {name}: RmInitAdapter failed! ({n})",
                draw(_WORD),
            ]
        )
    )
    return stamp + body


@st.composite
def bundles(draw: Any) -> str:
    kinds = sorted(FactRegistry.load().kinds)
    facts = []
    for _ in range(draw(st.integers(0, 8))):
        attrs = draw(
            st.dictionaries(
                st.sampled_from(["code", "pid", "present", "signature", "role", "alive", "silent_s", "x"]),
                st.one_of(
                    st.integers(),
                    st.floats(),
                    st.booleans(),
                    _WORD,
                    st.none(),
                    st.lists(st.integers(), max_size=2),
                ),
                max_size=4,
            )
        )
        facts.append(
            {
                "kind": draw(st.one_of(st.sampled_from(kinds), _WORD)),
                "attrs": attrs,
                "file": draw(_WORD),
                "line": draw(st.one_of(st.integers(-5, 10**6), st.none())),
                "rank": draw(st.one_of(st.integers(-2, 99), st.none(), st.just("3"))),
                "ts": draw(st.one_of(st.floats(), st.none(), st.just("x"))),
                "text": draw(_WORD),
                "extra": draw(
                    st.one_of(st.none(), st.just({"exceptions": [[1, 0, "KeyError: 'x'"], ["a"]]}))
                ),
            }
        )
    doc: Any = {
        "schema": draw(st.sampled_from(["mldebug-rules/bundle/v1", "other/v9"])),
        "host": draw(_WORD),
        "facts": facts,
    }
    if draw(st.integers(0, 9)) == 0:
        doc = draw(st.one_of(st.lists(st.integers(), max_size=3), _WORD))
    return json.dumps(doc)


def _check(kb: KnowledgeBase, files: dict[str, str], **req: Any) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        run.mkdir()
        for name, text in files.items():
            (run / name).write_text(text, encoding="utf-8", errors="surrogatepass")
        named = {k: [run / p for p in v] for k, v in req.items()}
        d = diagnose(Request(run_dirs=[run], offline=True, **named), kb=kb)
        data = report.build(d)
        assert data["verdict"] in ("cause", "uncertain", "no_failure")
        for h in data["hypotheses"]:
            assert h["evidence"], h["id"]
        json.loads(report.to_json(data))
        text = report.to_text(data)
        render(text, color=True, width=60, wrap=True)
        report.to_text(data, markdown=True)


@FUZZ
@given(st.lists(st.one_of(tracebacks(), metric_lines()), min_size=1, max_size=12))
def test_fuzz_tracebacks_and_metric_lines(kb: KnowledgeBase, chunks: list[str]) -> None:
    _check(kb, {"train.log": "\n".join(chunks) + "\n", "rank1.log": chunks[-1]})


@FUZZ
@given(st.lists(kernel_lines(), min_size=1, max_size=12), st.lists(metric_lines(), max_size=5))
def test_fuzz_kernel_lines(kb: KnowledgeBase, kernel: list[str], metrics: list[str]) -> None:
    _check(kb, {"dmesg.txt": "\n".join(kernel) + "\n", "metrics.jsonl": "\n".join(metrics)})
    _check(kb, {"k.txt": "\n".join(kernel)}, kernel_logs=["k.txt"])


@FUZZ
@given(st.lists(bundles(), min_size=1, max_size=3))
def test_fuzz_bundles(kb: KnowledgeBase, docs: list[str]) -> None:
    files = {f"node{i}.mldebug.json": doc for i, doc in enumerate(docs)}
    _check(kb, files)
    _check(kb, {"x.json": docs[0]}, bundles=["x.json"])
