"""``kubectl kilter queues``: every ClusterQueue and Cohort, with what it lends, borrows and holds.

The document is ``kilter queues``' own (``cli.queues.queues_data``), so
``-o json`` is byte for byte what ``kilter queues -o json`` prints for the
same cluster at the same ``--now``. The table sums the accelerator resources
(the catalog's device resources) over flavors: the number a GPU cluster's
users ask about first.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from kilter.cli.kubectl import output
from kilter.cli.kubectl.source import Cluster
from kilter.cli.queues import queues_data
from kilter.cli.render import cell
from kilter.model.errors import InputError

__all__ = ["COLUMNS", "add_parser", "rows", "run"]

COLUMNS: output.Columns = (
    ("KIND", False),
    ("NAME", False),
    ("PARENT", False),
    ("GPU NOMINAL", False),
    ("USAGE", False),
    ("BORROWED", False),
    ("LENT", False),
    ("SHARE", False),
    ("DECAYED", False),
    ("PENDING", False),
    ("ADMITTED", False),
    ("WEIGHT", True),
    ("DOMINANT", True),
    ("RESERVING", True),
    ("ACTIVE", True),
)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "queues",
        parents=[common],
        help="every ClusterQueue and Cohort: quota, borrowing, lending, share, counts",
        description="Quota, borrowing and fair share of every ClusterQueue and Cohort (cluster-scoped: -n is "
        "ignored). -o json is kilter queues -o json.",
    )
    p.set_defaults(view=run, reads_pods=False)  # quota is Workloads' business: a snapshot's Pods go unread


def _sum(node: dict[str, Any], key: str, devices: frozenset[str]) -> float | None:
    values = [r[key] for r in node["resources"] if r["resource"] in devices and r[key] is not None]
    return sum(values) if values else None


def _decayed(node: dict[str, Any], devices: frozenset[str]) -> float | None:
    if "decayedUsage" not in node:
        return None
    usage = json.loads(node["decayedUsage"])["usage"]
    return float(sum(v for k, v in usage.items() if k.split("/", 1)[1] in devices))


def rows(data: dict[str, Any], devices: frozenset[str]) -> list[tuple[str, ...]]:
    out = []
    for kind, key in (("ClusterQueue", "clusterQueues"), ("Cohort", "cohorts")):
        for n in data[key]:
            cells = (
                kind,
                n["name"],
                n["parent"] or "-",
                _sum(n, "subtreeQuota" if kind == "Cohort" else "nominal", devices),
                _sum(n, "usage", devices),
                _sum(n, "borrowed", devices),
                _sum(n, "lent", devices),
                n["weightedShare"],
                _decayed(n, devices),
                n["pendingWorkloads"],
                n["admittedWorkloads"],
                n["weight"],
                n["dominantResource"],
                n["reservingWorkloads"],
                "yes" if n["active"] else "no",
            )
            out.append(tuple(cell(c) for c in cells))
    return out


def run(args: argparse.Namespace, cluster: Cluster) -> output.Answer:
    state = cluster.store.state()
    data = queues_data(state, now=cluster.now_s)
    if not data["clusterQueues"] and not data["cohorts"]:
        raise InputError("the cluster holds no ClusterQueues or Cohorts")
    devices = frozenset(state.catalog.device_resources)
    return output.Answer(0, output.emit(args, data, output.table(args, COLUMNS, rows(data, devices))))
