"""The reference lists a pack author needs: diagnosis ids, signature ids and smoke ids, with their titles.

``rules list --ids|--signatures|--smokes`` prints them for the packs loaded (built-in and third-party), and
``docs/gen_diagnoses.py`` writes ``docs/diagnoses.md`` from the built-in packs with the same rows.
"""

from __future__ import annotations

from .engine.packs import KnowledgeBase


def id_rows(kb: KnowledgeBase, packs: set[str] | None = None) -> list[tuple[str, str, str]]:
    """(id, where it comes from, title): the taxonomy's ids, then the packs' namespaced ones."""
    rows = []
    for hid in sorted(kb.taxonomy):
        info = kb.hypothesis_info(hid)
        rows.append((hid, "taxonomy", str(info.get("title") or kb.taxonomy[hid].get("claim", ""))))
    for hid in sorted(set(kb.hypotheses) - set(kb.taxonomy)):
        spec = kb.hypotheses[hid]
        if packs is not None and spec["pack"] not in packs:
            continue
        rows.append((hid, f"pack {spec['pack']}", str(spec.get("title", ""))))
    return rows


def signature_rows(kb: KnowledgeBase, packs: set[str] | None = None) -> list[tuple[str, str, str, str]]:
    """(id, role, title, the diagnosis ids it points at), sorted by id."""
    return sorted(
        (s.id, s.role, s.title, ", ".join(s.hypotheses))
        for s in kb.signatures
        if packs is None or s.pack in packs
    )


def smoke_rows(kb: KnowledgeBase, packs: set[str] | None = None) -> list[tuple[str, str, str]]:
    """(id, pack, description)."""
    return sorted(
        (sid, str(spec["pack"]), str(spec["description"]).strip())
        for sid, spec in kb.smokes.items()
        if packs is None or spec["pack"] in packs
    )


def text(kb: KnowledgeBase, what: str) -> str:
    rows: list[tuple[str, ...]]
    if what == "ids":
        rows = [(i, title, f"[{src}]") for i, src, title in id_rows(kb)]
    elif what == "signatures":
        rows = [(i, f"{role:<7} {title}", f"-> {hyps}") for i, role, title, hyps in signature_rows(kb)]
    else:
        rows = [(i, desc, f"[{pack}]") for i, pack, desc in smoke_rows(kb)]
    width = max((len(r[0]) for r in rows), default=0)
    return "".join(f"{r[0]:<{width}}  {r[1]}  {r[2]}\n" for r in rows)


def _cell(s: str) -> str:
    return " ".join(s.split()).replace("|", "\\|")


def markdown(kb: KnowledgeBase) -> str:
    """docs/diagnoses.md: the built-in packs' lists (whatever else is installed where it is generated)."""
    builtin = {p.name for p in kb.packs if p.origin == "builtin"}
    out = [
        "# Diagnosis, signature and smoke ids",
        "",
        "Generated from the built-in packs by `python docs/gen_diagnoses.py` (a test keeps it in step); the same",
        "lists, with your installed packs' ids too, come from `mldebug-rules rules list --ids`, `--signatures`",
        "and `--smokes`. A pack refers to these ids as they are; its own ids are namespaced (`acme.my_id`).",
        "What each diagnosis claims, and what to do about it, is in [runbooks.md](runbooks.md); the taxonomy",
        "itself ships with the package as `mldebug_rules/engine/taxonomy.yaml` (`engine/taxonomy.yaml` here).",
        "",
        "## Diagnosis ids",
        "",
        "The ids `hypothesis`, `then.hypothesis`, `alternatives`, `explains` and a report's `hypotheses[].id`",
        "use. They keep their meaning across releases.",
        "",
        "| id | title |",
        "|---|---|",
    ]
    out += [f"| `{i}` | {_cell(title)} |" for i, _src, title in id_rows(kb, builtin)]
    out += [
        "",
        "## Signature ids",
        "",
        "Log-line signatures a rule matches with `{kind: log.signature, match: {signature: ID}}`. The role says",
        "what a line means: `root` starts a failure, `cascade` follows from another one, `context` is",
        "background (a setting, a start-up line) that refines a diagnosis without marking where a failure began.",
        "",
        "| id | role | title | points at |",
        "|---|---|---|---|",
    ]
    out += [
        f"| `{i}` | {role} | {_cell(title)} | {_cell(hyps)} |"
        for i, role, title, hyps in signature_rows(kb, builtin)
    ]
    out += ["", "## Smoke ids", "", "| id | description |", "|---|---|"]
    out += [f"| `{i}` | {_cell(desc)} |" for i, _pack, desc in smoke_rows(kb, builtin)]
    return "\n".join(out) + "\n"
