"""Write docs/diagnoses.md, the diagnosis, signature and smoke ids of the built-in packs (run after changing
the taxonomy or a built-in pack; tests/test_reference_lists.py fails while the file is out of step).

python docs/gen_diagnoses.py
"""

from __future__ import annotations

from pathlib import Path

from mldebug_rules.engine.packs import load_packs

from mldebug_rules.reference import markdown


def main() -> int:
    kb = load_packs(entry_points=False)
    Path(__file__).with_name("diagnoses.md").write_text(markdown(kb), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
