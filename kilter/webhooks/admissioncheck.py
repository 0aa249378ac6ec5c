"""The Kueue AdmissionCheck ``kilter.dev/topology``: a gang is admitted only with a placement that exists.

For every Workload whose quota is reserved (``QuotaReserved=True``) and
whose entry for one of kilter's checks is ``Pending`` — new, or reset by an
eviction, which also clears the podSetUpdates — the core plans the gang on
the fleet as it is now:

* it fits: ``Ready``, with podSetUpdates that pin each pod set whose plan
  lies in one scale-up domain to that domain (``nodeSelector`` on the
  domain label) and put the plan's record on the others' pods (annotation
  ``kilter.dev/plan``, the JSON of ``kilter.gangs.records`` for gang
  ``NS/workload/NAME`` with the slots of that pod set's planned pods,
  signed with the server's plan keys for the Workload's UID: the pods do
  not exist yet, and the gang book verifies a pod's record against the
  Workload it names, so a restarted kilter takes the plan up again);
* it fits, but split over more scale-up domains than it needs, and its
  split-wait budget is not spent (``kilter.gangs.waits``): the entry stays
  ``Pending``, its message the wait's reason with the moment the budget runs
  out (``waiting until 2026-12-01T12:00:00Z for room in 1 domain; 2
  available now``). Kueue keeps the quota reserved and the Workload its
  place; the gang holds no nodes (nothing reserved, no plan record, no
  podSetUpdates). Kueue's ``Retry`` would evict it and give the quota back,
  and then the jobs behind it take the room it waits for: in the simulator
  (the whole Philly trace, ``docs/sim/split-wait-study.md``) that made mean
  JCT worse than no rule at all (108,490 s against 88,696 s), where keeping
  the quota, with the budget counted from the reservation, cut it to
  20,060 s. Kueue evicts only for a ``Retry`` or ``Rejected`` entry
  (``reconcileCheckBasedEviction``); a Pending one leaves the reservation in
  place, and its message is the check controller's to set, as Kueue's own
  ProvisioningRequest controller does to show a request's ETA;
* it fits, but split, while jobs have queued all along a span as long as
  its expected run (the split would take GPU-time from a queue that
  outlasts it, ``topology.split_wait.QueueLoad``): ``Retry`` with
  ``requeueAfterSeconds`` and the reason (``waiting while jobs queue behind
  it: ...``). Holding the quota would keep from the queue the very room the
  wait leaves it, so Kueue gets it back and the Workload tries again;
* it does not fit now but would on the idle fleet: ``Retry`` with
  ``requeueAfterSeconds`` (Kueue releases the quota and tries again);
* it could never fit: ``Rejected``, with the reason.

Status is written with server-side apply carrying only kilter's own entry,
so Kueue's and other controllers' entries are left alone. The check itself
is kept ``Active``. A decision is written once per Pending entry: again only
when it changes, or when Kueue reset the entry to Pending since (a new
``lastTransitionTime``: after a ``Retry`` the same answer is due again). A
Pending message keeps the entry's ``lastTransitionTime`` (the state did not
change) and is not written when the entry already says it, so a waiting gang
costs no writes, and Kueue no Job events, while nothing but the clock moves.

``Controller`` judges every Pending entry again each round (``interval_s``,
over the state the watches keep current), so room that frees up is seen
within a round, and it wakes early for the moment a waiting gang's budget
runs out: no Workload change is needed to end a wait.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from kilter._native.domains import DETACHED
from kilter.gangs import records
from kilter.gangs.decisions import Decision, DecisionFeed
from kilter.gangs.identity import GangKey
from kilter.gangs.kept import Kept
from kilter.gangs.keys import PlanKeys
from kilter.gangs.planning import joined, plan_gangs
from kilter.gangs.waits import NO_WAIT, Waits
from kilter.kube.api import ApiError, ApiServer, object_path
from kilter.kube.events import EventRecorder, Involved
from kilter.model.annotations import CONTROLLER_NAME, PLAN
from kilter.model.errors import InputError, KilterError, NoGpus
from kilter.model.jobs import PodSetSpec, read_job
from kilter.model.kueue import KUEUE_GROUP, Workload
from kilter.state.cluster import ClusterState
from kilter.state.store import ClusterStore
from kilter.topology.fleet import Fleet
from kilter.topology.labels import HOSTNAME_LABEL
from kilter.topology.plan import GangRequest, Plan
from kilter.topology.split_wait import WaitDecision

__all__ = [
    "CONTROLLER_NAME",
    "PLAN_ANNOTATION",
    "RETRY_AFTER_S",
    "CheckDecision",
    "Controller",
    "active_status",
    "check_status_path",
    "decide",
    "our_checks",
    "workload_status_path",
]

PLAN_ANNOTATION = PLAN
RETRY_AFTER_S = 60
MIN_PAUSE_S = 0.1  # the shortest pause between rounds, when a budget runs out within it
API = f"{KUEUE_GROUP}/v1beta2"
log = logging.getLogger("kilter.admissioncheck")


def _now(unix_s: float | None = None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(unix_s))


@dataclass(frozen=True)
class CheckDecision:
    namespace: str
    workload: str
    check: str
    state: str
    message: str
    pod_set_updates: list[dict[str, Any]] = field(default_factory=list)
    requeue_after_seconds: int | None = None
    plan: Plan | None = field(default=None, compare=False, repr=False)
    workload_uid: str = ""
    pending_since: str = field(default="", compare=False)  # the Pending entry's lastTransitionTime, as judged
    pending_message: str = field(default="", compare=False)  # the Pending entry's message, as judged
    until_s: float | None = field(default=None, compare=False)  # Unix seconds a wait (Pending) runs out

    def entry(self, now: str | None = None) -> dict[str, Any]:
        """The ``status.admissionChecks[]`` item kilter owns; a Pending one keeps the entry's transition time."""
        since = self.pending_since if self.state == "Pending" else ""
        out: dict[str, Any] = {
            "name": self.check,
            "state": self.state,
            "lastTransitionTime": since or now or _now(),
            "message": self.message,
        }
        if self.pod_set_updates:
            out["podSetUpdates"] = self.pod_set_updates
        if self.requeue_after_seconds is not None:
            out["requeueAfterSeconds"] = self.requeue_after_seconds
        return out

    def apply_body(self, now: str | None = None) -> dict[str, Any]:
        """The server-side-apply body for ``workloads/status``: identity plus kilter's one entry."""
        return {
            "apiVersion": API,
            "kind": "Workload",
            "metadata": {"name": self.workload, "namespace": self.namespace},
            "status": {"admissionChecks": [self.entry(now)]},
        }


