"""Controls: a smoke rerun with exactly one variable changed, paired with its baseline (the same smoke without
the change) from the same state file. What the pair shows, and the mechanism that narrows to, come from the
table in ``controls.yaml`` beside this module.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import UsageError

FAILING = ("reproduced", "failed_differently")


@cache
def controls_table() -> dict[str, Any]:
    from ..engine.yamlload import load_data  # only when a report has control runs

    text = resources.files("mldebug_rules.smokes").joinpath("controls.yaml").read_text("utf-8")
    return dict(load_data(text))


def parse_control(values: Sequence[str]) -> dict[str, str] | None:
    """``--control NAME=VALUE``: one known axis, one value; a control changes exactly one variable."""
    if not values:
        return None
    if len(values) > 1:
        raise UsageError(
            "--control: a control changes exactly one variable; give one --control per smoke run"
        )
    name, eq, value = values[0].partition("=")
    name, value = name.strip(), value.strip()
    known = controls_table()["controls"]
    if not eq or not name or not value:
        raise UsageError(f"--control {values[0]!r}: expected NAME=VALUE (names: {', '.join(sorted(known))})")
    if name not in known:
        raise UsageError(f"--control {name}: unknown control (known: {', '.join(sorted(known))})")
    return {"name": name, "value": value}


def is_baseline_for(rec: Mapping[str, Any], ctl: Mapping[str, Any]) -> bool:
    return (
        not rec.get("control")
        and rec.get("kind") == "run"
        and rec.get("hypothesis") == ctl.get("hypothesis")
        and rec.get("smoke", "") == ctl.get("smoke", "")
        and not rec.get("derived_from")
    )


def find_baseline(records: Sequence[Mapping[str, Any]], ctl: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The recorded baseline, else the latest earlier `--baseline` run of the same smoke (any run of it without
    a control when there is none), one that did not time out when there is one, else a later one."""
    by_seq = {r.get("seq"): r for r in records}
    if ctl.get("baseline_seq") in by_seq:
        return by_seq[ctl["baseline_seq"]]
    cands = [r for r in records if is_baseline_for(r, ctl)]
    marked = [
        r for r in cands if r.get("role") == "baseline"
    ]  # `smoke run --baseline`: the unchanged command
    cands = marked or cands
    decisive = [r for r in cands if r.get("classification") != "timed_out"]
    cands = decisive or cands  # a timed-out baseline compares with nothing
    before = [r for r in cands if int(r.get("seq", 0)) < int(ctl.get("seq", 0))]
    if before:
        return before[-1]
    return cands[0] if cands else None


def effect_of(baseline: str, control: str) -> str:
    if "timed_out" in (baseline, control):
        return "inconclusive"
    if baseline in FAILING and control == "passed":
        return "removes_failure"
    if baseline == "passed" and control in FAILING:
        return "introduces_failure"
    if baseline == control:
        return "no_effect"
    return "changes_failure"


def pairs(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    if not any(isinstance(r.get("control"), Mapping) for r in records):
        return []  # most reports: no control runs, so no table to parse
    table = controls_table()
    out = []
    for rec in records:
        ctl = rec.get("control")
        if not isinstance(ctl, Mapping) or rec.get("derived_from"):
            continue
        spec = table["controls"].get(ctl.get("name"), {})
        base = find_baseline(records, rec)
        entry: dict[str, Any] = {
            "hypothesis": rec.get("hypothesis"),
            "smoke": rec.get("smoke", ""),
            "control": f"{ctl.get('name')}={ctl.get('value')}",
            "axis": spec.get("axis", ctl.get("name")),
            "result": {"seq": rec.get("seq"), "classification": rec.get("classification", "")},
            "baseline": None,
        }
        if base is None or not base.get("classification") or not rec.get("classification"):
            entry["effect"] = "unpaired"
            entry["showed"] = "no baseline yet: run the smoke's unchanged command with --baseline to compare"
            entry["mechanism"] = ""
        else:
            eff = effect_of(str(base["classification"]), str(rec["classification"]))
            entry["baseline"] = {"seq": base.get("seq"), "classification": base["classification"]}
            entry["effect"] = eff
            entry["showed"] = (
                f"{table['effects'][eff]} (baseline {base['classification']}, with {entry['control']}: "
                f"{rec['classification']})"
            )
            entry["mechanism"] = spec.get("mechanisms", {}).get(eff, "")
            if rec.get("same_command_as_baseline"):
                entry["showed"] += (
                    "; its command line was the same as the baseline's, so the change was made outside it "
                    "(a config file) or not at all"
                )
        out.append(entry)
    return out


def report_section(run_dirs: Iterable[Path]) -> list[dict[str, Any]]:
    """The report's ``controls`` section: one entry per control run, its baseline and what it narrows to."""
    from .state import read_records

    out: list[dict[str, Any]] = []
    for root in run_dirs:
        try:
            out += pairs(read_records(root))
        except OSError:  # an unusable state file: the smoke_state probe reports it as evidence
            continue
    return out


def text_lines(controls: Sequence[Mapping[str, Any]] | None, markdown: bool) -> list[str]:
    if not controls:
        return []
    h = "## " if markdown else ""
    bullet = "- " if markdown else "  "
    lines = [f"{h}Controls (one variable changed against a baseline smoke)"]
    for c in controls:
        lines.append(
            f"{bullet}{c['hypothesis']} / {c['smoke'] or 'smoke'}: {c['control']} ({c['axis']}): "
            f"{c['showed']}"
        )
        if c.get("mechanism"):
            lines.append(f"{bullet}   narrows to: {c['mechanism']}")
    lines.append("")
    return lines
