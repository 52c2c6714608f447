"""Typed facts: the only currency between collectors, the rule engine and the report.

A fact has a ``kind``, attributes validated by that kind's cerberus schema (``fact_kinds.yaml``), and
provenance: where it was read (``file:line`` or the probe's name), when (if the input says), and its origin
(``probe``, ``derived`` or ``smoke``). Big payloads such as the cited log line stay on the Python side in
``text``; the engine only sees the small typed attributes.

>>> reg = FactRegistry.load()
>>> f = reg.make("kernel.oom_kill", {"pid": 4242, "process": "python"}, file="dmesg.txt", line=7)
>>> f.source, f.attrs["anon_rss_kb"], f.origin
('dmesg.txt:7', -1, 'probe')
>>> reg.make("kernel.oom_kill", {"pid": "many"}, probe="kernel_log")
Traceback (most recent call last):
...
mldebug_rules.engine.facts.FactError: kernel.oom_kill: pid: must be of integer type
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import cerberus


ORIGINS = ("probe", "derived", "smoke")
COMMON = ("file", "line", "ts", "rank", "host")
# Reserved by durable-rules (``sid``, ``id``) or by the fact envelope.
RESERVED = frozenset({"id", "sid", "kind", "key", "origin"})
_PY_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "float": (float, int),
    "number": (float, int),
    "boolean": (bool,),
}


class FactError(ValueError):
    """A fact that does not fit its kind's schema."""


@dataclass(frozen=True)
class Fact:
    kind: str
    attrs: Mapping[str, Any]
    origin: str
    source: str
    text: str = ""
    key: str = ""
    file: str = ""
    line: int = 0
    ts: float | None = None
    rank: int | None = None
    host: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)  # Python-side payload (scrollback, series...)

    def to_engine(self) -> dict[str, Any]:
        """The flat dict the rule engine matches: attributes, provenance and the identity key."""
        d = dict(self.attrs)
        d.update(
            kind=self.kind,
            key=self.key,
            file=self.file,
            line=self.line,
            ts=-1.0 if self.ts is None else float(self.ts),
            rank=-1 if self.rank is None else self.rank,
            host=self.host,
        )
        return d

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "kind": self.kind,
            "attrs": dict(self.attrs),
            "origin": self.origin,
            "source": self.source,
            "key": self.key,
        }
        for name in ("text", "file", "line", "ts", "rank", "host"):
            value = getattr(self, name)
            if value not in ("", 0, None) or (name == "rank" and value == 0 and value is not False):
                d[name] = value
        if self.extra:
            d["extra"] = dict(self.extra)
        return d


def fact_key(kind: str, attrs: Mapping[str, Any], source: str, rank: int | None, host: str) -> str:
    blob = json.dumps([kind, attrs, source, rank, host], sort_keys=True, default=str)
    return kind + ":" + hashlib.sha1(blob.encode()).hexdigest()[:16]


