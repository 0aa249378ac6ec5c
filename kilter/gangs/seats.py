"""Which of its gang's planned slots a pod may take: its own rank's, else any free one of its shape.

Every server that holds a pod to its gang's plan asks here (the extender's
filter, prioritize, preempt and bind; Volcano's predicate, nodeOrder and
allocate), so the rules are one:

1. a slot the pod is bound to already is its own;
2. a pod with an index (``ranks.place_of``) takes the slot of its rank —
   also when the pod that held it is gone (a Job's replacement pod of the
   same index), as long as that node still has the GPUs free;
3. otherwise — no index, an unusable one, a plan made without ranks, or
   its rank's slot held by another pod that is still there (two live pods
   with one index) — any free slot of its shape, as before ranks, with
   the reason in the note. This never waits on a slot that will not come
   free: a gang's pods and its free slots stay equal in number.
"""

from __future__ import annotations

from dataclasses import dataclass

from kilter.gangs import ranks
from kilter.gangs.gang_plan import GangPlan
from kilter.model.core_v1 import Pod
from kilter.state.store import ClusterStore
from kilter.topology import verdicts

__all__ = ["Seat", "hold", "seat"]


@dataclass(frozen=True)
class Seat:
    """The planned nodes (fleet indices) a pod may use, the rank it is held to (None: any free slot of its shape),
    and what about its rank a person should know ("" when nothing)."""

    nodes: tuple[int, ...]
    place: ranks.Place | None = None
    note: str = ""


def seat(plan: GangPlan, pod: Pod, uid: str, gpus: int, store: ClusterStore) -> Seat:
    """Where ``pod`` (``uid``, asking ``gpus`` GPUs) may go on its gang's feasible ``plan`` (module docstring)."""
    own = tuple(s.node_index for s in plan.slots if s.uid == uid)
    if own:
        return Seat(own)
    found = ranks.place_of(pod, gpus, plan.shapes) if plan.shapes else None
    note = f"unindexed: {found}" if isinstance(found, str) else ""
    if isinstance(found, ranks.Place):
        slot = next((s for s in plan.slots if s.rank == found.rank and s.pod_set == found.pod_set), None)
        if slot is None or slot.gpus != gpus:
            note = f"{found} has no slot in this plan (made without ranks): any free slot of its shape"
        elif not slot.uid:
            repaired = next((f"; {r}" for r in plan.repaired if r.place == found), "")
            return Seat((slot.node_index,), found, f"holds {found} on {slot.node}{repaired}")
        elif not ranks.is_gone(store, slot.uid):
            note = f"{found} is held by pod {_who(store, slot.uid)} on {slot.node}: any free slot of its shape"
        elif store.fleet().bitmap.node_free_gpus(slot.node_index) >= gpus:
            return Seat((slot.node_index,), found, f"holds {found} on {slot.node}, whose pod is gone")
        else:
            note = f"{found}: its pod is gone but {slot.node} is full now: any free slot of its shape"
    free = sorted({s.node_index for s in plan.slots if not s.uid and s.gpus == gpus})
    return Seat(tuple(free), None, note)


def hold(plan: GangPlan, found: Seat | None) -> verdicts.Hold:
    """What the verdict ladder needs of the plan for one pod: its seat's nodes (``seat``), or why the gang waits."""
    if not plan.feasible or found is None:
        return verdicts.Hold(False, (), plan.plan.reason, waits=plan.waiting)
    return verdicts.Hold(True, found.nodes, plan.describe() + (f"; {found.note}" if found.note else ""))


def _who(store: ClusterStore, uid: str) -> str:
    held = store.pod(uid)
    return f"{held.metadata.namespace}/{held.metadata.name}" if held is not None else uid
