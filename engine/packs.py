"""Rule packs: discovery, loading, cerberus validation and cross-reference checks.

A pack is a directory with a ``pack.yaml`` manifest and rule files (``*.yaml``; ``*.test.yaml`` files are the
pack's test cases). Every error names ``path:line`` and says what to do, like a reviewer would.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import json
import os
import pickle
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from .facts import FactError, FactRegistry
from .keys import digest
from .regex_text import class_end
from .yamlload import LineDict, YamlError, line_of, load_data, load_file

RULES_SCHEMA = "mldebug-rules/rules/v1"
MAX_PACK_FILES = 200
MAX_RULES_PER_PACK = 2000
MAX_SIGNATURES_PER_PACK = 2000
_REF = re.compile(r"^\$([a-z][a-z0-9_]*)\.([a-z_][a-z0-9_]*)$")
OPERATORS = ("eq", "neq", "gt", "gte", "lt", "lte", "in")
_ADVICE = {
    "required field": "required",
    "unknown field": "unknown field (check the spelling against docs/rule-format.md)",
}
_WHY = {
    "smoke": "since every hypothesis names the smoke that would discriminate it",
    "alternatives": "since every hypothesis lists the alternatives not yet ruled out",
    "falsepositives": "since every rule says when it may be a false positive (even 'none known')",
    "examples": "since every signature carries example lines that `rules lint` checks",
    "remediation": "since every hypothesis says what to do now, what to investigate, and when it is wrong",
}


class BlobCache(Protocol):
    """Where a load keeps what is slow to rebuild: bytes by namespace and key, and any failure is a miss.
    The engine has no cache of its own; the caller hands one in (``mldebug_rules.cache`` is one)."""

    def get(self, namespace: str, key: str) -> bytes | None: ...

    def put(self, namespace: str, key: str, payload: bytes) -> bool: ...


class PackError(ValueError):
    """A pack that cannot be used: ``path:line: message``."""

    def __init__(self, path: str, line: int, message: str):
        self.path, self.line, self.message = path, line, message
        self.pack = ""  # the pack at fault, when the error is found after merging (overrides)
        super().__init__(f"{path}:{line}: {message}" if line else f"{path}: {message}")


@dataclass(frozen=True)
class Signature:
    id: str
    pack: str
    title: str
    role: str
    streams: tuple[str, ...]
    regex: str
    ignore_case: bool
    fields: Mapping[str, str]
    hypotheses: tuple[str, ...]
    examples_match: tuple[str, ...]
    examples_no_match: tuple[str, ...]
    where: str  # path:line
    failure: bool = False  # the line says the run failed (see pack_schema.yaml)
    prefilter: str | None = None  # what the fast scanner looks for instead of `regex` (see pack_schema.yaml)


@dataclass(frozen=True)
class ProgressPattern:
    id: str
    pack: str
    regex: str
    ignore_case: bool
    examples_match: tuple[str, ...]
    examples_no_match: tuple[str, ...]
    where: str


@dataclass
class Rule:
    id: str  # pack.rule_id
    pack: str
    spec: dict[str, Any]
    where: str
    path: str
    line: int
    disabled: bool = False
    weight_override: float | None = None


@dataclass
class PackInfo:
    name: str
    version: str
    description: str
    owners: list[str]
    origin: str  # builtin, --rules, MLDEBUG_RULES_PATH, entry point <dist> <version>
    path: str
    files: list[str] = field(default_factory=list)
    tests: list[str] = field(default_factory=list)


@dataclass
class KnowledgeBase:
    registry: FactRegistry
    taxonomy: dict[str, dict[str, Any]]
    packs: list[PackInfo] = field(default_factory=list)
    signatures: list[Signature] = field(default_factory=list)
    progress: list[ProgressPattern] = field(default_factory=list)
    hypotheses: dict[str, dict[str, Any]] = field(default_factory=dict)
    smokes: dict[str, dict[str, Any]] = field(default_factory=dict)
    rules: list[Rule] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)
    param_docs: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    where: dict[str, str] = field(default_factory=dict)  # "kind:id" -> path:line, for conflict messages

    def hypothesis_info(self, hyp: str) -> dict[str, Any]:
        info = dict(self.taxonomy.get(hyp, {}))
        info.update(self.hypotheses.get(hyp, {}))
        return info

    def is_failure(self, hyp: str) -> bool:
        return bool(self.hypothesis_info(hyp).get("failure", True))


def _load_schemas() -> dict[str, Any]:
    return load_data((Path(__file__).parent / "pack_schema.yaml").read_text("utf-8"))


def load_taxonomy() -> dict[str, dict[str, Any]]:
    return dict(load_data((Path(__file__).parent / "taxonomy.yaml").read_text("utf-8"))["diagnoses"])


@functools.cache
def line_prefix() -> str:
    """The optional log prefixes that `^` in a signature skips (``line_prefixes.yaml``), as one group."""
    data = load_data((Path(__file__).parent / "line_prefixes.yaml").read_text("utf-8"))
    alts = "|".join(f"(?:{p['regex']})" for p in data["prefixes"])
    # [ \t], not \s: hyperscan scans whole buffers, where \s would carry a prefix over a newline.
    return f"(?:(?:{alts})[ \\t]*(?:\\|[ \\t]*)?){{0,2}}"


def with_line_prefixes(regex: str, loose: bool = False) -> str:
    """`regex` with each `^` (outside character classes) followed by the optional log prefixes: a signature's
    `^` means the start of the text a program printed, whatever a logger or launcher put before it.

    `loose`: followed by ``[^\n]*`` instead, the signature's prefilter (what the fast scanner looks for; the
    regex confirms each line it finds). The prefixes' alternation at every line start made hyperscan's pass
    over a 1 GiB log 40% slower; the loose form costs what the bare ``^`` did (bench/bench_signatures.py)."""
    if "^" not in regex:
        return regex
    out: list[str] = []
    i, n = 0, len(regex)
    while i < n:
        c = regex[i]
        if c == "\\":
            out.append(regex[i : i + 2])
            i += 2
            continue
        if c == "[":  # copy the class whole: its ^ negates
            j = class_end(regex, i)
            out.append(regex[i:j])
            i = j
            continue
        out.append(c)
        if c == "^":
            out.append(r"[^\n]*" if loose else line_prefix())
        i += 1
    return "".join(out)


def _prefilter_of(sig: Mapping[str, Any]) -> str | None:
    """The signature's prefilter, with its `^`s loosened; a regex with a `^` gets one made from it."""
    if sig.get("prefilter"):
        return with_line_prefixes(sig["prefilter"], loose=True)
    loose = with_line_prefixes(sig["regex"], loose=True)
    return loose if loose != sig["regex"] else None


