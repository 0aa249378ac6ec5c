"""Why each pending workload waits: the first reason on one ladder, in the order Kueue would consider them.

The ladder, for each Workload without an admission, in ``quota.admit``'s
admission order (the same replay ``kilter queues --pending`` shows):

1. quota: no ClusterQueue (``Misconfigured``), a resource no flavor of its
   queue offers (``NoMatchingFlavor``), more than the queue could ever hold
   (``ExceedsMaxQuota``), more than is free when its turn comes
   (``WaitingForQuota``: which queue, which flavor and resource, how much
   over), or only by preempting (``WaitingForPreemptedWorkloads``);
2. topology, for one that fits its quota: no plan on the fleet as it is
   (``TopologyPlacementFailed``: the GPUs it needs in at most k domains, k
   the fewest the idle fleet could hold it in, and the best the fleet holds
   now), or a plan over more domains than it could have and a wait for fewer
   (``WaitingForFewerDomains``, ``gangs.waits``: until when);
3. otherwise it fits now (``NextInLine``), and its plan is booked so that the
   workloads after it see the fleet without those GPUs.

A Workload that holds its quota but is not admitted yet waits for its
admission checks (``UnsatisfiedAdmissionChecks``, naming the first check not
``Ready`` and its message); those come first, being closest to running.

Reason strings are Kueue's own where Kueue has one (the QuotaReserved /
Admitted condition reasons of KEP-3965, "unadmitted workloads
observability"), so a user of both reads one vocabulary; kilter's own
(``WaitingForFewerDomains``, ``NextInLine``) are CamelCase the same way.
Nothing here changes the fleet it is given: plans booked to judge the
workloads behind are released before returning.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kilter.gangs.planning import joined, plan_gangs
from kilter.gangs.waits import NO_WAIT, Waits
from kilter.model.errors import InputError, NoGpus
from kilter.model.jobs import PodSetSpec, read_job
from kilter.quota import amount
from kilter.quota.admit import ADMIT, NEVER, PREEMPT, AdmissionDecision, admission_order, by_cluster_queue
from kilter.quota.config import FairSharingConfig
from kilter.quota.runtimes import WINDOW
from kilter.quota.status import apply_usage
from kilter.quota.tree import build_tree
from kilter.quota.usage import Ledger, WorkloadInfo, admitted_keys, workload_infos
from kilter.state.cluster import KUEUE, ClusterState
from kilter.topology.fleet import Fleet
from kilter.topology.plan import GangRequest, Plan, commit
from kilter.topology.split_wait import SplitWait, WaitDecision, fewest_domains_idle

__all__ = [
    "ADMISSION_CHECKS",
    "EXCEEDS_MAX_QUOTA",
    "MISCONFIGURED",
    "NEXT_IN_LINE",
    "NO_MATCHING_FLAVOR",
    "QUOTA_REASONS",
    "TOPOLOGY_FAILED",
    "WAITING_FOR_DOMAINS",
    "WAITING_FOR_PREEMPTED",
    "WAITING_FOR_QUOTA",
    "Pending",
    "QuotaShortfall",
    "why_pending",
]

MISCONFIGURED = "Misconfigured"
NO_MATCHING_FLAVOR = "NoMatchingFlavor"
EXCEEDS_MAX_QUOTA = "ExceedsMaxQuota"
WAITING_FOR_QUOTA = "WaitingForQuota"
WAITING_FOR_PREEMPTED = "WaitingForPreemptedWorkloads"
TOPOLOGY_FAILED = "TopologyPlacementFailed"
ADMISSION_CHECKS = "UnsatisfiedAdmissionChecks"
WAITING_FOR_DOMAINS = "WaitingForFewerDomains"  # kilter's own
NEXT_IN_LINE = "NextInLine"  # kilter's own
QUOTA_REASONS = frozenset(
    (MISCONFIGURED, NO_MATCHING_FLAVOR, EXCEEDS_MAX_QUOTA, WAITING_FOR_QUOTA, WAITING_FOR_PREEMPTED)
)


@dataclass(frozen=True)
class QuotaShortfall:
    """One flavor/resource a workload asks more of than its ClusterQueue has free (base units: cores, GPUs)."""

    flavor: str
    resource: str
    requested: int | float
    available: int | float

    @property
    def over(self) -> int | float:
        return self.requested - self.available


@dataclass(frozen=True)
class Pending:
    """One pending workload and the first reason it waits."""

    position: int  # 1-based: workloads holding quota first, then Kueue's admission order
    namespace: str
    name: str
    cluster_queue: str
    local_queue: str
    priority: int
    created_s: float
    gpus: int
    reason: str
    message: str
    shortfall: tuple[QuotaShortfall, ...] = ()
    preempts: tuple[str, ...] = ()
    plan: Plan | None = None  # the gang's plan when topology was judged (the best now, or what it takes)
    domains_min: int = 0  # the fewest domains the idle fleet could hold it in (0: unknown or never)
    wait_until_s: float | None = None  # WaitingForFewerDomains: when its wait ends
    checks: Mapping[str, str] = field(default_factory=dict)  # admission check -> state
    request: GangRequest | None = None  # the gang's GPU request, when topology was judged

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def _gpus(requests: Mapping[str, int], devices: frozenset[str]) -> int:
    return sum(v for r, v in requests.items() if r in devices)


def _quota_reason(d: AdmissionDecision) -> tuple[str, str, tuple[QuotaShortfall, ...]]:
    """Kueue's reason and a message for a workload its quota stops; ("", "", ()) when the quota lets it in."""
    cq = d.workload.cluster_queue
    if d.outcome == NEVER:
        if d.cycle == 0:
            lq = d.workload.local_queue or "(none)"
            return MISCONFIGURED, f"{d.reason} for LocalQueue {lq}", ()
        if "unavailable in" in d.reason:
            return NO_MATCHING_FLAVOR, d.reason, ()
        return EXCEEDS_MAX_QUOTA, d.reason, ()
    if d.outcome == ADMIT:
        return "", "", ()
    short = tuple(
        QuotaShortfall(f, r, amount.display(r, asked), amount.display(r, free))
        for (f, r), (asked, free) in sorted(d.shortfall.items())
    )
    parts = [
        f"{s.resource} in flavor {s.flavor}: asks {s.requested}, {s.available} available ({s.over} over)" for s in short
    ]
    what = "; ".join(parts) or "its flavors are taken"
    if d.outcome == PREEMPT:
        victims = ", ".join(t.workload.key for t in d.preemption.targets) if d.preemption else ""
        return WAITING_FOR_PREEMPTED, f"ClusterQueue {cq}: {what}; preempting {victims}", short
    return WAITING_FOR_QUOTA, f"ClusterQueue {cq}: {what}", short