def our_checks(state: ClusterState) -> list[str]:
    """Names of the AdmissionChecks whose controllerName is kilter's."""
    out = []
    for obj in state.raw.of(KUEUE_GROUP, "AdmissionCheck"):
        spec = obj.get("spec")
        meta = obj.get("metadata")
        if isinstance(spec, Mapping) and spec.get("controllerName") == CONTROLLER_NAME and isinstance(meta, Mapping):
            out.append(str(meta.get("name", "")))
    return sorted(out)


def active_status(check: str, now: str | None = None) -> dict[str, Any]:
    """The server-side-apply body that keeps one of kilter's AdmissionChecks ``Active``."""
    return {
        "apiVersion": API,
        "kind": "AdmissionCheck",
        "metadata": {"name": check},
        "status": {
            "conditions": [
                {
                    "type": "Active",
                    "status": "True",
                    "reason": "Active",
                    "message": "kilter plans topology for workloads of this check",
                    "lastTransitionTime": now or _now(),
                }
            ]
        },
    }


def decide(
    state: ClusterState,
    fleet: Fleet,
    idle: Fleet,
    *,
    now_s: float | None = None,
    keys: PlanKeys | None = None,
    waits: Waits | None = None,
    kept: Kept | None = None,
) -> list[CheckDecision]:
    """The status kilter would write now for every Workload waiting on one of its checks.

    ``now_s`` (Unix seconds; default the clock) is the time the plan records in podSetUpdates carry; ``keys``
    sign them for the Workload's UID (without keys they are unsigned, which no gang book adopts: what
    ``kilter admission-check`` prints). ``waits`` decides whether a preferred gang that fits only split waits
    for fewer domains (None: it never does). ``kept``: the reservations kept (``GangBook.kept``): a plan that
    would delay another's is steered around them or waits, and a gang waiting for its own is told its start.
    """
    at_s = time.time() if now_s is None else now_s
    mine = set(our_checks(state))
    raw = {
        (str(o["metadata"].get("namespace", "")), str(o["metadata"].get("name", ""))): o
        for o in state.raw.of(KUEUE_GROUP, "Workload")
        if isinstance(o.get("metadata"), Mapping)
    }
    out: list[CheckDecision] = []
    for wl in sorted(state.workloads, key=lambda w: (w.metadata.namespace, w.metadata.name)):
        pending = [c for c in wl.status.admission_checks if c.name in mine and c.state == "Pending"]
        if not pending or not wl.status.condition("QuotaReserved"):
            continue
        obj = raw.get((wl.metadata.namespace, wl.metadata.name))
        if obj is None:
            continue
        a = _judge(wl, obj, fleet, idle, at_s, keys, waits, kept)
        out.extend(
            dataclasses.replace(a, check=c.name, pending_since=c.last_transition_time, pending_message=c.message)
            for c in pending
        )
    return out


