"""``kubectl kilter``: the kubectl plugin's entry point (the ``kubectl-kilter`` console script is ``run``).

kubectl runs ``kubectl-kilter`` from PATH for ``kubectl kilter ...`` and
passes every word after ``kilter`` through. Exit codes: 0 done, 1 the
answer is negative (nothing of that name, a job that does not fit), 2 bad
input (one line on stderr, never a traceback).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn, cast

from kilter import __version__
from kilter.cli import render
from kilter.cli.exits import guarded
from kilter.cli.kubectl import completion, domains, explain, pending, plan, queues, remote, source, top
from kilter.cli.kubectl.output import Answer
from kilter.cli.parsing import StrictParser

__all__ = ["PROG", "build_parser", "complete_main", "main", "run"]

PROG = "kubectl kilter"


class _Parser(StrictParser):
    """argparse whose usage errors are one line and exit 2, as every other bad input."""

    def error(self, message: str) -> None:  # type: ignore[override]
        print(f"{PROG}: {message}", file=sys.stderr)
        raise SystemExit(2)


def build_parser(parser_class: type[argparse.ArgumentParser] = _Parser) -> argparse.ArgumentParser:
    """The plugin's command line; ``served`` passes a class whose errors raise rather than print and exit."""
    parser = parser_class(
        prog=PROG,
        description="Why is my job pending? Quota, topology and placement of a Kueue/Volcano GPU cluster, "
        "read from the cluster (kubeconfig) or a snapshot file.",
    )
    parser.add_argument("--version", action="version", version=f"kubectl-kilter {__version__}")
    sub = cast(
        "argparse._SubParsersAction[argparse.ArgumentParser]",
        parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=parser_class),
    )
    common = source.common_options()
    queues.add_parser(sub, common)
    pending.add_parser(sub, common)
    explain.add_parser(sub, common)
    domains.add_parser(sub, common)
    plan.add_parser(sub, common)
    top.add_parser(sub, common)
    completion.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args = parser.parse_args(words)
    except SystemExit as exc:
        return int(exc.code or 0)
    if not getattr(args, "command", None):
        parser.print_help(sys.stderr)
        return 2

    def answer() -> int:
        if getattr(args, "offline", None) is not None:
            code: int = args.offline(args, parser)
            return code
        if remote.asked(args):
            said = remote.answer(args, words)
        else:
            view: Callable[[argparse.Namespace, source.Cluster], Answer] = args.view
            said = view(args, source.load(args))
        print(render.printable(said.text), end="")  # the cluster's words reach a terminal: no escape sequences
        if said.error:
            print(render.printable(said.error), file=sys.stderr)
        return said.code

    return guarded(f"{PROG} {args.command}", answer)


def run() -> NoReturn:
    """The console script: ``main``, then out at once. The objects of a 150,000-pod reading are all alive at the
    end; freeing them one by one at interpreter exit would cost as long as a view's own work (~0.4 s), and
    nothing is left to do with them once the answer is written."""
    code = main()
    with contextlib.suppress(BrokenPipeError):
        sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def complete_main(argv: Sequence[str] | None = None) -> int:
    """``kubectl_complete-kilter``: kubectl's plugin completion protocol (``completion``)."""
    words = list(sys.argv[1:] if argv is None else argv) or [""]
    found, directive = completion.candidates(completion.spec(build_parser()), words)
    print("\n".join([*found, f":{directive}"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
