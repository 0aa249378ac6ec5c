"""The ``kilter`` command: parse, dispatch, and turn errors into one line and an exit code.

Exit codes: 0 done, 1 the answer is negative (a plan that does not fit) or
an internal error, 2 bad input (one line on stderr, never a traceback).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from kilter import __version__
from kilter.cli import admissioncheck, certs, config, demo, fleet, maintenance, plan, queues, serve, simulate
from kilter.cli.exits import guarded
from kilter.cli.parsing import StrictParser

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = StrictParser(
        prog="kilter",
        description="Topology-aware gang placement and fair-share quota for Kueue and Volcano GPU clusters.",
    )
    parser.add_argument("--version", action="version", version=f"kilter {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    plan.add_parser(sub)
    queues.add_parser(sub)
    demo.add_parser(sub)
    simulate.add_parser(sub)
    serve.add_parser(sub)
    admissioncheck.add_parser(sub)
    config.add_parser(sub)
    certs.add_parser(sub)
    fleet.add_parser(sub)
    maintenance.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # `kilter serve --config` reads which flags were given
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    func: Callable[[argparse.Namespace], int] = args.func
    return guarded(f"kilter {args.command}", lambda: func(args))


if __name__ == "__main__":
    sys.exit(main())
