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
  split-wait budget is not spent (``kilter.gangs.waits``): ``Retry`` with the
  wait's reason and ``requeueAfterSeconds`` of at most ``RETRY_AFTER_S``, no
  more than what is left of the budget: Kueue releases the quota, so the gang
  holds nothing while it waits, and asks again;
* it does not fit now but would on the idle fleet: ``Retry`` with
  ``requeueAfterSeconds`` (Kueue releases the quota and tries again);
* it could never fit: ``Rejected``, with the reason.

Status is written with server-side apply carrying only kilter's own entry,
so Kueue's and other controllers' entries are left alone. The check itself
is kept ``Active``. A decision is written once per Pending entry: again only
when it changes, or when Kueue reset the entry to Pending since (a new
``lastTransitionTime``: after a ``Retry`` the same answer is due again).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from kilter.gangs import records
from kilter.gangs.identity import GangKey
from kilter.gangs.keys import PlanKeys
from kilter.gangs.waits import Waits
from kilter.kube.api import ApiError, ApiServer, object_path
from kilter.kube.events import EventRecorder, Involved
from kilter.model.annotations import CONTROLLER_NAME, PLAN
from kilter.model.errors import InputError, KilterError
from kilter.model.jobs import read_job
from kilter.model.kueue import KUEUE_GROUP, Workload
from kilter.state.cluster import ClusterState
from kilter.state.store import ClusterStore
from kilter.topology.fleet import Fleet
from kilter.topology.labels import HOSTNAME_LABEL
from kilter.topology.plan import Plan, gang_request, plan_gang

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
API = f"{KUEUE_GROUP}/v1beta2"
log = logging.getLogger("kilter.admissioncheck")


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


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

    def entry(self, now: str | None = None) -> dict[str, Any]:
        """The ``status.admissionChecks[]`` item kilter owns."""
        out: dict[str, Any] = {
            "name": self.check,
            "state": self.state,
            "lastTransitionTime": now or _now(),
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
) -> list[CheckDecision]:
    """The status kilter would write now for every Workload waiting on one of its checks.

    ``now_s`` (Unix seconds; default the clock) is the time the plan records in podSetUpdates carry; ``keys``
    sign them for the Workload's UID (without keys they are unsigned, which no gang book adopts: what
    ``kilter admission-check`` prints). ``waits`` decides whether a preferred gang that fits only split waits
    for fewer domains (None: it never does).
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
        verdict, message, updates, retry, plan = _judge(wl, obj, fleet, idle, at_s, keys, waits)
        ns, name, uid = wl.metadata.namespace, wl.metadata.name, wl.metadata.uid
        out.extend(
            CheckDecision(ns, name, c.name, verdict, message, updates, retry, plan, uid, c.last_transition_time)
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
) -> tuple[str, str, list[dict[str, Any]], int | None, Plan | None]:
    try:
        job = read_job(dict(obj))
        request = gang_request(f"{wl.metadata.namespace}/{wl.metadata.name}", job.gangs[0], fleet.catalog)
    except InputError as exc:
        if "no pod set asks for GPUs" in str(exc):
            return "Ready", "no pod set asks for GPUs: nothing to place", [], None, None
        return "Rejected", f"kilter cannot plan this workload: {exc}", [], None, None
    except KilterError as exc:
        return "Rejected", f"kilter cannot plan this workload: {exc}", [], None, None
    plan = plan_gang(fleet, request)
    if plan.feasible:
        try:  # a split-wait annotation of the job's own that does not read refuses it, saying which
            templates = [ps.template for ps in job.gangs[0]]
            wait = waits.for_object(obj, templates, request, plan, fleet) if waits is not None else None
        except KilterError as exc:
            return "Rejected", f"kilter cannot plan this workload: {exc}", [], None, None
        if wait is not None and wait.wait:
            return "Retry", wait.reason, [], max(1, min(RETRY_AFTER_S, math.ceil(wait.remaining_s))), None
        return "Ready", f"placed: {plan.reason}", _updates(fleet, plan, wl, at_s, keys), None, plan
    if plan_gang(idle, request).feasible:
        return "Retry", f"does not fit now: {plan.reason}", [], RETRY_AFTER_S, None
    return "Rejected", f"can never fit this fleet: {plan.reason}", [], None, None


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
    if not platform.is_multi_node:
        return (HOSTNAME_LABEL, nodes[0]) if len(set(nodes)) == 1 else None
    labels = fleet.node_labels[index[0]]
    key = next((k for k in fleet.levels.domain_keys(platform) if labels.get(k)), None)
    return None if key is None else (key, labels[key])


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
    ``lastTransitionTime``), is. ``keys`` sign the plan records of podSetUpdates (the server's
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
    ) -> None:
        self.store = store
        self.keys = keys
        self.waits = waits
        self.wall = wall  # Unix seconds: the time of the plan records in podSetUpdates
        self.api = api
        self.interval_s = interval_s
        self.on_ready = on_ready
        self.is_writer = is_writer
        self.events = events
        self.written: dict[tuple[str, str, str], tuple[str, str, str, str]] = {}
        self.errors = 0

    def pending_writes(self) -> list[CheckDecision]:
        state = self.store.state()
        fresh = []
        fleet, idle = self.store.fleet(), self.store.idle_fleet()
        for d in decide(state, fleet, idle, now_s=self.wall(), keys=self.keys, waits=self.waits):
            key = (d.namespace, d.workload, d.check)
            if self.written.get(key) != _signature(d):
                fresh.append(d)
        return fresh

    async def run_once(self) -> None:
        loop = asyncio.get_running_loop()
        for check in our_checks(self.store.state()):
            path = self._path(check_status_path, check)
            if path is not None:
                await self._write(loop, path, active_status(check))
        for d in self.pending_writes():
            path = self._path(workload_status_path, d.namespace, d.workload)
            if path is not None and await self._write(loop, path, d.apply_body()):
                self.written[(d.namespace, d.workload, d.check)] = _signature(d)
                if d.state == "Ready" and self.on_ready is not None:
                    self.on_ready(d)
                self._event(d)

    async def run(self) -> None:
        """A round every ``interval_s`` while this replica is the writer (the leader); idle otherwise."""
        while True:
            if not self.is_writer():
                self.written.clear()  # on becoming the leader again, judge every workload afresh
            else:
                try:
                    await self.run_once()
                except KilterError as exc:  # a state that cannot be read right now: try again next round
                    log.warning("admission check round failed: %s", exc)
            await asyncio.sleep(self.interval_s)

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
            log.warning("could not write %s: %s", path, exc)
            return False
        return True


EVENT_REASONS = {"Ready": "KilterGangPlanned", "Retry": "KilterCheckRetry", "Rejected": "KilterCheckRejected"}


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
