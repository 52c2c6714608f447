"""A third-party pack can hurt nobody but itself: whatever it contains, the built-in diagnosis stands, the
pack is disabled with one warning line naming its file:line (stderr and every report format), and
``--strict`` makes that exit 2. A ``--rules`` folder that is missing or has no pack.yaml is bad usage."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mldebug_rules.engine.packs import PackError, load_pack_dirs, load_packs
from mldebug_rules.engine.yamlload import YamlError

MANIFEST = "pack: {name}\nversion: 0.1.0\ndescription: test pack\nrequires: mldebug-rules/rules/v1\n"
OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of"
    " 79.15 GiB of which 1.02 GiB is free.\n"
)
RULE = """rules:
  - id: r1
    title: t
    status: test
    description: d
    falsepositives: [none known]
    when:
      a: {{kind: {kind}, match: {{{attr}: {value}}}}}
    then: {{hypothesis: {hyp}, weight: 0.5}}
"""
LOOKAHEAD = """signatures:
  - id: acme_fatal
    title: t
    role: root
    hypotheses: [gpu_oom]
    regex: 'acme: (?=.*fatal)\\w+'
    examples: {match: ["acme: boom fatal"], no_match: ["acme: fine"]}
"""


def make_pack(root: Path, name: str, body: str, file: str = "rules.yaml") -> Path:
    d = root / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "pack.yaml").write_text(MANIFEST.format(name=name))
    (d / file).write_text(body)
    return d


def rule(
    kind: str = "log.signature", attr: str = "signature", value: str = "cuda_oom", hyp: str = "gpu_oom"
) -> str:
    return RULE.format(kind=kind, attr=attr, value=value, hyp=hyp)


def cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mldebug_rules", *args], cwd=cwd, env=env, capture_output=True, text=True
    )


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    d = tmp_path / "run"
    d.mkdir()
    (d / "train.log").write_text("step 10 loss 1.2\n" + OOM)
    return d


# --- the "Done when" -------------------------------------------------------------------------------
def test_lookahead_and_unknown_kind_leave_the_builtin_diagnosis_intact(tmp_path: Path, run_dir: Path) -> None:
    la = make_pack(tmp_path, "la", LOOKAHEAD, "sig.yaml")
    kind = make_pack(tmp_path, "kind", rule(kind="log.signatures"))
    args = ["diagnose", "--offline", "run", "--rules", "la", "--rules", "kind"]
    for fmt in ("json", "text", "markdown"):
        p = cli(*args, "--format", fmt, cwd=tmp_path)
        assert p.returncode == 0, p.stderr
        lines = p.stderr.splitlines()
        assert len(lines) == 2, p.stderr
        assert lines[0].startswith(
            "mldebug-rules: warning: pack disabled: la/sig.yaml:6: acme_fatal: regex uses a look-around"
        )
        assert lines[1].startswith("mldebug-rules: warning: pack disabled: kind/rules.yaml:8: when.a.kind:")
        assert "did you mean 'log.signature'?" in lines[1]
        if fmt == "json":
            rep = json.loads(p.stdout)
            assert rep["hypotheses"][0]["id"] == "gpu_oom"
            assert [w.split(":")[1] for w in rep["warnings"]] == [" la/sig.yaml", " kind/rules.yaml"]
        else:
            assert "gpu_oom" in p.stdout
            assert p.stdout.count("warning: pack disabled: ") == 2
            assert "la/sig.yaml:6" in p.stdout and "kind/rules.yaml:8" in p.stdout
    assert (la / "sig.yaml").exists() and (kind / "rules.yaml").exists()
    for bad in ("la", "kind"):
        p = cli("diagnose", "--offline", "run", "--rules", bad, "--strict", cwd=tmp_path)
        assert p.returncode == 2 and p.stderr.count("\n") == 1 and "Traceback" not in p.stderr
        assert f"{bad}/" in p.stderr and p.stderr.startswith("mldebug-rules: error: ")


@pytest.mark.parametrize("command", [["diagnose", "--offline", "run"], ["rules", "test"], ["rules", "lint"]])
def test_a_rules_folder_missing_or_without_manifest_is_exit_2(
    tmp_path: Path, run_dir: Path, command: list[str]
) -> None:
    (tmp_path / "empty").mkdir()
    flag = ["--rules"] if command[0] == "diagnose" else []
    for folder, why in (("nope", "no such pack folder"), ("empty", "no pack.yaml manifest")):
        p = cli(*command, *flag, folder, cwd=tmp_path)
        assert p.returncode == 2, (p.stdout, p.stderr)
        assert p.stderr.startswith(f"mldebug-rules: error: {folder}: {why}") and p.stderr.count("\n") == 1


def test_a_missing_folder_on_the_search_path_only_warns(tmp_path: Path) -> None:
    env = dict(os.environ, MLDEBUG_RULES_PATH=str(tmp_path / "gone"))
    p = cli("rules", "list", cwd=tmp_path, env=env)
    assert p.returncode == 0 and "pack disabled: " in p.stderr and "gone" in p.stderr


# --- every kind of pack error disables only that pack --------------------------------------------------------
@pytest.mark.parametrize(
    ("body", "message"),
    [
        (rule(kind="log.nope"), "rules.yaml:8: when.a.kind: unknown fact kind 'log.nope'"),
        (rule(attr="nope"), "rules.yaml:8: when.a.match.nope: log.signature has no attribute 'nope'"),
        (
            rule(kind="gpu.state", attr="temp_c", value="{gte: {param: nope}}"),
            "rules.yaml:8: when.a.match.temp_c: unknown parameter 'nope'",
        ),
        (rule(hyp="nope_id"), "rules.yaml:9: then.hypothesis: unknown diagnosis id 'nope_id'"),
        ("rules: [", "rules.yaml:2: "),
        (
            "signatures:\n  - {id: s, title: t, role: root, regex: 'a(b', hypotheses: [gpu_oom],"
            " examples: {match: [ab], no_match: [b]}}\n",
            "does not compile",
        ),
        (
            rule() + "overrides:\n  - {rule: core.nope, disable: true, reason: x}\n",
            "overrides: rule 'core.nope' does not exist",
        ),
        ("rules:\n  - id: r1\n    title: on\n", "unquoted 'on' is the boolean true in YAML 1.1"),
    ],
)
def test_each_pack_error_disables_only_that_pack(tmp_path: Path, body: str, message: str) -> None:
    bad = make_pack(tmp_path, "bad", body)
    good = make_pack(tmp_path, "good", rule())
    kb = load_packs([bad, good], entry_points=False, strict=False)
    assert {p.name for p in kb.packs} >= {"core", "good"} and "bad" not in {p.name for p in kb.packs}
    assert "good.r1" in {r.id for r in kb.rules} and not any(r.pack == "bad" for r in kb.rules)
    assert len(kb.warnings) == 1 and message in kb.warnings[0], kb.warnings
    with pytest.raises((PackError, YamlError), match="bad"):
        load_packs([bad, good], entry_points=False, strict=True)


def test_a_pack_resting_on_a_disabled_pack_is_disabled_too(tmp_path: Path) -> None:
    base = make_pack(tmp_path, "base", LOOKAHEAD.replace("[gpu_oom]", "[base.x]") + HYP.format(name="base"))
    user = make_pack(tmp_path, "user", rule(hyp="base.x"))
    kb = load_packs([base, user], entry_points=False, strict=False)
    assert not {"base", "user"} & {p.name for p in kb.packs}
    assert len(kb.warnings) == 2 and "unknown diagnosis id 'base.x'" in kb.warnings[1]


HYP = """hypotheses:
  {name}.x:
    title: t
    alternatives: [gpu_oom]
    smoke: halve_batch
    remediation: {{immediate: a, investigate: b, false_positive: c}}