def _judge(
    wl: Workload,
    obj: Mapping[str, Any],
    fleet: Fleet,
    idle: Fleet,
    at_s: float,
    keys: PlanKeys | None,
    waits: Waits | None,
    kept: Kept | None = None,
) -> CheckDecision:
    """The decision for ``wl``, its check's name left blank (``decide`` fills it in per Pending entry)."""
    answer = partial(CheckDecision, wl.metadata.namespace, wl.metadata.name, "", workload_uid=wl.metadata.uid)
    name = f"{wl.metadata.namespace}/{wl.metadata.name}"

    def wait(pod_sets: Sequence[PodSetSpec], request: GangRequest, plan: Plan) -> WaitDecision:
        if waits is None or not plan.feasible:
            return NO_WAIT
        return waits.for_object(obj, [ps.template for ps in pod_sets], request, plan, fleet)

    try:  # a split-wait annotation of the job's own that does not read refuses it, saying which
        job = read_job(dict(obj))
        planned = plan_gangs(
            fleet,
            job,
            name=name,
            wait=wait,
            keep=False,
            steer=kept.workload_steer(wl, fleet, at_s) if kept is not None else None,
        )
    except NoGpus:
        return answer("Ready", "no pod set asks for GPUs: nothing to place")
    except KilterError as exc:
        return answer("Rejected", f"kilter cannot plan this workload: {exc}")
    plan = joined(name, [g.plan for g in planned])
    if plan.feasible:
        waiting = next((g.wait for g in planned if g.wait.wait), None)
        if waiting is not None and math.isinf(waiting.remaining_s):  # for the queue's sake: quota back
            return answer("Retry", waiting.reason, requeue_after_seconds=RETRY_AFTER_S)
        if waiting is not None:  # quota kept, no nodes held: see the module docstring
            return answer("Pending", waiting.standing or waiting.reason, until_s=waiting.until_s)
        return answer("Ready", f"placed: {plan.reason}", _updates(fleet, plan, wl, at_s, keys), plan=plan)
    if all(g.plan.feasible for g in plan_gangs(idle, job, name=name, keep=False)):
        promised = kept.waiting_for_own(wl.metadata.namespace, wl.metadata.name) if kept is not None else ""
        why = f"does not fit now: {plan.reason}" + (f"; {promised}" if promised else "")
        return answer("Retry", why, requeue_after_seconds=RETRY_AFTER_S)
    return answer("Rejected", f"can never fit this fleet: {plan.reason}")


def _updates(fleet: Fleet, plan: Plan, wl: Workload, at_s: float, keys: PlanKeys | None) -> list[dict[str, Any]]:
    """Per pod set: a ``nodeSelector`` on its one domain, else its plan record as an annotation of its pods.

    A record over ``records.MAX_BYTES`` (a pod set of thousands of pods)
    would push the pods past the API server's annotation limit, so that pod
    set gets no update; the Workload's own record (``recorder``) still holds it.
    """
    gang = GangKey(wl.metadata.namespace, "workload", (wl.metadata.name,)).format()
    updates: list[dict[str, Any]] = []
    for ps in plan.pod_sets:
        pinned = _one_domain(fleet, ps.nodes)
        if pinned is not None:
            updates.append({"name": ps.name, "nodeSelector": {pinned[0]: pinned[1]}})
            continue
        record = records.PlanRecord(gang, at_s, tuple((n, ps.gpus_per_pod) for n in ps.nodes))
        value = records.encode(record, keys=keys, uid=wl.metadata.uid)
        if len(value) > records.MAX_BYTES:
            log.warning(
                "workload %s: the plan record of pod set %s is %d bytes; not put on its pods", gang, ps.name, len(value)
            )
            continue
        updates.append({"name": ps.name, "annotations": {PLAN_ANNOTATION: value}})
    return updates