def _least(fleet: Fleet, request: GangRequest, plan: Plan) -> int:
    """The fewest domains the idle fleet could hold the gang in, on its plan's platform (else its resource's)."""
    shapes = tuple((ps.count, ps.gpus_per_pod) for ps in request.pod_sets)
    best = 0
    for i, p in enumerate(fleet.platforms):
        if (plan.platform and p.name != plan.platform) or p.device_resource != request.resource:
            continue
        k = fewest_domains_idle(fleet, i, shapes)
        best = k if not best or (k and k < best) else best
    return best


def _topology(
    fleet: Fleet, obj: Mapping[str, Any], waits: Waits, booked: list[Plan]
) -> tuple[str, str, Plan | None, int, float | None, GangRequest | None]:
    """The topology rung for a workload its quota lets in: (reason, message, plan, fewest domains, wait end,
    request). Every gang of the job is planned (``plan_gangs``); a split-wait annotation that does not read is
    misconfigured, as the AdmissionCheck rejects it."""

    def wait(pod_sets: Sequence[PodSetSpec], request: GangRequest, plan: Plan) -> WaitDecision:
        if not plan.feasible:
            return NO_WAIT
        return waits.for_object(obj, [ps.template for ps in pod_sets], request, plan, fleet)

    try:
        job = read_job(obj)
        planned = plan_gangs(fleet, job, wait=wait, keep=False)
    except NoGpus:
        return NEXT_IN_LINE, "fits its quota; it asks for no GPUs, so topology does not hold it", None, 0, None, None
    except InputError as exc:
        return MISCONFIGURED, str(exc), None, 0, None, None
    if not planned:
        return NEXT_IN_LINE, "fits its quota; it asks for no GPUs, so topology does not hold it", None, 0, None, None
    plan = joined(job.name, [g.plan for g in planned])
    request = planned[0].request
    each = [_least(fleet, g.request, g.plan) for g in planned]
    least = sum(each) if all(each) else 0  # one gang's (0 when the idle fleet cannot hold it), or every gang's
    gpus = sum(ps.count * ps.gpus_per_pod for g in planned for ps in g.request.pod_sets)
    within = f"in at most {least} domain{'s' if least != 1 else ''}" if least else "(more than the idle fleet holds)"
    if any(ps.topology.required for g in planned for ps in g.request.pod_sets):
        within = "as its required topology asks"
    if not plan.feasible:
        return TOPOLOGY_FAILED, f"needs {gpus} GPUs {within}; the best now: {plan.reason}", plan, least, None, request
    waiting = next((g.wait for g in planned if g.wait.wait), None)
    if waiting is not None:
        why = waiting.standing or waiting.reason
        return WAITING_FOR_DOMAINS, f"needs {gpus} GPUs {within}; {why}", plan, least, waiting.until_s, request
    commit(fleet, plan)
    booked.append(plan)
    where = ", ".join(fleet.domain_name(d) for d in plan.domains)
    n = len(plan.domains)
    fits = f"fits now: {gpus} GPUs in {n} domain{'s' if n != 1 else ''} ({where})"
    return NEXT_IN_LINE, fits, plan, least, None, request