class FactRegistry:
    """The fact kinds in force: the built-in schemas plus attributes that packs declare."""

    def __init__(self, spec: Mapping[str, Any]):
        self.common: dict[str, dict[str, Any]] = copy.deepcopy(dict(spec["common"]))
        self.kinds: dict[str, dict[str, Any]] = copy.deepcopy(dict(spec["kinds"]))
        self._validators: dict[str, cerberus.Validator] = {}

    @classmethod
    def load(cls) -> FactRegistry:
        from .yamlload import load_data  # a KB served from the cache never parses YAML

        return cls(load_data((Path(__file__).parent / "fact_kinds.yaml").read_text("utf-8")))

    def __getstate__(self) -> dict[str, Any]:
        # Validators are rebuilt on demand; leaving them out keeps cerberus out of a cached KB's unpickling.
        state = dict(self.__dict__)
        state["_validators"] = {}
        return state

    # --- schema queries -------------------------------------------------------------------------------
    def attrs_of(self, kind: str) -> dict[str, dict[str, Any]]:
        schema = dict(self.common)
        schema.update(self.kinds[kind]["attrs"])
        return schema

    def attr_type(self, kind: str, attr: str) -> str | None:
        if attr == "key":
            return "string"
        spec = self.attrs_of(kind).get(attr)
        return None if spec is None else spec.get("type")

    def allowed_values(self, kind: str, attr: str) -> list[Any] | None:
        spec = self.attrs_of(kind).get(attr)
        return None if spec is None else spec.get("allowed")

    def origins(self, kind: str) -> list[str]:
        return list(self.kinds[kind].get("origins", ["probe"]))

    def extend(self, kind: str, attr: str, type_name: str, owner: str) -> None:
        """Add a typed attribute to an open kind (a pack signature's ``fields``)."""
        spec = self.kinds[kind]
        if not spec.get("open_attrs"):
            raise FactError(f"{owner}: fact kind {kind} does not take extra attributes")
        if attr in RESERVED or attr in COMMON:
            raise FactError(f"{owner}: field {attr!r} is reserved")
        if type_name not in _PY_TYPES:
            raise FactError(f"{owner}: field {attr!r}: unknown type {type_name!r}")
        existing = spec["attrs"].get(attr)
        if existing is not None:
            if existing.get("type") != type_name:
                raise FactError(
                    f"{owner}: field {attr!r} is {type_name} here but {existing.get('type')} elsewhere"
                )
            return
        spec["attrs"][attr] = {"type": type_name, "default": _default_for(type_name)}
        self._validators.pop(kind, None)

    # --- validation ----------------------------------------------------------------------------------
    def _validator(self, kind: str) -> cerberus.Validator:
        v = self._validators.get(kind)
        if v is None:
            import cerberus  # only for facts the fast path defers (see _fast_normalise)

            v = cerberus.Validator(self.kinds[kind]["attrs"], purge_unknown=False)
            self._validators[kind] = v
        return v

    def normalise(self, kind: str, attrs: Mapping[str, Any]) -> dict[str, Any]:
        """Validate and fill defaults. A fast type check handles the common case; cerberus is the
        reference and writes the error message (it is ~50x slower, and logs can hold many hits)."""
        if kind not in self.kinds:
            raise FactError(f"unknown fact kind {kind!r}")
        schema = self.kinds[kind]["attrs"]
        fast = _fast_normalise(schema, attrs)
        if fast is not None:
            return fast
        v = self._validator(kind)
        if not v.validate(dict(attrs)):
            raise FactError(f"{kind}: {_flatten_errors(v.errors)}")
        out = v.document
        for name, spec in schema.items():
            if spec.get("type") == "float" and isinstance(out.get(name), int):
                out[name] = float(out[name])
            if isinstance(out.get(name), float) and not math.isfinite(out[name]):
                # Engines order numbers and NaN has no order: collectors state NaN as a trend fact instead.
                raise FactError(f"{kind}: {name}: must be a finite number")
        return out

    def make(
        self,
        kind: str,
        attrs: Mapping[str, Any],
        *,
        origin: str = "probe",
        file: str = "",
        line: int = 0,
        probe: str = "",
        text: str = "",
        ts: float | None = None,
        rank: int | None = None,
        host: str = "",
        extra: Mapping[str, Any] | None = None,
    ) -> Fact:
        if origin not in ORIGINS:
            raise FactError(f"{kind}: unknown origin {origin!r}")
        if kind not in self.kinds:
            raise FactError(f"unknown fact kind {kind!r}")
        if origin not in self.origins(kind):
            raise FactError(f"{kind}: may not have origin {origin!r} (allowed: {self.origins(kind)})")
        clean = self.normalise(kind, attrs)
        if ts is not None and (not isinstance(ts, (int, float)) or math.isnan(ts)):
            ts = None
        if file:
            source = f"{file}:{line}" if line else file
        else:
            source = probe if probe.startswith("rule:") else f"probe:{probe or kind}"
        key = fact_key(kind, clean, source, rank, host)
        return Fact(
            kind=kind,
            attrs=clean,
            origin=origin,
            source=source,
            text=text,
            key=key,
            file=file,
            line=line,
            ts=ts,
            rank=rank,
            host=host,
            extra=dict(extra or {}),
        )


def _default_for(type_name: str) -> Any:
    return {"string": "", "integer": -1, "float": -1.0, "number": -1.0, "boolean": False}[type_name]


def _fast_normalise(
    schema: Mapping[str, Mapping[str, Any]], attrs: Mapping[str, Any]
) -> dict[str, Any] | None:
    """The subset of cerberus we use (type, allowed, required, default), or None to defer to cerberus."""
    out: dict[str, Any] = {}
    for name, value in attrs.items():
        spec = schema.get(name)
        if spec is None:
            return None
        t = spec.get("type", "string")
        types = _PY_TYPES.get(t)
        if types is None or not isinstance(value, types) or (t != "boolean" and isinstance(value, bool)):
            return None
        if t in ("float", "number"):
            value = float(value)
            if math.isnan(value) or math.isinf(value):
                # Engines compare numbers; NaN breaks ordering. Collectors state NaN as a trend instead.
                return None
        allowed = spec.get("allowed")
        if allowed is not None and value not in allowed:
            return None
        out[name] = value
    for name, spec in schema.items():
        if name not in out:
            if spec.get("required"):
                return None
            if "default" in spec:
                out[name] = spec["default"]
    return out


def _flatten_errors(errors: Any, prefix: str = "") -> str:
    parts: list[str] = []
    if isinstance(errors, dict):
        for k in sorted(errors, key=str):
            parts.append(_flatten_errors(errors[k], f"{prefix}{k}"))
    elif isinstance(errors, list):
        for e in errors:
            if isinstance(e, dict):
                parts.append(_flatten_errors(e, prefix + "."))
            else:
                parts.append(f"{prefix}: {e}" if prefix else str(e))
    else:
        parts.append(f"{prefix}: {errors}")
    return "; ".join(p for p in parts if p)
