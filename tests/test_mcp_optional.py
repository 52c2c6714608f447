"""Issue 21, without the SDK: the `[agent]` extra is optional (the core never imports `mcp`), `mldebug-rules
mcp` says how to install it when it is missing, and `--root` must name directories."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_the_extra_is_optional() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    meta = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert not [d for d in meta["dependencies"] if d.lower().startswith("mcp")]
    assert any(d.startswith("mcp") for d in meta["optional-dependencies"]["agent"])
    # The core commands never import the SDK; `mcp` without it says how to get it (exit 2, one line).
    code = (
        "import sys\n"
        "from mldebug_rules.cli import main\n"
        "rc = main(['rules', 'list'])\n"
        "assert rc == 0 and not [m for m in sys.modules if m == 'mcp' or m.startswith('mcp.')], 'mcp imported'\n"
        "sys.modules['mcp'] = None  # as if the extra were not installed\n"
        "raise SystemExit(main(['mcp']))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert 'pip install "mldebug-rules[agent]"' in r.stderr and "Traceback" not in r.stderr
    assert r.stderr.startswith("mldebug-rules: error: ") and r.stderr.count("\n") == 1, r.stderr


def test_a_root_that_is_not_a_directory_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from mldebug_rules.cli import main

    (tmp_path / "file").write_text("x")
    for bad in (tmp_path / "missing", tmp_path / "file"):
        assert main(["mcp", "--root", str(tmp_path), "--root", str(bad)]) == 2
        assert f"--root {bad}: not a directory" in capsys.readouterr().err


def test_the_documented_mcp_json_starts_the_server() -> None:
    """docs/agent-hook.md's `.mcp.json` snippet is valid JSON, and its command line is one the CLI accepts."""
    import json
    import re

    from mldebug_rules.cli import build_parser

    doc = (REPO / "docs" / "agent-hook.md").read_text()
    blocks = [json.loads(b) for b in re.findall(r"```json\n(.*?)```", doc, re.S) if "mcpServers" in b]
    assert len(blocks) == 1
    server = blocks[0]["mcpServers"]["mldebug-rules"]
    assert server["command"] == "mldebug-rules"
    args = build_parser().parse_args(server["args"])
    assert args.command == "mcp" and args.root and args.allow_run
