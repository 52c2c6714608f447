"""The reference lists a pack author works from: `rules list --ids|--signatures|--smokes`, docs/diagnoses.md
(generated, kept in step here), and user docs that stand on their own (nothing points outside the repo)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from mldebug_rules.engine.packs import KnowledgeBase

from mldebug_rules.reference import markdown

REPO = Path(__file__).resolve().parents[1]


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mldebug_rules", *args], cwd=cwd, capture_output=True, text=True
    )


def test_rules_list_ids_signatures_and_smokes(kb: KnowledgeBase, tmp_path: Path) -> None:
    ids = cli("rules", "list", "--ids", cwd=tmp_path)
    assert ids.returncode == 0, ids.stderr
    rows = {line.split()[0]: line for line in ids.stdout.splitlines()}
    assert set(kb.taxonomy) <= set(rows)
    assert "The accelerator ran out of memory" in rows["gpu_oom"] and rows["gpu_oom"].endswith("[taxonomy]")
    sigs = cli("rules", "list", "--signatures", cwd=tmp_path).stdout.splitlines()
    by_id = {line.split()[0]: line for line in sigs}
    assert {s.id for s in kb.signatures} == set(by_id)
    assert re.search(r"cuda_oom +root +The CUDA caching allocator .* -> gpu_oom", by_id["cuda_oom"])
    smokes = cli("rules", "list", "--smokes", cwd=tmp_path).stdout
    assert "halve_batch" in smokes and "[core]" in smokes


def test_pack_ids_are_listed_with_their_pack(tmp_path: Path) -> None:
    assert cli("rules", "new", "acme", cwd=tmp_path).returncode == 0
    out = cli("rules", "list", "--ids", "acme", cwd=tmp_path).stdout
    line = next(x for x in out.splitlines() if x.startswith("acme.example_cache_corrupt"))
    assert "The example cache is corrupt" in line and line.endswith("[pack acme]")


def test_docs_diagnoses_md_is_in_step(kb: KnowledgeBase) -> None:
    doc = (REPO / "docs" / "diagnoses.md").read_text(encoding="utf-8")
    assert doc == markdown(kb), "docs/diagnoses.md is out of date: run `python docs/gen_diagnoses.py`"
    for hid in kb.taxonomy:
        assert f"| `{hid}` |" in doc


def test_the_taxonomy_ships_in_the_package() -> None:
    import mldebug_rules.engine as engine_pkg

    assert (Path(engine_pkg.__file__).parent / "taxonomy.yaml").is_file()
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    assert '"mldebug_rules.engine" = ["*.yaml"]' in pyproject


def test_user_docs_never_point_outside_the_repository() -> None:
    docs = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    offenders = [str(p.relative_to(REPO)) for p in docs if "../shared" in p.read_text(encoding="utf-8")]
    assert not offenders, f"docs pointing to ../shared: {offenders}"


def test_gate_with_an_unknown_id_points_to_the_id_list(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    p = cli("gate", "run", "--claim", "OOM", cwd=tmp_path)
    assert p.returncode == 2
    assert "did you mean gpu_oom" in p.stderr and "`mldebug-rules rules list --ids`" in p.stderr
