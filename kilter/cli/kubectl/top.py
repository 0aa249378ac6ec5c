"""``kubectl kilter top``: running gangs by GPUs, with the domains each uses against the fewest it could have.

``DOMAINS`` reads ``used/min``: a gang on 3 domains that 2 could hold shows
``3/2``; the numbers come from ``gangs.running``.
"""

from __future__ import annotations

import argparse
from typing import Any

from kilter.cli import render
from kilter.cli.kubectl import output
from kilter.cli.kubectl.source import Cluster
from kilter.gangs.running import RunningGang, running_gangs
from kilter.topology.split_wait import format_duration

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "top",
        parents=[common],
        help="running gangs by GPUs, with domains used / minimum and age",
        description="Running gangs, the most GPUs first: pods, GPUs, scale-up domains used against the fewest "
        "that could hold them, and the time since the gang started.",
    )
    p.set_defaults(view=run)


def _item(g: RunningGang) -> dict[str, Any]:
    started = render.rfc3339(g.started_s) if g.started_s is not None else None
    return {
        "gang": g.key,
        "namespace": g.namespace,
        "platform": g.platform,
        "pods": g.pods,
        "gpus": g.gpus,
        "domains": list(g.domains),
        "domainsUsed": len(g.domains),
        "domainsMin": g.domains_min or None,
        "started": started,
    }


def run(args: argparse.Namespace, cluster: Cluster) -> output.Answer:
    found = running_gangs(cluster.store, namespace=cluster.namespace)
    data = {"gangs": [_item(g) for g in found]}
    columns: output.Columns = (
        *((("NAMESPACE", False),) if cluster.namespace is None else ()),
        ("GANG", False),
        ("PODS", False),
        ("GPUS", False),
        ("DOMAINS", False),
        ("AGE", False),
        ("PLATFORM", True),
        ("DOMAIN IDS", True),
    )
    rows = [
        (
            *((g.namespace,) if cluster.namespace is None else ()),
            g.key.split("/", 1)[1],
            g.pods,
            g.gpus,
            f"{len(g.domains)}/{g.domains_min or '-'}",
            format_duration(cluster.now_s - g.started_s) if g.started_s is not None else "-",
            g.platform,
            ",".join(g.domains),
        )
        for g in found
    ]
    return output.Answer(0, output.emit(args, data, output.table(args, columns, rows)))