def _checks_waiting(
    state: ClusterState, reserved: Sequence[WorkloadInfo], admitted: set[str], devices: frozenset[str]
) -> list[Pending]:
    """Workloads holding quota whose admission checks are not all ``Ready``."""
    by_key = {f"{w.metadata.namespace}/{w.metadata.name}": w for w in state.workloads}
    out = []
    for info in reserved:
        wl = by_key.get(info.key)
        if wl is None or info.key in admitted:
            continue
        checks = {c.name: c.state for c in wl.status.admission_checks}
        waiting = [c for c in wl.status.admission_checks if c.state != "Ready"]
        if not waiting:
            continue
        first = waiting[0]
        message = f"quota reserved in ClusterQueue {info.cluster_queue}; admission check {first.name} is {first.state}"
        if first.message:
            message += f": {first.message}"
        usage = {r: v for (_, r), v in info.usage.items()}
        out.append(
            Pending(
                0,
                info.namespace,
                info.name,
                info.cluster_queue,
                info.local_queue,
                info.priority,
                info.created_s,
                _gpus(usage, devices),
                ADMISSION_CHECKS,
                message,
                checks=checks,
            )
        )
    return out


def why_pending(
    state: ClusterState,
    fleet: Fleet,
    *,
    now_s: float,
    config: FairSharingConfig | None = None,
    split_wait: SplitWait | None = None,
    window: int = WINDOW,
) -> list[Pending]:
    """Every pending Workload with the first reason it waits (module docstring), closest to running first;
    ``window``: how many finished Workloads per size class runtimes are learned from."""
    tree = build_tree(state.cluster_queues, state.cohorts)
    tree.raise_problems(cycles=False)
    infos = workload_infos(state.workloads, state.local_queues, state.priority_classes)
    apply_usage(tree, Ledger(infos, sorted(tree.cluster_queues)).per_cluster_queue())
    devices = frozenset(state.catalog.device_resources)
    out = _checks_waiting(state, [i for i in infos if i.reserved], admitted_keys(state.workloads), devices)
    decisions = admission_order(
        tree,
        [i for i in infos if not i.reserved],
        by_cluster_queue(infos),
        config=config or FairSharingConfig(),
        now=now_s,
    )
    objects = {
        f"{(o.get('metadata') or {}).get('namespace', '')}/{(o.get('metadata') or {}).get('name', '')}": o
        for o in state.raw.of(KUEUE, "Workload")
    }
    waits = Waits.of_state(state, split_wait or SplitWait(), now_s=now_s, window=window)
    booked: list[Plan] = []
    try:
        for d in decisions:
            w = d.workload
            reason, message, short = _quota_reason(d)
            plan, least, until, request = None, 0, None, None
            if not reason:
                reason, message, plan, least, until, request = _topology(fleet, objects.get(w.key, {}), waits, booked)
            out.append(
                Pending(
                    0,
                    w.namespace,
                    w.name,
                    w.cluster_queue,
                    w.local_queue,
                    w.priority,
                    w.created_s,
                    _gpus(w.requests, devices),
                    reason,
                    message,
                    short,
                    tuple(t.workload.key for t in d.preemption.targets) if d.preemption else (),
                    plan,
                    least,
                    until,
                    request=request,
                )
            )
    finally:
        for plan in booked:
            for node, g in zip(plan.node_indices, plan.gpus, strict=True):
                fleet.bitmap.release(node, g)
    return [_numbered(p, i + 1) for i, p in enumerate(out)]


def _numbered(p: Pending, position: int) -> Pending:
    return dataclasses.replace(p, position=position)
