"""The gang book's side of plan records: finding a gang's record, taking it up again, and whom a new one is for.

Plans survive a restart through records in the cluster (``records``): a
plan the book makes is handed to its ``on_planned`` hook with the UIDs of the
objects its record goes on (``uids_for``: the signature binds a record to
its object), and before making a new plan the book looks for a record of
the gang on its owner object or its pods (``find``). A record no older than
the gang timeout is taken up when it still fits (``take_up``, ``refit``):
pods of the gang already bound take the slots on their nodes, and every
other slot's node must still exist, be usable, admit the pods and have the
GPUs free. A repair reads the ranks' nodes from a record of any age.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence

from kilter.gangs import records, refit, repairs, trust
from kilter.gangs.gang_plan import GangPlan, Life, Origin, Slot, slots_of
from kilter.gangs.identity import GangId, in_gang
from kilter.gangs.keys import PlanKeys
from kilter.gangs.layout import Layout
from kilter.model.core_v1 import Pod
from kilter.state.store import ClusterStore
from kilter.topology.plan import GangRequest

__all__ = ["RecordReader"]

log = logging.getLogger("kilter.gangs")

Reserve = Callable[[GangId, Sequence[Slot]], bool]


class RecordReader:
    """Records as one store holds them, verified with ``keys``; ``wall`` is Unix time, to judge a record's age
    against ``timeout_s`` (the gang timeout, set by ``GangBook.configure``)."""

    def __init__(self, store: ClusterStore, keys: PlanKeys, wall: Callable[[], float], timeout_s: float) -> None:
        self.store = store
        self.keys = keys
        self.wall = wall
        self.timeout_s = timeout_s

    def find(self, gang: GangId, members: list[Pod] | None) -> records.PlanRecord | None:
        """The gang's newest plan record that verifies, of any age (a repair reads the ranks' nodes from it)."""
        owner = records.owner_of(gang.key)
        if owner is not None:
            where = f"{owner[1]} {owner[2]}/{owner[3]}"
            record = records.read_object(self.store.get(*owner), where=where, keys=self.keys)
        else:
            where = f"the pods of gang {gang.key}"
            record = records.newest(members or (), keys=self.keys, owner_uid=self._owner_uid)
        if record is not None and record.gang != gang.key:
            log.info("%s: the plan record names gang %s, not %s; ignored", where, record.gang, gang.key)
            return None
        return record

    def take_up(
        self,
        gang: GangId,
        request: GangRequest,
        members: list[Pod] | None,
        shaped: Layout,
        record: records.PlanRecord | None,
        *,
        reserve: Reserve,
        clock: Callable[[], float],
    ) -> GangPlan | None:
        """The gang's recorded plan, taken up again (its open slots reserved with ``reserve``) if it is young
        enough and still holds; None otherwise."""
        if record is None:
            return None
        age = self.wall() - record.at_s
        if abs(age) > self.timeout_s:
            log.info("gang %s: the plan recorded at %s is past the gang timeout; planning afresh", gang.key, record.at)
            return None
        if members is None:
            members = in_gang(gang.key).members(self.store)
        adopted, why = self._adopt(gang, request, record, members, shaped, reserve, clock)
        if adopted is None:
            log.info("gang %s: the plan recorded at %s no longer fits (%s); planning afresh", gang.key, record.at, why)
        else:
            log.info("gang %s: took up the plan recorded at %s", gang.key, record.at, extra={"gang": gang.key})
        return adopted

    def uids_for(self, plan: GangPlan) -> dict[str, str]:
        """The UID of each object ``plan``'s record goes on, by name: its owner's, else its unbound pods'."""
        owner = records.owner_of(plan.gang.key)
        if owner is not None:
            meta = (self.store.get(*owner) or {}).get("metadata")
            uid = meta.get("uid") if isinstance(meta, Mapping) else None
            return {owner[3]: uid} if isinstance(uid, str) and uid else {}
        ns = trust.namespace_of(plan.gang.key)
        held = (self.store.pod_named(ns, name) for name in plan.pods)
        return {p.metadata.name: p.metadata.uid for p in held if p is not None and p.metadata.uid}

    def _owner_uid(self, gang_key: str) -> str:
        """The UID of the Workload or PodGroup a record's gang key names ("" if the state holds none): what a
        podSetUpdates record on a pod is signed for."""
        owner = records.owner_of(gang_key)
        meta = (self.store.get(*owner) or {}).get("metadata") if owner is not None else None
        uid = meta.get("uid") if isinstance(meta, Mapping) else None
        return uid if isinstance(uid, str) else ""

    def _adopt(
        self,
        gang: GangId,
        request: GangRequest,
        record: records.PlanRecord,
        members: Sequence[Pod],
        shaped: Layout,
        reserve: Reserve,
        clock: Callable[[], float],
    ) -> tuple[GangPlan | None, str]:
        """The recorded plan with its open slots reserved (each keeps the rank its place in the record gives it:
        ``refit``), or None and why it does not fit the fleet now."""
        fit = refit.fit(record, request, members, self.store.fleet(), shaped=shaped)
        if isinstance(fit, str):
            return None, fit
        slots = slots_of(fit.open)
        if not reserve(gang, slots):
            return None, "its nodes' GPUs could not be reserved"
        moved = repairs.recorded(record, shaped, self.store.fleet())  # a recorded repair says what it replaced
        taken = [*slots_of(fit.taken), *slots]
        life, now, generation = Life.made(fit.plan, Origin.RECORD), clock(), self.store.generation
        return GangPlan(gang, fit.plan, taken, now, generation, life, shapes=shaped.shapes, repaired=moved), ""
