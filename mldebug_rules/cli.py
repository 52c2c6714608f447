"""The ``mldebug-rules`` command line (CONTRACT.md). Heavy modules are imported lazily to start fast.

Exit status: 0 when the command did its job, 2 for bad usage or unusable input (one line on stderr, never a
traceback), 1 only for an internal error (and for ``gate`` when the claim is not smoke-confirmed).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import __version__
from .errors import UsageError
from .smokes.args import add_smoke_commands


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2
        self.exit(2, f"mldebug-rules: error: {message} (see --help)\n")


def _params(values: Sequence[str]) -> dict[str, str]:
    out = {}
    for v in values:
        if "=" not in v:
            raise UsageError(f"--param {v!r}: expected NAME=VALUE")
        k, _, val = v.partition("=")
        out[k.strip()] = val.strip()
    return out


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="mldebug-rules",
        description="Why is this training run failing? Evidence first.",
        epilog="typical use:\n"
        "  mldebug-rules diagnose RUN_DIR\n"
        "  mldebug-rules smoke plan RUN_DIR\n"
        "  mldebug-rules smoke run RUN_DIR --hypothesis ID -- COMMAND [ARG...]\n"
        "  mldebug-rules gate RUN_DIR --claim ID\n"
        "exit status: 0 done, 2 bad usage or unusable input, 1 internal error. See docs/cli.md.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"mldebug-rules {__version__}")
    sub = p.add_subparsers(dest="command", parser_class=_Parser)

    d = sub.add_parser(
        "diagnose",
        help="diagnose run directories, logs and bundles",
        description="Probe the run, rank hypotheses with their evidence, and name the smoke that settles them. "
        "Exit 0 when a report was produced (whatever its verdict), 2 for bad usage or unusable input, 1 for "
        "an internal error. See docs/cli.md.",
    )
    d.add_argument(
        "run_dirs",
        nargs="*",
        metavar="RUN_DIR",
        help="a training run's directory (its files are found by name; see docs/cli.md)",
    )
    d.add_argument(
        "--log", action="append", default=[], metavar="FILE", help="a training log to read (repeatable)"
    )
    d.add_argument(
        "--kernel-log",
        action="append",
        default=[],
        metavar="FILE",
        help="a kernel log: dmesg, journalctl -k or kern.log output (repeatable)",
    )
    d.add_argument(
        "--bundle",
        action="append",
        default=[],
        metavar="FILE",
        help="a bundle written by `collect`; a quoted glob ('node*.mldebug.json') or several files",
    )
    d.add_argument(
        "--rules", action="append", default=[], metavar="DIR", help="an extra rule pack (repeatable)"
    )
    d.add_argument("--offline", action="store_true", help="read only what was named; never probe the machine")
    d.add_argument(
        "--format", choices=["text", "markdown", "json"], default="text", help="the report's format (text)"
    )
    d.add_argument("--out", metavar="FILE", help="write the report to FILE instead of standard output")
    d.add_argument(
        "--no-wrap",
        action="store_true",
        help="text: keep every line whole (no wrapping to the terminal's width)",
    )
    d.add_argument(
        "--param", action="append", default=[], metavar="NAME=VALUE", help="override a pack parameter"
    )
    d.add_argument(
        "--engine",
        choices=["auto", "durable", "python"],
        default=None,
        help="the rule engine (auto: durable-rules when it loads, else the built-in one)",
    )
    d.add_argument(
        "--strict", action="store_true", help="a broken third-party pack is an error, not a warning"
    )
    d.add_argument(
        "--plot", metavar="FILE.png", help="draw the curves behind the hypotheses (needs matplotlib)"
    )

    r = sub.add_parser(
        "rules",
        help="list, lint, test and scaffold rule packs",
        usage="mldebug-rules rules list [--ids|--signatures|--smokes] [PACK_DIR ...]\n"
        "       mldebug-rules rules lint|test [PACK_DIR ...] [--pack NAME] [options]\n"
        "       mldebug-rules rules new NAME [--pack PACKNAME]",
    )
    r.add_argument(
        "action",
        choices=["list", "lint", "test", "new"],
        help="list, lint or test packs; new NAME writes a pack skeleton in the folder NAME",
    )
    r.add_argument(
        "packs",
        nargs="*",
        metavar="PACK_DIR|NAME",
        help="list/lint/test: pack folders (default: the installed packs); new: the new pack's folder",
    )
    r.add_argument("--strict", action="store_true", help="a pack that fails to load is an error")
    r.add_argument(
        "--engine",
        choices=["auto", "durable", "python"],
        default=None,
        help="test: the rule engine the cases run on",
    )
    r.add_argument(
        "--pack",
        action="append",
        default=[],
        metavar="NAME",
        help="test: the packs of that name; new: the pack name, with a pyproject.toml around it",
    )
    for what in ("ids", "signatures", "smokes"):
        r.add_argument(f"--{what}", action="store_true", help=f"list: the {what} with their titles")

    add_smoke_commands(sub)  # smoke plan|run|record and gate

    c = sub.add_parser("collect", help="record the probes' facts into a replayable bundle")
    c.add_argument("run_dirs", nargs="*", metavar="RUN_DIR", help="a training run's directory")
    c.add_argument("--out", required=True, metavar="BUNDLE", help="the bundle to write (X.mldebug.json)")
    c.add_argument("--offline", action="store_true", help="read only what was named; never probe the machine")
    c.add_argument("--log", action="append", default=[], metavar="FILE", help="a training log (repeatable)")
    c.add_argument(
        "--kernel-log", action="append", default=[], metavar="FILE", help="a kernel log (repeatable)"
    )
    c.add_argument("--rules", action="append", default=[], metavar="DIR", help="an extra rule pack")

    e = sub.add_parser("eval", help="top-1/top-3 accuracy over labelled cases")
    e.add_argument("cases_dir", metavar="CASES_DIR", help="a folder of cases (run directories)")
    e.add_argument(
        "labels_dir",
        metavar="LABELS_DIR",
        nargs="?",
        help="their labels (default: each case's expected.yaml)",
    )
    e.add_argument("--rules", action="append", default=[], metavar="DIR", help="an extra rule pack")
    e.add_argument("--format", choices=["text", "json"], default="text", help="the summary's format")
    e.add_argument(
        "--subset",
        choices=["all", "non-blind", "blind", "fresh"],
        default="all",
        help="cases to evaluate (blind.txt, fresh.txt)",
    )
    e.add_argument("--show-blind", action="store_true", help="print the blind cases' per-case results too")

    m = sub.add_parser(
        "mcp", help="serve the tools to coding agents over MCP (stdio; needs the [agent] extra)"
    )
    m.add_argument("--root", action="append", default=[], metavar="DIR", help="allowed run dirs (default: .)")
    m.add_argument("--allow-run", action="store_true", help="let smoke_run run the commands it is given")
    m.add_argument(
        "--progress-every",
        type=float,
        default=5.0,
        metavar="S",
        help="seconds between smoke_run progress reports",
    )
    return p


def _request(args: argparse.Namespace) -> Any:
    from .diagnose import Request
    from .inputs import expand_paths

    run_dirs, bundles = expand_paths(args.run_dirs, getattr(args, "bundle", []))  # globs, several bundles
    return Request(
        run_dirs=run_dirs,
        logs=[Path(x) for x in getattr(args, "log", [])],
        kernel_logs=[Path(x) for x in getattr(args, "kernel_log", [])],
        bundles=bundles,
        rules_dirs=[Path(x) for x in args.rules],
        offline=bool(getattr(args, "offline", False)),
        params=_params(getattr(args, "param", [])),
        engine=getattr(args, "engine", None),
        strict=bool(getattr(args, "strict", False)),
    )


def cmd_diagnose(args: argparse.Namespace) -> int:
    from . import report as rep
    from .diagnose import diagnose

    if getattr(args, "plot", None):
        from .plot import check_target

        check_target(Path(args.plot))  # an unwritable plot file fails now, not after the diagnosis
    d = diagnose(_request(args))
    for w in d.warnings:  # raised while diagnosing (a pack disabled by the scanner's time bound)
        print(f"mldebug-rules: warning: {w}", file=sys.stderr)
    data = rep.build(d)
    if getattr(args, "plot", None):
        from .plot import PlotUnavailable, plot_diagnosis

        try:
            data["plot"] = str(plot_diagnosis(d, Path(args.plot)))
        except PlotUnavailable as e:  # the report matters more than the picture
            print(f"mldebug-rules: {e}", file=sys.stderr)
    if args.format == "json":
        text = rep.to_json(data)
    else:
        text = rep.to_text(data, markdown=args.format == "markdown")
        if args.format == "text":
            from .render import render, terminal_width, use_color

            # A terminal gets colour (unless NO_COLOR) and lines wrapped to its width; a file or a pipe gets
            # the same words with every line whole (grep, scripts, agents), as `--no-wrap` does on a terminal.
            tty = not args.out and use_color(sys.stdout, {})
            wrap = tty and not getattr(args, "no_wrap", False)
            text = render(
                text, color=tty and use_color(sys.stdout), width=terminal_width(sys.stdout), wrap=wrap
            )
    _emit(text, args.out)
    return 0


def _emit(text: str, out: str | None) -> None:
    if out:
        try:
            Path(out).write_text(text, encoding="utf-8")
        except OSError as e:
            raise UsageError(f"--out {out}: {e.strerror}") from None
    else:
        sys.stdout.write(text)


def cmd_rules(args: argparse.Namespace) -> int:
    from . import rulescmd
    from .diagnose import check_engine

    check_engine(getattr(args, "engine", None))  # durable-rules that cannot load here: bad usage, exit 2
    return rulescmd.main(args)


def cmd_smoke(args: argparse.Namespace) -> int:
    from .smokes import commands as smokecmd

    return smokecmd.main(args)


def cmd_gate(args: argparse.Namespace) -> int:
    from .smokes import commands as smokecmd

    return smokecmd.gate(args)


def cmd_collect(args: argparse.Namespace) -> int:
    try:
        from . import bundle
    except ImportError:
        raise UsageError("collect is not available in this build") from None
    return bundle.collect_main(args)


def cmd_eval(args: argparse.Namespace) -> int:
    from . import evaluate

    return evaluate.main(args)


def cmd_mcp(args: argparse.Namespace) -> int:
    from . import mcp_server

    return mcp_server.main(args)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    command: list[str] | None = None
    if argv[:1] == ["smoke"] and "--" in argv:
        cut = argv.index("--")
        argv, command = argv[:cut], argv[cut + 1 :]
    args, extra = parser.parse_known_args(argv)
    if extra and args.command == "rules" and not any(x.startswith("-") for x in extra):
        args.packs += extra  # `rules test --pack acme DIR`: folders after the options are folders too
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if command is not None:
        args.argv = command
    if not args.command:
        parser.print_help()
        return 2
    handler = {
        "diagnose": cmd_diagnose,
        "rules": cmd_rules,
        "smoke": cmd_smoke,
        "gate": cmd_gate,
        "collect": cmd_collect,
        "eval": cmd_eval,
        "mcp": cmd_mcp,
    }[args.command]
    try:
        return handler(args)
    except UsageError as e:
        print(f"mldebug-rules: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        return 130
    except Exception as e:
        from .engine.facts import FactError
        from .engine.packs import PackError
        from .engine.yamlload import YamlError

        if isinstance(e, (PackError, YamlError, FactError)):
            print(f"mldebug-rules: error: {e}", file=sys.stderr)
            return 2
        import traceback

        print(f"mldebug-rules: internal error: {type(e).__name__}: {e}", file=sys.stderr)
        if __import__("os").environ.get("MLDEBUG_DEBUG"):
            traceback.print_exc()
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