"""


def test_unnamespaced_id_suggests_the_namespaced_one(tmp_path: Path) -> None:
    d = make_pack(tmp_path, "acme", rule(hyp="x") + HYP.format(name="acme"))
    with pytest.raises(PackError, match=r"unknown diagnosis id 'x' \(did you mean 'acme\.x'\?"):
        load_packs([d], entry_points=False)


def test_a_broken_builtin_pack_is_an_internal_error(tmp_path: Path) -> None:
    d = make_pack(tmp_path, "core2", rule(kind="log.nope"))
    with pytest.raises(PackError, match="unknown fact kind"):
        load_pack_dirs([(d, "builtin")], strict=False)


# --- authors iterate: one pack per real path, the source folder over the installed copy ----------------------
def test_the_same_folder_twice_is_one_pack(tmp_path: Path) -> None:
    d = make_pack(tmp_path, "acme", rule())
    (tmp_path / "link").symlink_to(d)
    kb = load_packs([d, tmp_path / "link", d], entry_points=False, strict=True)
    assert [p.name for p in kb.packs].count("acme") == 1 and not kb.warnings


def test_rules_dir_overrides_the_installed_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    installed = make_pack(tmp_path / "site", "acme", rule())
    source = make_pack(tmp_path / "src", "acme", rule().replace("id: r1", "id: r2"))
    monkeypatch.setenv("MLDEBUG_RULES_PATH", str(installed))
    kb = load_packs([source], entry_points=False, strict=True)
    assert "acme.r2" in {r.id for r in kb.rules} and "acme.r1" not in {r.id for r in kb.rules}
    assert not kb.warnings
    other = make_pack(tmp_path / "other", "acme", rule())
    monkeypatch.setenv("MLDEBUG_RULES_PATH", os.pathsep.join([str(installed), str(other)]))
    kb = load_packs([], entry_points=False, strict=False)
    assert len(kb.warnings) == 1 and "pack name 'acme' is already used by" in kb.warnings[0]


def test_rules_test_pack_selects_by_name(tmp_path: Path) -> None:
    assert cli("rules", "new", "acme", cwd=tmp_path).returncode == 0
    env = dict(os.environ, MLDEBUG_RULES_PATH=str(tmp_path / "acme"))
    p = cli("rules", "test", "--pack", "acme", cwd=tmp_path, env=env)
    assert p.returncode == 0 and p.stdout.strip().endswith("2 passed, 0 failed"), p.stdout + p.stderr
    p = cli("rules", "test", "acme", cwd=tmp_path, env=env)  # the source folder while it is also installed
    assert p.returncode == 0 and p.stdout.strip().endswith("2 passed, 0 failed"), p.stdout + p.stderr
    p = cli("rules", "test", "--pack", "nope", cwd=tmp_path, env=env)
    assert p.returncode == 2 and "--pack nope: no such pack" in p.stderr


def test_rules_commands_take_a_folder_of_packs(tmp_path: Path) -> None:
    """`rules test teams` / `rules lint teams`: a folder whose subfolders are packs stands for all of them."""
    team = tmp_path / "teams"
    team.mkdir()
    for name in ("acme", "bolt"):
        assert cli("rules", "new", name, cwd=team).returncode == 0
        for f in (team / name).glob("example*.yaml"):  # each team's own framework, not the same log line
            f.write_text(f.read_text().replace("ExampleCache", f"{name.title()}Cache"))
    p = cli("rules", "test", "teams", cwd=tmp_path)
    assert p.returncode == 0 and p.stdout.strip().endswith("4 passed, 0 failed"), p.stdout + p.stderr
    p = cli("rules", "lint", "teams", cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr


# --- refining a built-in diagnosis with a context signature ---------------------------------------------------
REFINE = """signatures:
  - id: acme_ckpt_off
    title: The acme trainer starts with activation checkpointing off
    role: context
    regex: 'acme-trainer: activation checkpointing (?:disabled|off)'
    examples:
      match: ["acme-trainer: activation checkpointing disabled"]
      no_match: ["acme-trainer: activation checkpointing enabled"]

