"""The terminal report: ``report.to_text``'s lines, coloured and wrapped to the terminal with rich.

``report.to_text`` owns the layout (one place for what the report says); this module only decides how the
lines meet a terminal:

- colour only when the output is a TTY, and never when ``NO_COLOR`` is set (https://no-color.org);
- on a terminal, wrapped to its width, continuation lines indented under the text they continue, so a
  cited ``file:line`` stays readable;
- ``--no-wrap``, a file or a pipe keep every line whole (one evidence line is one line, for grep, scripts
  and agents).

The words are the same whatever the rendering: a report saved to a file, piped, or shown on a terminal
differs only in colour codes and line breaks.

>>> print(render("mldebug-rules diagnosis: NO FAILURE found\\n  seen: train.log:3: " + "x " * 30, width=44))
mldebug-rules diagnosis: NO FAILURE found
  seen: train.log:3: x x x x x x x x x x x x
        x x x x x x x x x x x x x x x x x x
<BLANKLINE>
"""

from __future__ import annotations

import io
import os
import re
from typing import IO

from rich.console import Console
from rich.text import Text

# Continuation lines align under the text after these prefixes (leading spaces are always kept).
_HANG = re.compile(
    r"^(\s*(?:[-*] )?(?:\d+\. )?(?:\[[A-Za-z]+\] )?(?:seen: |input: |if [\w ]+: |note: |first failure: |raised by rank \d+: )?)"
)
_SCROLL = re.compile(r"^(\s{4}\s*\d+  )")  # a scrollback line: "    1042  text"
_HEAD = re.compile(r"^(#\s*)?mldebug-rules diagnosis: (?P<what>.*)$")
_SECTION = re.compile(r"^(?:#+\s*)?(?:\d\. |Scrollback\b)")
_PROBE = re.compile(r"^(\s+\w[\w-]*: )(ok|unavailable|timeout|error)\b")
_HYP = re.compile(r"^(\s+\d+\. )\[(CONFIRMED|refuted|hypothesis)\] (\S+)")
_SEEN = re.compile(r"^(\s+seen: )(\S+?:\d*)(: )")
_VERDICT_STYLE = {"CAUSE": "bold green", "UNCERTAIN": "bold yellow", "NO FAILURE": "bold green"}
_STATUS_STYLE = {"ok": "green", "unavailable": "dim", "timeout": "bold red", "error": "bold red"}
_TAG_STYLE = {"CONFIRMED": "bold green", "refuted": "dim", "hypothesis": "yellow"}


def use_color(stream: IO[str] | None, env: dict[str, str] | None = None) -> bool:
    """Colour only on a terminal, and never with NO_COLOR set (to anything, as the convention says)."""
    env = dict(os.environ) if env is None else env
    if "NO_COLOR" in env:
        return False
    try:
        return bool(stream is not None and stream.isatty())
    except (AttributeError, ValueError):
        return False


def terminal_width(stream: IO[str] | None) -> int:
    """The terminal's width when ``stream`` is one, else ``COLUMNS``, else 80 (rich's own rules)."""
    try:
        tty = bool(stream is not None and stream.isatty())
    except (AttributeError, ValueError):
        tty = False
    console = Console(file=stream if tty else io.StringIO(), force_terminal=tty)
    return max(20, console.width)


def _styled(line: str) -> Text:
    """One report line with its parts styled (the words are never changed)."""
    text = Text(line)
    m = _HEAD.match(line)
    if m:
        what = m.group("what")
        style = next((s for k, s in _VERDICT_STYLE.items() if what.startswith(k)), "bold")
        text.stylize("bold", 0, m.start("what"))
        text.stylize(style, m.start("what"))
        return text
    if _SECTION.match(line):
        text.stylize("bold underline")
        return text
    m = _PROBE.match(line)
    if m:
        text.stylize("bold", 0, m.end(1) - 2)
        text.stylize(_STATUS_STYLE[m.group(2)], m.start(2), m.end(2))
        return text
    m = _HYP.match(line)
    if m:
        text.stylize(_TAG_STYLE[m.group(2)], m.start(2) - 1, m.end(2) + 1)
        text.stylize("bold cyan", m.start(3), m.end(3))
        return text
    m = _SEEN.match(line)
    if m:
        text.stylize("cyan", m.start(2), m.end(2))
        return text
    if line.startswith(("4. Verdict:", "## 4. Verdict:")):
        text.stylize("bold")
    return text


def _indent_of(line: str) -> int:
    m = _SCROLL.match(line) or _HANG.match(line)
    return len(m.group(1)) if m else 0


def render(text: str, *, color: bool = False, width: int | None = 80, wrap: bool = True) -> str:
    """``text`` (report.to_text's output) for a terminal: styled when ``color``, each line wrapped to
    ``width`` with a hanging indent unless ``wrap`` is False."""
    out = io.StringIO()
    console = Console(
        file=out,
        force_terminal=color,
        no_color=not color,
        color_system="standard" if color else None,
        width=10_000 if not wrap or width is None else width,
        emoji=False,
        highlight=False,
        markup=False,
        soft_wrap=not wrap,
        legacy_windows=False,
    )
    for line in text.rstrip("\n").split("\n"):
        styled = _styled(line.rstrip())
        if not wrap or width is None or len(line) <= width:
            console.print(styled, no_wrap=True, overflow="ignore", crop=False)
            continue
        indent = min(_indent_of(line), width // 2)
        body = styled[indent:]
        head = styled[:indent]
        pieces = body.wrap(console, width - indent, overflow="fold")
        for i, piece in enumerate(pieces):
            prefix = head if i == 0 else Text(" " * indent)
            piece.rstrip()
            console.print(Text.assemble(prefix, piece), no_wrap=True, overflow="ignore", crop=False)
    return out.getvalue()
