"""``mldebug-rules rules list|lint|test|new``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .errors import UsageError


def _load(args: argparse.Namespace):
    from . import cache
    from .engine.packs import load_packs

    strict = bool(args.strict) or args.action != "list"
    args.packs = _expand_pack_folders(args.packs)
    return load_packs([Path(p) for p in args.packs], strict=strict, cache=cache)


def _expand_pack_folders(paths: list[str]) -> list[str]:
    """A folder of packs (no pack.yaml of its own, packs one level down, as `rules/`) stands for its packs:
    `rules lint rules` lints every pack in it, as a team's CI would write it."""
    out: list[str] = []
    for p in paths:
        d = Path(p)
        packs = (
            sorted(c for c in d.iterdir() if c.is_dir() and (c / "pack.yaml").is_file())
            if d.is_dir() and not (d / "pack.yaml").exists()
            else []
        )
        out.extend([str(c) for c in packs] or [p])
    return out


def cmd_list(args: argparse.Namespace) -> int:
    kb = _load(args)
    listed = [w for w in ("ids", "signatures", "smokes") if getattr(args, w, False)]
    if listed:
        from .reference import text

        for w in kb.warnings:
            print(f"warning: {w}", file=sys.stderr)
        sys.stdout.write("".join(text(kb, what) for what in listed))
        return 0
    for p in kb.packs:
        n_rules = sum(1 for r in kb.rules if r.pack == p.name)
        n_sigs = sum(1 for s in kb.signatures if s.pack == p.name)
        print(f"{p.name} {p.version}  [{p.origin}]  {p.path}")
        print(f"    {p.description.strip()}")
        print(f"    {n_rules} rules, {n_sigs} signatures, {len(p.tests)} test files")
    for w in kb.warnings:
        print(f"warning: {w}", file=sys.stderr)
    if kb.params:
        print("parameters:")
        for name in sorted(kb.params):
            print(f"    {name} = {kb.params[name]!r}: {kb.param_docs.get(name, '')}")
    return 0


def cmd_lint(args: argparse.Namespace) -> int:
    from .pack_lint import lint

    kb = _load(args)
    only = {Path(p).resolve() for p in args.packs}
    problems = lint(kb, only_packs={p.name for p in kb.packs if Path(p.path).resolve() in only} or None)
    errors = [p for p in problems if p.severity == "error"]
    for p in problems:
        print(p.format())
    n = len(kb.rules), len(kb.signatures)
    print(
        f"{len(errors)} error(s), {len(problems) - len(errors)} warning(s) in {n[0]} rules and {n[1]} signatures"
    )
    return 1 if errors else 0


def cmd_test(args: argparse.Namespace) -> int:
    from .pack_tests import run_pack_tests

    kb = _load(args)
    only = {Path(p).resolve() for p in args.packs}
    names = set(getattr(args, "pack", []) or [])
    unknown = names - {p.name for p in kb.packs}
    if unknown:
        raise UsageError(
            f"--pack {', '.join(sorted(unknown))}: no such pack loaded (`mldebug-rules rules list` shows them)"
        )
    packs = [
        p for p in kb.packs if (not only or Path(p.path).resolve() in only) and (not names or p.name in names)
    ]
    failed = total = 0
    for pack in packs:
        for result in run_pack_tests(kb, pack, engine=args.engine):
            total += 1
            if result.ok:
                print(f"PASS {result.where}: {result.name}")
            else:
                failed += 1
                print(f"FAIL {result.where}: {result.name}")
                for line in result.diff:
                    print(f"     {line}")
    print(f"{total - failed} passed, {failed} failed")
    return 1 if failed else 0


def cmd_new(args: argparse.Namespace) -> int:
    from .scaffold import new_distribution, new_pack

    if len(args.packs) != 1:
        raise UsageError("rules new NAME: give one pack name (or path)")
    pack_names = getattr(args, "pack", []) or []
    if len(pack_names) > 1:
        raise UsageError("rules new NAME --pack PACKNAME: give one pack name")
    if pack_names:
        project, path = new_distribution(Path(args.packs[0]), pack_names[0])
        print(
            f"created {project} (pyproject.toml, entry point {pack_names[0]!r}) with the pack in {path}; try:\n"
            f"  mldebug-rules rules test {path}\n  pip install -e {project} && mldebug-rules rules list"
        )
        return 0
    path = new_pack(Path(args.packs[0]))
    print(f"created {path}; try: mldebug-rules rules test {path}")
    return 0


def main(args: argparse.Namespace) -> int:
    return {"list": cmd_list, "lint": cmd_lint, "test": cmd_test, "new": cmd_new}[args.action](args)
