"""The plan a job would get, as ``kilter plan -o json`` prints it, the gRPC ``Plan`` answers it and the
AdmissionCheck and the pending view judge it.

One implementation for every caller (``plan_gangs``): the command plans on a
fleet of its own, the servers on their live fleet. A job of several gangs books each
feasible gang before the next is planned (they will run side by side); with
``keep=False`` those bookings are undone before returning, so that a
server's what-if leaves its fleet as it found it (it runs on the event-loop
thread, so no verb sees the fleet in between).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kilter.gangs.waits import NO_WAIT, Waits
from kilter.model.core_v1 import PodTemplateSpec
from kilter.model.jobs import JobSpec, PodSetSpec
from kilter.topology.fleet import Fleet
from kilter.topology.plan import GangRequest, Plan, commit, gang_request, plan_gang
from kilter.topology.split_wait import WaitDecision

__all__ = ["GangPlanned", "Wait", "joined", "plan_gangs", "plan_job", "plan_job_waits", "plan_object", "plan_to_dict"]

Wait = Callable[[Sequence[PodSetSpec], GangRequest, Plan], WaitDecision]  # one gang's pod sets, request and plan


def plan_job(fleet: Fleet, job: JobSpec, *, platform: str | None = None) -> list[Plan]:
    """Plan each gang of the job in turn; a feasible gang's pods are booked before the next."""
    return [plan for plan, _ in plan_job_waits(fleet, job, platform=platform)]


def plan_job_waits(
    fleet: Fleet, job: JobSpec, *, platform: str | None = None, wait: Wait | None = None, keep: bool = True
) -> list[tuple[Plan, WaitDecision]]:
    """``plan_job`` with each gang's wait for fewer domains (``plan_gangs``)."""
    return [(g.plan, g.wait) for g in plan_gangs(fleet, job, platform=platform, wait=wait, keep=keep)]


@dataclass(frozen=True)
class GangPlanned:
    """One gang of a job as planned: what it asked, its plan, and whether it waits for fewer domains."""

    pod_sets: tuple[PodSetSpec, ...]
    request: GangRequest
    plan: Plan
    wait: WaitDecision


def plan_gangs(
    fleet: Fleet,
    job: JobSpec,
    *,
    name: str | None = None,
    platform: str | None = None,
    wait: Wait | None = None,
    keep: bool = True,
    steer: Callable[[GangRequest, Plan], Plan] | None = None,
) -> list[GangPlanned]:
    """Every gang of ``job`` planned in turn, each gang's wait for fewer domains judged by ``wait`` (None: no gang
    waits). A feasible gang of a job of several that does not wait is booked before the next is planned (they will
    run side by side); a gang that waits holds nothing, so the next gang is planned as if it were not there.
    ``keep=False`` undoes those bookings before returning (a what-if on a fleet someone else reads). Gangs are
    named ``name`` (default the job's), ``<name>/group-<i>`` when there are several. InputError (``NoGpus`` when
    a gang asks for no GPUs) when a gang cannot be read as a request. ``steer`` may move a feasible plan around the
    kept reservations, or make it wait for them (``Kept.steer``), before its split wait is judged."""
    base = job.name if name is None else name
    out: list[GangPlanned] = []
    booked: list[Plan] = []
    try:
        for i, pod_sets in enumerate(job.gangs):
            request = gang_request(
                base if len(job.gangs) == 1 else f"{base}/group-{i}", pod_sets, fleet.catalog, platform=platform
            )
            plan = plan_gang(fleet, request)
            if steer is not None and plan.feasible:
                plan = steer(request, plan)
            decision = wait(pod_sets, request, plan) if wait is not None else NO_WAIT
            if plan.feasible and not decision.wait and len(job.gangs) > 1:
                commit(fleet, plan)
                booked.append(plan)
            out.append(GangPlanned(tuple(pod_sets), request, plan, decision))
    finally:
        if not keep:
            for plan in reversed(booked):
                for node, gpus in zip(plan.node_indices, plan.gpus, strict=True):
                    fleet.bitmap.release(node, gpus)
    return out


