"""``kubectl kilter pending``: pending workloads, closest to running first, each with the first reason it waits.

The reasons come from ``gangs.pending`` (the ladder: quota, topology,
admission checks), the one place that decides them; each workload's
expected start and the domains reserved for it from
``gangs.expected_starts`` (empty, with the reason, when none can be
promised). A workload its quota can never admit is promised nothing.
"""

from __future__ import annotations

import argparse
from typing import Any

from kilter.cli import render
from kilter.cli.kubectl import output
from kilter.cli.kubectl.source import Cluster
from kilter.gangs.expected_starts import ExpectedStart, ExpectedStarts
from kilter.gangs.pending import EXCEEDS_MAX_QUOTA, MISCONFIGURED, NO_MATCHING_FLAVOR, Pending, why_pending
from kilter.quota.policy import parse_time
from kilter.topology.split_wait import format_duration

__all__ = ["add_parser", "pending_data", "run", "start_of"]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "pending",
        parents=[common],
        help="pending workloads in admission order, each with the first reason it waits",
        description="Pending Kueue Workloads, those holding quota first, then in the order Kueue would consider "
        "them, with the first reason each waits: quota, topology, an admission check, or next in line.",
    )
    p.set_defaults(view=run)


def _age(now_s: float, created: str | None) -> str:
    return "-" if created is None else format_duration(now_s - parse_time(created, path="created"))


_NEVER = frozenset((MISCONFIGURED, NO_MATCHING_FLAVOR, EXCEEDS_MAX_QUOTA))


def start_of(p: Pending, starts: ExpectedStarts) -> tuple[ExpectedStart | None, str]:
    """The workload's expected start, or None and why not: what keeps it from ever starting first (``explain``
    tells the same)."""
    found = starts.of("Workload", p.namespace, p.name)
    if found is not None and found.gang.problem:
        return None, found.reason
    if p.reason in _NEVER:
        return None, f"never admitted as it is ({p.reason}): {p.message}"
    if found is None:
        return None, "kilter cannot read it as a gang"
    return (found, "") if found.reservation is not None else (None, found.reason)


def _item(p: Pending, starts: ExpectedStarts) -> dict[str, Any]:
    start, why = start_of(p, starts)
    return {
        "position": p.position,
        "namespace": p.namespace,
        "name": p.name,
        "clusterQueue": p.cluster_queue or None,
        "localQueue": p.local_queue or None,
        "priority": p.priority,
        "gpus": p.gpus,
        "created": render.rfc3339(p.created_s) if p.created_s else None,
        "reason": p.reason,
        "message": p.message,
        "shortfall": [
            {
                "flavor": s.flavor,
                "resource": s.resource,
                "requested": s.requested,
                "available": s.available,
                "over": s.over,
            }
            for s in p.shortfall
        ],
        "preempts": list(p.preempts),
        "domains": list(p.plan.domains) if p.plan is not None else [],
        "domainsMin": p.domains_min or None,
        "waitUntil": render.rfc3339(p.wait_until_s) if p.wait_until_s is not None else None,
        "admissionChecks": dict(p.checks),
        "expectedStart": render.rfc3339(start.reservation.start_s) if start and start.reservation else None,
        "expectedStartReason": start.reason if start else why,
        "reservedDomains": list(start.domains) if start else [],
        "reservationKept": start is not None and start.reservation in starts.kept,  # every door keeps it
    }


def pending_data(cluster: Cluster) -> dict[str, Any]:
    """``{"pending": [...]}``: every pending Workload in the namespace scope, positions counted cluster-wide."""
    store = cluster.store
    starts = cluster.expected_starts()
    found = why_pending(store.state(), store.fleet(), now_s=cluster.now_s, window=cluster.runtime_window)
    return {"pending": [_item(p, starts) for p in found if cluster.in_scope(p.namespace)]}


def run(args: argparse.Namespace, cluster: Cluster) -> output.Answer:
    data = pending_data(cluster)
    columns: output.Columns = (
        ("#", False),
        *((("NAMESPACE", False),) if cluster.namespace is None else ()),
        ("WORKLOAD", False),
        ("CLUSTERQUEUE", False),
        ("GPUS", False),
        ("AGE", False),
        ("REASON", False),
        ("MESSAGE", False),
        ("START", False),
        ("PRIORITY", True),
        ("LOCALQUEUE", True),
        ("DOMAINS", True),
    )
    fleet = cluster.store.fleet()
    rows = [
        (
            p["position"],
            *((p["namespace"],) if cluster.namespace is None else ()),
            p["name"],
            p["clusterQueue"] or "-",
            p["gpus"],
            _age(cluster.now_s, p["created"]),
            p["reason"],
            p["message"],
            p["expectedStart"] or "-",
            p["priority"],
            p["localQueue"] or "-",
            ",".join(fleet.domain_name(d) for d in p["reservedDomains"]) or "-",
        )
        for p in data["pending"]
    ]
    return output.Answer(0, output.emit(args, data, output.table(args, columns, rows)))
