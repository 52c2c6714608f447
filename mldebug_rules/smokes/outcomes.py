"""A smoke's outcomes and pairs in words: the one place they are put into text, for the report (its smoke
section and smoke pairs) and for ``smoke plan`` and ``gate`` alike. What an outcome decides is the gate's
(``engine/gate.py``); this only says it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

OUTCOME_KEYS = ("confirms", "refutes", "meaning")


def outcome_table(spec: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """A smoke's declared outcomes as the report and the plan show them: by outcome name, only what each one
    confirms, refutes and means (empty entries left out), in that order.

    >>> outcome_table({"outcomes": {"timed_out": {"meaning": "inconclusive", "confirms": []},
    ...                             "passed": {"refutes": ["x"], "confirms": ["y"]}}})
    {'passed': {'confirms': ['y'], 'refutes': ['x']}, 'timed_out': {'meaning': 'inconclusive'}}
    """
    return {name: {k: o[k] for k in OUTCOME_KEYS if o.get(k)} for name, o in sorted(spec["outcomes"].items())}


def outcome_lines(outcomes: Mapping[str, Any], indent: str) -> list[str]:
    """What each outcome of a smoke's change would mean, one line each (``outcomes`` as ``outcome_table``
    gives them). A timeout decides nothing, whatever the pack says; a meaning of just "inconclusive" is not
    repeated after it.

    >>> outcome_lines({"passed": {"confirms": ["gpu_oom"]}, "timed_out": {"meaning": "inconclusive"}}, "  ")
    ['  if the change passed: confirms gpu_oom', '  if the change timed_out: decides nothing']
    """
    lines = []
    for name, o in outcomes.items():
        bits = [f"confirms {', '.join(o['confirms'])}"] if o.get("confirms") else []
        bits += [f"refutes {', '.join(o['refutes'])}"] if o.get("refutes") else []
        if name == "timed_out":
            bits = ["decides nothing"]
        meaning = f" - {o['meaning']}" if o.get("meaning") not in (None, "", "inconclusive") else ""
        lines.append(f"{indent}if the change {name}: {'; '.join(bits) or 'inconclusive'}{meaning}")
    return lines


def pair_lines(p: Mapping[str, Any], indent: str, first: str | None = None) -> list[str]:
    """A pair in text: both commands, the argv difference, both outcomes, and what it decided. ``first``
    prefixes the first line instead of ``indent`` (a markdown bullet)."""
    head = {"confirmed": "CONFIRMED"}.get(p["outcome"], p["outcome"])
    smoke = p["smoke"] or "no smoke declared"
    lines = [f"{indent if first is None else first}pair for {p['hypothesis']} ({smoke}): {head}: {p['why']}"]
    for label, half in (("baseline", p["baseline"]), ("change", p["change"])):
        if half is None:
            lines.append(f"{indent}  {label + ':':9} missing")
        else:
            why = f" ({half['reason']})" if half.get("reason") else ""
            lines.append(f"{indent}  {label + ':':9} #{half['seq']} {half['command']}")
            lines.append(f"{indent}  {'':9} -> {half['classification']}{why}")
    if p["argv_diff"]:
        lines.append(f"{indent}  argv difference: {'; '.join(p['argv_diff'])}")
    return lines