def joined(name: str, plans: Sequence[Plan]) -> Plan:
    """The plans of a job's gangs as one: when each is feasible, their pod sets (and pods) gang after gang in
    order and their reasons joined; else infeasible for the reasons of those that are. One gang's plan comes back
    as it is."""
    if len(plans) == 1:
        return plans[0]
    ignored = tuple(n for p in plans for n in p.ignored)
    if not all(p.feasible for p in plans):
        return Plan(False, "; ".join(p.reason for p in plans if not p.feasible), name, ignored=ignored)
    return Plan(
        True,
        "; ".join(p.reason for p in plans),
        name,
        next((p.platform for p in plans if p.platform), None),
        tuple(ps for p in plans for ps in p.pod_sets),
        tuple(sorted({d for p in plans for d in p.domains})),
        tuple(sorted({g for p in plans for g in p.groups})),
        next((p.group_level for p in plans if p.group_level), None),
        ignored,
        tuple(n for p in plans for n in p.node_indices),
        tuple(g for p in plans for g in p.gpus),
    )


def plan_object(
    fleet: Fleet,
    obj: Mapping[str, Any],
    job: JobSpec,
    waits: Waits,
    *,
    now_s: float,
    platform: str | None = None,
    keep: bool = True,
) -> dict[str, Any]:
    """The plan dict of job object ``obj`` (``job`` is ``read_job(obj)``), each gang's wait judged by ``waits`` at
    ``now_s``; a job without ``metadata.creationTimestamp`` is taken as created at ``now_s``."""

    def wait(pod_sets: Sequence[PodSetSpec], request: GangRequest, plan: Plan) -> WaitDecision:
        templates: list[PodTemplateSpec] = [ps.template for ps in pod_sets]
        return waits.for_object(obj, templates, request, plan, fleet, created_s=now_s)

    planned = plan_job_waits(fleet, job, platform=platform, wait=wait, keep=keep)
    return plan_to_dict(job, [p for p, _ in planned], [w for _, w in planned])


def _gang_dict(plan: Plan, wait: WaitDecision = NO_WAIT) -> dict[str, Any]:
    return {
        "gang": plan.gang,
        "feasible": plan.feasible,
        "reason": plan.reason,
        "platform": plan.platform,
        "podSets": [
            {"name": ps.name, "count": ps.count, "gpusPerPod": ps.gpus_per_pod, "nodes": list(ps.nodes)}
            for ps in plan.pod_sets
        ],
        "domains": list(plan.domains),
        "blocks": list(plan.groups),
        "ignoredPodSets": list(plan.ignored),
        "waiting": wait.wait,
        "waitReason": wait.reason,
        "waitSeconds": math.ceil(wait.remaining_s) if math.isfinite(wait.remaining_s) else None,
    }


def plan_to_dict(job: JobSpec, plans: list[Plan], waits: Sequence[WaitDecision] = ()) -> dict[str, Any]:
    """The plan for programs; ``waiting`` (any gang waits for fewer domains) and each gang's ``waitReason`` and
    ``waitSeconds`` (what is left of its wait) say what ``kilter serve`` would do now."""
    decisions = list(waits) or [NO_WAIT] * len(plans)
    gangs = [_gang_dict(p, w) for p, w in zip(plans, decisions, strict=True)]
    return {
        "job": {"kind": job.kind, "name": job.name, "namespace": job.namespace},
        "feasible": all(p.feasible for p in plans),
        "waiting": any(w.wait for w in decisions),
        "reason": "; ".join(p.reason for p in plans),
        "platform": next((p.platform for p in plans if p.platform), None),
        "podSets": [ps for g in gangs for ps in g["podSets"]],
        "domains": sorted({d for p in plans for d in p.domains}),
        "blocks": sorted({b for p in plans for b in p.groups}),
        "ignoredPodSets": sorted({n for p in plans for n in p.ignored}),
        "gangs": gangs,
    }
