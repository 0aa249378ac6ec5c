"""Writes each new plan's ``kilter.dev/plan`` record into the cluster, off the event loop.

Records are written as JSON merge patches (RFC 7386,
``application/merge-patch+json``) of ``metadata.annotations`` only, on one
worker thread, so a verb never waits for the API server; only while
``is_writer()`` holds (the elected leader), and a failed write is logged,
never raised. A record over ``records.MAX_BYTES`` is not written. Each
object gets the record signed for its own UID (``records``, ``keys``), as
the gang book gives it (``GangPlan.uids``); an object kilter's state does
not show is not written, as there is nothing to sign for.

A repair plan also says what it replaced, as a ``Repaired`` Event per moved
rank ("replaced gb200-r07-t03 by gb200-r07-t16 in domain ..., rank 27 of pod
set workers ...") on the gang's Workload or PodGroup, or on the replacement
pod of a gang without one: what ``kubectl describe`` shows the person on call.
A repair that takes a lent spare back (``GangPlan.victims``) evicts the
borrowers through the Eviction API on the same thread, with a ``Preempted``
Event on each, so the replacement need not wait for kube-scheduler's
preemption to sample that node; a PodDisruptionBudget that refuses is logged
and left to the scheduler.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from kilter.gangs.gang_plan import GangPlan, Victim
from kilter.gangs.identity import GangId, GangKey
from kilter.gangs.keys import PlanKeys
from kilter.gangs.records import KUEUE, MAX_BYTES, PLAN_ANNOTATION, VOLCANO, PlanRecord, encode, owner_of
from kilter.kube.api import MERGE_PATCH, ApiServer, object_path
from kilter.kube.events import EventRecorder, Involved
from kilter.kube.evict import GONE, evict
from kilter.model.errors import InputError, KilterError

__all__ = ["PlanRecorder", "repaired_slots"]

log = logging.getLogger("kilter.plans")

KUEUE_DEFAULT_VERSION = "v1beta2"


def _always() -> bool:
    return True


class PlanRecorder:
    """Writes each new plan's record into the cluster (``GangBook``'s ``on_planned`` hook); never raises or waits.

    ``is_writer`` is asked before every write (leader election supplies it;
    a follower writes nothing). ``kueue_version`` names the Workload API
    version the live feed found ("" when unknown: v1beta2).
    """

    def __init__(
        self,
        api: ApiServer,
        *,
        is_writer: Callable[[], bool] = _always,
        kueue_version: Callable[[], str] | None = None,
        wall: Callable[[], float] = time.time,
        keys: PlanKeys | None = None,
        events: EventRecorder | None = None,
    ) -> None:
        self.api = api
        self.keys = keys or PlanKeys.ephemeral(announce=False)  # ``kilter serve`` sets the gang book's keys
        self.is_writer = is_writer
        self.kueue_version = kueue_version
        self.wall = wall
        self.written = 0
        self.failed = 0
        self.evicted = 0  # pods evicted to take lent spares back for repairs
        self.not_evicted = 0  # evictions the API server refused (a disruption budget, a changed pod ...)
        self.unverified = 0  # plans not written (yet): no pod of the gang the state holds asked for them
        self.unknown = 0  # objects not written: kilter's state does not show their UID, so nothing to sign for
        self._stop_at: float | None = None
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kilter-plans")
        self.events = events

    def on_planned(self, gang: GangId, plan: GangPlan) -> Future[None] | None:
        """Queue the record of ``plan`` (called on the event loop when a plan is made); its future, if queued."""
        if not self.is_writer():
            return None
        if not plan.verified:  # made for a pod the state does not show: the request may name any pod (``trust``)
            self.unverified += 1
            return None
        if plan.victims:
            try:
                self._pool.submit(self._take_back, gang.key, plan.victims)
            except RuntimeError:  # shut down: the server is stopping
                return None
        record = PlanRecord(
            gang.key, self.wall(), tuple((s.node, s.gpus) for s in plan.slots), repaired=repaired_slots(plan)
        )
        size = len(encode(record, keys=self.keys))
        if size > MAX_BYTES:
            log.warning("gang %s: the plan's record is %d bytes, over %d; not recorded", gang.key, size, MAX_BYTES)
            return None
        try:
            owner = owner_of(gang.key)
            names = [owner[3]] if owner is not None else list(plan.pods)
            paths = self.paths(gang.key, plan.pods)
        except InputError:  # a malformed key, or names no object can have: nowhere to put the record
            names, paths = [], []
        writes = []
        for name, path in zip(names, paths, strict=True):
            uid = plan.uids.get(name, "")
            if uid:
                writes.append((path, encode(record, keys=self.keys, uid=uid)))
            else:
                self.unknown += 1
        self._tell_repairs(gang.key, plan)
        if not writes:
            log.info("gang %s: no object kilter's state shows to record the plan on", gang.key)
            return None
        try:
            return self._pool.submit(self._write, gang.key, writes)
        except RuntimeError:  # shut down: the server is stopping
            log.info("gang %s: plan not recorded, kilter is stopping", gang.key)
            return None

    def _tell_repairs(self, gang_key: str, plan: GangPlan) -> None:
        """A ``Repaired`` Event per rank a repair plan moved (or placed without knowing its old node)."""
        if self.events is None:
            return
        try:
            owner = owner_of(gang_key)
        except InputError:
            return
        namespace = GangKey.parse(gang_key).namespace
        for moved in plan.repaired:
            if moved.was == moved.now:
                continue
            if owner is not None:
                group = VOLCANO if owner[1] == "PodGroup" else KUEUE
                version = "v1beta1" if owner[1] == "PodGroup" else self._kueue_version()
                about = Involved(f"{group}/{version}", owner[1], namespace, owner[3], plan.uids.get(owner[3], ""))
            elif moved.pod:
                about = Involved("v1", "Pod", namespace, moved.pod, plan.uids.get(moved.pod, ""))
            else:
                continue
            self.events.record(about, "Repaired", f"gang {gang_key}: {moved}")

    def _take_back(self, gang_key: str, victims: Sequence[Victim]) -> None:
        """Evict each pod a repair takes a lent spare back from, while this kilter is the writer."""
        for namespace, name, uid, node in victims:
            if not self.is_writer() or (self._stop_at is not None and time.monotonic() > self._stop_at):
                return
            try:
                refused = evict(self.api, namespace, name, uid)
            except KilterError as exc:
                refused = str(exc)
            except Exception:  # a bug must not kill the writer thread silently
                log.exception("gang %s: pod %s/%s not evicted", gang_key, namespace, name)
                self.not_evicted += 1
                continue
            if refused == GONE:
                continue
            if refused:
                self.not_evicted += 1
                log.warning(
                    "gang %s: pod %s/%s on %s not evicted: %s",
                    gang_key,
                    namespace,
                    name,
                    node,
                    refused,
                    extra={"gang": gang_key, "pod": f"{namespace}/{name}", "node": node},
                )
                continue
            self.evicted += 1
            if self.events is not None:
                why = f"kilter: evicted to take spare node {node} back for the repair of gang {gang_key}"
                self.events.record(Involved("v1", "Pod", namespace, name, uid), "Preempted", why)

    def _kueue_version(self) -> str:
        return (self.kueue_version() if self.kueue_version is not None else "") or KUEUE_DEFAULT_VERSION

    def paths(self, gang_key: str, pods: Sequence[str]) -> list[str]:
        """Where the record goes: the owner object's path, else each pod's; ``InputError`` for a malformed key or a
        namespace or name the API server would not accept (checked and escaped by ``object_path``)."""
        key = GangKey.parse(gang_key)
        owner = owner_of(key)
        ns = key.namespace
        if owner is not None:
            if owner[1] == "PodGroup":
                return [object_path(f"/apis/{VOLCANO}/v1beta1", "podgroups", owner[3], namespace=ns)]
            return [object_path(f"/apis/{KUEUE}/{self._kueue_version()}", "workloads", owner[3], namespace=ns)]
        return [object_path("/api/v1", "pods", pod, namespace=ns) for pod in pods]

    def _write(self, gang_key: str, writes: list[tuple[str, str]]) -> None:
        """PATCH each (path, value): the record, signed for that object."""
        for i, (path, value) in enumerate(writes):
            body = {"metadata": {"annotations": {PLAN_ANNOTATION: value}}}
            if self._stop_at is not None and time.monotonic() > self._stop_at:
                log.warning("gang %s: kilter is stopping; %d plan records not written", gang_key, len(writes) - i)
                return
            try:
                if not self.is_writer():
                    log.debug("gang %s: not the leader; plan not recorded", gang_key)
                    return
                self.api.call("PATCH", path, body, content_type=MERGE_PATCH)
                self.written += 1
            except KilterError as exc:
                self.failed += 1
                log.warning("gang %s: plan record on %s not written: %s", gang_key, path, exc, extra={"gang": gang_key})
            except Exception:  # a bug must not kill the writer thread silently
                self.failed += 1
                log.exception("gang %s: plan record on %s not written", gang_key, path)

    def close(self, timeout_s: float = 5.0) -> None:
        """Write what is queued for up to ``timeout_s`` more, then stop."""
        self._stop_at = time.monotonic() + timeout_s
        self._pool.shutdown(wait=True)
        if self.events is not None:
            self.events.close()


def repaired_slots(plan: GangPlan) -> tuple[tuple[int, str, str], ...]:
    """A repair plan's replacements as its record keeps them: (slot, old node, rung) each. A ranked replacement's
    slot is its rank's (bound already or not); an unranked one takes the first open slot on its node not taken by
    another."""
    out: list[tuple[int, str, str]] = []
    used: set[int] = set()
    for moved in plan.repaired:
        found = next(
            (
                i
                for i, s in enumerate(plan.slots)
                if i not in used
                and s.node == moved.now
                and (s.place == moved.place if moved.place is not None else not s.uid)
            ),
            None,
        )
        if found is not None:
            used.add(found)
            out.append((found, moved.was, moved.how))
    return tuple(out)