hypotheses:
  acme.oom_without_ckpt:
    title: The model runs out of GPU memory because activation checkpointing is off
    alternatives: [gpu_oom, gpu_memory_leak]
    smoke: halve_batch
    remediation:
      immediate: Turn activation checkpointing back on (acme.ckpt=true).
      investigate: Compare peak memory with and without checkpointing.
      false_positive: The OOM happens with checkpointing on as well.

rules:
  - id: oom_without_ckpt
    title: A CUDA OOM in a run that started with activation checkpointing off
    status: test
    description: The team's start-up line refines the built-in gpu_oom.
    falsepositives: [none known]
    when:
      ctx: {kind: log.signature, match: {signature: acme_ckpt_off}}
      oom: {kind: log.signature, match: {signature: cuda_oom}}
    then:
      hypothesis: acme.oom_without_ckpt
      weight: 0.95
      explains: [gpu_oom]
"""


def test_a_context_signature_refines_a_builtin_diagnosis(tmp_path: Path) -> None:
    from mldebug_rules import report
    from mldebug_rules.diagnose import Request, diagnose
    from mldebug_rules.pack_lint import lint

    d = make_pack(tmp_path, "acme", REFINE)
    kb = load_packs([d], entry_points=False, strict=True)
    errors = [p.format() for p in lint(kb, only_packs={"acme"}) if p.severity == "error"]
    assert not errors
    run = tmp_path / "run"
    run.mkdir()
    # Rank 0 prints the start-up line first; rank 3 fails first. The context line is not a failure.
    (run / "rank0.log").write_text(
        "[2025-02-11 10:00:00] acme-trainer: activation checkpointing disabled\n"
        "[2025-02-11 10:05:09] step 10 loss 2.1\n"
    )
    (run / "rank3.log").write_text(f"[2025-02-11 10:05:10] {OOM}")
    rep = report.build(diagnose(Request(run_dirs=[run], offline=True), kb=kb))
    ids = [h["id"] for h in rep["hypotheses"]]
    assert ids[:2] == ["acme.oom_without_ckpt", "gpu_oom"], ids
    top = rep["hypotheses"][0]
    assert {e["source"] for e in top["evidence"]} == {"rank0.log:1", "rank3.log:1"}
    assert rep["hypotheses"][1]["score"] < top["score"]
    first = rep["ranks"]["first_failure"]
    assert (first["rank"], first["signature"]) == (3, "cuda_oom"), first
    (run / "rank3.log").write_text("[2025-02-11 10:05:10] step 11 loss 2.0\n")  # no failure: nothing raised
    rep = report.build(diagnose(Request(run_dirs=[run], offline=True), kb=kb))
    assert "acme.oom_without_ckpt" not in [h["id"] for h in rep["hypotheses"]]


def test_context_signatures_take_no_part_in_a_firings_role() -> None:
    from mldebug_rules.engine.run import firing_role

    def sig(role: str) -> dict[str, str]:
        return {"kind": "log.signature", "role": role}

    assert firing_role([sig("context"), sig("root")]) == "root"
    assert firing_role([sig("context"), sig("cascade")]) == "cascade"  # not turned into a root by the context
    assert firing_role([sig("context")]) == "context"
    assert firing_role([sig("context"), {"kind": "kernel.xid"}]) == "root"


CITES_ONLY_CONTEXT = """signatures:
  - id: acme_slow_reads
    title: The acme loader measured slow reads
    role: context
    regex: 'acme-loader: slow reads'
    examples:
      match: ["acme-loader: slow reads (3 MB/s)"]
      no_match: ["acme-loader: fast reads (900 MB/s)"]