def builtin_pack_dirs() -> list[Path]:
    # find_spec rather than importlib.resources, which imports tempfile, shutil and more at start-up.
    spec = importlib.util.find_spec("mldebug_rules.rules")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        return []
    root = Path(locations[0])
    return sorted(p for p in root.iterdir() if p.is_dir() and (p / "pack.yaml").is_file())


def entry_point_pack_dirs(cache: BlobCache | None = None) -> list[tuple[Path, str]]:
    """Packs installed as Python distributions (entry-point group ``mldebug_rules.packs``).
    An entry point names a module (or ``module:attr`` returning a path) whose directory holds pack.yaml.

    Reading every distribution's metadata costs more than the rest of a cached start-up, so with a ``cache``
    the answer is kept, keyed by the installed distributions and their entry_points.txt files."""
    if cache is None:
        return _entry_point_pack_dirs()
    key = _distributions_key()
    blob = cache.get("entry-points", key) if key else None
    if blob:
        try:
            return [(Path(p), str(o)) for p, o in json.loads(blob)]
        except (ValueError, TypeError):
            pass
    found = _entry_point_pack_dirs()
    if key:
        cache.put("entry-points", key, json.dumps([[str(p), o] for p, o in found]).encode())
    return found


def _distributions_key() -> str | None:
    parts: list[bytes | str] = ["entry-points", sys.version]
    try:
        for entry in sys.path:
            if not entry or not os.path.isdir(entry):
                continue
            parts.append(entry)
            with os.scandir(entry) as it:
                metas = sorted(e.name for e in it if e.name.endswith((".dist-info", ".egg-info")))
            for name in metas:
                ep = os.path.join(entry, name, "entry_points.txt")
                try:
                    st = os.stat(ep)
                    parts.append(f"{name}:{st.st_size}:{st.st_mtime_ns}")
                except OSError:
                    parts.append(name)
    except OSError:
        return None
    return digest(parts)


def _entry_point_pack_dirs() -> list[tuple[Path, str]]:
    from importlib.metadata import entry_points

    found: list[tuple[Path, str]] = []
    for ep in sorted(entry_points(group="mldebug_rules.packs"), key=lambda e: e.name):
        dist = getattr(ep, "dist", None)
        origin = f"entry point {ep.name}"
        if dist is not None:
            origin = f"entry point {dist.metadata['Name']} {dist.version}"
        try:
            obj = ep.load()
        except Exception as e:  # a broken third-party package must not take the tool down
            found.append((Path(f"<entry point {ep.name}: {type(e).__name__}: {e}>"), origin))
            continue
        if callable(obj):
            obj = obj()
        path = Path(obj.__file__).parent if hasattr(obj, "__file__") and obj.__file__ else Path(str(obj))
        found.append((path, origin))
    return found


