"""kilter's values as ``kilter.v1`` messages: one function per message, no policy.

The servicer asks ``gangs``/``state`` and hands the answers here; nothing in
this module decides anything. Explain records arrive rendered
(``DecisionLog.explain``'s dicts, the very ones ``/debug/explain`` prints),
so the gRPC and HTTP views cannot disagree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
from google.protobuf.timestamp_pb2 import Timestamp

from kilter.api import placement_pb2 as pb
from kilter.gangs.decisions import Decision, Dropped
from kilter.gangs.gang_plan import GangPlan
from kilter.gangs.inventory import DomainInventory, Inventory

__all__ = ["explain_record", "gang_plan", "inventory", "plan_response", "pod_decisions", "timestamp", "watch_response"]


def timestamp(unix_s: float) -> Timestamp:
    stamp = Timestamp()
    stamp.FromNanoseconds(round(unix_s * 1e9))
    return stamp


def plan_response(plan: Mapping[str, Any]) -> pb.PlanResponse:
    """``plan`` (``gangs.planning.plan_object``'s dict) as JSON, with the fields a client branches on typed."""
    return pb.PlanResponse(
        plan_json=msgspec.json.encode(plan).decode(),
        feasible=bool(plan["feasible"]),
        waiting=bool(plan["waiting"]),
        reason=str(plan["reason"]),
        platform=str(plan["platform"] or ""),
    )


def explain_record(record: Mapping[str, Any]) -> pb.ExplainRecord:
    """One rendered ``DecisionLog`` record."""
    nodes = []
    for entry in record.get("nodes", ()):
        node = pb.NodeVerdict(node=entry["node"], verdict=entry.get("verdict", ""), reason=entry.get("reason", ""))
        if "score" in entry:
            node.score = int(entry["score"])
        nodes.append(node)
    return pb.ExplainRecord(
        verb=record["verb"], time=record["time"], summary=record["summary"], nodes=nodes, note=record.get("note", "")
    )


def gang_plan(plan: GangPlan) -> pb.GangPlanSummary:
    return pb.GangPlanSummary(
        key=plan.gang.key,
        feasible=plan.feasible,
        waiting=plan.waiting,
        description=plan.describe(),
        nodes=[s.node for s in plan.slots],
        bound=sum(1 for s in plan.slots if s.uid),
    )


def inventory(inv: Inventory) -> pb.InventoryResponse:
    platforms = [
        pb.PlatformInventory(
            platform=p.platform,
            domains=p.domains,
            nodes_healthy=p.nodes_healthy,
            nodes_total=p.nodes_total,
            gpus_free=p.gpus_free,
            gpus_total=p.gpus_total,
            free_histogram=p.free_histogram,
        )
        for p in inv.platforms
    ]
    kept, _LAST.by_row = _LAST.by_row, {}
    domains = []
    for d in inv.domains:
        last = kept.get(id(d))
        message = last[1] if last is not None and last[0] is d else _domain(d)
        _LAST.by_row[id(d)] = (d, message)
        domains.append(message)
    return pb.InventoryResponse(generation=inv.generation, platforms=platforms, domains=domains)


@dataclass
class _LastMessages:
    """The last answer's domain messages by row: ``inventory.take`` gives an unchanged domain's row again as the
    same object, so its message is not built again either (a polled inventory of a busy fleet changes a few
    domains between calls). The row is kept beside its message, so an ``id`` is never reused while it is here."""

    by_row: dict[int, tuple[DomainInventory, pb.DomainInventory]] = field(default_factory=dict)


_LAST = _LastMessages()


def _domain(d: DomainInventory) -> pb.DomainInventory:
    return pb.DomainInventory(
        domain=d.domain,
        platform=d.platform,
        block=d.block,
        nodes_healthy=d.nodes_healthy,
        nodes_total=d.nodes_total,
        gpus_free=d.gpus_free,
        gpus_total=d.gpus_total,
        spares=d.spares,
        largest_pods=d.largest_pods,
        largest_gpus_per_pod=d.largest_gpus_per_pod,
        gangs=[pb.GangOnDomain(key=g.key, pods=g.pods, gpus=g.gpus) for g in d.gangs],
        trays=d.trays,
        detached=d.detached,
        spares_used=d.spares_used,
    )


def watch_response(item: Decision | Dropped) -> pb.WatchResponse:
    if isinstance(item, Dropped):
        return pb.WatchResponse(dropped=pb.Dropped(count=item.count))
    return pb.WatchResponse(
        decision=pb.Decision(
            time=timestamp(item.at),
            source=item.source,
            verb=item.verb,
            kind=item.kind,
            namespace=item.namespace,
            name=item.name,
            outcome=item.outcome,
            message=item.message,
            node=item.node,
        )
    )


def pod_decisions(namespace: str, name: str, records: Sequence[Mapping[str, Any]]) -> pb.PodDecisions:
    return pb.PodDecisions(namespace=namespace, name=name, records=[explain_record(r) for r in records])