rules:
  - id: slow_reads_at_the_end
    title: The loader warned of slow reads and the log ends there
    status: test
    description: A rule whose cited evidence is a context signature alone (the other pattern is not cited).
    falsepositives: [none known]
    when:
      w: {kind: log.signature, match: {signature: acme_slow_reads, from_end: {gte: 0, lte: 1}}}
      tail: {kind: log.tail, match: {file: $w.file}}
    then:
      hypothesis: network_filesystem_stall
      weight: 0.5
      cite: [w]
"""


def test_a_firing_that_cites_only_a_context_signature_is_diagnosed(tmp_path: Path) -> None:
    # firing_role gives such a firing the role "context"; the hypothesis fact it asserts must accept it
    # (it used to be refused, and the whole diagnosis ended with an internal error).
    from mldebug_rules import report
    from mldebug_rules.diagnose import Request, diagnose

    d = make_pack(tmp_path, "acme", CITES_ONLY_CONTEXT)
    kb = load_packs([d], entry_points=False, strict=True)
    run = tmp_path / "run"
    run.mkdir()
    (run / "train.log").write_text("step 1 loss 2.0\nacme-loader: slow reads (3 MB/s)\n")
    rep = report.build(diagnose(Request(run_dirs=[run], offline=True), kb=kb))
    assert "network_filesystem_stall" in [h["id"] for h in rep["hypotheses"]], rep["hypotheses"]
