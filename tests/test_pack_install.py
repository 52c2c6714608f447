"""A team pack, scaffolded by `rules new`, tested by `rules test`, found with --rules, and found again without
--rules once installed as a Python distribution (entry-point group `mldebug_rules.packs`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

LOG = "step 10 loss 1.2\nExampleCacheError: cache at /tmp/cache.db is corrupt\n"


def cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mldebug_rules.cli", *args], cwd=cwd, env=env, capture_output=True, text=True
    )


def test_pack_lifecycle(tmp_path: Path) -> None:
    assert cli("rules", "new", "acme_pack", cwd=tmp_path).returncode == 0
    pack = tmp_path / "acme_pack"
    t = cli("rules", "test", str(pack), cwd=tmp_path)
    assert t.returncode == 0, t.stdout + t.stderr
    run = tmp_path / "run"
    run.mkdir()
    (run / "train.log").write_text(LOG)
    d = cli("diagnose", "--offline", "--format", "json", "--rules", str(pack), str(run), cwd=tmp_path)
    assert json.loads(d.stdout)["hypotheses"][0]["id"] == "acme_pack.example_cache_corrupt"

    # Installed as a distribution: an importable package holding the pack, and its entry point metadata.
    site = tmp_path / "site"
    (site / "acme_pack").mkdir(parents=True)
    for f in pack.iterdir():
        (site / "acme_pack" / f.name).write_bytes(f.read_bytes())
    (site / "acme_pack" / "__init__.py").write_text("")
    dist = site / "acme_pack-0.1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-pack\nVersion: 0.1.0\n")
    (dist / "entry_points.txt").write_text("[mldebug_rules.packs]\nacme = acme_pack\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    listed = cli("rules", "list", cwd=tmp_path, env=env)
    assert "acme_pack" in listed.stdout and "entry point acme-pack 0.1.0" in listed.stdout, listed.stdout
    d = cli("diagnose", "--offline", "--format", "json", str(run), cwd=tmp_path, env=env)
    assert json.loads(d.stdout)["hypotheses"][0]["id"] == "acme_pack.example_cache_corrupt"


def test_scaffolded_distribution_and_the_installed_plus_source_loop(tmp_path: Path) -> None:
    """`rules new DIR --pack NAME` writes a pyproject.toml whose entry point finds the pack once installed;
    while that copy is installed, `rules test SRC` and `--rules SRC` use the source folder instead."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    made = cli("rules", "new", "acme-mldebug-pack", "--pack", "acme", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    project = tmp_path / "acme-mldebug-pack"
    src = project / "acme_mldebug_pack"
    meta = tomllib.loads((project / "pyproject.toml").read_text())
    assert meta["project"]["name"] == "acme-mldebug-pack"
    assert meta["project"]["entry-points"]["mldebug_rules.packs"] == {"acme": "acme_mldebug_pack"}
    assert meta["tool"]["setuptools"]["package-data"] == {"acme_mldebug_pack": ["*.yaml"]}
    assert (src / "__init__.py").is_file() and "pack: acme\n" in (src / "pack.yaml").read_text()

    # What `pip install acme-mldebug-pack` puts in site-packages: a copy of the package, and the metadata.
    site = tmp_path / "site"
    (site / src.name).mkdir(parents=True)
    for f in src.iterdir():
        (site / src.name / f.name).write_bytes(f.read_bytes())
    dist = site / "acme_mldebug_pack-0.1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-mldebug-pack\nVersion: 0.1.0\n")
    eps = meta["project"]["entry-points"]["mldebug_rules.packs"]
    (dist / "entry_points.txt").write_text(
        "[mldebug_rules.packs]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items())
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    listed = cli("rules", "list", cwd=tmp_path, env=env)
    assert "entry point acme-mldebug-pack 0.1.0" in listed.stdout, listed.stdout + listed.stderr

    # The author adds a case to the source; the installed copy does not have it.
    tests = src / "example.test.yaml"
    tests.write_text(
        tests.read_text()
        + '  - name: a new case in the source only\n    log: "ExampleCacheError: cache at /x is corrupt\\n"\n'
        + "    expect: {top: acme.example_cache_corrupt}\n"
    )
    t = cli("rules", "test", str(src), cwd=tmp_path, env=env)
    assert t.returncode == 0 and t.stdout.strip().endswith("3 passed, 0 failed"), t.stdout + t.stderr
    assert not t.stderr
    installed = cli("rules", "test", "--pack", "acme", cwd=tmp_path, env=env)
    assert installed.stdout.strip().endswith("2 passed, 0 failed"), installed.stdout + installed.stderr