def env_pack_dirs() -> list[Path]:
    raw = os.environ.get("MLDEBUG_RULES_PATH", "")
    return [Path(p) for p in raw.split(os.pathsep) if p.strip()]


def discover(
    extra: Sequence[str | Path] = (), *, entry_points: bool = True, cache: BlobCache | None = None
) -> list[tuple[Path, str]]:
    """Pack directories in precedence order: built-in, --rules, MLDEBUG_RULES_PATH, entry points."""
    dirs: list[tuple[Path, str]] = [(p, "builtin") for p in builtin_pack_dirs()]
    dirs += [(Path(p), "--rules") for p in extra]
    dirs += [(p, "MLDEBUG_RULES_PATH") for p in env_pack_dirs()]
    if entry_points:
        dirs += entry_point_pack_dirs(cache)
    return dirs


# --- loading ---------------------------------------------------------------------------------------------
def _cerberus_messages(errors: Any, path: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], str]]:
    out: list[tuple[tuple[Any, ...], str]] = []
    if isinstance(errors, dict):
        for k in sorted(errors, key=str):
            out += _cerberus_messages(errors[k], (*path, k))
    elif isinstance(errors, list):
        for e in errors:
            if isinstance(e, (dict, list)):
                out += _cerberus_messages(e, path)
            else:
                out.append((path, str(e)))
    return out


def _validate(doc: Any, schema: Mapping[str, Any], display: str) -> dict[str, Any]:
    if not isinstance(doc, dict):
        raise PackError(display, getattr(doc, "start_line", 1), "expected a mapping at the top level")
    import cerberus  # imported here: a diagnosis served from the KB cache never validates

    v = cerberus.Validator(copy.deepcopy(dict(schema)))
    if v.validate(doc):
        return v.document
    messages = _cerberus_messages(v.errors)
    fpath, msg = messages[0]
    dotted = ".".join(str(p) for p in fpath)
    last = str(fpath[-1]) if fpath else ""
    msg = _ADVICE.get(msg, msg)
    if msg == "required" and last in _WHY:
        msg = f"required, {_WHY[last]}"
    raise PackError(display, line_of(doc, fpath), f"{dotted}: {msg}")


