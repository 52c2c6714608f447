"""A team pack, scaffolded by `rules new`, tested by `rules test`, found with --rules, and found again without
--rules once installed as a Python distribution (entry-point group `mldebug_rules.packs`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

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