def _one_domain(fleet: Fleet, nodes: Sequence[str]) -> tuple[str, str] | None:
    """(label, value) selecting exactly the scale-up domain all these nodes share, if they share one."""
    index = [fleet.node_index[n] for n in nodes]
    if len({int(fleet.node_domain[i]) for i in index}) != 1:
        return None
    platform = fleet.platform_of_node(index[0])
    detached = bool(fleet.bitmap.domain_flags[int(fleet.node_domain[index[0]])] & DETACHED)
    if not platform.is_multi_node or detached:  # a detached domain is its node alone, whatever labels it carries
        return (HOSTNAME_LABEL, nodes[0]) if len(set(nodes)) == 1 else None
    return fleet.levels.domain_label(platform, fleet.node_labels[index[0]])


WORKLOADS = "/apis/kueue.x-k8s.io/v1beta2/namespaces/{namespace}/workloads/{name}/status"
CHECKS = "/apis/kueue.x-k8s.io/v1beta2/admissionchecks/{name}/status"
"""The shapes of the paths the controller writes (what its RBAC must allow); ``workload_status_path`` and
``check_status_path`` build them, every name checked and escaped."""


def workload_status_path(namespace: str, name: str) -> str:
    """``workloads/NAME/status`` of a Workload; InputError for a namespace or name no API server accepts."""
    return object_path(f"/apis/{API}", "workloads", name, namespace=namespace, subresource="status")


def check_status_path(name: str) -> str:
    """``admissionchecks/NAME/status`` (cluster-scoped); InputError for a name no API server accepts."""
    return object_path(f"/apis/{API}", "admissionchecks", name, subresource="status")