def _display(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


@dataclass
class _RawPack:
    info: PackInfo
    files: list[tuple[str, Any, dict[str, Any]]]  # (display path, raw doc with lines, validated doc)


def read_pack(path: Path, origin: str) -> _RawPack:
    schemas = _load_schemas()
    if not path.is_dir():
        raise PackMissing(_display(path), 0, "no such pack folder (expected a folder with pack.yaml)")
    manifest_path = path / "pack.yaml"
    if not manifest_path.is_file():
        raise PackMissing(
            _display(path), 0, "no pack.yaml manifest (run `mldebug-rules rules new NAME` for a scaffold)"
        )
    disp = _display(manifest_path)
    raw_manifest = load_file(manifest_path, disp)
    manifest = _validate(raw_manifest, schemas["manifest"], disp)
    if manifest["requires"] != RULES_SCHEMA:
        raise PackError(
            disp,
            line_of(raw_manifest, ("requires",)),
            f"requires: pack needs {manifest['requires']!r} but this mldebug-rules reads {RULES_SCHEMA!r}",
        )
    info = PackInfo(
        name=manifest["pack"],
        version=manifest["version"],
        description=manifest["description"],
        owners=list(manifest["owners"]),
        origin=origin,
        path=str(path),
    )
    files: list[tuple[str, Any, dict[str, Any]]] = []
    candidates = sorted(p for p in path.rglob("*.yaml") if p.name != "pack.yaml")
    if len(candidates) > MAX_PACK_FILES:
        raise PackError(disp, 0, f"pack has {len(candidates)} YAML files; the limit is {MAX_PACK_FILES}")
    for p in candidates:
        d = _display(p)
        if p.name.endswith(".test.yaml"):
            info.tests.append(str(p))
            continue
        raw = load_file(p, d)
        if raw is None:
            continue
        files.append((d, raw, _validate(raw, schemas["file"], d)))
        info.files.append(str(p))
    return _RawPack(info, files)


def load_packs(
    extra: Sequence[str | Path] = (),
    *,
    entry_points: bool = True,
    strict: bool = True,
    builtin: bool = True,
    params: Mapping[str, Any] | None = None,
    cache: BlobCache | None = None,
) -> KnowledgeBase:
    """Load and cross-check every pack. Built-in pack errors always raise; a third-party pack's error
    raises under ``strict`` and otherwise disables only that pack, with a warning.

    With a ``cache`` (the command line hands in ``mldebug_rules.cache``), a successful load is kept, keyed by
    the bytes of every pack file, the engine's own schemas and code, and the options: parsing and validating
    the packs is most of a small diagnosis' time. Errors are never cached, so a broken pack reports the same
    way every time."""
    dirs = discover(extra, entry_points=entry_points, cache=cache)
    if not builtin:
        dirs = [d for d in dirs if d[1] != "builtin"]
    if cache is None:
        return load_pack_dirs(dirs, strict=strict, params=params)
    key = _kb_key(dirs, strict=strict, params=params)
    blob = cache.get("kb", key) if key else None
    if blob:
        try:
            kb = pickle.loads(blob)
            if isinstance(kb, KnowledgeBase):
                return kb
        except Exception:
            pass  # an entry from another version of the code: rebuild it
    kb = load_pack_dirs(dirs, strict=strict, params=params)
    if key:
        cache.put("kb", key, pickle.dumps(kb, protocol=pickle.HIGHEST_PROTOCOL))
    return kb


def _kb_key(
    dirs: Sequence[tuple[Path, str]], *, strict: bool, params: Mapping[str, Any] | None
) -> str | None:
    """A digest of everything a load reads, or None when that cannot be told (then the load is not cached).
    The engine's own code and data files stand for its version: a KB pickled by other code is never served."""
    engine_dir = Path(__file__).parent
    parts: list[bytes | str] = ["kb", sys.version, RULES_SCHEMA, repr(strict)]
    parts.append(json.dumps(dict(params or {}), sort_keys=True, default=repr))
    try:
        for f in sorted(engine_dir.glob("*.py")) + sorted(engine_dir.glob("*.yaml")):
            parts += [f.name, f.read_bytes()]
        for path, origin in dirs:
            parts += [str(path), origin]
            if not path.is_dir():
                continue
            files = sorted(path.rglob("*.yaml"))
            if len(files) > MAX_PACK_FILES:
                return None
            for f in files:
                parts += [str(f.relative_to(path)), f.read_bytes()]
    except OSError:
        return None
    return digest(parts)


class PackMissing(PackError):
    """A pack folder named on the command line that is not there, or has no pack.yaml: bad usage."""


def load_pack_dirs(
    dirs: Sequence[tuple[Path, str]], *, strict: bool, params: Mapping[str, Any] | None = None
) -> KnowledgeBase:
    """The knowledge base of these ``(folder, origin)`` pairs, as ``discover`` lists them, never cached.

    Read every pack, then assemble them; a third-party pack that fails anywhere (reading, merging, its
    overrides or its references) is left out and the others are assembled again without it, so that no pack
    can stop another one, the built-ins included. Built-in errors always raise (CI catches them)."""
    warnings: list[str] = []

    def disable(origin: str, err: Exception) -> None:
        if strict or origin == "builtin":
            raise err
        warnings.append(f"pack disabled: {err}")

    raws = _read_packs(dirs, disable)
    while True:
        kb, failed = _assemble(raws)
        if failed is None:
            break
        raw, err = failed
        disable(raw.info.origin, err)
        raws = [r for r in raws if r is not raw]
    kb.warnings = warnings
    if params:
        for name, value in params.items():
            if name not in kb.params:
                raise PackError(
                    "--param", 0, f"unknown parameter {name!r} (`mldebug-rules rules list` shows them all)"
                )
            kb.params[name] = coerce_param(kb.params[name], value, name)
    return kb


def _read_packs(dirs: Sequence[tuple[Path, str]], disable: Any) -> list[_RawPack]:
    """Each pack folder once (by real path), in precedence order. An author's explicit ``--rules DIR`` of a
    pack that is also installed (MLDEBUG_RULES_PATH, entry point) replaces the installed copy: that is how a
    pack's source is tested while an older release of it is installed."""
    raws: list[_RawPack] = []
    seen_paths: set[str] = set()
    by_name: dict[str, _RawPack] = {}
    for path, origin in dirs:
        real = os.path.realpath(path)
        if real in seen_paths:
            continue
        seen_paths.add(real)
        try:
            raw = read_pack(path, origin)
        except PackMissing as e:
            if origin == "--rules":  # a folder named on the command line: bad usage, whatever --strict says
                raise
            disable(origin, e)
            continue
        except (PackError, YamlError, FactError) as e:
            disable(origin, e)
            continue
        prev = by_name.get(raw.info.name)
        if prev is not None:
            if prev.info.origin == "--rules" and origin != "builtin":
                continue  # the source folder named on the command line wins over the installed copy
            disable(
                origin,
                PackError(
                    _display(path / "pack.yaml"),
                    1,
                    f"pack name {raw.info.name!r} is already used by {_display(Path(prev.info.path) / 'pack.yaml')}"
                    f" ({prev.info.origin})",
                ),
            )
            continue
        by_name[raw.info.name] = raw
        raws.append(raw)
    return raws


def _assemble(raws: Sequence[_RawPack]) -> tuple[KnowledgeBase, tuple[_RawPack, Exception] | None]:
    """The knowledge base of these packs, or the first pack (in load order) that cannot be part of it."""
    kb = KnowledgeBase(registry=FactRegistry.load(), taxonomy=load_taxonomy())
    for raw in raws:
        try:
            _merge(kb, raw)
        except (PackError, YamlError, FactError) as e:
            return kb, (raw, e)
    by_name = {r.info.name: r for r in raws}
    try:
        _apply_overrides(kb)
    except PackError as e:
        return kb, (by_name[e.pack], e)
    for raw in raws:
        try:
            check_references(kb, raw.info.name)
        except PackError as e:
            return kb, (raw, e)
    return kb, None


def coerce_param(current: Any, value: Any, name: str) -> Any:
    """``value`` (often a string from the command line or a test case) as the type of the parameter's current
    value; a PackError naming the parameter when it does not convert."""
    if isinstance(value, str) and not isinstance(current, str):
        try:
            if isinstance(current, bool):
                return value.lower() in ("1", "true", "yes", "on")
            return type(current)(float(value)) if isinstance(current, int) else float(value)
        except ValueError:
            raise PackError("--param", 0, f"{name}: {value!r} is not a number") from None
    return value


def _claim(kb: KnowledgeBase, kind: str, ident: str, where: str) -> None:
    k = f"{kind}:{ident}"
    if k in kb.where:
        path, _, line = where.rpartition(":")
        raise PackError(path, int(line or 0), f"{kind} {ident!r} is already defined at {kb.where[k]}")
    kb.where[k] = where


def _check_regex(
    display: str, doc: Any, path: tuple[Any, ...], spec: Mapping[str, Any], key: str = "regex"
) -> None:
    """A pattern that does not compile, matches the empty string (so every line), or uses what the scanner's
    engines do not share (look-around, back-references: hyperscan cannot compile them) fails the pack here, at
    its line, rather than the log probe later, and the same way with or without hyperscan installed."""
    flags = re.IGNORECASE if spec.get("ignore_case") else 0
    try:
        compiled = re.compile(spec[key].encode("utf-8"), flags)
        problem = "matches the empty string, so every line" if compiled.search(b"") is not None else ""
        problem = problem or _unsupported_construct(compiled)
    except (re.error, UnicodeEncodeError, OverflowError, RecursionError) as e:
        problem = f"does not compile: {e}"
    if problem:
        raise PackError(display, line_of(doc, (*path, key)), f"{spec['id']}: {key} {problem}")


def _unsupported_construct(compiled: re.Pattern[bytes]) -> str:
    try:
        from re import _parser as sre_parse  # type: ignore[attr-defined]
    except ImportError:  # Python 3.10
        import sre_parse  # type: ignore[no-redef]

    names = {
        "ASSERT": "uses a look-around ((?=...), (?!...), (?<=...) or (?<!...))",
        "ASSERT_NOT": "uses a look-around ((?=...), (?!...), (?<=...) or (?<!...))",
        "GROUPREF": "uses a back-reference (\\1, (?P=name))",
        "GROUPREF_EXISTS": "uses a conditional group ((?(1)...))",
    }

    def walk(node: Any) -> str:
        if isinstance(node, sre_parse.SubPattern):
            for op, arg in node:
                found = names.get(getattr(op, "name", str(op))) or walk(arg)
                if found:
                    return found
        elif isinstance(node, (tuple, list)):
            for x in node:
                found = walk(x)
                if found:
                    return found
        return ""

    found = walk(sre_parse.parse(compiled.pattern.decode("utf-8"), compiled.flags & ~re.IGNORECASE))
    return (
        f"{found}, which hyperscan (the fast log scanner) cannot compile; match without it" if found else ""
    )


def _merge(kb: KnowledgeBase, raw: _RawPack) -> None:
    pack = raw.info.name
    n_rules = n_sigs = 0
    for display, doc, valid in raw.files:
        for i, sig in enumerate(valid.get("signatures", [])):
            where = f"{display}:{line_of(doc, ('signatures', i))}"
            _claim(kb, "signature", sig["id"], where)
            _check_regex(display, doc, ("signatures", i), sig)
            if sig.get("prefilter"):
                _check_regex(display, doc, ("signatures", i), sig, "prefilter")
            n_sigs += 1
            for fname, ftype in sig["fields"].items():
                try:
                    kb.registry.extend("log.signature", fname, _FIELD_TYPES[ftype], where)
                except FactError as e:
                    raise PackError(
                        display, line_of(doc, ("signatures", i, "fields", fname)), str(e)
                    ) from None
            kb.signatures.append(
                Signature(
                    id=sig["id"],
                    pack=pack,
                    title=sig["title"],
                    role=sig["role"],
                    streams=tuple(sig["streams"]),
                    regex=with_line_prefixes(sig["regex"]),
                    ignore_case=sig["ignore_case"],
                    fields=dict(sig["fields"]),
                    hypotheses=tuple(sig["hypotheses"]),
                    examples_match=tuple(sig["examples"]["match"]),
                    examples_no_match=tuple(sig["examples"]["no_match"]),
                    where=where,
                    failure=bool(sig["failure"]),
                    prefilter=_prefilter_of(sig),
                )
            )
        for i, prog in enumerate(valid.get("progress", [])):
            where = f"{display}:{line_of(doc, ('progress', i))}"
            _claim(kb, "progress", prog["id"], where)
            _check_regex(display, doc, ("progress", i), prog)
            kb.progress.append(
                ProgressPattern(
                    id=prog["id"],
                    pack=pack,
                    regex=prog["regex"],
                    ignore_case=prog["ignore_case"],
                    examples_match=tuple(prog["examples"]["match"]),
                    examples_no_match=tuple(prog["examples"]["no_match"]),
                    where=where,
                )
            )
        for name, spec in valid.get("params", {}).items():
            where = f"{display}:{line_of(doc, ('params', name))}"
            _claim(kb, "param", name, where)
            kb.params[name] = spec["default"]
            kb.param_docs[name] = spec["description"]
        for hyp, spec in valid.get("hypotheses", {}).items():
            where = f"{display}:{line_of(doc, ('hypotheses', hyp))}"
            if hyp not in kb.taxonomy and not hyp.startswith(pack + "."):
                raise PackError(
                    display,
                    line_of(doc, ("hypotheses", hyp)),
                    f"hypotheses.{hyp}: not a taxonomy id; a pack's own ids are namespaced as '{pack}.{hyp}'",
                )
            _claim(kb, "hypothesis", hyp, where)
            spec = dict(spec)
            spec["where"] = where
            spec["pack"] = pack
            kb.hypotheses[hyp] = spec
        for smoke, spec in valid.get("smokes", {}).items():
            where = f"{display}:{line_of(doc, ('smokes', smoke))}"
            _claim(kb, "smoke", smoke, where)
            spec = dict(spec)
            spec["where"] = where
            spec["pack"] = pack
            kb.smokes[smoke] = spec
        for i, rule in enumerate(valid.get("rules", [])):
            line = line_of(doc, ("rules", i))
            where = f"{display}:{line}"
            rid = f"{pack}.{rule['id']}"
            _claim(kb, "rule", rid, where)
            n_rules += 1
            spec = dict(rule)
            spec["_doc"] = doc["rules"][i]
            kb.rules.append(Rule(id=rid, pack=pack, spec=spec, where=where, path=display, line=line))
        for i, ov in enumerate(valid.get("overrides", [])):
            ov = dict(ov)
            ov["_where"] = (display, line_of(doc, ("overrides", i)))
            ov["_pack"] = pack
            kb.params.setdefault("__overrides__", []).append(ov)
    if n_rules > MAX_RULES_PER_PACK or n_sigs > MAX_SIGNATURES_PER_PACK:
        raise PackError(raw.info.path, 0, "pack exceeds the size limits (rules or signatures)")
    kb.packs.append(raw.info)


_FIELD_TYPES = {"int": "integer", "float": "float", "str": "string"}


def _apply_overrides(kb: KnowledgeBase) -> None:
    overrides = kb.params.pop("__overrides__", [])
    by_id = {r.id: r for r in kb.rules}
    for ov in overrides:
        display, line = ov["_where"]
        rule = by_id.get(ov["rule"])
        if rule is None:
            err = PackError(
                display, line, f"overrides: rule {ov['rule']!r} does not exist in any loaded pack"
            )
            err.pack = ov["_pack"]
            raise err
        if ov["disable"]:
            rule.disabled = True
        if ov.get("weight") is not None:
            rule.weight_override = float(ov["weight"])


# --- cross references -------------------------------------------------------------------------------------
def known_hypotheses(kb: KnowledgeBase) -> set[str]:
    return set(kb.taxonomy) | set(kb.hypotheses)


def check_references(kb: KnowledgeBase, pack: str | None = None) -> None:
    """Names that must resolve: fact kinds, attributes, hypothesis and smoke ids, pattern references.
    With ``pack``, only that pack's definitions are checked (each pack fails on its own)."""
    hyps = known_hypotheses(kb)

    def mine(owner: str) -> bool:
        return pack is None or owner == pack

    for hyp, spec in kb.hypotheses.items():
        if not mine(spec["pack"]):
            continue
        path, _, line = spec["where"].rpartition(":")
        for alt in spec["alternatives"]:
            if alt not in hyps:
                raise PackError(
                    path,
                    int(line),
                    f"hypotheses.{hyp}.alternatives: {unknown_id(kb, alt, spec['pack'])}",
                )
        if spec["smoke"] not in kb.smokes:
            raise PackError(
                path, int(line), f"hypotheses.{hyp}.smoke: {unknown_smoke(kb, spec['smoke'], spec['pack'])}"
            )
    for smoke, spec in kb.smokes.items():
        if not mine(spec["pack"]):
            continue
        path, _, line = spec["where"].rpartition(":")
        names = list(spec["discriminates"])
        for o in spec["outcomes"].values():
            names += o.get("confirms", []) + o.get("refutes", [])
        for h in names:
            if h not in hyps:
                raise PackError(path, int(line), f"smokes.{smoke}: {unknown_id(kb, h, spec['pack'])}")
    for sig in kb.signatures:
        if not mine(sig.pack):
            continue
        path, _, line = sig.where.rpartition(":")
        for h in sig.hypotheses:
            if h not in hyps:
                raise PackError(path, int(line), f"signature {sig.id}: {unknown_id(kb, h, sig.pack)}")
    for rule in kb.rules:
        if mine(rule.pack):
            check_rule(kb, rule, hyps)


def _did_you_mean(name: str, pack: str, known: Iterable[str]) -> str:
    """A pack's own ids are namespaced: `x` in pack acme is most likely `acme.x`."""
    import difflib

    known = list(known)
    if f"{pack}.{name}" in known:
        return f" (did you mean {pack + '.' + name!r}? a pack's own ids are namespaced)"
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.8)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _unknown_kind_hint(kb: KnowledgeBase, kind: str) -> str:
    import difflib

    close = difflib.get_close_matches(kind, sorted(kb.registry.kinds), n=1, cutoff=0.75)
    if close:
        return f" (did you mean {close[0]!r}?)"
    return f" (known: {', '.join(sorted(kb.registry.kinds))})"


