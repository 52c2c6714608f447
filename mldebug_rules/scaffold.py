"""``rules new NAME``: a pack skeleton with one signature, one rule, one hypothesis, one smoke and a passing test."""

from __future__ import annotations

import re
from pathlib import Path

from .errors import UsageError

_MANIFEST = """pack: {name}
version: 0.1.0
description: Failures that {name} knows about (edit me).
owners: [you@example.com]
requires: mldebug-rules/rules/v1
"""

_RULES = """# One file per topic: signatures turn log lines into facts, rules turn facts into hypotheses.
signatures:
  - id: {name}_example_error
    title: ExampleFramework could not open its cache
    role: root
    regex: 'ExampleCacheError: cache at (?P<cache_path>\\S+) is corrupt'
    fields: {{cache_path: str}}
    examples:
      match: ["ExampleCacheError: cache at /tmp/cache.db is corrupt"]
      no_match: ["ExampleCache opened /tmp/cache.db"]

hypotheses:
  {name}.example_cache_corrupt:
    title: The example cache is corrupt
    alternatives: [disk_full, config_error]
    smoke: {name}.fresh_cache
    remediation:
      immediate: Delete the cache directory and rerun.
      investigate: Check how the cache was written (a crash mid-write, a full disk).
      false_positive: The cache was fine and the path points at another file.

smokes:
  {name}.fresh_cache:
    description: Rerun one step with an empty cache directory.
    discriminates: [{name}.example_cache_corrupt]
    outcomes:
      passed: {{confirms: [{name}.example_cache_corrupt]}}
      reproduced: {{refutes: [{name}.example_cache_corrupt]}}

rules:
  - id: {name}_example_cache_corrupt
    title: The log reports a corrupt example cache
    status: experimental
    description: ExampleFramework refuses a cache it cannot read.
    falsepositives: [none known]
    when:
      err: {{kind: log.signature, match: {{signature: {name}_example_error}}}}
    then:
      hypothesis: {name}.example_cache_corrupt
      weight: 0.8
"""

_TESTS = """cases:
  - name: the error line raises the hypothesis
    log: |
      step 10 loss 1.2
      ExampleCacheError: cache at /tmp/cache.db is corrupt
    expect:
      top: {name}.example_cache_corrupt
      verdict: uncertain
      cites: ["train.log:2"]
  - name: a healthy log raises nothing
    log: |
      ExampleCache opened /tmp/cache.db
      step 10 loss 1.2
    expect:
      excludes: [{name}.example_cache_corrupt]
"""


_PYPROJECT = """# A Python distribution that installs the {name} pack for every mldebug-rules on the machine:
#   pip install -e .          (while you edit: the installed pack is this folder)
#   pip install .             (a copy; `--rules {module}` still tests this source over the copy)
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "{project}"
version = "0.1.0"
description = "mldebug-rules pack {name}: failures that {name} knows about"
requires-python = ">=3.10"
dependencies = ["mldebug-rules"]

# mldebug-rules finds installed packs through this entry-point group: the name is the pack's, the value the
# package (folder) that holds pack.yaml.
[project.entry-points."mldebug_rules.packs"]
{name} = "{module}"

[tool.setuptools]
packages = ["{module}"]

[tool.setuptools.package-data]
{module} = ["*.yaml"]
"""


def _check_name(name: str, what: str) -> None:
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
        raise UsageError(
            f"{what} {name!r}: use lowercase letters, digits and underscores, starting with a letter"
        )


def _empty_target(target: Path) -> None:
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise UsageError(f"{target}: already exists and is not empty")


def new_pack(target: Path, name: str | None = None) -> Path:
    name = name or target.name.replace("-", "_")
    _check_name(name, "pack name")
    _empty_target(target)
    target.mkdir(parents=True, exist_ok=True)
    (target / "pack.yaml").write_text(_MANIFEST.format(name=name), encoding="utf-8")
    (target / "example.yaml").write_text(_RULES.format(name=name), encoding="utf-8")
    (target / "example.test.yaml").write_text(_TESTS.format(name=name), encoding="utf-8")
    return target


def new_distribution(project: Path, name: str) -> tuple[Path, Path]:
    """``rules new DIR --pack NAME``: DIR/pyproject.toml declaring the entry point, and the pack NAME in the
    package DIR/<dir_as_module>/ (an ``__init__.py`` beside pack.yaml, so that the entry point imports it)."""
    _check_name(name, "--pack")
    module = re.sub(r"[^a-z0-9_]", "_", project.resolve().name.lower())
    if not re.fullmatch(r"[a-z][a-z0-9_]*", module):
        module = f"{name}_pack"
    _empty_target(project)
    pack_dir = new_pack(project / module, name)
    (pack_dir / "__init__.py").write_text(
        f'"""The mldebug-rules pack {name} (YAML files beside this one)."""\n'
    )
    dist = re.sub(r"[^A-Za-z0-9.]+", "-", project.resolve().name).strip("-") or f"{name}-pack"
    (project / "pyproject.toml").write_text(
        _PYPROJECT.format(name=name, module=module, project=dist), encoding="utf-8"
    )
    return project, pack_dir
