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
  - id: example_error
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
  - id: example_cache_corrupt
    title: The log reports a corrupt example cache
    status: experimental
    description: ExampleFramework refuses a cache it cannot read.
    falsepositives: [none known]
    when:
      err: {{kind: log.signature, match: {{signature: example_error}}}}
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


def new_pack(target: Path) -> Path:
    name = target.name.replace("-", "_")
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
        raise UsageError(
            f"pack name {name!r}: use lowercase letters, digits and underscores, starting with a letter"
        )
    if target.exists() and any(target.iterdir()):
        raise UsageError(f"{target}: already exists and is not empty")
    target.mkdir(parents=True, exist_ok=True)
    (target / "pack.yaml").write_text(_MANIFEST.format(name=name), encoding="utf-8")
    (target / "example.yaml").write_text(_RULES.format(name=name), encoding="utf-8")
    (target / "example.test.yaml").write_text(_TESTS.format(name=name), encoding="utf-8")
    return target