class Controller:
    """Decides on the event loop over the current state, writes through the API on a worker thread.

    What was written is remembered per (workload, check), so an unchanged
    decision is not written again while the state still shows the entry
    Pending; a new decision (the fleet changed), or the same one for an entry
    Kueue reset to Pending since (evicted after a ``Retry``: a new
    ``lastTransitionTime``), is. A wait (``Pending``) whose message the entry
    already shows is not written either, after a restart too. Rounds come
    every ``interval_s``, sooner when a wait runs out before then
    (``next_round_s``). ``keys`` sign the plan records of podSetUpdates (the server's
    ``PlanKeys``, the gang book's own); without them the records are unsigned
    and no gang book takes them up after a restart. ``waits`` holds preferred
    gangs back for fewer domains (``kilter.gangs.waits``; None: never).
    """

    def __init__(
        self,
        store: ClusterStore,
        api: ApiServer,
        *,
        interval_s: float = 10.0,
        on_ready: Callable[[CheckDecision], None] | None = None,
        is_writer: Callable[[], bool] = lambda: True,
        events: EventRecorder | None = None,
        wall: Callable[[], float] = time.time,
        keys: PlanKeys | None = None,
        waits: Waits | None = None,
        kept: Callable[[], Kept | None] | None = None,
        feed: DecisionFeed | None = None,
    ) -> None:
        self.feed = feed  # told of each decision written (``WatchDecisions``)
        self.store = store
        self.keys = keys
        self.waits = waits
        self.kept = kept  # the reservations the doors keep now (``GangBook.kept``)
        self.wall = wall  # Unix seconds: the time of the plan records in podSetUpdates and of transitions
        self.api = api
        self.interval_s = interval_s
        self.on_ready = on_ready
        self.is_writer = is_writer
        self.events = events
        self.written: dict[tuple[str, str, str], tuple[str, str, str, str]] = {}
        self.errors = 0
        self.decided: Counter[str] = Counter()  # Workload statuses written, by state (Ready, Retry, ...)
        self.wake_at_s: float | None = None  # Unix seconds the first wait judged last round runs out

    def pending_writes(self) -> list[CheckDecision]:
        """This round's decisions that are news: not written before, and not what the entry already says."""
        state = self.store.state()
        fresh = []
        fleet, idle = self.store.fleet(), self.store.idle_fleet()
        kept = self.kept() if self.kept is not None else None
        decisions = decide(state, fleet, idle, now_s=self.wall(), keys=self.keys, waits=self.waits, kept=kept)
        ends = [d.until_s for d in decisions if d.state == "Pending" and d.until_s is not None]
        self.wake_at_s = min(ends, default=None)
        for d in decisions:
            key = (d.namespace, d.workload, d.check)
            shown = d.state == "Pending" and d.message == d.pending_message
            if self.written.get(key) != _signature(d) and not shown:
                fresh.append(d)
        return fresh

    def next_round_s(self) -> float:
        """Seconds to the next round: ``interval_s``, or less when a wait judged this round runs out sooner (the
        gang is judged again at that moment, and takes its best plan), never less than ``MIN_PAUSE_S``."""
        if self.wake_at_s is None:
            return self.interval_s
        return min(self.interval_s, max(self.wake_at_s - self.wall(), MIN_PAUSE_S))

    async def run_once(self) -> None:
        loop = asyncio.get_running_loop()
        for check in our_checks(self.store.state()):
            path = self._path(check_status_path, check)
            if path is not None:
                await self._write(loop, path, active_status(check))
        for d in self.pending_writes():
            path = self._path(workload_status_path, d.namespace, d.workload)
            if path is not None and await self._write(loop, path, d.apply_body(_now(self.wall()))):
                self.written[(d.namespace, d.workload, d.check)] = _signature(d)
                self.decided[d.state] += 1
                if d.state == "Ready" and self.on_ready is not None:
                    self.on_ready(d)
                self._event(d)
                if self.feed is not None and self.feed.watched:
                    at, ns = self.wall(), d.namespace
                    self.feed.publish(
                        Decision(at, "admission-check", d.check, "workload", ns, d.workload, d.state, d.message)
                    )

    async def run(self) -> None:
        """A round every ``next_round_s`` while this replica is the writer (the leader); idle otherwise."""
        while True:
            pause = self.interval_s
            if not self.is_writer():
                self.written.clear()  # on becoming the leader again, judge every workload afresh
            else:
                try:
                    await self.run_once()
                    pause = self.next_round_s()
                except KilterError as exc:  # a state that cannot be read right now: try again next round
                    log.warning("admission check round failed: %s", exc)
            await asyncio.sleep(pause)

    def _event(self, d: CheckDecision) -> None:
        """What ``kubectl describe workload`` shows: the gang planned, or why the check holds it back."""
        reason = EVENT_REASONS.get(d.state)
        if self.events is None or reason is None:
            return
        workload = Involved(API, "Workload", d.namespace, d.workload, d.workload_uid)
        self.events.record(workload, reason, d.message, warning=d.state == "Rejected")

    def _path(self, build: Callable[..., str], *names: str) -> str | None:
        """The path ``build`` makes of ``names``, or None (counted, with a log line) when a name could not be an
        object's (a snapshot's typo, not the API server's): that object is skipped, the round goes on."""
        try:
            return build(*names)
        except InputError as exc:
            self.errors += 1
            log.warning("not written: %s", exc)
            return None

    async def _write(self, loop: asyncio.AbstractEventLoop, path: str, body: dict[str, Any]) -> bool:
        try:
            await loop.run_in_executor(None, partial(self.api.apply, path, body, field_manager=CONTROLLER_NAME))
        except ApiError as exc:
            self.errors += 1
            meta = body.get("metadata") or {}
            where = "/".join(x for x in (meta.get("namespace"), meta.get("name")) if x)
            log.warning(
                "could not write %s: %s",
                path,
                exc,
                extra={"workload" if body.get("kind") == "Workload" else "check": where},
            )
            return False
        return True


EVENT_REASONS = {
    "Ready": "KilterGangPlanned",
    "Pending": "KilterGangWaiting",
    "Retry": "KilterCheckRetry",
    "Rejected": "KilterCheckRejected",
}


def _signature(d: CheckDecision) -> tuple[str, str, str, str]:
    """What makes a decision new: its state, message and updates, with each plan record's time left out (a record
    made again in the next round, with the same slots, is the same decision and is not written again), and the
    Pending entry it answers (Kueue resetting the entry after a ``Retry`` asks for an answer again)."""
    updates = []
    for update in d.pod_set_updates:
        notes = update.get("annotations")
        raw = notes.get(PLAN_ANNOTATION) if isinstance(notes, Mapping) else None
        record = records.decode(raw, where=f"workload {d.namespace}/{d.workload}") if isinstance(raw, str) else None
        if record is not None and isinstance(notes, Mapping):
            timeless = records.PlanRecord(record.gang, 0.0, record.slots)
            update = {**update, "annotations": {**notes, PLAN_ANNOTATION: records.encode(timeless)}}
        updates.append(update)
    return d.state, d.message, json.dumps(updates, sort_keys=True), d.pending_since
