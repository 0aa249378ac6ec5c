"""``kilter queues``: quota, borrowing and fair-share state of every ClusterQueue and Cohort.

A cohort cycle is no error here: Kueue accepts the objects and marks what is
under the cycle inactive, so the command shows those ClusterQueues with
``active: false`` and Kueue's reason and message (``inactive``), names them
on stderr, and exits 0. A spec Kueue's webhooks would refuse still exits 2.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Mapping
from typing import Any

from kilter.cli import render, sources
from kilter.model.errors import InputError
from kilter.quota import amount, decay
from kilter.quota.admit import AdmissionDecision, admission_order, by_cluster_queue
from kilter.quota.afs import AdmissionFairSharingConfig, local_queue_usage
from kilter.quota.config import FairSharingConfig
from kilter.quota.policy import parse_duration
from kilter.quota.status import QuotaNodeStatus, apply_usage, tree_status
from kilter.quota.tree import build_tree
from kilter.quota.usage import Ledger, admitted_keys, workload_counts, workload_infos
from kilter.state import cluster
from kilter.state.cluster import ClusterState

__all__ = ["add_parser", "queues_data", "run"]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "queues",
        help="quota, borrowing and fair share of every ClusterQueue and Cohort",
        description="Show what Kueue computes for each ClusterQueue and Cohort, and kilter's decayed shares.",
    )
    sources.add_source_arguments(p, nodes=False)
    p.add_argument("--now", help="evaluate decayed usage at this RFC 3339 time (default: the current time)")
    p.add_argument(
        "--pending",
        action="store_true",
        help="also show the order in which pending workloads would be considered, and preemptions",
    )
    p.add_argument(
        "--fair-sharing",
        choices=("on", "off"),
        default="on",
        help="order and preempt as Kueue does with fair sharing on (default) or off",
    )
    p.add_argument(
        "--strategies",
        default=",".join(FairSharingConfig().strategies),
        help="fair-sharing preemption strategies, comma-separated, as in Kueue's config",
    )
    p.add_argument(
        "--no-prioritize-non-borrowing",
        action="store_true",
        help="turn off the FairSharingPrioritizeNonBorrowing gate (Kueue before v0.17)",
    )
    p.add_argument(
        "--no-preempt-within-nominal",
        action="store_true",
        help="turn off the FairSharingPreemptWithinNominal gate (Kueue before v0.17)",
    )
    p.add_argument(
        "--afs-half-life",
        metavar="DURATION",
        help="admission fair sharing's usageHalfLifeTime (e.g. 168h): orders the LocalQueues of ClusterQueues "
        "with admissionMode UsageBasedAdmissionFairSharing by decayed usage",
    )
    p.add_argument(
        "--afs-weight",
        action="append",
        default=[],
        metavar="RESOURCE=WEIGHT",
        help="an admission fair sharing resourceWeights entry (repeatable)",
    )
    p.add_argument("-o", "--output", choices=("table", "json", "yaml"), default="table")
    p.set_defaults(func=run)


def _number(resource: str, value: int | None) -> int | float | None:
    return None if value is None else amount.display(resource, value)


def _node_dict(s: QuotaNodeStatus, *, cohort: bool, counts: Mapping[str, int]) -> dict[str, Any]:
    resources = []
    for r in s.resources:
        row: dict[str, Any] = {
            "flavor": r.flavor,
            "resource": r.resource,
            "nominal": _number(r.resource, r.nominal),
            "borrowingLimit": _number(r.resource, r.borrowing_limit),
            "lendingLimit": _number(r.resource, r.lending_limit),
            "usage": _number(r.resource, r.usage),
            "available": _number(r.resource, r.available),
            "potentialAvailable": _number(r.resource, r.potential_available),
            "borrowed": _number(r.resource, r.borrowed),
            "lent": _number(r.resource, r.lent),
        }
        if cohort:
            row["subtreeQuota"] = _number(r.resource, r.subtree_quota)
        resources.append(row)
    out: dict[str, Any] = {
        "name": s.name,
        "parent": s.parent,
        "weight": s.weight,
        "weightedShare": s.drs.weighted_share,
        "roundedWeightedShare": s.drs.rounded_weighted_share,
        "dominantResource": s.drs.dominant_resource or None,
        "borrowing": s.borrowing,
        "active": s.active,
        "resources": resources,
        **counts,
    }
    if not s.active:
        out["inactive"] = {"reason": s.inactive_reason, "message": s.inactive_message}
    if s.decay is not None:
        out["decayedUsage"] = decay.to_annotation(s.decay)
    return out


def _decision_dict(d: AdmissionDecision) -> dict[str, Any]:
    return {
        "position": d.position,
        "cycle": d.cycle,
        "workload": d.workload.key,
        "clusterQueue": d.workload.cluster_queue or None,
        "priority": d.workload.priority,
        "outcome": d.outcome,
        "weightedShare": d.share.weighted_share if d.share else None,
        "flavors": dict(d.flavors),
        "reason": d.reason or None,
        "preempts": [
            {"workload": t.workload.key, "clusterQueue": t.workload.cluster_queue, "reason": t.reason}
            for t in (d.preemption.targets if d.preemption else ())
        ],
    }


def queues_data(
    state: ClusterState,
    *,
    now: float,
    pending: bool = False,
    config: FairSharingConfig | None = None,
    afs: AdmissionFairSharingConfig | None = None,
) -> dict[str, Any]:
    """The JSON document of ``kilter queues``: {"clusterQueues": [...], "cohorts": [...]} (+ "pending")."""
    tree = build_tree(state.cluster_queues, state.cohorts)
    tree.raise_problems(cycles=False)
    infos = workload_infos(state.workloads, state.local_queues, state.priority_classes)
    apply_usage(tree, Ledger(infos, sorted(tree.cluster_queues)).per_cluster_queue())
    cqs, cohorts = tree_status(tree, now=now)
    counts = workload_counts(tree, infos, admitted_keys(state.workloads))
    data: dict[str, Any] = {
        "clusterQueues": [_node_dict(s, cohort=False, counts=counts[(s.kind, s.name)]) for s in cqs],
        "cohorts": [_node_dict(s, cohort=True, counts=counts[(s.kind, s.name)]) for s in cohorts],
    }
    lq_usage = None
    if afs is not None:
        lq_usage = local_queue_usage(tree, state.local_queues, [i for i in infos if i.reserved], afs, now=now)
        data["localQueues"] = [
            {"namespace": ns, "name": name, "admissionFairSharingUsage": usage}
            for (ns, name), usage in sorted(lq_usage.items())
        ]
    if pending:
        decisions = admission_order(
            tree,
            [i for i in infos if not i.reserved],
            by_cluster_queue(infos),
            config=config or FairSharingConfig(),
            now=now,
            lq_usage=lq_usage,
        )
        data["pending"] = [_decision_dict(d) for d in decisions]
    return data


def _afs(args: argparse.Namespace) -> AdmissionFairSharingConfig | None:
    if args.afs_half_life is None:
        if args.afs_weight:
            raise InputError("--afs-weight needs --afs-half-life")
        return None
    weights: dict[str, float] = {}
    for item in args.afs_weight:
        resource, sep, value = item.partition("=")
        try:
            weight = float(value)
        except ValueError:
            weight = -1.0
        if not sep or not resource or not 0 <= weight < math.inf:
            raise InputError(f"--afs-weight {item!r} must be RESOURCE=WEIGHT with a finite weight >= 0")
        weights[resource] = weight
    return AdmissionFairSharingConfig(
        parse_duration(args.afs_half_life, path="--afs-half-life"), resource_weights=weights
    )


def _config(args: argparse.Namespace) -> FairSharingConfig:
    strategies = tuple(s.strip() for s in args.strategies.split(",") if s.strip())
    try:
        return FairSharingConfig(
            enabled=args.fair_sharing == "on",
            strategies=strategies,
            prioritize_non_borrowing=not args.no_prioritize_non_borrowing,
            preempt_within_nominal=not args.no_preempt_within_nominal,
        )
    except ValueError as exc:
        raise InputError(f"--strategies: {exc}") from None


def render_table(data: dict[str, Any]) -> str:
    nodes = [
        (
            kind,
            n["name"],
            n["parent"] or "-",
            render.cell(n["weight"]),
            render.cell(n["weightedShare"]),
            n["dominantResource"] or "-",
            "yes" if n["borrowing"] else "no",
        )
        for kind, key in (("ClusterQueue", "clusterQueues"), ("Cohort", "cohorts"))
        for n in data[key]
    ]
    out = render.table(("KIND", "NAME", "PARENT", "WEIGHT", "SHARE", "DOMINANT", "BORROWING"), nodes)
    inactive = [
        (kind, n["name"], n["inactive"]["reason"], n["inactive"]["message"])
        for kind, key in (("ClusterQueue", "clusterQueues"), ("Cohort", "cohorts"))
        for n in data[key]
        if "inactive" in n
    ]
    if inactive:
        out += "\n" + render.table(("KIND", "INACTIVE", "REASON", "MESSAGE"), inactive)
    rows = [
        (
            n["name"],
            f"{r['flavor']}/{r['resource']}",
            render.cell(r["nominal"]),
            render.cell(r["borrowingLimit"]),
            render.cell(r["lendingLimit"]),
            render.cell(r["usage"]),
            render.cell(r["available"]),
            render.cell(r["potentialAvailable"]),
        )
        for n in data["clusterQueues"]
        for r in n["resources"]
    ]
    if rows:
        out += "\n" + render.table(
            ("CLUSTERQUEUE", "FLAVOR/RESOURCE", "NOMINAL", "BORROW", "LEND", "USAGE", "AVAILABLE", "POTENTIAL"), rows
        )
    if "pending" in data:
        pend = [
            (
                p["position"],
                p["cycle"],
                p["workload"],
                p["clusterQueue"] or "-",
                p["priority"],
                render.cell(p["weightedShare"]),
                p["outcome"],
                "; ".join(f"{t['workload']} ({t['reason']})" for t in p["preempts"]) or p["reason"] or "",
            )
            for p in data["pending"]
        ]
        out += "\n" + render.table(
            ("#", "CYCLE", "WORKLOAD", "CLUSTERQUEUE", "PRIORITY", "SHARE", "OUTCOME", "DETAIL"), pend
        )
    return out


def run(args: argparse.Namespace) -> int:
    state = sources.load_state(args, skip=cluster.NODES_AND_PODS)  # quota is Workloads' business: no Pod is read
    now = sources.now_of(args)
    data = queues_data(state, now=now, pending=args.pending, config=_config(args), afs=_afs(args))
    if not data["clusterQueues"] and not data["cohorts"]:
        raise InputError("the snapshot holds no ClusterQueues or Cohorts")
    sources.print_warnings(state)
    for n in data["clusterQueues"]:
        if "inactive" in n:
            print(f"warning: ClusterQueue {n['name']} is inactive: {n['inactive']['message']}", file=sys.stderr)
    print(render_table(data) if args.output == "table" else render.dump(data, args.output), end="")
    return 0
