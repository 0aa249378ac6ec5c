"""Whom the gang book plans for, and how much one namespace may hold: nothing a request body alone can claim.

Filter and Volcano's predicate reach kilter from whoever reaches its port, and
their Pod is whatever the body says. A plan reserves GPUs for a gang's pods
still to come, so a body could otherwise hold the fleet with a pod that does
not exist (``kilter.dev/gang-size: 23``), or claim a place in another
tenant's gang with its labels. So (issue #17):

* the pod that asks is looked up in the state. Held there under another uid,
  or with other gang labels than the body shows, or not under the owner the
  state knows for the gang (``owners``: a tenant's own pod carrying another
  gang's labels), it is a *stranger*: no plan.
  Held there as the body says, it is a *member* and the plan is *verified*.
  Not held there yet (the feed lags kube-scheduler's informer by a moment)
  it is *unseen*: a plan is made but not recorded in the cluster, and it is
  dropped after ``grace_s`` unless the pod shows up; an unseen pod gets no
  place in a plan that a member verified (it waits for the feed);
* a namespace holds at most ``max_plans_per_namespace`` open plans and, when
  ``namespace_gpus`` is set, that many GPUs in their open slots. Plans for
  unseen pods always have a GPU cap (default half the fleet): nothing but a
  request body vouches for them. A verified gang's pods were created through
  the API server under the tenant's own rights and quota, and one training
  job may rightly want more than half the fleet, so by default it has none.
  Gangs a queue admitted (a Kueue Workload with an admission, a
  Volcano PodGroup Inqueue or Running, Volcano's own session) are exempt:
  their queue's quota bounds them. Unverified plans count together, as one
  namespace, whatever namespace they name;
* a gang no queue admitted yet may not ask more GPUs than its queue could
  ever admit (``queue_limit``: a Kueue ClusterQueue's quota with all it may
  borrow, a Volcano Queue's capability), when the state knows the queue;
* the book holds at most ``max_plans`` plans and ``max_unverified``
  unverified ones, whatever the keys, so 20,000 made-up gang names cost a
  bounded book and a refusal each, not a plan each.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Literal, NamedTuple, Protocol

from kilter.gangs import compute_domains, owners
from kilter.gangs.identity import VOLCANO_GROUP, GangId, GangKey, identify
from kilter.model.core_v1 import Pod
from kilter.model.errors import InputError
from kilter.quota import amount
from kilter.quota.available import potential_available
from kilter.quota.tree import QuotaTree
from kilter.state.store import ClusterStore

__all__ = [
    "UNSEEN_NAMESPACE",
    "Asker",
    "Limits",
    "OpenPlan",
    "asker",
    "full",
    "is_admitted",
    "namespace_of",
    "over_cap",
    "queue_limit",
    "scope_of",
]

UNSEEN_NAMESPACE = "(pods kilter's state does not show yet)"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
VOLCANO_ADMITTED = ("Inqueue", "Running")


@dataclass(frozen=True)
class Limits:
    """Bounds on the gang book (see the module docstring); counts are plans, GPUs are GPUs, times seconds."""

    grace_s: float = 30.0
    """How long a plan for a pod the state does not show waits for it: the feed shows a new pod within a second;
    30 s also covers a relist."""
    max_plans: int = 4096
    """Open plans in all: more gangs than kube-scheduler plans in the gang timeout."""
    max_unverified: int = 64
    """Plans for unseen pods at once: kube-scheduler filters one pod at a time, and these live a moment."""
    max_plans_per_namespace: int = 32
    """Open plans of one namespace's unadmitted gangs."""
    namespace_gpus: int | None = None
    """GPUs one namespace's unadmitted gangs may hold in open slots; None: no cap on verified gangs, and half the
    fleet's GPUs for plans of pods the state does not show yet."""

    def gpu_cap(self, fleet_gpus: int) -> int:
        return self.namespace_gpus if self.namespace_gpus is not None else fleet_gpus // 2


