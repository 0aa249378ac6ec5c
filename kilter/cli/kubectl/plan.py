"""``kubectl kilter plan -f JOB.yaml``: what ``kilter plan`` says about a job, against the live cluster.

The answer is ``cli.plan.answer``'s, so the text and the JSON are those of
``kilter plan --job JOB.yaml`` on the same cluster. Exit 1 when a gang does
not fit.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from kilter.cli import plan as plan_cmd
from kilter.cli.kubectl import output
from kilter.cli.kubectl.source import Cluster
from kilter.cli.split_wait_flags import add_split_wait_arguments, read_split_wait

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "plan",
        parents=[common],
        help="the placement plan a job would get now",
        description="Plan where every pod of a job would run on the cluster now, without changing anything "
        "(kilter plan against the live cluster). -o wide is the table.",
    )
    p.add_argument("-f", "--filename", required=True, type=Path, help="the job manifest (YAML or JSON)")
    p.add_argument("--platform", help="plan only on this platform (name or alias from the catalog)")
    add_split_wait_arguments(p)
    p.set_defaults(view=run, job=None)  # job: the manifest's object, when a running kilter answers (``served``)


def run(args: argparse.Namespace, cluster: Cluster) -> output.Answer:
    rule = read_split_wait(args)
    obj = args.job if args.job is not None else plan_cmd.read_job_object(args.filename)
    fmt = "table" if args.output in ("table", "wide") else args.output
    store = cluster.store
    text, code = plan_cmd.answer(
        store.state(),
        store.fleet(),
        obj,
        now_s=cluster.now_s,
        rule=rule,
        platform=args.platform,
        output=fmt,
        starts=cluster.expected_starts,
        window=cluster.runtime_window,
    )
    return output.Answer(code, text)
