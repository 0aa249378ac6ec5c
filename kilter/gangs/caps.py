"""The gang book's bounds on what plans may hold, applied over one store (the rules are ``trust``'s).

Before a plan is made, ``before`` says which bound a new plan would pass: a
gang no queue admitted asking more GPUs than its queue could ever admit, or
one of the book's caps (``trust.full``: plans in all, unverified plans, one
namespace's plans and GPUs). After, ``after`` checks the plan made against
its namespace's GPU cap (``trust.over_cap``). ``room_for_unseen`` says
whether a pod the state does not show yet may take a slot of a plan a
member verified. The limits are set by ``GangBook.configure``.
"""

from __future__ import annotations

from collections.abc import Collection

from kilter.gangs import trust
from kilter.gangs.gang_plan import GangPlan
from kilter.gangs.identity import GangId, in_gang
from kilter.model.core_v1 import Pod
from kilter.quota.tree import QuotaTree, build_tree
from kilter.state.store import ClusterStore
from kilter.topology import pod_gpus

__all__ = ["Caps"]


class Caps:
    """``trust``'s bounds with ``limits``, over the plans the book holds and the state ``store`` shows."""

    def __init__(self, store: ClusterStore, limits: trust.Limits) -> None:
        self.store = store
        self.limits = limits
        self._tree: tuple[int, QuotaTree] | None = None

    def before(
        self, plans: Collection[GangPlan], gang: GangId, pod: Pod, gpus: int, *, verified: bool, admitted: bool
    ) -> str:
        """Why no plan may be made for ``gang`` (asked by ``pod``, ``gpus`` per pod) beside ``plans``; "" if one
        may."""
        beyond = "" if admitted else self._beyond_queue(gang, pod, gpus)
        if beyond:
            return beyond
        return trust.full(plans, self.limits, gang, gpus, verified=verified, admitted=admitted, fleet=self._fleet_gpus)

    def after(self, plans: Collection[GangPlan], made: GangPlan) -> str:
        """Why the plan just made may not be kept: its namespace's GPU cap ("" if it may, or is admitted)."""
        if made.admitted or not made.feasible:
            return ""
        return trust.over_cap(plans, self.limits, made, self._fleet_gpus())

    def room_for_unseen(self, plan: GangPlan) -> bool:
        """The plan has more open slots than the gang has unplaced pods in the state: a pod the feed has not shown
        yet may take one (only such a pod can be the gang's; with an API server, a made-up one cannot be bound)."""
        open_slots = sum(1 for s in plan.slots if not s.uid)
        placed = {s.uid for s in plan.slots if s.uid}
        members = in_gang(plan.gang.key).members(self.store)
        waiting = sum(1 for p in members if not p.spec.node_name and (p.metadata.uid or "") not in placed)
        return open_slots > waiting

    def _beyond_queue(self, gang: GangId, pod: Pod, gpus: int) -> str:
        """Why the gang asks more GPUs than the queue the pod names could ever admit ("" if it does not, or no queue
        is known): a gang of 23 pods in a queue of 8 GPUs would otherwise hold 92 for nothing."""
        fleet = self.store.fleet()
        asked = [r for r in sorted(fleet.catalog.device_resources) if _asks(pod, r)]
        if not asked:
            return ""
        limit = trust.queue_limit(self.store, pod, asked[0], self._quota_tree)
        want = sum(ps.count for ps in gang.pod_sets) * gpus if gang.pod_sets else (gang.size or 1) * gpus
        if limit is None or want <= limit[1]:
            return ""
        return f"gang {gang.key} asks {want} {asked[0]}; {limit[0]} could admit at most {limit[1]}"

    def _quota_tree(self) -> QuotaTree:
        """The Kueue quota tree of the current state, built once per state version."""
        if self._tree is None or self._tree[0] != self.store.version:
            state = self.store.state()
            self._tree = (self.store.version, build_tree(state.cluster_queues, state.cohorts))
        return self._tree[1]

    def _fleet_gpus(self) -> int:
        fleet = self.store.fleet()
        return int(fleet.bitmap.node_gpu_counts.sum()) if fleet.n_nodes else 0


def _asks(pod: Pod, resource: str) -> bool:
    gpus = pod_gpus.count(pod.spec, resource)
    return not isinstance(gpus, pod_gpus.Unreadable) and gpus > 0  # one that does not read: the filter refuses it
