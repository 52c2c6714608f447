"""Write docs/runbooks.md from the built-in packs' hypothesis catalogue (run after changing a catalogue entry).

python docs/gen_runbooks.py
"""

from __future__ import annotations

from pathlib import Path

from mldebug_rules.engine.packs import load_packs


def main() -> int:
    kb = load_packs(entry_points=False)
    out = [
        "# Runbooks",
        "",
        "Generated from the hypothesis catalogue of the built-in packs by `docs/gen_runbooks.py`; edit the",
        "YAML, not this file. Each entry: what the hypothesis claims, what else could explain the evidence,",
        "the smoke that discriminates, and what to do.",
        "",
    ]
    for hid in sorted(kb.taxonomy):
        info = kb.hypothesis_info(hid)
        rem = info.get("remediation", {})
        smoke = kb.smokes.get(info.get("smoke") or "", {})
        out += [f"## {hid}", "", f"**Claim.** {kb.taxonomy[hid].get('claim', '')}", ""]
        if info.get("title"):
            out += [f"**In short.** {info['title']}.", ""]
        if info.get("alternatives"):
            out += ["**Alternatives.** " + ", ".join(f"[`{a}`](#{a})" for a in info["alternatives"]), ""]
        if smoke:
            out += [f"**Smoke** (`{info['smoke']}`). {smoke.get('description', '')}", ""]
        for key, label in (
            ("immediate", "Do now"),
            ("investigate", "Investigate"),
            ("false_positive", "False positive if"),
        ):
            if rem.get(key):
                out += [f"**{label}.** {rem[key]}", ""]
    Path(__file__).with_name("runbooks.md").write_text("\n".join(out), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
