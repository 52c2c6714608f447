"""Every recorded fixture (fixtures/**/expected.yaml) gets its expected diagnosis; healthy runs get no
failure; the diagnosis survives noise, truncation and garbage without crashing; output is deterministic;
the taxonomy, the catalogue and the rules stay in sync.

Fixtures that fail here because a rule is still missing are left failing on purpose (no xfail): they are the
work list."""

from __future__ import annotations

import json
import random
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mldebug_rules.engine.packs import KnowledgeBase

from mldebug_rules import report
from mldebug_rules.diagnose import Request, diagnose

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "fixtures"
HEALTHY = FIXTURES / "healthy"
SHARED_TAXONOMY = REPO.parent / "shared" / "taxonomy.yaml"
NO_FAILURE = "completed_normally"

# Hypotheses a healthy fixture may still list (verdict no_failure all the same), each with its reason.
# Key: (fixture name or "*", hypothesis id).
HEALTHY_ALLOWLIST: dict[tuple[str, str], str] = {
    ("*", NO_FAILURE): "a healthy run's normal end is itself reported as the non-failure hypothesis",
}

# fixtures/realworld is a measured corpus, not a list of passing cases: `mldebug-rules eval` reports its
# accuracy (its blind third apart), and tests/test_realworld.py holds it above a floor.
EXPECTED = sorted(
    p for p in FIXTURES.glob("**/expected.yaml") if ".mldebug" not in p.parts and "realworld" not in p.parts
)


def _name(p: Path) -> str:
    return p.parent.relative_to(FIXTURES).as_posix()


def _label(p: Path) -> dict[str, Any]:
    return yaml.safe_load(p.read_text(encoding="utf-8"))


_CACHE: dict[str, dict[str, Any]] = {}


def _report(run_dir: Path, kb: KnowledgeBase) -> dict[str, Any]:
    d = diagnose(Request(run_dirs=[run_dir], offline=True), kb=kb)
    return json.loads(report.to_json(report.build(d)))


def _cached(run_dir: Path, kb: KnowledgeBase) -> dict[str, Any]:
    key = str(run_dir)
    if key not in _CACHE:
        _CACHE[key] = _report(run_dir, kb)
    return _CACHE[key]


def _top(rep: Mapping[str, Any]) -> str | None:
    return rep["hypotheses"][0]["id"] if rep["hypotheses"] else None


def _summary(rep: Mapping[str, Any]) -> str:
    return f"verdict={rep['verdict']} got={[h['id'] for h in rep['hypotheses'][:3]]}"


def test_fixtures_found() -> None:
    assert len(EXPECTED) >= 40
    assert len(list(HEALTHY.glob("*/expected.yaml"))) >= 5


@pytest.mark.parametrize("expected_yaml", EXPECTED, ids=_name)
def test_fixture_top1(expected_yaml: Path, kb: KnowledgeBase) -> None:
    label = _label(expected_yaml)
    want = label["diagnosis"]
    rep = _cached(expected_yaml.parent, kb)
    if want == NO_FAILURE:
        assert rep["verdict"] == "no_failure", _summary(rep)
    else:
        fair = {want, *(label.get("accept") or [])}
        assert _top(rep) in fair, f"expected {want}: {_summary(rep)}"
    for h in rep["hypotheses"]:
        assert h["evidence"], f"{h['id']} cites no evidence"


HEALTHY_DIRS = sorted(p.parent for p in HEALTHY.glob("*/expected.yaml"))


@pytest.mark.parametrize("run_dir", HEALTHY_DIRS, ids=lambda p: p.name)
def test_healthy_no_failure(run_dir: Path, kb: KnowledgeBase) -> None:
    assert _label(run_dir / "expected.yaml")["diagnosis"] == NO_FAILURE
    rep = _cached(run_dir, kb)
    assert rep["verdict"] == "no_failure", _summary(rep)
    unexpected = [
        h["id"]
        for h in rep["hypotheses"]
        if (run_dir.name, h["id"]) not in HEALTHY_ALLOWLIST and ("*", h["id"]) not in HEALTHY_ALLOWLIST
    ]
    assert not unexpected, f"false positives on a healthy run: {unexpected} ({_summary(rep)})"


