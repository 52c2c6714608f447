"""Safe YAML loading that remembers where every key and item came from, so errors read ``path:line: ...``.

>>> doc = load_text("a: 1\\nb:\\n  - x: 2\\n", "p.yaml")
>>> doc["b"][0]["x"], line_of(doc, ("b", 0, "x"))
(2, 3)
>>> load_text("a: [1, 2\\n", "bad.yaml")
Traceback (most recent call last):
...
mldebug_rules.engine.yamlload.YamlError: bad.yaml:2: while parsing a flow sequence...expected ',' or ']'...
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .safeio import Unreadable, read_capped

MAX_YAML_BYTES = 4 * 1024 * 1024  # a rule file is text a person writes; bigger means a mistake or an attack


class YamlError(ValueError):
    def __init__(self, path: str, line: int, message: str):
        self.path, self.line, self.message = path, line, message
        super().__init__(f"{path}:{line}: {message}" if line else f"{path}: {message}")


class LineDict(dict):
    """A mapping that knows the line of each of its keys."""

    lines: dict[Any, int]
    start_line: int = 0


class LineList(list):
    lines: list[int]
    start_line: int = 0


def load_data(text: str) -> Any:
    """A data file the package ships (no line marks needed), parsed with libyaml when PyYAML has it.

    yaml is imported here, on first use: a diagnosis served from the caches never imports it."""
    import yaml

    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


# libyaml's parser (CSafeLoader) when PyYAML was built with it: pack loading is most of a small diagnosis's
# start-up, and the pure-Python scanner was measured at ~3 s for the built-in packs. Both give node marks.
# Built on first use: a diagnosis whose packs come from the KB cache never imports yaml.
@functools.cache
def _loader_class() -> Any:
    import yaml

    class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
        pass

    _Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
    _Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_sequence)
    _Loader.add_constructor("tag:yaml.org,2002:bool", _construct_bool)
    return _Loader


def _construct_bool(loader: Any, node: Any) -> bool:
    """Only ``true`` and ``false`` are booleans. YAML 1.1 (PyYAML) also reads unquoted yes/no/on/off/y/n as
    booleans, so ``state: off`` compared a string attribute with False and ``on:`` became the key True: errors
    that name neither the word nor the fix. Name both, at the word's line."""
    word = str(node.value)
    if word.lower() in ("true", "false"):
        return word.lower() == "true"
    meaning = "true" if word.lower() in ("yes", "y", "on") else "false"
    raise YamlError(
        str(getattr(loader, "_mldebug_path", "<yaml>")),
        node.start_mark.line + 1,
        f"unquoted {word!r} is the boolean {meaning} in YAML 1.1; write {meaning} for a boolean,"
        f" or quote it ('{word}') for the text",
    )


def _construct_mapping(loader: Any, node: Any) -> LineDict:
    out = LineDict()
    out.lines = {}
    out.start_line = node.start_mark.line + 1
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in out:
            raise YamlError(
                str(getattr(loader, "_mldebug_path", "<yaml>")),
                key_node.start_mark.line + 1,
                f"duplicate key {key!r}",
            )
        try:
            out[key] = loader.construct_object(value_node, deep=True)
        except TypeError as e:  # unhashable key, etc.
            raise YamlError(
                getattr(loader, "_mldebug_path", "<yaml>"), key_node.start_mark.line + 1, str(e)
            ) from e
        out.lines[key] = key_node.start_mark.line + 1
    return out


def _construct_sequence(loader: Any, node: Any) -> LineList:
    out = LineList(loader.construct_object(n, deep=True) for n in node.value)
    out.lines = [n.start_mark.line + 1 for n in node.value]
    out.start_line = node.start_mark.line + 1
    return out


def load_text(text: str, path: str) -> Any:
    import yaml

    loader = _loader_class()(text)
    loader._mldebug_path = path  # type: ignore[attr-defined]
    try:
        return loader.get_single_data()
    except YamlError:
        raise
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark else 0
        msg = " ".join(x for x in (e.context, e.problem) if x)
        msg = msg.replace("\n", " ")
        raise YamlError(path, line, msg or "invalid YAML") from None
    except yaml.YAMLError as e:
        raise YamlError(path, 0, str(e).replace("\n", " ")) from None
    finally:
        loader.dispose()


def load_file(path: Path | str, display: str | None = None) -> Any:
    p = Path(path)
    shown = display or str(p)
    try:
        data = read_capped(p, MAX_YAML_BYTES)
    except Unreadable as e:
        raise YamlError(
            shown, 0, f"cannot read: {e.reason} (rule files are limited to {MAX_YAML_BYTES} bytes)"
        ) from None
    except OSError as e:
        raise YamlError(shown, 0, f"cannot read: {e.strerror or e}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise YamlError(shown, data[: e.start].count(b"\n") + 1, "not valid UTF-8") from None
    return load_text(text, shown)


def line_of(doc: Any, path: Sequence[Any]) -> int:
    """Best line for a document path: the deepest node along it that knows its line."""
    best = getattr(doc, "start_line", 0)
    node = doc
    for part in path:
        if isinstance(node, LineDict) and part in node:
            best = node.lines.get(part, best)
            node = node[part]
        elif isinstance(node, LineList) and isinstance(part, int) and 0 <= part < len(node):
            best = node.lines[part]
            node = node[part]
        else:
            break
    return best