def unknown_id(kb: KnowledgeBase, name: str, pack: str) -> str:
    hint = _did_you_mean(name, pack, known_hypotheses(kb))
    return f"unknown diagnosis id {name!r}{hint or ' (`mldebug-rules rules list --ids` lists them)'}"


def unknown_smoke(kb: KnowledgeBase, name: str, pack: str) -> str:
    hint = _did_you_mean(name, pack, kb.smokes)
    return f"unknown smoke {name!r}{hint or ' (`mldebug-rules rules list --smokes` lists them)'}"


def _doc_line(rule: Rule, *path: Any) -> int:
    return line_of(rule.spec["_doc"], path) or rule.line


def check_rule(kb: KnowledgeBase, rule: Rule, hyps: set[str]) -> None:
    spec = rule.spec
    names: list[str] = []
    for pname, pat in spec["when"].items():
        kind = pat["kind"]
        if kind not in kb.registry.kinds:
            raise PackError(
                rule.path,
                _doc_line(rule, "when", pname, "kind"),
                f"when.{pname}.kind: unknown fact kind {kind!r}{_unknown_kind_hint(kb, kind)}",
            )
        for attr, cond in pat["match"].items():
            where = _doc_line(rule, "when", pname, "match", attr)
            atype = kb.registry.attr_type(kind, attr)
            if atype is None:
                raise PackError(
                    rule.path, where, f"when.{pname}.match.{attr}: {kind} has no attribute {attr!r}"
                )
            ops = cond if isinstance(cond, dict) else {"eq": cond}
            for op, value in ops.items():
                if op not in OPERATORS:
                    raise PackError(
                        rule.path,
                        where,
                        f"when.{pname}.match.{attr}: unknown operator {op!r} (use {', '.join(OPERATORS)})",
                    )
                values = value if op == "in" else [value]
                if op == "in" and (not isinstance(value, list) or not value):
                    raise PackError(
                        rule.path, where, f"when.{pname}.match.{attr}: 'in' needs a non-empty list"
                    )
                for v in values:
                    _check_value(kb, rule, where, pname, attr, atype, kind, v, names, op)
        for key in ("after", "after_time"):
            ref = pat.get(key)
            if ref is not None and ref not in names:
                raise PackError(
                    rule.path,
                    _doc_line(rule, "when", pname, key),
                    f"when.{pname}.{key}: {ref!r} is not an earlier pattern of this rule",
                )
        names.append(pname)
    then = spec["then"]
    if not then.get("hypothesis") and not then.get("derive"):
        raise PackError(
            rule.path, _doc_line(rule, "then"), "then: a rule must raise a hypothesis or derive facts"
        )
    hyp = then.get("hypothesis")
    if hyp is not None:
        if hyp not in hyps:
            raise PackError(
                rule.path,
                _doc_line(rule, "then", "hypothesis"),
                f"then.hypothesis: {unknown_id(kb, hyp, rule.pack)}",
            )
        if then.get("weight") is None:
            raise PackError(rule.path, _doc_line(rule, "then"), "then.weight: required with a hypothesis")
        if hyp not in kb.hypotheses:
            for need, why in (("smoke", _WHY["smoke"]), ("alternatives", _WHY["alternatives"])):
                if not then.get(need):
                    raise PackError(
                        rule.path,
                        _doc_line(rule, "then"),
                        f"then.{need}: required, {why} (no pack describes hypothesis {hyp!r})",
                    )
        for alt in then.get("alternatives", []) + then.get("explains", []):
            if alt not in hyps:
                raise PackError(rule.path, _doc_line(rule, "then"), f"then: {unknown_id(kb, alt, rule.pack)}")
        if then.get("smoke") and then["smoke"] not in kb.smokes:
            raise PackError(
                rule.path,
                _doc_line(rule, "then", "smoke"),
                f"then.smoke: {unknown_smoke(kb, then['smoke'], rule.pack)}",
            )
    for c in then.get("cite", []):
        if c not in names:
            raise PackError(
                rule.path, _doc_line(rule, "then", "cite"), f"then.cite: {c!r} is not a pattern of this rule"
            )
    for i, d in enumerate(then.get("derive", [])):
        kind = d["kind"]
        line = _doc_line(rule, "then", "derive", i)
        if kind not in kb.registry.kinds:
            raise PackError(
                rule.path, line, f"then.derive: unknown fact kind {kind!r}{_unknown_kind_hint(kb, kind)}"
            )
        if "derived" not in kb.registry.origins(kind):
            raise PackError(
                rule.path,
                line,
                f"then.derive: rules may not derive {kind!r} (only {kb.registry.origins(kind)} may)",
            )
        for attr, value in d["attrs"].items():
            atype = kb.registry.attr_type(kind, attr)
            if atype is None:
                raise PackError(rule.path, line, f"then.derive: {kind} has no attribute {attr!r}")
            _check_value(kb, rule, line, "derive", attr, atype, kind, value, names, "eq")