# --- properties -----------------------------------------------------------------------------------

# Lines healthy runs print (taken from the healthy fixtures' formats). None of them reports an end of
# training, an overflow or an error, so inserting them must not change a root-cause diagnosis.
HEALTHY_CHATTER = [
    "W0311 10:02:11.482000 139916 torch/distributed/run.py:779] Setting OMP_NUM_THREADS environment "
    "variable for each process to be 1 in default, to avoid your system being overloaded, please further "
    "tune the variable for optimal performance in your application as needed. ",
    "[W socket.cpp:697] [c10d] The client socket could not connect to [localhost]:29500 (errno: 97 - Address "
    "family not supported by protocol).",
    "gpu-node-017:139950:140020 [0] NCCL INFO Channel 00/02 :    0   1",
    "gpu-node-017:139950:140020 [0] NCCL INFO Connected all rings",
    "Some weights of BertForSequenceClassification were not initialized from the model checkpoint at "
    "bert-base-uncased and are newly initialized: ['classifier.bias', 'classifier.weight']",
    "You should probably TRAIN this model on a down-stream task to be able to use it for predictions and "
    "inference.",
    "/opt/conda/lib/python3.10/site-packages/transformers/training_args.py:1545: FutureWarning: "
    "`evaluation_strategy` is deprecated and will be removed in version 4.46 of Transformers. Use "
    "`eval_strategy` instead",
    "  warnings.warn(",
    " 12%|\u2588\u258f        | 83/690 [00:29<03:36,  2.81it/s]",
    "/opt/conda/lib/python3.10/site-packages/lightning/pytorch/trainer/connectors/data_connector.py:424: "
    "The 'train_dataloader' does not have many workers which may be a bottleneck. Consider increasing the "
    "value of the `num_workers` argument` to `num_workers=7` in the `DataLoader` to improve performance.",
    "[rank0]:[I1203 06:18:00.597937898 reducer.cpp:1228] Reducer: comm-optimized memory allocator not found, "
    "using regular one",
    "[2024-03-11 09:00:01,112] [INFO] [real_accelerator.py:191:get_accelerator] Setting ds_accelerator to "
    "cuda (auto detect)",
    "GPU available: True (cuda), used: True",
]

# Root-cause fixtures whose evidence is in a training log (the property tests copy and perturb them).
# Kept short: each example is a full diagnosis (about a second).
ROOT_CAUSE = ["nan_lr_too_high", "dist_peer_crash", "curves_megatron_fp16_overflow"]
CRASH_SET = ["curves_hf_logdict_divergence", "healthy/torchrun_gloo_ddp"]

PROP = settings(
    max_examples=2,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _main_log(run_dir: Path) -> Path:
    logs = [p for p in run_dir.rglob("*") if p.is_file() and p.suffix in (".log", ".out", ".err", ".txt")]
    logs = [p for p in logs if not p.name.startswith(("dmesg", "kern", "journal", "syslog", "nvidia-smi"))]
    assert logs, f"{run_dir}: no training log"
    named = [p for p in logs if p.name == "train.log"]
    return named[0] if named else max(logs, key=lambda p: p.stat().st_size)


def _copy(name: str, tmp: Path) -> Path:
    dst = tmp / Path(name).name
    shutil.copytree(FIXTURES / name, dst, ignore=shutil.ignore_patterns(".mldebug"))
    return dst


def _insert_before_failure(lines: list[str], rng: random.Random, extra: list[str]) -> list[str]:
    """Insert lines at random line boundaries before the first traceback (a traceback's lines stay whole)."""
    limit = next(
        (i for i, ln in enumerate(lines) if ln.startswith(("Traceback", "[rank")) and "Traceback" in ln),
        len(lines),
    )
    limit = max(1, limit)
    out = list(lines)
    for ln in extra:
        out.insert(rng.randint(0, limit - 1), ln)
    return out


@pytest.mark.parametrize("name", ROOT_CAUSE)
@PROP
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 40))
def test_healthy_noise_keeps_top1(name: str, seed: int, n: int, kb: KnowledgeBase) -> None:
    baseline = _top(_cached(FIXTURES / name, kb))
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        run = _copy(name, Path(tmp))
        log = _main_log(run)
        text = log.read_text(encoding="utf-8", errors="surrogateescape")
        lines = text.split("\n")
        extra = [rng.choice(HEALTHY_CHATTER) for _ in range(n)]
        log.write_text(
            "\n".join(_insert_before_failure(lines, rng, extra)), encoding="utf-8", errors="surrogateescape"
        )
        rep = _report(run, kb)
    assert _top(rep) == baseline, f"{name}: healthy chatter changed top-1 {baseline} -> {_summary(rep)}"


