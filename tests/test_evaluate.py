"""``mldebug-rules eval``: labels from a LABELS_DIR or from each case's expected.yaml, accept lists,
difficulty buckets, completed_normally judged by the verdict, text and JSON output."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from mldebug_rules.engine.packs import KnowledgeBase

from mldebug_rules import diagnose as diagnose_mod
from mldebug_rules.cli import main

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture(autouse=True)
def _shared_kb(monkeypatch: pytest.MonkeyPatch, kb: KnowledgeBase) -> None:
    monkeypatch.setattr(diagnose_mod, "load_kb", lambda req: kb)


@pytest.fixture
def cases(tmp_path: Path) -> Path:
    root = tmp_path / "cases"
    shutil.copytree(FIXTURES / "dist_peer_crash", root / "peer")
    (root / "empty").mkdir()  # nothing to read: the verdict cannot be no_failure
    return root


def test_labels_dir_json(cases: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    labels = tmp_path / "labels"
    labels.mkdir()
    (labels / "peer.yaml").write_text(
        "expected: nccl_network_error\naccept: [distributed_peer_failure]\ndifficulty: hard\n"
    )
    (labels / "empty.yaml").write_text("expected: completed_normally\ndifficulty: easy\n")
    assert main(["eval", str(cases), str(labels), "--format", "json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["cases"] == 2
    assert s["top1"] == {"hits": 1, "total": 2, "accuracy": 0.5}
    assert s["by_difficulty"]["hard"]["top1"]["hits"] == 1
    assert s["by_difficulty"]["easy"]["top3"]["hits"] == 0
    assert [m["case"] for m in s["misses"]] == ["empty"]


def test_expected_yaml_text(cases: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copy(FIXTURES / "dist_peer_crash" / "expected.yaml", cases / "peer" / "expected.yaml")
    assert main(["eval", str(cases)]) == 0
    out = capsys.readouterr().out
    assert "cases: 1" in out and "top-1: 1/1" in out and "fixture" in out
    assert "misses (top-1): none" in out


def test_blind_cases_reported_apart_and_their_details_withheld(
    cases: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copy(FIXTURES / "dist_peer_crash" / "expected.yaml", cases / "peer" / "expected.yaml")
    shutil.copytree(FIXTURES / "dist_peer_crash", cases / "peer2")
    (cases / "empty" / "expected.yaml").write_text("diagnosis: gpu_oom\n")
    (cases / "blind.txt").write_text("# blind third\nempty\n")
    assert main(["eval", str(cases), "--format", "json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["cases"] == 3 and s["top1"]["hits"] == 2
    assert s["split"]["non_blind"] == {
        "cases": 2,
        "top1": {"hits": 2, "total": 2, "accuracy": 1.0},
        "top3": {"hits": 2, "total": 2, "accuracy": 1.0},
    }
    assert s["split"]["blind"]["cases"] == 1 and s["split"]["blind"]["top1"]["hits"] == 0
    assert s["blind_details"] == "withheld"
    assert [r["case"] for r in s["results"]] == ["peer", "peer2"] and s["misses"] == []
    assert main(["eval", str(cases), "--show-blind"]) == 0
    out = capsys.readouterr().out
    assert "blind           1 cases" in out and "empty: expected gpu_oom" in out
    assert main(["eval", str(cases), "--subset", "non-blind", "--format", "json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["cases"] == 2 and "split" not in s


def test_fresh_cases_are_a_split_of_their_own(cases: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """fresh.txt names the cases written after the rules: their figure is reported apart, blind or not, and
    --subset fresh evaluates only them."""
    shutil.copy(FIXTURES / "dist_peer_crash" / "expected.yaml", cases / "peer" / "expected.yaml")
    (cases / "empty" / "expected.yaml").write_text("diagnosis: gpu_oom\n")
    (cases / "fresh.txt").write_text("# written after the rules\nempty\n")
    assert main(["eval", str(cases), "--format", "json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["split"]["all"]["cases"] == 2 and "blind" not in s["split"]
    assert s["split"]["fresh"] == {
        "cases": 1,
        "top1": {"hits": 0, "total": 1, "accuracy": 0.0},
        "top3": {"hits": 0, "total": 1, "accuracy": 0.0},
    }
    assert main(["eval", str(cases)]) == 0
    assert re.search(r"^  fresh +1 cases +top-1 +0/1 \(0\.0%\)", capsys.readouterr().out, re.M)
    assert main(["eval", str(cases), "--subset", "fresh", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["cases"] == 1


def test_a_healthy_case_scores_on_the_verdict_or_on_an_id_it_accepts() -> None:
    from mldebug_rules.evaluate import Case, hit

    case = Case(name="c", path=Path("."), expected="completed_normally", accept=["config_error"])
    assert hit([], "no_failure", case)
    assert hit(["config_error"], "uncertain", case)
    assert hit(["gpu_oom", "config_error"], "uncertain", case)
    assert not hit(["gpu_oom"], "uncertain", case)
    assert not hit(
        ["completed_normally"], "uncertain", Case(name="d", path=Path("."), expected="completed_normally")
    )


def test_blind_cases_whose_threads_rule_authors_read_are_left_out_of_blind_unread(
    cases: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copy(FIXTURES / "dist_peer_crash" / "expected.yaml", cases / "peer" / "expected.yaml")
    with (cases / "peer" / "expected.yaml").open("a") as f:
        f.write("source: https://example.org/issues/1\n")
    (cases / "empty" / "expected.yaml").write_text(
        "diagnosis: gpu_oom\nsource: https://example.org/issues/2\n"
    )
    (cases / "blind.txt").write_text("peer\nempty\n")
    (cases / "read-by-rule-authors.txt").write_text(
        "# read while writing rules\nhttps://example.org/issues/1\n"
    )
    assert main(["eval", str(cases), "--format", "json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["split"]["blind"]["cases"] == 2 and s["split"]["blind"]["top1"]["hits"] == 1
    assert s["split"]["blind_unread"]["cases"] == 1 and s["split"]["blind_unread"]["top1"]["hits"] == 0
    assert main(["eval", str(cases)]) == 0
    assert "blind,unread" in capsys.readouterr().out
    (cases / "read-by-rule-authors.txt").unlink()  # nothing read: no such split
    assert main(["eval", str(cases), "--format", "json"]) == 0
    assert "blind_unread" not in json.loads(capsys.readouterr().out)["split"]
