"""The ``smoke plan | run | record`` and ``gate`` command lines: each subcommand owns its flags.

Kept apart from ``commands`` (which imports the whole diagnosis pipeline) so that building the parser stays
cheap at start-up.
"""

from __future__ import annotations

import argparse
from typing import Any

RUN_USAGE = (
    "mldebug-rules smoke run RUN_DIR --hypothesis ID [--baseline] [--timeout S] [--control NAME=VALUE] "
    "-- COMMAND [ARG...]"
)
RUN_EPILOG = """\
Everything after `--` is the command, run as given (no shell).

A cause needs a pair, both halves run with `smoke run` on the same RUN_DIR:
  1. the baseline: the unchanged command under the smoke's conditions (few steps, same data), with
     --baseline; it counts only if it reproduces the original failure;
  2. the change: the same program and script with the one variable the smoke changes; `passed` (exit 0,
     training progress in its own output, none of the failure's signatures) confirms, `reproduced` refutes.
`mldebug-rules smoke plan RUN_DIR` prints both commands.

example:
  mldebug-rules smoke run runs/exp42 --hypothesis gpu_oom --baseline -- python train.py --batch-size 32 --max-steps 1
  mldebug-rules smoke run runs/exp42 --hypothesis gpu_oom -- python train.py --batch-size 1 --max-steps 1
"""


def _rules(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--rules", action="append", default=[], metavar="DIR", help="an extra rule pack (repeatable)"
    )


def add_smoke_commands(sub: Any) -> None:
    """Add ``smoke`` (with its plan, run and record subcommands) and ``gate`` to the top-level subparsers."""
    s = sub.add_parser(
        "smoke",
        help="plan, run and record smokes (baseline + one-variable change)",
        description="Smokes settle hypotheses: a reproduced baseline, then a one-variable change.",
    )
    acts = s.add_subparsers(dest="action", metavar="{plan,run,record}", parser_class=type(s))
    acts.required = True

    p = acts.add_parser(
        "plan",
        help="the pair of commands (baseline, change) that would settle the leading hypotheses",
        usage="mldebug-rules smoke plan RUN_DIR [--hypothesis ID] [--cmd COMMAND] [--format text|json]",
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="the run directory to plan for")
    p.add_argument("--hypothesis", metavar="ID", help="plan for this hypothesis (default: the leads)")
    p.add_argument("--cmd", default=None, help="the run's command line, when the logs do not record it")
    p.add_argument(
        "--timeout", type=float, default=600.0, metavar="S", help="the --timeout the commands suggest"
    )
    p.add_argument("--format", choices=["text", "json"], default="text", help="the plan's format")
    _rules(p)

    r = acts.add_parser(
        "run",
        help="run one half of a pair: --baseline (unchanged command) or the change",
        usage=RUN_USAGE,
        epilog=RUN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    r.add_argument("run_dir", metavar="RUN_DIR", help="the run directory (state goes to RUN_DIR/.mldebug/)")
    r.add_argument("--hypothesis", metavar="ID", required=True, help="the hypothesis this smoke tests")
    r.add_argument(
        "--baseline",
        action="store_true",
        help="the unchanged command: it must reproduce the original failure to count",
    )
    r.add_argument(
        "--timeout", type=float, default=600.0, metavar="S", help="kill the command after S seconds (600)"
    )
    r.add_argument("--smoke", default="", help="the smoke id (default: the hypothesis's own)")
    r.add_argument(
        "--control",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a control: one variable changed against the baseline, to narrow the mechanism",
    )
    _rules(r)

    c = acts.add_parser(
        "record",
        help="record a check run by hand (counted by `gate` only with --trust-recorded)",
        usage=(
            "mldebug-rules smoke record RUN_DIR --hypothesis ID --outcome confirmed|refuted|inconclusive "
            "--note TEXT"
        ),
    )
    c.add_argument("run_dir", metavar="RUN_DIR", help="the run directory (state goes to RUN_DIR/.mldebug/)")
    c.add_argument("--hypothesis", metavar="ID", required=True, help="the hypothesis the result is about")
    c.add_argument(
        "--outcome",
        choices=["confirmed", "refuted", "inconclusive"],
        required=True,
        help="what the smoke showed",
    )
    c.add_argument("--note", required=True, help="what was run and what it showed (required)")
    c.add_argument("--smoke", default="", help="the smoke id that was run")
    _rules(c)
    # `smoke run ... -- COMMAND [ARG...]`: cli.main() cuts the argv at the first `--` before parsing, so the
    # command reaches the runner verbatim.
    s.set_defaults(argv=[])

    g = sub.add_parser(
        "gate",
        help="exit 0 only if the claimed cause is smoke-confirmed",
        usage="mldebug-rules gate RUN_DIR --claim ID [--trust-recorded]",
    )
    g.add_argument("run_dir", metavar="RUN_DIR", help="the run directory whose smokes are checked")
    g.add_argument("--claim", required=True, metavar="ID", help="the hypothesis id claimed as the cause")
    g.add_argument(
        "--trust-recorded",
        action="store_true",
        help="also count results typed in with `smoke record` (by default only smoke pairs count)",
    )
    _rules(g)