_NOISE = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=0, max_size=200)


@pytest.mark.parametrize("name", CRASH_SET)
@PROP
@given(
    seed=st.integers(0, 2**32 - 1),
    noise=st.lists(_NOISE, min_size=1, max_size=20),
    garbage=st.binary(min_size=1, max_size=4096),
    cut=st.floats(0.05, 0.99),
)
def test_perturbed_logs_never_crash(
    name: str, seed: int, noise: list[str], garbage: bytes, cut: float, kb: KnowledgeBase
) -> None:
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        run = _copy(name, Path(tmp))
        log = _main_log(run)
        data = log.read_bytes()
        lines = data.split(b"\n")
        for ln in noise:  # random noise lines anywhere
            lines.insert(rng.randint(0, len(lines)), ln.encode("utf-8", "surrogateescape"))
        data = b"\n".join(lines)
        pos = rng.randint(0, len(data))  # binary garbage in the middle
        data = data[:pos] + garbage + data[pos:]
        data = data[: max(1, int(len(data) * cut))]  # truncated mid-line
        if data.endswith(b"\n"):
            data = data[:-1] + b"x"
        log.write_bytes(data)
        rep = _report(run, kb)
    assert rep["verdict"] in ("cause", "uncertain", "no_failure")
    for h in rep["hypotheses"]:
        assert h["evidence"]


# --- determinism ----------------------------------------------------------------------------------

_TIMING_KEYS = {"seconds", "elapsed", "elapsed_s", "duration", "duration_s", "wall_s", "timing"}


def _strip_timing(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _strip_timing(v) for k, v in x.items() if k not in _TIMING_KEYS}
    if isinstance(x, list):
        return [_strip_timing(v) for v in x]
    return x


DETERMINISM = ["dist_peer_crash"]


@pytest.mark.parametrize("name", DETERMINISM)
def test_deterministic(name: str, kb: KnowledgeBase) -> None:
    a = _cached(FIXTURES / name, kb)  # the first diagnosis, often already made by test_fixture_top1
    b = _report(FIXTURES / name, kb)
    ja = json.dumps(_strip_timing(a), sort_keys=True)
    jb = json.dumps(_strip_timing(b), sort_keys=True)
    assert ja == jb


# --- taxonomy / catalogue / rules sync ------------------------------------------------------------


def test_taxonomy_matches_shared() -> None:
    if not SHARED_TAXONOMY.exists():
        pytest.skip(f"{SHARED_TAXONOMY} not present")
    ours = yaml.safe_load((REPO / "engine" / "taxonomy.yaml").read_text(encoding="utf-8"))
    theirs = yaml.safe_load(SHARED_TAXONOMY.read_text(encoding="utf-8"))
    assert ours == theirs, "engine/taxonomy.yaml differs from the contract's shared/taxonomy.yaml"


def test_every_taxonomy_id_has_catalogue_entry(kb: KnowledgeBase) -> None:
    missing = sorted(h for h in kb.taxonomy if h not in kb.hypotheses)
    assert not missing, f"taxonomy ids with no catalogue entry: {missing}"


def test_every_taxonomy_id_has_a_rule(kb: KnowledgeBase) -> None:
    raised = {r.spec["then"].get("hypothesis") for r in kb.rules}
    missing = sorted(h for h in kb.taxonomy if h not in raised)
    assert not missing, f"taxonomy ids no rule can raise: {missing}"