class Asker(NamedTuple):
    """Who asks for a gang's plan: a ``member`` (the state holds the pod as the body shows it; ``pod`` is the
    state's), ``unseen`` (the state does not hold it yet; ``pod`` is the body's) or a ``stranger`` (``why``)."""

    kind: Literal["member", "unseen", "stranger"]
    pod: Pod
    why: str = ""


def asker(store: ClusterStore, gang: GangId, pod: Pod) -> Asker:
    """What the state says of the pod that asks for ``gang``'s plan.

    A gang known from Volcano's session (``source == "volcano"``) is keyed by
    the job Volcano sent, not by the pod's labels, so only its uid is checked.
    Any other gang's member must also be under the gang's owner, as the state
    shows it (``owners``: the owners of its Workload or PodGroup, or the one
    controller of a ``kilter.dev/gang`` gang's pods).
    """
    meta = pod.metadata
    held = store.pod_named(meta.namespace, meta.name)
    if held is None:
        return Asker("unseen", pod)
    where = f"pod {meta.namespace}/{meta.name}"
    if meta.uid and held.metadata.uid and held.metadata.uid != meta.uid:
        return Asker("stranger", pod, f"{where} has uid {held.metadata.uid} in kilter's state, not {meta.uid}")
    same_labels = (held.metadata.labels, held.metadata.annotations) == (meta.labels, meta.annotations)
    same_claims = compute_domains.templates(held.spec) == compute_domains.templates(pod.spec)
    if gang.source != "volcano" and not (same_labels and same_claims):  # what ``identify`` reads a gang from
        try:
            own = identify(held, store)
        except InputError as exc:
            return Asker("stranger", pod, f"{where}: {exc}")
        if own is None or own.key != gang.key:
            return Asker("stranger", pod, f"{where} is not in gang {gang.key} in kilter's state")
    if gang.source != "volcano":
        why = owners.stranger(store, gang.key, held)
        if why:
            return Asker("stranger", pod, f"{where} {why}")
    return Asker("member", held)


def is_admitted(store: ClusterStore, gang: GangId) -> bool:
    """A queue admitted the gang, so its quota bounds what the gang's plan may hold.

    A Kueue Workload the state holds with ``status.admission`` (the gang's size
    and shape then come from the Workload, not from a pod), a Volcano PodGroup
    Inqueue or Running, or a gang of Volcano's session (Volcano enqueued it).
    """
    if gang.source == "volcano":
        return True
    try:
        key = GangKey.parse(gang.key)
    except InputError:
        return False
    if key.kind == "workload":
        status = _status(store.get("kueue.x-k8s.io", "Workload", key.namespace, key.name))
        return bool(gang.pod_sets) and isinstance(status.get("admission"), Mapping)
    if key.kind == "podgroup":
        status = _status(store.get("scheduling.volcano.sh", "PodGroup", key.namespace, key.name))
        return status.get("phase") in VOLCANO_ADMITTED
    return False


def namespace_of(gang_key: str) -> str:
    """The namespace a gang key names ("" for a key that does not parse)."""
    try:
        return GangKey.parse(gang_key).namespace
    except InputError:
        return ""


class OpenPlan(Protocol):
    """What the caps read of an open plan (``gang_plan.GangPlan``; a Protocol: the rules need no more of it)."""

    @property
    def gang(self) -> GangId: ...
    @property
    def verified(self) -> bool: ...
    @property
    def admitted(self) -> bool: ...
    @property
    def open_gpus(self) -> int: ...


def scope_of(plan: OpenPlan) -> str:
    """Whose caps a plan counts against: its namespace, or all unverified plans together."""
    return namespace_of(plan.gang.key) if plan.verified else UNSEEN_NAMESPACE