def _check_value(
    kb: KnowledgeBase,
    rule: Rule,
    line: int,
    pname: str,
    attr: str,
    atype: str,
    kind: str,
    value: Any,
    names: Sequence[str],
    op: str,
) -> None:
    if isinstance(value, dict) and set(value) == {"param"}:
        if value["param"] not in kb.params:
            raise PackError(
                rule.path, line, f"when.{pname}.match.{attr}: unknown parameter {value['param']!r}"
            )
        value = kb.params[value["param"]]
    if isinstance(value, str) and value.startswith("$") and not value.startswith("$$"):
        m = _REF.match(value)
        if not m:
            raise PackError(
                rule.path, line, f"{pname}.{attr}: {value!r} is not a reference like '$pattern.attribute'"
            )
        ref, rattr = m.groups()
        if ref not in names:
            raise PackError(
                rule.path, line, f"{pname}.{attr}: {value!r} refers to {ref!r}, not an earlier pattern"
            )
        rkind = rule.spec["when"][ref]["kind"]
        rtype = kb.registry.attr_type(rkind, rattr)
        if rtype is None:
            raise PackError(rule.path, line, f"{pname}.{attr}: {rkind} has no attribute {rattr!r}")
        if _family(rtype) != _family(atype):
            raise PackError(rule.path, line, f"{pname}.{attr}: compares {atype} with {rtype} ({value})")
        return
    if not _value_fits(atype, value):
        raise PackError(rule.path, line, f"{pname}.{attr}: {value!r} is not a {atype} ({kind}.{attr})")
    allowed = kb.registry.allowed_values(kind, attr)
    if allowed is not None and op in ("eq", "neq", "in") and value not in allowed:
        raise PackError(rule.path, line, f"{pname}.{attr}: {value!r} is not one of {allowed}")


def _family(t: str) -> str:
    return "number" if t in ("integer", "float", "number") else t


def _value_fits(atype: str, value: Any) -> bool:
    if atype == "boolean":
        return isinstance(value, bool)
    if atype in ("integer", "float", "number"):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, str)


def iter_rule_files(kb: KnowledgeBase) -> Iterable[str]:
    for p in kb.packs:
        yield from p.files


__all__ = [
    "BlobCache",
    "KnowledgeBase",
    "LineDict",
    "PackError",
    "PackInfo",
    "ProgressPattern",
    "Rule",
    "Signature",
    "load_pack_dirs",
    "load_packs",
]
