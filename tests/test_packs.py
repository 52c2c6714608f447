"""Pack loading: schema and cross-reference errors name path:line and say what to do."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from mldebug_rules.engine.packs import PackError, load_packs
from mldebug_rules.engine.yamlload import YamlError

MANIFEST = "pack: acme\nversion: 0.1.0\ndescription: test pack\nrequires: mldebug-rules/rules/v1\n"
GOOD_RULE = """rules:
  - id: r1
    title: t
    status: test
    description: d
    falsepositives: [none known]
    when:
      a: {kind: log.signature, match: {signature: cuda_oom}}
    then: {hypothesis: gpu_oom, weight: 0.5}
"""


def pack(tmp_path: Path, body: str, manifest: str = MANIFEST) -> Path:
    d = tmp_path / "acme"
    d.mkdir(exist_ok=True)
    (d / "pack.yaml").write_text(manifest)
    (d / "rules.yaml").write_text(body)
    return d


def error_of(tmp_path: Path, body: str, manifest: str = MANIFEST) -> str:
    with pytest.raises((PackError, YamlError)) as e:
        load_packs([pack(tmp_path, body, manifest)], entry_points=False, strict=True)
    return str(e.value)


def test_builtin_packs_load() -> None:
    kb = load_packs(entry_points=False)
    assert any(p.name == "core" for p in kb.packs)
    assert kb.rules and kb.signatures


def test_good_pack_loads(tmp_path: Path) -> None:
    kb = load_packs([pack(tmp_path, GOOD_RULE)], entry_points=False)
    assert "acme.r1" in {r.id for r in kb.rules}
    assert [p.origin for p in kb.packs if p.name == "acme"] == ["--rules"]


def test_malformed_yaml_names_file_and_line(tmp_path: Path) -> None:
    msg = error_of(tmp_path, "rules:\n  - id: r1\n    title: [unclosed\n")
    assert ("rules.yaml:" in msg and ":4:" in msg) or ":3:" in msg


def test_unknown_fact_kind(tmp_path: Path) -> None:
    msg = error_of(tmp_path, GOOD_RULE.replace("kind: log.signature", "kind: log.signatures"))
    assert "rules.yaml:8:" in msg and "unknown fact kind 'log.signatures'" in msg


def test_unknown_attribute(tmp_path: Path) -> None:
    msg = error_of(tmp_path, GOOD_RULE.replace("signature: cuda_oom", "signatur: cuda_oom"))
    assert "has no attribute 'signatur'" in msg and "rules.yaml:8:" in msg


def test_unknown_diagnosis_id(tmp_path: Path) -> None:
    msg = error_of(tmp_path, GOOD_RULE.replace("gpu_oom", "gpu_oomm"))
    assert "unknown diagnosis id 'gpu_oomm'" in msg


def test_missing_falsepositives_explains_why(tmp_path: Path) -> None:
    msg = error_of(tmp_path, GOOD_RULE.replace("    falsepositives: [none known]\n", ""))
    assert "falsepositives: required, since every rule says when it may be a false positive" in msg
    assert "rules.yaml:2:" in msg


def test_pack_hypothesis_must_be_namespaced(tmp_path: Path) -> None:
    body = (
        GOOD_RULE
        + """hypotheses:
  tokenizer_broken:
    title: t
    alternatives: [config_error]
    smoke: halve_batch
    remediation: {immediate: a, investigate: b, false_positive: c}
"""
    )
    assert "namespaced as 'acme.tokenizer_broken'" in error_of(tmp_path, body)


def test_join_must_refer_to_an_earlier_pattern(tmp_path: Path) -> None:
    body = GOOD_RULE.replace("match: {signature: cuda_oom}", "match: {signature: cuda_oom, rank: $b.rank}")
    assert "not an earlier pattern" in error_of(tmp_path, body)


def test_type_mismatch_in_match(tmp_path: Path) -> None:
    body = GOOD_RULE.replace("match: {signature: cuda_oom}", "match: {signature: cuda_oom, line: {gt: many}}")
    assert "is not a integer" in error_of(tmp_path, body)


def test_rules_may_not_derive_smoke_results(tmp_path: Path) -> None:
    body = GOOD_RULE.replace(
        "then: {hypothesis: gpu_oom, weight: 0.5}",
        "then: {derive: [{kind: smoke.result, attrs: {hypothesis: gpu_oom, outcome: confirmed}}]}",
    )
    assert "may not derive 'smoke.result'" in error_of(tmp_path, body)


def test_duplicate_rule_id_names_both_places(tmp_path: Path) -> None:
    body = GOOD_RULE + GOOD_RULE.replace("rules:\n", "")
    msg = error_of(tmp_path, body)
    assert "already defined at" in msg and "rules.yaml:2" in msg


def test_incompatible_version(tmp_path: Path) -> None:
    msg = error_of(tmp_path, GOOD_RULE, MANIFEST.replace("rules/v1", "rules/v9"))
    assert "pack.yaml:4:" in msg and "v9" in msg


def test_broken_third_party_pack_is_disabled_without_strict(tmp_path: Path) -> None:
    d = pack(tmp_path, "rules: [")
    kb = load_packs([d], entry_points=False, strict=False)
    assert any("pack disabled" in w for w in kb.warnings)
    assert "acme" not in {p.name for p in kb.packs}


def test_cli_malformed_pack_is_exit_2_one_line(tmp_path: Path) -> None:
    d = pack(tmp_path, GOOD_RULE.replace("kind: log.signature", "kind: nope"))
    run = tmp_path / "run"
    run.mkdir()
    (run / "train.log").write_text("hello\n")
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "mldebug_rules",
            "diagnose",
            str(run),
            "--offline",
            "--rules",
            str(d),
            "--strict",
        ],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and "rules.yaml:8:" in p.stderr and "Traceback" not in p.stderr


def test_params_override_and_unknown(tmp_path: Path) -> None:
    kb = load_packs(entry_points=False, params={"disk_full_pct": "90"})
    assert kb.params["disk_full_pct"] == 90.0
    with pytest.raises(PackError, match="unknown parameter"):
        load_packs(entry_points=False, params={"nope": "1"})


def test_override_disables_and_reweights(tmp_path: Path) -> None:
    body = (
        GOOD_RULE
        + """overrides:
  - {rule: core.bare_sigkill, disable: true, reason: our launcher prints Killed on every clean exit}
  - {rule: core.cuda_oom, weight: 0.2, reason: testing}
"""
    )
    kb = load_packs([pack(tmp_path, body)], entry_points=False)
    rules = {r.id: r for r in kb.rules}
    assert rules["core.bare_sigkill"].disabled and rules["core.cuda_oom"].weight_override == 0.2
    msg = error_of(tmp_path, GOOD_RULE + "overrides:\n  - {rule: core.nope, disable: true, reason: x}\n")
    assert "does not exist" in msg


@pytest.mark.parametrize(
    ("regex", "problem"),
    [
        ("'CUDA (out of'", "does not compile: missing ), unterminated subpattern"),
        ("'x*'", "matches the empty"),
    ],
)
def test_bad_signature_regex_names_its_line(tmp_path: Path, regex: str, problem: str) -> None:
    body = f"""signatures:
  - id: sig1
    title: t
    role: root
    hypotheses: [gpu_oom]
    regex: {regex}
    examples: {{match: ["CUDA out of memory"], no_match: ["fine"]}}
"""
    msg = error_of(tmp_path, body)
    assert msg.startswith(str(tmp_path / "acme" / "rules.yaml") + ":6: sig1: regex " + problem), msg