def full(
    plans: Collection[OpenPlan],
    limits: Limits,
    gang: GangId,
    gpus: int,
    *,
    verified: bool,
    admitted: bool,
    fleet: Callable[[], int],
) -> str:
    """Which cap a new plan for ``gang`` would pass beside ``plans`` ("" if none).

    For an unseen pod the GPUs are guessed before planning (``gpus`` per pod
    of the gang), so made-up gangs cost no planning; every plan made is
    checked again (``over_cap``). ``fleet`` gives the fleet's GPUs.
    """
    if len(plans) >= limits.max_plans:
        return f"kilter holds {len(plans)} open gang plans, its limit; the gang waits for one to end"
    if not verified and sum(1 for p in plans if not p.verified) >= limits.max_unverified:
        return f"{limits.max_unverified} gangs already wait for their pods to reach kilter's state"
    if admitted:
        return ""
    scope = namespace_of(gang.key) if verified else UNSEEN_NAMESPACE
    mine = [p for p in plans if not p.admitted and scope_of(p) == scope]
    if len(mine) >= limits.max_plans_per_namespace:
        return f"namespace {scope} has {len(mine)} open gang plans, the most one namespace may have"
    if verified:
        return ""  # checked on the plan made: pods of the gang already bound need no slot
    ask = sum(ps.count for ps in gang.pod_sets) * gpus if gang.pod_sets else (gang.size or 1) * gpus
    return _over(limits, scope, sum(p.open_gpus for p in mine), ask, fleet())


def over_cap(plans: Collection[OpenPlan], limits: Limits, made: OpenPlan, fleet_gpus: int) -> str:
    """Why the plan just made would take its namespace past its GPU cap ("" if it does not, or has none)."""
    if made.verified and limits.namespace_gpus is None:
        return ""
    scope = scope_of(made)
    held = sum(p.open_gpus for p in plans if p is not made and not p.admitted and scope_of(p) == scope)
    return _over(limits, scope, held, made.open_gpus, fleet_gpus)


def _over(limits: Limits, scope: str, held: int, ask: int, fleet_gpus: int) -> str:
    cap = limits.gpu_cap(fleet_gpus)
    if held + ask <= cap:
        return ""
    return f"namespace {scope} holds {held} GPUs in open gang plans; {ask} more would pass its cap of {cap}"


def queue_limit(store: ClusterStore, pod: Pod, resource: str, tree: Callable[[], QuotaTree]) -> tuple[str, int] | None:
    """The queue the pod names and the most ``resource`` it could ever admit; None when the state knows no queue
    of the pod's, or the queue sets no limit on ``resource``.

    Kueue: the LocalQueue of the pod's ``kueue.x-k8s.io/queue-name`` label,
    its ClusterQueue's ``potentialAvailable`` summed over the flavors of
    ``resource`` (nominal quota plus all it may borrow; ``tree`` builds the
    quota tree). Volcano: the Queue of the pod's PodGroup, its
    ``capability`` (no entry: no limit, as Volcano reads it).
    """
    ns = pod.metadata.namespace
    local = pod.metadata.labels.get(KUEUE_QUEUE_LABEL)
    if local:
        spec = _spec(store.get("kueue.x-k8s.io", "LocalQueue", ns, local))
        cq_name = spec.get("clusterQueue")
        node = tree().cluster_queues.get(cq_name) if isinstance(cq_name, str) else None
        if node is None:
            return None
        frs = [fr for fr in node.quotas if fr[1] == resource]
        most = sum(max(0, potential_available(node, fr)) for fr in frs)
        return f"ClusterQueue {cq_name}", min(most, amount.UNLIMITED)
    group = pod.metadata.annotations.get(VOLCANO_GROUP)
    queue_name = _spec(store.get("scheduling.volcano.sh", "PodGroup", ns, group)).get("queue") if group else None
    if not isinstance(queue_name, str):
        return None
    capability = _spec(store.get("scheduling.volcano.sh", "Queue", "", queue_name)).get("capability")
    limit = capability.get(resource) if isinstance(capability, Mapping) else None
    if not isinstance(limit, str | int):
        return None
    try:
        return f"Queue {queue_name}", amount.from_quantity(resource, limit, path=f"Queue {queue_name}: capability")
    except InputError:
        return None


def _spec(obj: Mapping[str, object] | None) -> Mapping[str, object]:
    spec = obj.get("spec") if obj is not None else None
    return spec if isinstance(spec, Mapping) else {}


def _status(obj: Mapping[str, object] | None) -> Mapping[str, object]:
    status = obj.get("status") if obj is not None else None
    return status if isinstance(status, Mapping) else {}
